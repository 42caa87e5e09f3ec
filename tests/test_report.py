"""The report's numbers are the ones in the AIPerf exports it read (real exports of two
small sweeps), and the gains are computed from them."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

import pytest
from scipy import stats

from benchmarks.aiperf_run import SUMMARY_EXPORT
from benchmarks.report import build_report, seed_lines
from benchmarks.sweep import INTERVAL_METHOD, MANIFEST_NAME, level_dir_name, paired_gain
from infra.names import InputError
from infra.run import T_QUANTILE
from tests.support_report_runs import seed_like_runs
from tests.support_sweep_runs import (
    LEVELS,
    VIDEOS,
    SweepRuns,
    sweep_runs,  # noqa: F401  (fixture)
)

# Rates are the mean of a level's chunks; percentiles are over all of its requests.
RATES = {
    "request_throughput": ("request_throughput", "avg"),
    "output_token_throughput": ("output_token_throughput", "avg"),
}
PERCENTILES = {"ttft_p50_ms": ("time_to_first_token", 50),
               "ttft_p90_ms": ("time_to_first_token", 90),
               "request_latency_p50_ms": ("request_latency", 50)}


def _exports(run_dir: Path, level: int) -> list[dict]:
    """The level's AIPerf exports: its own, or each replicate chunk's."""
    return [json.loads(path.read_text()) for path in
            sorted((run_dir / level_dir_name(level)).glob(f"**/{SUMMARY_EXPORT}"))]


def _expected(exports: list[dict], metric: str, stat: str) -> float:
    return statistics.fmean(export[metric][stat] for export in exports)


def _pooled(run_dir: Path, level: int, metric: str, percent: int) -> float:
    """The percentile of every request of the level, as AIPerf computes one run's."""
    values = [json.loads(line)["metrics"][metric]["value"] for path in sorted(
        (run_dir / level_dir_name(level)).glob("*/profile_export.jsonl"))
        for line in path.read_text().splitlines()]
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


