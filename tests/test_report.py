"""The report's numbers are the ones in the AIPerf exports it read (real exports of two
small sweeps), and the gains are computed from them."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from benchmarks.aiperf_run import SUMMARY_EXPORT
from benchmarks.report import build_report
from benchmarks.sweep import MANIFEST_NAME, level_dir_name
from infra.names import InputError
from tests.support_sweep_runs import (
    LEVELS,
    SweepRuns,
    sweep_runs,  # noqa: F401  (fixture)
)

FIELDS = {
    "request_throughput": ("request_throughput", "avg"),
    "ttft_p50_ms": ("time_to_first_token", "p50"),
    "ttft_p90_ms": ("time_to_first_token", "p90"),
    "request_latency_p50_ms": ("request_latency", "p50"),
    "output_token_throughput": ("output_token_throughput", "avg"),
}


def _export(run_dir: Path, level: int) -> dict:
    return json.loads((run_dir / level_dir_name(level) / SUMMARY_EXPORT).read_text())


@pytest.fixture(scope="module")
def report_dir(sweep_runs: SweepRuns, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("report")
    build_report([sweep_runs.round_robin.run_dir, sweep_runs.affinity.run_dir], out,
                 warn=lambda _: None)
    return out


def test_numbers_equal_the_exports_and_gains_come_from_them(
    sweep_runs: SweepRuns, report_dir: Path  # noqa: F811
) -> None:
    data = json.loads((report_dir / "report.json").read_text())
    assert data["profiles"] == ["round-robin", "session-affinity"]
    assert data["baseline"] == "round-robin"
    rows = {(r["concurrency"], r["profile"]): r for r in data["rows"]}
    assert set(rows) == {(c, p) for c in LEVELS for p in data["profiles"]}
    for level in LEVELS:
        rr = _export(sweep_runs.round_robin.run_dir, level)
        aff = _export(sweep_runs.affinity.run_dir, level)
        for profile, export in (("round-robin", rr), ("session-affinity", aff)):
            row = rows[(level, profile)]
            for name, (metric, stat) in FIELDS.items():
                assert row[name] == export[metric][stat], (level, profile, name)
            assert row["requests"] == export["request_count"]["avg"]
        rr_rate, aff_rate = rr["request_throughput"]["avg"], aff["request_throughput"]["avg"]
        expected_gain = (aff_rate / rr_rate - 1) * 100
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
    aff_row = rows[(LEVELS[-1], "session-affinity")]
    rr_row = rows[(LEVELS[-1], "round-robin")]
    low, high = aff_row["throughput_gain_ci95_low"], aff_row["throughput_gain_ci95_high"]
    assert low is not None and low <= high  # from the per-request records
    assert float(csv_rows[-1]["throughput_gain_ci95_low"]) == pytest.approx(low)
    assert (f"| {LEVELS[-1]} | {rr_row['request_throughput']:,.2f} | "
            f"{aff_row['request_throughput']:,.2f} | {aff_row['throughput_gain_pct']:+.0f}% "
            f"[{low:+.0f}%, {high:+.0f}%]") in markdown
    assert "note: recording server, not a model" in markdown
    for png in ("throughput.png", "ttft.png"):
        assert (report_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stickiness_from_the_rehearsal_is_shown(sweep_runs: SweepRuns, tmp_path: Path) -> None:  # noqa: F811
    run = tmp_path / "session-affinity-run"
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
    assert "| 2 | 100% | 1.00 |" in markdown
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["runs"][0]["stickiness"] == {"2": sticky}
    row = next(r for r in data["rows"] if r["concurrency"] == 2)
    assert row["stickiness_share_single_worker"] == 1.0


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


def test_a_gain_comes_with_its_bootstrap_interval_over_videos() -> None:
    from benchmarks.report import _gain_cell, gain_interval

    rng = __import__("random").Random(1)
    base = {f"v{i}": [800 + rng.uniform(-50, 50) for _ in range(20)] for i in range(40)}
    same = {f"v{i}": [800 + rng.uniform(-50, 50) for _ in range(20)] for i in range(40)}
    faster = {k: [lat / 1.2 for lat in v] for k, v in base.items()}
    low, high = gain_interval(base, faster)
    assert 15 < low < 20 < high < 25  # 1.2x faster: +20%
    low, high = gain_interval(base, same)
    assert low < 0 < high
    assert gain_interval({}, same) is None
    # Placed around the measured gain (AIPerf's rates), which it then always contains.
    around = gain_interval(base, faster, point=22.0)
    assert around is not None and 17 < around[0] < 22 < around[1] < 27
    row = {"throughput_gain_pct": 1.2, "throughput_gain_ci95_low": low,
           "throughput_gain_ci95_high": high}
    assert _gain_cell(row).endswith("(no measurable difference)")
    assert _gain_cell({**row, "throughput_gain_ci95_low": 2.0}) == f"+1% [+2%, {high:+.0f}%]"


def test_runs_of_another_workload_or_deployment_are_not_compared(
        sweep_runs: SweepRuns, tmp_path: Path) -> None:  # noqa: F811
    """Routing may differ (the frontend's flags, the graph); anything else is refused and
    named: a 10-video, 64-token run on 4 replicas is not a baseline for a 3-video one."""
    other = tmp_path / "other"
    shutil.copytree(sweep_runs.round_robin.run_dir, other)
    path = other / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["deployment"] = {"routing": "--router-mode kv", "graph_uid": "another-graph"}
    path.write_text(json.dumps(manifest))
    build_report([sweep_runs.affinity.run_dir, other], tmp_path / "routing-only",
                 warn=lambda _: None)
    manifest.update(sessions_per_level=10, output_tokens=64,
                    deployment={**manifest["deployment"], "replicas": "4"})
    manifest["dataset"]["info"]["videos"] = 10
    path.write_text(json.dumps(manifest))
    with pytest.raises(InputError) as refused:
        build_report([sweep_runs.affinity.run_dir, other], tmp_path / "refused",
                     warn=lambda _: None)
    problems = "\n".join(refused.value.problems)
    for change in ("videos: 3 -> 10", "output_tokens: 128 -> 64", "dataset.videos: 3 -> 10",
                   "deployment.replicas: None -> '4'"):
        assert change in problems
    assert "routing" not in problems.split("compare runs")[0]
    assert not (tmp_path / "refused").exists()
