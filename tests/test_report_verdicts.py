"""The report's decisions as pure functions: which runs may be compared, the gain over the
baseline, and the intervals from the spread between a level's replicate chunks. A wrong one
credits the routing with a difference in workload, or calls noise a gain."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from benchmarks.aiperf_run import LevelSummary
from benchmarks.report import (
    ProfileRun,
    _gain_cell,
    binding,
    binding_changes,
    check_comparable,
    design,
    gain_interval,
    gain_pct,
    gain_verdict,
    read_run,
    report_rows,
    welch_df,
)
from benchmarks.sweep import INTERVAL_METHOD, MANIFEST_NAME, paired_gain
from infra.names import InputError
from infra.run import T_QUANTILE
from tests.support_report_runs import chunk, seed_like_runs, write_run

# The two-sided confidence of the stop rule's corrected t (its intervals' 95% label holds).
CONFIDENCE = 2 * T_QUANTILE - 1
WORKLOAD = {"concurrencies": [1, 2], "videos": 3, "questions_per_video": 2,
            "output_tokens": 128, "seed": 0, "stop_within_pct": 3.0, "full": False}
MANIFEST = {
    "model": "m", "workload": WORKLOAD, "endpoint": "http://one.test",
    "video_source": {"kind": "video", "standin_tokens": None}, "pause_ms": 0,
    "tools": {"aiperf": "0.13.0", "python": "3.11.7"},
    "deployment": {"replicas": "8", "routing": "rr", "graph_uid": "u1",
                   "frontend_command": "f1", "worker_image": "w:1"},
}


def test_binding_is_the_workload_the_client_and_the_deployment_routing_aside() -> None:
    assert binding(MANIFEST) == {
        "model": "m", "workload": {"videos": 3, "questions_per_video": 2,
                                   "output_tokens": 128, "stop_within_pct": 3.0, "full": False},
        "video_source": MANIFEST["video_source"], "pause_ms": 0, "aiperf": "0.13.0",
        "deployment": {"replicas": "8", "worker_image": "w:1"}}
    assert binding({**MANIFEST, "deployment": None})["deployment"] == {}
    assert binding({}) == {"model": None, "workload": {}, "video_source": None,
                           "pause_ms": None, "aiperf": None, "deployment": {}}


def test_routing_the_videos_content_the_levels_and_the_endpoint_never_bind() -> None:
    other = {**MANIFEST, "endpoint": "http://two.test",
             "workload": {**WORKLOAD, "seed": 7, "concurrencies": [16]},
             "tools": {**MANIFEST["tools"], "python": "3.12.1"},
             "deployment": {**MANIFEST["deployment"], "routing": "affinity",
                            "graph_uid": "u2", "frontend_command": "f2"}}
    assert binding_changes(MANIFEST, other) == []


def test_each_binding_difference_is_named() -> None:
    other = {**MANIFEST, "model": "n",
             "workload": {**WORKLOAD, "output_tokens": 64, "stop_within_pct": 5.0},
             "tools": {"aiperf": "0.14.0"},
             "deployment": {**MANIFEST["deployment"], "replicas": "4"}}
    assert binding_changes(MANIFEST, other) == [
        "model: 'm' -> 'n'", "workload.output_tokens: 128 -> 64",
        "workload.stop_within_pct: 3.0 -> 5.0", "aiperf: '0.13.0' -> '0.14.0'",
        "deployment.replicas: '8' -> '4'"]


def run(label: str, manifest: dict[str, Any], source: Path = Path("r")) -> ProfileRun:
    return ProfileRun(label, source, manifest)


def test_runs_of_another_workload_are_refused_each_against_the_first() -> None:
    check_comparable([run("a", MANIFEST), run("b", dict(MANIFEST))])
    check_comparable([run("a", MANIFEST)])
    other = {**MANIFEST, "workload": {**WORKLOAD, "questions_per_video": 5}}
    with pytest.raises(InputError) as refused:
        check_comparable([run("a", MANIFEST, Path("ra")), run("b", dict(MANIFEST)),
                          run("c", other, Path("rc"))])
    assert refused.value.problems[:-1] == [
        "c (rc) differs from a (ra) in workload.questions_per_video: 2 -> 5"]
    assert refused.value.heading == "bad report input"
    assert refused.value.problems[-1] == (
        "compare runs of one workload and deployment (routing aside): the same videos, "
        "questions, output tokens, stop rule, AIPerf, images and topology")
    with pytest.raises(InputError, match="b \\(r\\) differs from a \\(r\\) in workload.full"):
        check_comparable([run("a", MANIFEST), run("b", {**MANIFEST, "workload": {
            **WORKLOAD, "full": True}})])


def test_gain_is_the_ratio_to_the_baseline_and_none_without_one() -> None:
    assert gain_pct(12.0, 10.0) == pytest.approx(20.0)
    assert gain_pct(8.0, 10.0) == pytest.approx(-20.0)
    assert gain_pct(10.0, 10.0) == 0.0
    assert gain_pct(None, 10.0) is None
    assert gain_pct(5.0, None) is None
    assert gain_pct(5.0, 0.0) is None


def test_a_gain_cell_says_when_its_interval_covers_zero() -> None:
    row = {"throughput_gain_pct": 12.4, "throughput_gain_ci95_low": 0.0,
           "throughput_gain_ci95_high": 20.0}
    assert _gain_cell(row) == "+12% [+0%, +20%] (no measurable difference)"
    assert _gain_cell({**row, "throughput_gain_ci95_low": -20.0,
                       "throughput_gain_ci95_high": 0.0}).endswith("(no measurable difference)")
    assert _gain_cell({**row, "throughput_gain_ci95_low": 0.5}) == "+12% [+0%, +20%]"
    assert _gain_cell({**row, "throughput_gain_ci95_low": None}) == "+12%"
    # The baseline's own row, or a level the baseline lacks: no gain to show.
    assert _gain_cell({**row, "throughput_gain_pct": None, "throughput_gain_ci95_low": None}
                      ) == "n/a"


def summary(concurrency: int, throughput: float) -> LevelSummary:
    return LevelSummary(concurrency=concurrency, requests=6, errors=0,
                        request_throughput=throughput, ttft_p50_ms=1.0, ttft_p90_ms=2.0,
                        request_latency_p50_ms=3.0, output_token_throughput=4.0)


def test_rows_give_each_level_of_each_run_its_gain_over_the_first(tmp_path: Path) -> None:
    state = {"status": "complete", "output_lengths": {"other": 2},
             "prefix_cache_hit_pct": 40.0, "replicates": 2, "stopped_by": "videos",
             "interval_method": INTERVAL_METHOD,
             "routing": {"videos": 3, "requests_per_worker_min": 1,
                         "requests_per_worker_max": 3}}
    base = ProfileRun("rr", tmp_path / "rr", {"levels": {"1": {}, "2": {}}},
                      {2: summary(2, 10.0), 1: summary(1, 5.0)},
                      chunks={2: [summary(2, 9.0), summary(2, 11.0)]})
    other = ProfileRun("sa", tmp_path / "sa", {"levels": {"2": state, "4": {}}},
                       {2: summary(2, 12.5), 4: summary(4, 20.0)},
                       chunks={2: [summary(2, 12.0), summary(2, 13.0)]})
    rows = report_rows([base, other])
    assert [(r["concurrency"], r["profile"]) for r in rows] == [
        (1, "rr"), (2, "rr"), (2, "sa"), (4, "sa")]
    one, two_rr, two_sa, four = rows
    assert one["throughput_gain_pct"] == 0.0 and one["throughput_gain_ci95_low"] is None
    assert one["request_throughput_ci95_low"] is None  # no chunks, no spread
    assert two_rr["throughput_gain_ci95_high"] is None  # the baseline has no interval
    assert two_sa["throughput_gain_pct"] == pytest.approx(25.0)
    low, high = two_sa["throughput_gain_ci95_low"], two_sa["throughput_gain_ci95_high"]
    assert low < 25.0 < high
    assert (low, high) == pytest.approx(gain_interval([9.0, 11.0], [12.0, 13.0]))
    assert (two_sa["request_throughput_ci95_low"], two_sa["request_throughput_ci95_high"]
            ) == pytest.approx(stats.t.interval(CONFIDENCE, 1, loc=12.5, scale=0.5))
    assert two_sa["ttft_p50_ms_ci95_low"] == two_sa["ttft_p50_ms_ci95_high"] == 1.0
    assert (two_sa["replicates"], two_sa["stopped_by"]) == (2, "videos")
    assert two_sa["interval_method"] == INTERVAL_METHOD and two_rr["replicates"] is None
    assert four["throughput_gain_pct"] is None and four["throughput_gain_ci95_low"] is None
    assert two_sa["requests"] == 6 and two_sa["errors"] == 0
    assert two_sa["request_throughput"] == 12.5 and two_sa["ttft_p90_ms"] == 2.0
    assert two_sa["stickiness_videos"] == 3 and two_sa["stickiness_workers_seen"] is None
    assert two_sa["prefix_cache_hit_pct"] == 40.0 and two_rr["prefix_cache_hit_pct"] is None
    assert (two_sa["requests_per_worker_min"], two_sa["requests_per_worker_max"]) == (1, 3)
    assert two_rr["requests_per_worker_min"] is None
    assert two_sa["dir"] == str(tmp_path / "sa" / "concurrency-2")


def test_a_figure_s_interval_is_student_t_over_its_level_s_chunks(tmp_path: Path) -> None:
    """Known chunk figures, the interval scipy gives: mean +- t(T_QUANTILE, n-1) s/sqrt(n)."""
    rates = [7.0, 7.6, 7.3, 6.9]
    run = read_run(write_run(tmp_path, "rr", {8: [chunk(r, ttft=40 + r) for r in rates]})
                   / MANIFEST_NAME)
    assert [c.request_throughput for c in run.chunks[8]] == rates
    row = report_rows([run])[0]
    expected = stats.t.interval(CONFIDENCE, 3, loc=statistics.fmean(rates),
                                scale=statistics.stdev(rates) / 2)
    assert (row["request_throughput_ci95_low"], row["request_throughput_ci95_high"]
            ) == pytest.approx(expected)
    assert row["ttft_p50_ms_ci95_high"] - row["ttft_p50_ms"] == pytest.approx(
        expected[1] - statistics.fmean(rates))
    assert (row["replicates"], row["stopped_by"], row["requests"]) == (4, "interval", 640)


def test_the_gain_interval_is_the_delta_method_on_the_log_ratio_with_welch_df() -> None:
    """Computed here from scipy's t and the textbook formulas, by another route: the
    variance of log(mean) is var / (n mean^2) on each side."""
    base, other = [10.0, 10.4, 9.6], [12.0, 12.9, 11.4, 12.3]
    (mb, vb), (mo, vo) = ((statistics.fmean(s), statistics.variance(s)) for s in (base, other))
    part_b, part_o = vb / 3 / mb**2, vo / 4 / mo**2
    df = (part_b + part_o) ** 2 / (part_b**2 / 2 + part_o**2 / 3)
    log_low, log_high = stats.t.interval(CONFIDENCE, df, loc=math.log(mo / mb),
                                         scale=math.sqrt(part_b + part_o))
    assert gain_interval(base, other) == pytest.approx(
        ((math.exp(log_low) - 1) * 100, (math.exp(log_high) - 1) * 100))
    low, high = gain_interval(base, other)
    assert low < (mo / mb - 1) * 100 < high
    assert gain_interval([10.0], other) is None and gain_interval(base, [12.0]) is None
    assert gain_interval([0.0, 0.0], other) is None  # no rate to compare with
    assert gain_interval([10.0, 10.0], [12.0, 12.0]) == pytest.approx((20.0, 20.0))


def test_the_gain_interval_widens_with_either_side_s_spread() -> None:
    def width(base: list[float], other: list[float]) -> float:
        low, high = gain_interval(base, other)
        return high - low

    calm, noisy = [10.0, 10.1, 9.9], [10.0, 11.0, 9.0]
    fast_calm, fast_noisy = [12.0, 12.1, 11.9], [12.0, 13.2, 10.8]
    assert width(noisy, fast_calm) > width(calm, fast_calm)
    assert width(calm, fast_noisy) > width(calm, fast_calm)
    # More replicates of the same spread narrow it.
    assert width(noisy * 3, fast_noisy * 3) < width(noisy, fast_noisy)


def test_welch_degrees_of_freedom() -> None:
    """Equal parts from n each: 2(n-1); one side's part dominating: that side's n-1."""
    assert welch_df([0.5, 0.5], [4, 4]) == pytest.approx(6.0)
    assert welch_df([1.0, 1e-9], [5, 30]) == pytest.approx(4.0)
    # The textbook case: s1^2/n1 = 4/10, s2^2/n2 = 9/15.
    assert welch_df([0.4, 0.6], [10, 15]) == pytest.approx(1.0 / (0.16 / 9 + 0.36 / 14))


def test_one_interleaved_runs_profiles_are_paired_and_gain_over_their_blocks(
        tmp_path: Path) -> None:
    """Round robin's chunks 11.8, 12.0, 12.2 beside affinity's 16.7, 17.0, 17.3, block by
    block: paired, the gain is over the three ratios (tight); as separate runs the same
    figures give Welch's interval over both spreads (wide)."""
    paired = [read_run(p / MANIFEST_NAME) for p in seed_like_runs(tmp_path / "p", paired=True)]
    separate = [read_run(p / MANIFEST_NAME) for p in seed_like_runs(tmp_path / "s")]
    assert (design(paired), design(separate), design(paired[:1])) == (
        "paired", "separate", "separate")
    assert design([paired[0], separate[1]]) == "separate"  # one run's profile with another's
    other_run = {**paired[1].manifest, "run_uid": "another"}
    assert design([paired[0], ProfileRun("sa", tmp_path, other_run)]) == "separate"
    (p16,) = [r for r in report_rows(paired) if r["profile"] == "session-affinity"
              and r["concurrency"] == 16]
    (s16,) = [r for r in report_rows(separate) if r["profile"] == "session-affinity"
              and r["concurrency"] == 16]
    expected = paired_gain([11.8, 12.0, 12.2], [16.7, 17.0, 17.3])
    assert (p16["throughput_gain_pct"], p16["throughput_gain_ci95_low"],
            p16["throughput_gain_ci95_high"]) == pytest.approx(
                (expected.mean, expected.low, expected.high))
    assert (s16["throughput_gain_ci95_low"], s16["throughput_gain_ci95_high"]) == \
        pytest.approx(gain_interval([11.8, 12.0, 12.2], [16.7, 17.0, 17.3]))
    assert (p16["throughput_gain_ci95_high"] - p16["throughput_gain_ci95_low"]
            < (s16["throughput_gain_ci95_high"] - s16["throughput_gain_ci95_low"]) / 5)


def test_a_gain_matches_the_seed_only_when_its_whole_interval_is_within_ten_points() -> None:
    seed = 23.0
    assert gain_verdict(14.0, 32.0, 23.0, seed) == "matches"
    assert gain_verdict(13.0, 33.0, 23.0, seed) == "matches"  # the band holds its edges
    assert gain_verdict(12.9, 32.0, 23.0, seed) == "consistent with"  # reaches below 13
    assert gain_verdict(10.0, 29.0, 19.0, seed) == "consistent with"  # the review's level 2
    assert gain_verdict(34.0, 40.0, 37.0, seed) == "differs"
    assert gain_verdict(-5.0, 12.0, 3.0, seed) == "differs"
    assert gain_verdict(33.0, 40.0, 36.0, seed) == "consistent with"  # touches 33
    # A point alone never matches: it is at most consistent with the seed.
    assert gain_verdict(None, None, 23.0, seed) == "consistent with"
    assert gain_verdict(None, None, 34.0, seed) == "differs"
    assert gain_verdict(23.0, 23.0, 23.0, seed) == "consistent with"
