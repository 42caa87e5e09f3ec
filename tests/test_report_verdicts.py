"""The report's decisions as pure functions: which runs may be compared, the gain over the
baseline, the intervals from the spread between a level's replicate chunks, and the verdicts
beside the seed (on seed-like runs, no AIPerf). A wrong one credits the routing with a
difference in workload, or calls noise a gain."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from benchmarks.aiperf_run import LevelSummary
from benchmarks.report import (
    ProfileRun,
    _figure_verdict,
    _gain_cell,
    binding,
    binding_changes,
    build_report,
    check_comparable,
    design,
    gain_interval,
    gain_pct,
    gain_verdict,
    read_run,
    report_rows,
    seed_comparison,
    seed_lines,
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


def _built(tmp_path: Path, runs: list[Path], **kwargs: float) -> tuple[dict, str]:
    build_report(runs, tmp_path / "out", warn=lambda _: None, **kwargs)
    return (json.loads((tmp_path / "out" / "report.json").read_text()),
            (tmp_path / "out" / "report.md").read_text())


def test_each_figure_has_its_interval_from_the_chunks_in_every_output(tmp_path: Path) -> None:
    data, markdown = _built(tmp_path, seed_like_runs(tmp_path / "runs"))
    rows = {(r["concurrency"], r["profile"]): r for r in data["rows"]}
    rr, sa = rows[(16, "round-robin")], rows[(16, "session-affinity")]
    assert (rr["replicates"], rr["stopped_by"]) == (3, "interval")
    assert rr["request_throughput"] == pytest.approx(12.0)
    half = stats.t.ppf(T_QUANTILE, 2) * 0.2 / 3 ** 0.5  # the stop rule's t, n - 1 = 2
    assert rr["request_throughput_ci95_low"] == pytest.approx(12.0 - half, rel=1e-6)
    assert rr["request_throughput_ci95_high"] == pytest.approx(12.0 + half, rel=1e-6)
    low, high = sa["throughput_gain_ci95_low"], sa["throughput_gain_ci95_high"]
    assert sa["throughput_gain_pct"] == pytest.approx(100 * (17 / 12 - 1))
    assert low < sa["throughput_gain_pct"] < high
    assert (f"| 16 | {12.0:,.2f} [{12 - half:,.2f}, {12 + half:,.2f}] | 17.00 [") in markdown
    assert f"| +42% [{low:+.0f}%, {high:+.0f}%] |" in markdown
    assert "| 16 | round-robin | 960 / 0 in 3 blocks (stopped by interval) | 700 ms |" in markdown
    assert "Routing stickiness" not in markdown  # no level recorded it
    assert f"95% intervals: {INTERVAL_METHOD}" in markdown and "Design: separate" in markdown
    for png in ("throughput.png", "ttft.png"):
        assert (tmp_path / "out" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_beside_the_seed_one_verdict_per_figure_when_the_run_agrees(tmp_path: Path) -> None:
    data, markdown = _built(tmp_path, seed_like_runs(tmp_path / "runs"))
    lines = seed_lines(data)
    section = "## Beside the seed" + markdown.split("## Beside the seed")[1].split("\n## ")[0]
    assert section.strip().splitlines() == lines
    assert seed_lines({}) == seed_lines({"seed_comparison": {"cells": []}}) == []
    table = "\n".join(lines)
    assert "| 16 | round-robin | 12.00 / 12.65 (-5%) |  | 120 / 124 (-3%) | " \
        "1100 / 1140 (-4%) | 700 / 757 (-8%) |" in table
    assert "| 16 | session-affinity | 17.00 / 17.78 (-4%) | +42% [+34, +50] / +41%: matches |" \
        in table
    assert "| 8 | session-affinity | 9.30 / 9.35 (-1%) | +27% [+22, +33] / +27%: matches | " \
        "44 / 44 (+0%) | n/a | n/a |" in table
    assert data["seed_comparison"]["verdicts"] == lines[-5:] == [
        "req/s: within 25% of the seed at 4 of 4 cells",
        "gain beside the seed's +-10 points: matches at 8, 16; consistent with at no level; "
        "differs at no level",
        "TTFT p50: affinity's at or below round robin's, as in the seed, at 2 of 2 levels",
        "request latency p50: within 25% of the seed at 2 of 2 cells",
        "TTFT p90: affinity's at or below round robin's, as in the seed, at 1 of 1 levels"]


def test_beside_the_seed_a_verdict_names_each_cell_that_disagrees(tmp_path: Path) -> None:
    data, _ = _built(tmp_path, seed_like_runs(tmp_path / "runs", rr_16=8.0,
                                              ttft_16=(81.0, 84.0)))
    verdicts = data["seed_comparison"]["verdicts"]
    assert verdicts[:3] == [
        "req/s: within 25% of the seed at 3 of 4 cells; not round-robin at 16 (-37%)",
        "gain beside the seed's +-10 points: matches at 8; consistent with at no level; "
        "differs at 16",
        "TTFT p50: affinity's at or below round robin's, as in the seed, at 1 of 2 levels; "
        "not at 16 (84 vs 81 ms)"]
    assert len(verdicts) == 5 and data["seed_comparison"]["ttft_floor_ms"] is None


def test_a_gain_whose_interval_reaches_past_the_band_is_only_consistent_with_the_seed(
        tmp_path: Path) -> None:
    """+33% [+26, +41] beside the seed's +41: within 10 points as a point, but its interval
    reaches below +31, so it can't claim to match; a mock's calibration levels are marked."""
    runs = seed_like_runs(tmp_path / "runs", sa_16=16.0)
    for run in runs:  # as the rehearsal records its mock
        path = run / MANIFEST_NAME
        path.write_text(json.dumps({**json.loads(path.read_text()),
                                    "deployment": {"replicas": "8", "mock_workers": 8}}))
    data, markdown = _built(tmp_path, runs)
    (sixteen,) = [g for g in data["seed_comparison"]["gains"] if g["concurrency"] == 16]
    assert sixteen["verdict"] == "consistent with"
    assert sixteen["low"] < 31 < sixteen["run"] < 51
    assert "consistent with at 16" in data["seed_comparison"]["verdicts"][1]
    assert data["seed_comparison"]["in_sample"] == [1, 2]  # neither ran here: no footnote
    assert not any("in-sample" in v for v in data["seed_comparison"]["verdicts"])


def test_ttft_at_the_mock_s_floor_is_named_its_overhead_not_a_verdict_on_routing(
        tmp_path: Path) -> None:
    """The issue's run: TTFT p50 at 16 was 84 vs 81 ms on a mock whose own floor is about
    that; it must not read as "NOT the seed's direction" beside "goal met"."""
    runs = seed_like_runs(tmp_path / "runs", ttft_16=(81.0, 84.0))
    data, markdown = _built(tmp_path, runs, ttft_floor_ms=70.0)
    verdict = data["seed_comparison"]["verdicts"][2]
    assert verdict == (
        "TTFT p50: at 2 of 2 levels both profiles are within 25% of the mock's TTFT floor "
        "(70 ms), which is the mock's own overhead, not routing")
    assert data["seed_comparison"]["ttft_floor_ms"] == 70.0
    assert verdict in markdown
    # Above the floor (84 > 1.25 x 60 ms) a level is judged; at it (48 ms at 8) it is not.
    data, _ = _built(tmp_path / "lower", runs, ttft_floor_ms=60.0)
    assert data["seed_comparison"]["verdicts"][2] == (
        "TTFT p50: at 1 of 2 levels both profiles are within 25% of the mock's TTFT floor "
        "(60 ms), which is the mock's own overhead, not routing; above it, affinity's at or "
        "below round robin's, as in the seed, at 0 of 1 levels; not at 16 (84 vs 81 ms)")
    # The level is excused only when both profiles are near it: round robin at 70 ms is, but
    # affinity at 90 ms is not (1.25 x 60 = 75), so 90 vs 70 is a miss, not the floor's.
    data, _ = _built(tmp_path / "one-near", seed_like_runs(tmp_path / "one", ttft_16=(70, 90)),
                     ttft_floor_ms=60.0)
    assert data["seed_comparison"]["verdicts"][2].endswith("not at 16 (90 vs 70 ms)")
    # A floor far below the figures judges every level as before.
    data, _ = _built(tmp_path / "low", runs, ttft_floor_ms=20.0)
    assert data["seed_comparison"]["verdicts"][2].endswith("at 1 of 2 levels; not at 16 "
                                                            "(84 vs 81 ms)")


def test_a_gain_with_half_an_interval_is_judged_by_its_point_and_the_band_s_edge_counts() -> None:
    assert gain_verdict(None, 50.0, 41.0, 41.0) == "consistent with"  # a point can't match
    assert gain_verdict(20.0, 31.0, 25.0, 41.0) == "consistent with"  # reaches 41 - 10 exactly
    assert gain_verdict(20.0, 30.9, 25.0, 41.0) == "differs"


def _seed_rows(tmp_path: Path) -> list[dict[str, Any]]:
    return report_rows([read_run(run / MANIFEST_NAME) for run in seed_like_runs(tmp_path)])


def test_in_sample_levels_are_starred_and_footnoted(tmp_path: Path) -> None:
    verdicts = seed_comparison(_seed_rows(tmp_path), in_sample=(8, 16))["verdicts"]
    assert verdicts[1] == ("gain beside the seed's +-10 points: matches at 8*, 16*; consistent "
                           "with at no level; differs at no level")
    assert verdicts[-1] == ("* in-sample: the mock's costs come from the seed's concurrency-8 "
                            "row and its pause was tuned at 16, so these levels do not test it; "
                            "the others do")
    # The costs' level is the first, the pause's the last, however many lie between.
    three = seed_comparison(_seed_rows(tmp_path / "3"), in_sample=(2, 8, 16))["verdicts"]
    assert "concurrency-2 row and its pause was tuned at 16" in three[-1]


def test_against_another_baseline_the_gain_is_the_ratio_alone(tmp_path: Path) -> None:
    rows = _seed_rows(tmp_path)
    rate = {(r["concurrency"], r["profile"]): r["request_throughput"] for r in rows}
    gains = seed_comparison(rows, baseline="kv-routing")["gains"]
    assert [(g["concurrency"], g["run"], g["low"], g["high"], g["verdict"]) for g in gains] == [
        (c, gain_pct(rate[(c, "session-affinity")], rate[(c, "round-robin")]), None, None,
         "consistent with") for c in (8, 16)]


def test_a_figure_verdict_s_edges_count_for_the_run() -> None:
    """A cell exactly 25% off is within 25%; equal TTFTs are affinity's at or below; both at
    exactly 1.25 x the floor are the floor's; no cell is no verdict."""
    def cell(c: int, profile: str, figure: str, run: float, seed: float) -> dict[str, Any]:
        return {"concurrency": c, "profile": profile, "figure": figure, "run": run, "seed": seed}

    assert _figure_verdict([cell(8, "round-robin", "req/s", 1.25, 1.0)], "req/s", 0.25,
                           None) == "req/s: within 25% of the seed at 1 of 1 cells"
    assert _figure_verdict([], "req/s", 0.25, None) is None
    ttft = [cell(16, "round-robin", "TTFT p50", 75.0, 1.0),
            cell(16, "session-affinity", "TTFT p50", 75.0, 1.0)]
    assert _figure_verdict(ttft, "TTFT p50", None, None) == (
        "TTFT p50: affinity's at or below round robin's, as in the seed, at 1 of 1 levels")
    assert _figure_verdict(ttft, "TTFT p50", None, 60.0).startswith(
        "TTFT p50: at 1 of 1 levels both profiles are within 25% of the mock's TTFT floor")