@pytest.fixture(scope="module")
def report_dir(sweep_runs: SweepRuns, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("report")
    build_report([sweep_runs.root], out, warn=lambda _: None)  # the run: a folder per profile
    return out


def test_numbers_equal_the_exports_and_gains_come_from_them(
    sweep_runs: SweepRuns, report_dir: Path  # noqa: F811
) -> None:
    data = json.loads((report_dir / "report.json").read_text())
    assert data["profiles"] == ["round-robin", "session-affinity"]
    assert data["baseline"] == "round-robin" and data["design"] == "paired"
    rows = {(r["concurrency"], r["profile"]): r for r in data["rows"]}
    assert set(rows) == {(c, p) for c in LEVELS for p in data["profiles"]}
    for level in LEVELS:
        rr = _exports(sweep_runs.round_robin.run_dir, level)
        aff = _exports(sweep_runs.affinity.run_dir, level)
        for profile, exports in (("round-robin", rr), ("session-affinity", aff)):
            row = rows[(level, profile)]
            for name, (metric, stat) in RATES.items():
                assert row[name] == pytest.approx(_expected(exports, metric, stat)), (
                    level, profile, name)
            run_dir = (sweep_runs.round_robin if profile == "round-robin"
                       else sweep_runs.affinity).run_dir
            for name, (metric, percent) in PERCENTILES.items():
                assert row[name] == pytest.approx(_pooled(run_dir, level, metric, percent))
            assert row["requests"] == sum(e["request_count"]["avg"] for e in exports)
        # Paired: over the blocks' ratios (exports in block order); one block, its ratio.
        rates = [[e["request_throughput"]["avg"] for e in side] for side in (rr, aff)]
        gain = paired_gain(*rates)
        expected_gain = gain.mean if gain else (rates[1][0] / rates[0][0] - 1) * 100
        assert rows[(level, "session-affinity")]["throughput_gain_pct"] == pytest.approx(
            expected_gain)
        assert rows[(level, "round-robin")]["throughput_gain_pct"] == pytest.approx(0.0)

    with open(report_dir / "report.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == len(data["rows"])
    for csv_row, row in zip(csv_rows, data["rows"], strict=True):
        assert int(csv_row["concurrency"]) == row["concurrency"]
        assert float(csv_row["request_throughput"]) == pytest.approx(row["request_throughput"])
        assert float(csv_row["throughput_gain_pct"]) == pytest.approx(row["throughput_gain_pct"])

    markdown = (report_dir / "report.md").read_text()
    assert "note: recording servers, not a model" in markdown
    assert "Design: paired." in markdown
    rate = rows[(1, "round-robin")]["request_throughput"]
    assert f"| 1 | round-robin | {rate:.2f} / 0.94 ({rate / 0.94 - 1:+.0%}) |" in markdown
    for png in ("throughput.png", "ttft.png"):
        assert (report_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stickiness_from_the_rehearsal_is_shown(sweep_runs: SweepRuns, tmp_path: Path) -> None:  # noqa: F811
    run = tmp_path / "session-affinity"
    shutil.copytree(sweep_runs.affinity.run_dir, run)
    sticky = {"videos": 3, "share_single_worker": 1.0, "mean_workers_per_video": 1.0,
              "workers_seen": 3}
    manifest = json.loads((run / MANIFEST_NAME).read_text())
    manifest["levels"]["2"]["routing"] = {**sticky, "requests_per_worker_min": 3,
                                          "requests_per_worker_max": 3}
    (run / MANIFEST_NAME).write_text(json.dumps(manifest))
    build_report([run], tmp_path / "out", warn=lambda _: None)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "Routing stickiness" in markdown
    assert "| 2 | session-affinity | 100% | 1.00 |" in markdown
    assert "| 2 | session-affinity | n/a / n/a | 3 (3-3) |" in markdown  # the workers' spread
    assert "| 1 | session-affinity | n/a | n/a |" not in markdown  # levels without any
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    stickiness = {r["concurrency"]: {k: r[f"stickiness_{k}"] for k in sticky}
                  for r in data["rows"]}
    assert stickiness == {c: dict.fromkeys(sticky) for c in LEVELS} | {2: sticky}
    assert stickiness[2]["share_single_worker"] == 1.0


def test_a_folder_of_runs_is_read_from_their_manifests(
    sweep_runs: SweepRuns, tmp_path: Path  # noqa: F811
) -> None:
    folder = tmp_path / "rehearsal"
    shutil.copytree(sweep_runs.round_robin.run_dir, folder / "a")
    shutil.copytree(sweep_runs.affinity.run_dir, folder / "b")
    # A level the manifest does not record as finished is not reported, export or not.
    manifest = json.loads((folder / "b" / MANIFEST_NAME).read_text())
    manifest["levels"][str(LEVELS[0])]["status"] = "failed"
    (folder / "b" / MANIFEST_NAME).write_text(json.dumps(manifest))
    build_report([folder], tmp_path / "out", warn=lambda _: None)
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["profiles"] == ["round-robin", "session-affinity"]
    assert (LEVELS[0], "session-affinity") not in {(r["concurrency"], r["profile"])
                                                   for r in data["rows"]}


def test_no_results_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="run `python -m benchmarks sweep` first"):
        build_report([tmp_path], tmp_path / "out", warn=lambda _: None)


def test_runs_of_another_workload_or_deployment_are_not_compared(
        sweep_runs: SweepRuns, tmp_path: Path) -> None:  # noqa: F811
    """Routing may differ (the frontend's flags, the graph); anything else is refused and
    named: a 10-video, 64-token run on 4 replicas is not a baseline for a 3-video one."""
    other = tmp_path / "other"
    shutil.copytree(sweep_runs.round_robin.run_dir, other)
    path = other / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["deployment"] = {"routing": "--router-mode kv", "graph_uid": "another-graph"}
    manifest["workload"]["seed"] = 7  # other videos of the same shape: comparable
    path.write_text(json.dumps(manifest))
    build_report([sweep_runs.affinity.run_dir, other], tmp_path / "routing-only",
                 warn=lambda _: None)
    manifest["workload"].update(videos=10, output_tokens=64, stop_within_pct=5.0, full=True)
    manifest.update(deployment={**manifest["deployment"], "replicas": "4"},
                    tools={**manifest["tools"], "aiperf": "0.12.0"})
    path.write_text(json.dumps(manifest))
    with pytest.raises(InputError) as refused:
        build_report([sweep_runs.affinity.run_dir, other], tmp_path / "refused",
                     warn=lambda _: None)
    problems = "\n".join(refused.value.problems)
    for change in (f"workload.videos: {VIDEOS} -> 10", "workload.output_tokens: 128 -> 64",
                   "workload.stop_within_pct: 3.0 -> 5.0", "workload.full: False -> True",
                   "aiperf: '0.13.0' -> '0.12.0'", "deployment.replicas: None -> '4'"):
        assert change in problems
    assert "routing" not in problems.split("compare runs")[0]
    assert not (tmp_path / "refused").exists()


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
