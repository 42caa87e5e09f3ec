"""The report's numbers are the ones in the AIPerf exports it read (real exports of two
small sweeps), and the gains are computed from them."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

import pytest

from benchmarks.aiperf_run import SUMMARY_EXPORT
from benchmarks.report import build_report
from benchmarks.sweep import MANIFEST_NAME, level_dir_name, paired_gain
from infra.names import InputError
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