def test_a_paired_level_of_one_block_has_its_gain_without_an_interval(tmp_path: Path) -> None:
    runs = [read_run(write_run(tmp_path, profile, {8: [chunk(rate)]}, run_uid="paired-run")
                     / MANIFEST_NAME)
            for profile, rate in (("round-robin", 7.3), ("session-affinity", 9.3))]
    (sa,) = [row for row in report_rows(runs) if row["profile"] == "session-affinity"]
    assert sa["throughput_gain_pct"] == pytest.approx(100 * (9.3 / 7.3 - 1))
    assert sa["throughput_gain_ci95_low"] is sa["throughput_gain_ci95_high"] is None


def test_a_level_s_row_carries_the_machine_load_its_sweep_recorded(tmp_path: Path) -> None:
    run = write_run(tmp_path, "round-robin", {8: [chunk(7.3)] * 2, 16: [chunk(12.0)] * 2})
    manifest = json.loads((run / MANIFEST_NAME).read_text())
    manifest["levels"]["8"]["machine"] = {"other_busy_pct": 40.0}
    (run / MANIFEST_NAME).write_text(json.dumps(manifest))
    rows = report_rows([read_run(run / MANIFEST_NAME)])
    assert [(r["concurrency"], r["other_busy_pct"]) for r in rows] == [(8, 40.0), (16, None)]
