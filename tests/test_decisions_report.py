"""The report's decisions as pure functions: which runs may be compared, the gain over the
baseline, and its bootstrap interval over videos. A wrong one credits the routing with a
difference in workload, or calls noise a gain."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from benchmarks.aiperf_run import RECORDS_EXPORT, LevelSummary
from benchmarks.report import (
    ProfileRun,
    _gain_cell,
    binding,
    binding_changes,
    check_comparable,
    gain_interval,
    gain_pct,
    report_rows,
)
from infra.names import InputError

MANIFEST = {
    "model": "m", "sessions_per_level": 3, "questions_per_video": 2, "output_tokens": 128,
    "dataset": {"sha256": "a" * 64, "path": "/x", "info": {
        "videos": 3, "path": "/x", "video_source": "http://one.test"}},
    "deployment": {"replicas": "8", "routing": "rr", "graph_uid": "u1",
                   "frontend_command": "f1", "worker_image": "w:1"},
}


def test_binding_is_the_workload_and_the_deployment_routing_aside() -> None:
    assert binding(MANIFEST) == {
        "model": "m", "videos": 3, "questions_per_video": 2, "output_tokens": 128,
        "dataset": {"videos": 3}, "deployment": {"replicas": "8", "worker_image": "w:1"}}
    bare = {**MANIFEST, "dataset": {"sha256": "b" * 64}, "deployment": None}
    assert binding(bare)["dataset"] == "b" * 64
    assert binding(bare)["deployment"] == {}
    assert binding({}) == {"model": None, "videos": None, "questions_per_video": None,
                           "output_tokens": None, "dataset": None, "deployment": {}}


def test_routing_and_where_the_videos_come_from_never_bind() -> None:
    other = {**MANIFEST,
             "dataset": {"sha256": "c" * 64, "path": "/y", "info": {
                 "videos": 3, "path": "/y", "video_source": "http://two.test"}},
             "deployment": {**MANIFEST["deployment"], "routing": "affinity",
                            "graph_uid": "u2", "frontend_command": "f2"}}
    assert binding_changes(MANIFEST, other) == []


def test_each_binding_difference_is_named() -> None:
    other = {**MANIFEST, "model": "n", "output_tokens": 64,
             "deployment": {**MANIFEST["deployment"], "replicas": "4"}}
    assert binding_changes(MANIFEST, other) == [
        "model: 'm' -> 'n'", "output_tokens: 128 -> 64", "deployment.replicas: '8' -> '4'"]


def run(label: str, manifest: dict[str, Any], source: Path = Path("r")) -> ProfileRun:
    return ProfileRun(label, source, manifest)


def test_runs_of_another_workload_are_refused_each_against_the_first() -> None:
    check_comparable([run("a", MANIFEST), run("b", dict(MANIFEST))])
    check_comparable([run("a", MANIFEST)])
    other = {**MANIFEST, "questions_per_video": 5}
    with pytest.raises(InputError) as refused:
        check_comparable([run("a", MANIFEST, Path("ra")), run("b", dict(MANIFEST)),
                          run("c", other, Path("rc"))])
    assert refused.value.problems[:-1] == [
        "c (rc) differs from a (ra) in questions_per_video: 2 -> 5"]
    assert refused.value.heading == "bad report input"
    assert refused.value.problems[-1] == (
        "compare runs of one workload and deployment (routing aside): the same videos, "
        "questions, output tokens, dataset, images and topology")
    with pytest.raises(InputError, match="b \\(r\\) differs from a \\(r\\) in output_tokens"):
        check_comparable([run("a", MANIFEST), run("b", {**MANIFEST, "output_tokens": 64})])


def test_gain_is_the_ratio_to_the_baseline_and_none_without_one() -> None:
    assert gain_pct(12.0, 10.0) == pytest.approx(20.0)
    assert gain_pct(8.0, 10.0) == pytest.approx(-20.0)
    assert gain_pct(10.0, 10.0) == 0.0
    assert gain_pct(None, 10.0) is None
    assert gain_pct(5.0, None) is None
    assert gain_pct(5.0, 0.0) is None


def test_the_interval_is_the_middle_95_percent_of_the_bootstrap() -> None:
    """With one video a side, every resample is that video: the interval is the gain."""
    assert gain_interval({"a": [120.0, 120.0]}, {"b": [100.0]}) == pytest.approx((20.0, 20.0))
    assert gain_interval({"a": [100.0]}, {}) is None
    assert gain_interval({"a": [120.0]}, {"b": [100.0]}, point=25.0) == pytest.approx(
        (25.0, 25.0))


def test_the_interval_resamples_whole_videos_and_cuts_2_5_percent_each_side() -> None:
    """Two baseline videos (latency 100 and 300), one other (200): each resample's
    baseline mean is 100, 200 or 300 (a quarter, half, a quarter of the time), so the
    gain is -50%, 0% or +50%; the 2.5% and 97.5% cuts fall on -50% and +50%."""
    base, other = {"slow": [300.0], "fast": [100.0]}, {"x": [200.0]}
    low, high = gain_interval(base, other, samples=1000)
    assert (low, high) == pytest.approx((-50.0, 50.0))
    # Latencies are pooled over the picked videos, not averaged per video.
    low, high = gain_interval({"a": [100.0, 100.0, 400.0]}, {"b": [200.0]}, samples=40)
    assert (low, high) == pytest.approx((0.0, 0.0))
    # The point moves the interval by its distance from the whole-data gain (0% here).
    low, high = gain_interval(base, other, point=10.0, samples=1000)
    assert (low, high) == pytest.approx((-40.0, 60.0))


def test_the_interval_cuts_at_the_exact_ranks() -> None:
    """Ranks 25 and 974 of 1000 sorted gains, drawn as the bootstrap draws them (the
    baseline's videos, then the other side's, per sample): a rank off by one moves a bound."""
    base = {str(i): [100.0 + 7.3 * i ** 0.5] for i in range(40)}
    low, high = gain_interval(base, {"x": [100.0]}, samples=1000, seed=3)
    rng = random.Random(3)
    gains = []
    for _ in range(1000):
        picked = rng.choices(list(base.values()), k=40)
        rng.choices([[100.0]], k=1)
        gains.append((sum(v[0] for v in picked) / 40 / 100.0 - 1.0) * 100.0)
    gains.sort()
    assert (low, high) == pytest.approx((gains[25], gains[974]))
    assert gains[24] != gains[25] and gains[974] != gains[975]


def test_the_interval_is_placed_by_the_gain_of_all_the_data() -> None:
    """The shift is the point minus the gain of every video, each side whole (never a
    resample); the default seed is 0, so a report is the same each time it is built."""
    base = {str(i): [100.0 + 7.3 * i ** 0.5] for i in range(40)}
    other = {str(i): [90.0 + 3.1 * i ** 0.5] for i in range(30)}
    mean = [sum(v[0] for v in side.values()) / len(side) for side in (base, other)]
    full = (mean[0] / mean[1] - 1.0) * 100.0
    plain = gain_interval(base, other)
    assert gain_interval(base, other, point=full) == pytest.approx(plain)
    assert plain == gain_interval(base, other, seed=0) != gain_interval(base, other, seed=1)


def test_a_gain_cell_says_when_its_interval_covers_zero() -> None:
    row = {"throughput_gain_pct": 12.4, "throughput_gain_ci95_low": 0.0,
           "throughput_gain_ci95_high": 20.0}
    assert _gain_cell(row) == "+12% [+0%, +20%] (no measurable difference)"
    assert _gain_cell({**row, "throughput_gain_ci95_low": -20.0,
                       "throughput_gain_ci95_high": 0.0}).endswith("(no measurable difference)")
    assert _gain_cell({**row, "throughput_gain_ci95_low": 0.5}) == "+12% [+0%, +20%]"
    assert _gain_cell({**row, "throughput_gain_ci95_low": None}) == "+12%"


def summary(concurrency: int, throughput: float) -> LevelSummary:
    return LevelSummary(concurrency=concurrency, requests=6, errors=0,
                        request_throughput=throughput, ttft_p50_ms=1.0, ttft_p90_ms=2.0,
                        request_latency_p50_ms=3.0, output_token_throughput=4.0)


def write_records(folder: Path, latencies: dict[str, float]) -> None:
    folder.mkdir(parents=True)
    folder.joinpath(RECORDS_EXPORT).write_text("".join(
        json.dumps({"metadata": {"conversation_id": video},
                    "metrics": {"request_latency": {"value": latency}}}) + "\n"
        for video, latency in latencies.items()))


def test_rows_give_each_level_of_each_run_its_gain_over_the_first(tmp_path: Path) -> None:
    state = {"status": "complete", "output_lengths": {"other": 2},
             "prefix_cache_hit_pct": 40.0,
             "routing": {"requests_per_worker_min": 1, "requests_per_worker_max": 3}}
    base = ProfileRun("rr", tmp_path / "rr", {"levels": {"1": {}, "2": {}}},
                      {2: summary(2, 10.0), 1: summary(1, 5.0)})
    other = ProfileRun("sa", tmp_path / "sa", {"levels": {"2": state, "4": {}}},
                       {2: summary(2, 12.5), 4: summary(4, 20.0)}, {2: {"videos": 3}})
    write_records(tmp_path / "rr" / "concurrency-2", {"a": 120.0, "b": 360.0})
    write_records(tmp_path / "sa" / "concurrency-2", {"a": 100.0, "b": 300.0})
    rows = report_rows([base, other])
    assert [(r["concurrency"], r["profile"]) for r in rows] == [
        (1, "rr"), (2, "rr"), (2, "sa"), (4, "sa")]
    one, two_rr, two_sa, four = rows
    assert one["throughput_gain_pct"] == 0.0 and one["throughput_gain_ci95_low"] is None
    assert two_rr["throughput_gain_ci95_high"] is None  # the baseline has no interval
    assert two_sa["throughput_gain_pct"] == pytest.approx(25.0)
    # Placed around the gain of AIPerf's rates (25%), not the latencies' (20%).
    low, high = two_sa["throughput_gain_ci95_low"], two_sa["throughput_gain_ci95_high"]
    assert low < 25.0 < high
    assert (low, high) == pytest.approx(gain_interval(
        {"a": [120.0], "b": [360.0]}, {"a": [100.0], "b": [300.0]}, 25.0))
    assert four["throughput_gain_pct"] is None and four["throughput_gain_ci95_low"] is None
    assert two_sa["requests"] == 6 and two_sa["errors"] == 0
    assert two_sa["request_throughput"] == 12.5 and two_sa["ttft_p90_ms"] == 2.0
    assert two_sa["stickiness_videos"] == 3 and two_sa["stickiness_workers_seen"] is None
    assert two_sa["prefix_cache_hit_pct"] == 40.0 and two_rr["prefix_cache_hit_pct"] is None
    assert (two_sa["requests_per_worker_min"], two_sa["requests_per_worker_max"]) == (1, 3)
    assert two_rr["requests_per_worker_min"] is None
    assert two_sa["export"] == str(other.export(2))
