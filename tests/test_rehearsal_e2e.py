"""The rehearsal end to end, as the user runs it: `python -m rehearsal`.

Real dynamo.frontend per profile on one dynamo.mocker (8 workers, as the stacks declare), real
AIPerf, every profile interleaved block by block, two concurrency levels, a few small videos.
Asserts the routing obeyed each profile (affinity: every video on one worker; round robin:
every video spread over several), the report shows it beside the seed, and nothing the
rehearsal started is left running, also after Ctrl-C in the middle of a level or a level
over its timeout.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from benchmarks.evidence import ATTRIBUTION_FILE
from benchmarks.sweep import level_dir_name
from rehearsal.local_dynamo import LOOPBACK, PROCESS_RECORD, tree_pids
from rehearsal.rehearse import REHEARSAL_FILE
from tests.conftest import at_a_terminal
from tests.support_rehearsal import child_env, ports_of, still_listening, wait_gone

pytestmark = pytest.mark.rehearsal

LEVELS = (2, 4)
SMALL = [
    "--videos-per-level", "4", "--questions-per-video", "4", "--standin-tokens", "2000",
    "--concurrency", *map(str, LEVELS), "--speedup-ratio", "4",
]


def _rehearse(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rehearsal", *SMALL,
            "--results-root", str(tmp_path), "--run-id", "e2e", *extra]


def _recorded_processes(run_dir: Path) -> tuple[set[int], list[dict]]:
    pids: set[int] = set()
    listeners: list[dict] = []
    for record in run_dir.rglob(PROCESS_RECORD):  # the graph's, and the TTFT floor's
        data = json.loads(record.read_text())
        for process in data["processes"]:
            pids |= {process["pid"], *process["members"]}
        listeners += data["listeners"]
    return pids, listeners


PROFILES = ("round-robin", "session-affinity", "kv-routing")


def test_rehearsal_of_every_profile(tmp_path: Path) -> None:
    started = time.monotonic()
    result = subprocess.run(
        _rehearse(tmp_path, "--profiles", *PROFILES), capture_output=True, text=True,
        timeout=450, env=child_env(),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "e2e"

    # Everything ran on loopback, and nothing of it is left.
    pids, listeners = _recorded_processes(run_dir)
    # The graph kept across both levels: NATS, the mocker and a frontend per profile.
    (graph,) = (run_dir / "stack").glob(PROCESS_RECORD)
    assert len(json.loads(graph.read_text())["processes"]) == 2 + len(PROFILES)
    assert listeners and all(lst["address"] == LOOPBACK for lst in listeners), listeners
    assert not wait_gone(pids, timeout=5.0)
    assert not still_listening({lst["port"] for lst in listeners})

    def stickiness(profile: str, level: int) -> dict:
        manifest = json.loads((run_dir / profile / "manifest.json").read_text())
        return manifest["levels"][str(level)]["routing"]

    for level in LEVELS:
        # Session affinity by header: every video's questions on one worker.
        sticky = stickiness("session-affinity", level)
        assert sticky["videos"] == 4
        assert sticky["share_single_worker"] == 1.0, level
        assert sticky["mean_workers_per_video"] == 1.0
        # KV routing by cache overlap (no header) weighs overlap against load, so it keeps
        # a video together more than round robin does, but promises no single worker
        # (a CI run saw 2 of 4 videos split at concurrency 4).
        kv, round_robin = stickiness("kv-routing", level), stickiness("round-robin", level)
        assert kv["videos"] == 4
        assert kv["mean_workers_per_video"] < round_robin["mean_workers_per_video"], level

    # Round robin: every single video spread over more than one worker.
    for level in LEVELS:
        assert stickiness("round-robin", level)["share_single_worker"] == 0.0
        by_video: dict[str, list[int]] = {}  # each chunk (of disjoint videos) has its own
        for chunk in (run_dir / "round-robin" / level_dir_name(level)).glob("chunk-*"):
            by_video |= json.loads((chunk / ATTRIBUTION_FILE).read_text())["workers_by_video"]
        assert len(by_video) == 4
        for video, workers in by_video.items():
            assert len(workers) == 4, video
            assert len(set(workers)) > 1, f"{video} stayed on one worker under round robin"

    # Server-side evidence per level: the frontend's prefix-cache count (more reuse under
    # affinity than round robin) and the workers the responses named.
    def level_record(profile: str, level: int) -> dict:
        manifest = json.loads((run_dir / profile / "manifest.json").read_text())
        return manifest["levels"][str(level)]

    for level in LEVELS:
        hits = {p: level_record(p, level)["prefix_cache_hit_pct"] for p in PROFILES}
        assert all(0 <= hit <= 100 for hit in hits.values()), hits
        assert hits["session-affinity"] > hits["round-robin"], (level, hits)
        for profile in PROFILES:
            routing = level_record(profile, level)["routing"]
            assert routing["unattributed"] == 0
            assert 1 <= routing["requests_per_worker_min"] <= routing["requests_per_worker_max"]

    # The report shows the profiles side by side with their stickiness and evidence.
    report = (run_dir / "report.md").read_text()
    assert "Server-side evidence" in report
    assert all(f"{profile} throughput gain" in report for profile in PROFILES[1:])
    assert "Routing stickiness" in report
    # Each run's frontend flags, as the rehearsal ran them (never guessed from a name).
    assert "kv-routing: --router-mode kv --no-router-kv-events" in report
    # The run beside the seed's table (2 and 4 are seed levels too): the report writes it,
    # the rehearsal prints it as written, after the mock's TTFT floor.
    seed_section = report[report.index("## Beside the seed"):].split("\n## ")[0].strip()
    assert seed_section.count("\n") >= 3 and seed_section in result.stdout
    # One block at a time, each profile's chunk in turn, the order reversed every other block.
    order = [line.split(",")[0] for line in result.stdout.splitlines()
             if line.startswith(PROFILES) and ", concurrency 2, block " in line]
    assert order == [*PROFILES, *PROFILES[::-1]]
    assert "Design: paired." in report
    summary = json.loads((run_dir / REHEARSAL_FILE).read_text())
    assert summary["peak_memory_bytes"] > 0
    assert 0 < summary["wall_time_secs"] < time.monotonic() - started + 1
    assert summary["ttft_floor_ms"] > 0
    assert f"TTFT floor of the mock stack: {summary['ttft_floor_ms']:.0f} ms" in result.stdout
    for profile in PROFILES:
        for level in LEVELS:
            numbers = level_record(profile, level)["summary"]
            assert numbers["errors"] == 0 and numbers["requests"] == 16
    assert "rehearsal done in" in result.stdout and "peak memory" in result.stdout


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def test_ctrl_c_during_a_level_stops_everything(tmp_path: Path) -> None:
    """As a user's Ctrl-C reaches a rehearsal in the foreground (`at_a_terminal`), also when
    this suite itself runs in the background with SIGINT ignored."""
    child = subprocess.Popen(
        _rehearse(tmp_path, "--videos-per-level", "40"), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=child_env(), start_new_session=True,
        preexec_fn=at_a_terminal,
    )
    try:
        deadline = time.monotonic() + 180
        while not any("aiperf" in " ".join(_cmdline(pid)) for pid in tree_pids(child.pid)):
            assert child.poll() is None, child.communicate()[0]
            assert time.monotonic() < deadline, "no AIPerf started below the rehearsal"
            time.sleep(0.5)
        time.sleep(3)  # AIPerf and its workers are up and sending
    except BaseException:
        child.kill()
        raise
    seen = tree_pids(child.pid) - {child.pid}
    assert len(seen) >= 4, "expected NATS, mocker, frontend and AIPerf below the rehearsal"
    ports = ports_of(seen)
    assert len(ports) >= 2, "expected at least NATS and the frontend listening"
    child.send_signal(signal.SIGINT)
    rest = child.communicate(timeout=120)[0]
    assert child.returncode == 130, rest
    assert "interrupted" in rest and "--run-id e2e" in rest
    assert not wait_gone(seen, timeout=30.0), "processes survived Ctrl-C"
    assert not still_listening(ports)


def test_a_level_timeout_stops_everything_and_names_the_setting(tmp_path: Path) -> None:
    result = subprocess.run(
        _rehearse(tmp_path, "--videos-per-level", "40", "--level-timeout", "2"),
        capture_output=True, text=True, timeout=300, env=child_env(),
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "--level-timeout" in result.stderr and "--run-id e2e" in result.stderr
    pids, recorded = _recorded_processes(tmp_path / "e2e")
    assert pids and recorded, "the rehearsal recorded no processes or listeners"
    assert not wait_gone(pids, timeout=30.0), "processes survived the timeout"
    assert not still_listening({lst["port"] for lst in recorded})
