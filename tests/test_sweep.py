"""The sweep drives the real AIPerf against recording servers on 127.0.0.1: what arrives on
the wire (session header per video, exact output length, video first, every chunk's videos
fresh), the run layout and manifests, resume after a crash, and bad settings refused up front."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.aiperf_run import RAW_EXPORT, SUMMARY_EXPORT
from benchmarks.dataset import QUESTIONS as QUESTION_SET
from benchmarks.dataset import VideoSource
from benchmarks.evidence import attribute_raw_export
from benchmarks.sweep import (
    CHUNK_DATASET,
    INTERVAL_METHOD,
    MANIFEST_NAME,
    NEW_RUN_HINT,
    SweepConfig,
    SweepError,
    Target,
    config_problems,
    level_dir_name,
    replicate_interval,
    run_sweep,
)
from benchmarks.tiny_model import build_tiny_model_dir
from infra.names import SESSION_HEADER, InputError
from infra.run import MIN_BLOCKS, Workload
from tests.conftest import REPO_ROOT
from tests.support_openai_server import RecordedRequest, RecordingOpenAIServer
from tests.support_sweep_runs import (
    LEVELS,
    MODEL,
    OUTPUT_TOKENS,
    QUESTIONS,
    VIDEO_BASE_URL,
    VIDEOS,
    SweepRuns,
    sent_videos,
    sweep_runs,  # noqa: F401  (fixture)
)

BASE = "http://127.0.0.1:9/"


def _parts(request: RecordedRequest) -> list[dict]:
    messages = request.body["messages"]
    assert len(messages) == 1, "each request carries only its own question (no history)"
    return messages[0]["content"]


def _video_of(request: RecordedRequest) -> str:
    return _parts(request)[0]["video_url"]["url"]


def _videos(*indices: int, base: str = BASE) -> set[str]:
    return {f"{base.rstrip('/')}/video_{i:04d}.mp4" for i in indices}


def test_affinity_sends_one_session_id_per_video_on_exactly_its_questions(
    sweep_runs: SweepRuns,  # noqa: F811
) -> None:
    run = sweep_runs.affinity
    assert len(run.requests) == sum(map(sent_videos, LEVELS)) * QUESTIONS
    for index, level in enumerate(LEVELS):
        measured = run.level_requests(index)
        by_session: dict[str, list[RecordedRequest]] = defaultdict(list)
        for request in measured:
            session = request.header(SESSION_HEADER)
            assert session, "every measured request of the affinity profile has a session id"
            by_session[session].append(request)
        assert len(by_session) == sent_videos(level)
        for requests in by_session.values():
            assert len(requests) == QUESTIONS
            assert len({_video_of(r) for r in requests}) == 1
            assert [_parts(r)[1]["text"] for r in requests] == list(QUESTION_SET[:QUESTIONS])
    # Sessions never span levels: each level's sessions are new.
    first, second = ({r.header(SESSION_HEADER) for r in run.level_requests(i)} for i in range(2))
    assert not first & second


def test_every_chunk_of_every_level_and_profile_sends_fresh_videos(
        sweep_runs: SweepRuns) -> None:  # noqa: F811
    """The run's cursor: no video is sent twice, by any profile at any level, and the blocks
    alternate which profile goes first (AB, BA, AB)."""
    sent = [_video_of(r) for run in (sweep_runs.round_robin, sweep_runs.affinity)
            for r in run.requests]
    assert len(sent) == len(set(sent)) * QUESTIONS
    assert set(sent) == _videos(*range(2 * sum(map(sent_videos, LEVELS))), base=VIDEO_BASE_URL)
    manifests = {p: json.loads((sweep_runs.root / p / MANIFEST_NAME).read_text())
                 for p in ("round-robin", "session-affinity")}
    rr, sa = (m["levels"]["1"]["chunks"] for m in manifests.values())
    assert [c["videos"] for c in rr] == [[0, 1], [3, 4], [4, 5]]
    assert [c["videos"] for c in sa] == [[1, 2], [2, 3], [5, 6]]
    assert manifests["round-robin"]["videos_sent"] == manifests["session-affinity"][
        "videos_sent"] == 2 * sum(map(sent_videos, LEVELS))


def test_round_robin_sends_no_session_header(sweep_runs: SweepRuns) -> None:  # noqa: F811
    run = sweep_runs.round_robin
    assert len(run.requests) == sum(map(sent_videos, LEVELS)) * QUESTIONS
    for request in run.requests:
        assert request.header(SESSION_HEADER) is None
        assert request.header("X-Session-Affinity") is None


def test_every_request_asks_for_exact_output_tokens_with_the_video_first(
    sweep_runs: SweepRuns,  # noqa: F811
) -> None:
    for request in sweep_runs.affinity.requests + sweep_runs.round_robin.requests:
        body = request.body
        assert body["model"] == MODEL
        assert body["stream"] is True
        assert body.get("max_completion_tokens", body.get("max_tokens")) == OUTPUT_TOKENS
        assert body["min_tokens"] == OUTPUT_TOKENS
        assert body["ignore_eos"] is True
        assert [p["type"] for p in _parts(request)] == ["video_url", "text"]


def test_extra_body_fields_reach_the_wire_and_raw_export_keeps_worker_ids(
    sweep_runs: SweepRuns,  # noqa: F811
) -> None:
    run = sweep_runs.affinity
    assert all(r.body["nvext"] == {"extra_fields": ["worker_id"]}
               for r in run.requests + sweep_runs.round_robin.requests)
    raw = run.run_dir / level_dir_name(LEVELS[-1]) / "chunk-00" / RAW_EXPORT  # both videos
    attribution = attribute_raw_export(raw)
    assert attribution.unattributed == 0
    chunk = json.loads((run.run_dir / MANIFEST_NAME).read_text())["levels"]["2"]["chunks"][0]
    assert sorted(attribution.workers_by_video) == [
        f"video-{i:04d}" for i in range(*chunk["videos"])]
    assert all(len(w) == QUESTIONS for w in attribution.workers_by_video.values())


def test_run_layout_manifest_and_summary_lines(sweep_runs: SweepRuns) -> None:  # noqa: F811
    run = sweep_runs.affinity
    assert run.run_dir.parts[-2:] == ("test-run", "session-affinity")
    manifest = json.loads((run.run_dir / MANIFEST_NAME).read_text())
    assert manifest["profile"] == "session-affinity" and manifest["design"] == "paired"
    assert manifest["profiles"] == ["round-robin", "session-affinity"]
    assert manifest["session_header"] == SESSION_HEADER
    assert manifest["model"] == MODEL and manifest["endpoint"].startswith("http://127.0.0.1:")
    assert manifest["workload"] == {
        "concurrencies": list(LEVELS), "videos": VIDEOS, "questions_per_video": QUESTIONS,
        "output_tokens": OUTPUT_TOKENS, "seed": 0, "stop_within_pct": 3.0, "full": False}
    assert manifest["video_source"] == {"kind": "video", "standin_tokens": None}
    assert manifest["tools"]["aiperf"] == "0.13.0"
    assert manifest["notes"] == ["recording servers, not a model"]
    rr = json.loads((sweep_runs.round_robin.run_dir / MANIFEST_NAME).read_text())
    assert rr["session_header"] is None and rr["run_uid"] == manifest["run_uid"]
    for level in LEVELS:
        assert manifest["levels"][str(level)]["status"] == "complete"
        for chunk in manifest["levels"][str(level)]["chunks"]:
            assert (run.run_dir / level_dir_name(level) / chunk["dir"] / SUMMARY_EXPORT).is_file()
        line = next(s for s in run.said if s.startswith(f"session-affinity: concurrency {level}: ")
                    and "req/s" in s)
        assert "TTFT p50" in line and "p90" in line and "output tokens/s" in line
        assert f"({sent_videos(level) * QUESTIONS} requests, 0 errors)" in line
        # A gain over round robin from two blocks or more (level 2 has one).
        assert ("gain " in line) == (level == 1)
        assert "gain " not in next(s for s in run.said
                                   if s.startswith(f"round-robin: concurrency {level}: "))


def test_rerun_with_other_settings_is_refused(sweep_runs: SweepRuns) -> None:  # noqa: F811
    with pytest.raises(SweepError, match="other settings.*model"):
        run_sweep(replace(sweep_runs.config, model="another-model"), say=lambda _: None)


def test_bad_settings_are_all_named_before_anything_runs(tmp_path: Path) -> None:
    config = SweepConfig(targets=(Target("round-robin", "localhost:8000"),),
                         source=VideoSource(), run_id="no spaces",
                         workload=Workload(concurrencies=(0, 2, 2)))
    problems = "\n".join(config_problems(config))
    for option in ("--url", "--concurrency", "levels must be >= 1", "repeat", "--run-id",
                   "give one of --video-base-url, --videos or --text-standin-tokens"):
        assert option in problems
    with pytest.raises(InputError, match="bad sweep settings"):
        run_sweep(config, say=lambda _: None)
    assert not (tmp_path / "results").exists()
    with pytest.raises(InputError, match="--session-affinity or --no-session-affinity"):
        run_sweep(replace(config, targets=(Target("mine", "http://127.0.0.1:9"),),
                          workload=Workload(), run_id=None,
                          source=VideoSource(base_url=BASE)), say=lambda _: None)


SWEEP_SCRIPT = """
import sys
from pathlib import Path
from benchmarks.dataset import VideoSource
from benchmarks.sweep import SweepConfig, Target, run_sweep
from infra.run import Workload
url, videos, run_dir, tokenizer, levels, within = sys.argv[1:7]
run_sweep(SweepConfig(targets=(Target("round-robin", url),),
                      source=VideoSource(base_url="http://127.0.0.1:9/"), model="m",
                      workload=Workload(concurrencies=tuple(map(int, levels.split(","))),
                                        videos=int(videos), questions_per_video=2,
                                        output_tokens=8, stop_within_pct=float(within)),
                      run_dir=Path(run_dir), tokenizer=tokenizer, heartbeat_secs=2),
          say=lambda s: print(s, flush=True))
"""


def _crash_during(server: RecordingOpenAIServer, requests: int, *args: str) -> None:
    """Run SWEEP_SCRIPT (`args` after the URL) and kill it, as a crash (nothing gets to clean
    up), once the server got more than `requests` requests."""
    sweep = subprocess.Popen(
        [sys.executable, "-c", SWEEP_SCRIPT, server.url, *args],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(server.chat_requests()) <= requests:
            assert sweep.poll() is None, sweep.stdout.read()
            assert time.monotonic() < deadline, "the crash point was never reached"
            time.sleep(0.1)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
        sweep.wait(timeout=30)


def _config(url: str, tmp_path: Path, profile: str = "round-robin", **workload: object
            ) -> SweepConfig:
    """A one-profile sweep of the recording server at `url`, 8 output tokens."""
    return SweepConfig(
        targets=(Target(profile, url),), source=VideoSource(base_url=BASE), model="m",
        workload=Workload(**{"output_tokens": 8, **workload}),
        tokenizer=str(build_tiny_model_dir(tmp_path.parent / "tokenizer")),
        run_dir=tmp_path / "run")


def test_a_sweep_killed_during_a_level_resumes_without_redoing_finished_levels(
    tmp_path: Path,
) -> None:
    tokenizer = str(build_tiny_model_dir(tmp_path / "tokenizer"))
    run_dir, profile_dir = tmp_path / "run", tmp_path / "run" / "round-robin"
    per_level = 4  # level 1: two blocks of one video; level 2: one block of two
    with RecordingOpenAIServer(models=["m"]) as server:
        server.delay_secs = 0.4  # slow enough to stop the sweep inside level 2
        _crash_during(server, per_level + 1, "2", str(run_dir), tokenizer, "1,2", "3")
        manifest = json.loads((profile_dir / MANIFEST_NAME).read_text())
        assert manifest["levels"]["1"]["status"] == "complete"
        assert manifest["levels"]["2"]["status"] == "running"
        level1_export = profile_dir / level_dir_name(1) / "chunk-00" / SUMMARY_EXPORT
        level1_bytes = level1_export.read_bytes()

        server.delay_secs = 0.0
        server.clear()
        said: list[str] = []
        run_sweep(replace(_config(server.url, tmp_path, concurrencies=(1, 2), videos=2,
                                  questions_per_video=2), tokenizer=tokenizer),
                  say=said.append)
        resent = [_video_of(r) for r in server.chat_requests()]
    assert len(resent) == per_level, "only level 2 ran again"
    assert set(resent) == _videos(4, 5), "on videos no attempt had sent"
    assert any(s.startswith("round-robin: concurrency 1: ") and "kept from the earlier run" in s
               for s in said)
    assert any("removing an unfinished earlier attempt" in s for s in said)
    manifest = json.loads((profile_dir / MANIFEST_NAME).read_text())
    assert {k: v["status"] for k, v in manifest["levels"].items()} == {
        "1": "complete", "2": "complete"}
    assert level1_export.read_bytes() == level1_bytes
    assert json.loads((profile_dir / level_dir_name(2) / "chunk-00" / SUMMARY_EXPORT
                       ).read_text())["request_count"]["avg"] == per_level


def test_cli_reports_aiperf_failures_and_how_to_resume(tmp_path: Path) -> None:
    """A dead endpoint: AIPerf fails, the sweep says so with AIPerf's last lines, exit 1,
    and how to resume: without --run-id the run id is the clock's, so it names it."""
    with RecordingOpenAIServer() as server:
        dead_url = server.url  # nothing listens there once the server stops
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks",
         "sweep", "--url", dead_url, "--profile", "round-robin", "--video-base-url",
         "http://127.0.0.1:9/v", "--videos-per-level", "1", "--questions-per-video", "1",
         "--concurrency", "1",
         "--results-root", str(tmp_path), "--request-timeout", "5", "--model", "m"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
    )
    (run_dir,) = (tmp_path / "round-robin").iterdir()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "AIPerf" in result.stderr
    assert f"rerun the same command with --run-id {run_dir.name}" in result.stderr
    manifest = json.loads((run_dir / "round-robin" / MANIFEST_NAME).read_text())
    assert manifest["levels"]["1"]["status"] == "failed"


def test_a_level_over_its_timeout_stops_aiperf_and_says_which_setting(tmp_path: Path) -> None:
    """The level timeout holds to the second, not to the next progress line, and AIPerf
    (with its worker processes) is gone when the error is raised."""
    from rehearsal.local_dynamo import tree_pids

    before = tree_pids(os.getpid())
    with RecordingOpenAIServer(models=["m"]) as server:
        server.delay_secs = 30.0  # no request finishes inside the timeout
        started = time.monotonic()
        with pytest.raises(SweepError, match="--level-timeout") as raised:
            run_sweep(replace(_config(server.url, tmp_path, concurrencies=(1,), videos=1,
                                      questions_per_video=4), level_timeout_secs=8.0),
                      say=lambda _: None)
        elapsed = time.monotonic() - started
    assert "longer than 8 s" in str(raised.value)
    assert elapsed < 45, f"the 8 s timeout took {elapsed:.0f} s to act"
    assert tree_pids(os.getpid()) - before == set(), "AIPerf processes outlived the timeout"
    manifest = json.loads((tmp_path / "run" / "round-robin" / MANIFEST_NAME).read_text())
    assert manifest["levels"]["1"]["status"] != "complete"


def test_a_run_of_another_deployment_is_never_resumed(sweep_runs: SweepRuns) -> None:  # noqa: F811
    """Same run id, same settings, another deployment (image, a recreated graph, new code):
    the earlier levels are not taken for this deployment's; the refusal says what to do."""
    config = replace(sweep_runs.config,
                     deployment={"graph_uid": "a-new-graph", "code": "0123456789ab"})
    with pytest.raises(SweepError) as err:
        run_sweep(config, say=lambda _: None)
    first_line = str(err.value).splitlines()[0]
    assert "deployment" in first_line and "a-new-graph" in first_line
    assert first_line.endswith(NEW_RUN_HINT)


def test_a_run_of_another_deployment_is_set_aside_and_named_when_asked(
        tmp_path: Path) -> None:
    """The cluster's repeat path: after `destroy` and `up` the graph's uid is new; its sweep
    keeps the earlier run under a name of its own and starts anew, never failing."""
    with RecordingOpenAIServer(models=["m"]) as server:
        config = replace(_config(server.url, tmp_path, concurrencies=(1,), videos=1,
                                 questions_per_video=2), set_aside=True,
                         deployment={"graph_uid": "first"})
        run_sweep(config, say=lambda _: None)
        said: list[str] = []
        run_sweep(replace(config, deployment={"graph_uid": "second"}), say=said.append)
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("run-")]
    kept = json.loads((aside / "round-robin" / MANIFEST_NAME).read_text())
    new = json.loads((tmp_path / "run" / "round-robin" / MANIFEST_NAME).read_text())
    assert kept["deployment"] == {"graph_uid": "first"}
    assert new["deployment"] == {"graph_uid": "second"}
    assert new["levels"]["1"]["status"] == "complete" and new["run_uid"] != kept["run_uid"]
    assert f"kept as {aside}" in said[0] and "graph_uid: 'first' -> 'second'" in said[0]


def _small_sweep(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "sweep", "--url", url, "--model", "m",
         "--video-base-url", "http://127.0.0.1:9/", "--videos-per-level", "1",
         "--questions-per-video", "4", "--profile", "round-robin", "--concurrency", "1",
         "--output-tokens", "8", "--out", str(tmp_path / "run"),
         "--request-timeout", "5", *extra],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
    )


def test_a_level_past_its_error_share_fails_and_its_cause_is_the_last_line(
        tmp_path: Path) -> None:
    """Failed requests no longer make a complete level; the last line printed (the one a
    Job's failure shows) is the cause, the way to resume comes before it."""
    with RecordingOpenAIServer(models=["m"]) as server:
        server.fail_status, server.fail_count = 500, 1
        result = _small_sweep(tmp_path, server.url)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(
        "sweep: error: round-robin, concurrency 1: 1 of 4 requests failed")
    assert "to resume" in lines[-2]
    manifest = json.loads((tmp_path / "run" / "round-robin" / MANIFEST_NAME).read_text())
    assert manifest["levels"]["1"]["status"] == "failed"


def test_a_failing_aiperf_names_its_own_last_line_as_the_cause(tmp_path: Path) -> None:
    with RecordingOpenAIServer(models=["m"]) as server:
        server.fail_status = 500
        result = _small_sweep(tmp_path, server.url)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("sweep: error: AIPerf failed at concurrency 1 (exit code 1): ")
    assert not last.endswith(": ")
    # AIPerf's own last line names its log file; the cause is its ERROR line above it.
    assert "Log File" not in last and "All 4 inference request(s) failed" in last


def test_a_server_that_stops_early_fails_the_level(tmp_path: Path) -> None:
    """128 tokens asked, 5 given: the level says so and fails."""
    with RecordingOpenAIServer(models=["m"]) as server:
        server.max_tokens = 5
        refused = _small_sweep(tmp_path / "refused", server.url)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1].startswith(
        "sweep: error: round-robin, concurrency 1: 4 requests got other than 8 output tokens "
        "(min 5, max 5)")


def test_the_client_capacity_benchmark_runs_the_sweeps_own_aiperf_command() -> None:
    """tests/perf_client_capacity.py builds its level with the sweep's LevelSpec: a change there
    must not leave the benchmark broken (it was, once, by a removed field). Its figures
    are printed, not asserted; what is asserted is what it sent and counted."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.perf_client_capacity", "--videos", "2",
         "--questions-per-video", "4", "--concurrency", "2", "--timeout", "120"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
    )
    assert result.returncode in (0, 1), result.stdout[-2000:] + result.stderr[-2000:]
    assert "(8 measured requests, 0 errors, 8 served in total" in result.stdout


def _tiny_sweep(tmp_path: Path, url: str, videos: int, questions: int, **options: object
                ) -> list[str]:
    """run_sweep of one profile at concurrency 1 (8 output tokens; `options`: the config's
    or the workload's); returns what it said."""
    workload = {k: options.pop(k) for k in list(options) if k in Workload.__dataclass_fields__}
    profile = str(options.pop("profile", "round-robin"))
    said: list[str] = []
    config = _config(url, tmp_path, profile, **{"concurrencies": (1,), "videos": videos,
                                                "questions_per_video": questions, **workload})
    run_sweep(replace(config, **options), say=said.append)
    return said


def _level(tmp_path: Path, level: int = 1, profile: str = "round-robin") -> dict:
    return json.loads((tmp_path / "run" / profile / MANIFEST_NAME).read_text())["levels"][
        str(level)]


def test_a_level_is_checked_against_its_own_routing_evidence(tmp_path: Path) -> None:
    """More worker ids than the graph's workers, or affinity with a video on two workers:
    the level fails with the cause; sticky sessions on the graph's workers pass."""
    level = dict(attribute_workers=True, concurrencies=(2,))  # one block of both videos
    with RecordingOpenAIServer(models=["m"]) as server:  # 8 worker ids, round robin
        with pytest.raises(SweepError, match="8 worker ids answered but the graph has 4"):
            _tiny_sweep(tmp_path / "rollout", server.url, 2, 4, deployment={"replicas": "4"},
                        **level)
        with pytest.raises(SweepError, match="2 of 2 videos were served by more than one"):
            _tiny_sweep(tmp_path / "unsticky", server.url, 2, 4, profile="session-affinity",
                        deployment={"replicas": "8"}, **level)
        server.sticky = True
        _tiny_sweep(tmp_path / "sticky", server.url, 2, 4, profile="session-affinity",
                    deployment={"replicas": "8"}, **level)
    for name, profile, status in (("rollout", "round-robin", "failed"),
                                  ("unsticky", "session-affinity", "failed"),
                                  ("sticky", "session-affinity", "complete")):
        state = _level(tmp_path / name, 2, profile)
        assert state["status"] == status, name
        assert state["routing"]["videos"] == 2
    sticky = _level(tmp_path / "sticky", 2, "session-affinity")
    assert sticky["chunks"][0]["frontend"]["routing"] == sticky["routing"]


def test_round_robin_over_fewer_workers_than_the_graph_fails_unless_accepted(
        tmp_path: Path) -> None:
    """Two of four workers answering a round robin: some are not serving; kept only when
    accepted on purpose, and then recorded. A profile of the user's own naming is not
    judged: its frontend's router mode is not known (it may route by KV, which needn't spread)."""
    options = dict(attribute_workers=True, deployment={"replicas": "4"})
    with RecordingOpenAIServer(models=["m"]) as server:
        server.workers = 2
        with pytest.raises(SweepError, match="round robin reached 2 of the graph's 4 workers"):
            _tiny_sweep(tmp_path / "refused", server.url, 1, 4, **options)
        _tiny_sweep(tmp_path / "accepted", server.url, 1, 4, accept_fewer_workers=True,
                    **options)
        _tiny_sweep(tmp_path / "own", server.url, 1, 4, profile="mine",
                    targets=(Target("mine", server.url, affinity=False),), **options)
    assert _level(tmp_path / "refused")["status"] == "failed"
    assert _level(tmp_path / "accepted")["fewer_workers_accepted"] is True
    own = _level(tmp_path / "own", profile="mine")
    assert own["status"] == "complete" and "fewer_workers_accepted" not in own
    assert own["routing"]["workers_seen"] == 2


def test_answers_without_a_token_count_fail_the_level(tmp_path: Path) -> None:
    with RecordingOpenAIServer(models=["m"]) as server:
        server.usage = False
        with pytest.raises(SweepError, match="4 answers carry no output token count"):
            _tiny_sweep(tmp_path, server.url, 1, 4)
    level = _level(tmp_path)
    assert level["status"] == "failed" and level["output_lengths"]["missing"] == 4


def test_one_failed_request_in_over_a_hundred_fails_the_level(tmp_path: Path) -> None:
    """No failure share is kept as a complete level (docs/benchmark-toolkit.md)."""
    with RecordingOpenAIServer(models=["m"]) as server:
        server.fail_status, server.fail_count = 500, 1
        with pytest.raises(SweepError, match="1 of 120 requests failed"):
            _tiny_sweep(tmp_path, server.url, 6, 20, concurrencies=(6,))  # one chunk


def test_progress_is_relayed_and_a_level_stops_at_its_first_failed_request(
        tmp_path: Path) -> None:
    """A slow failing endpoint (40 requests, 0.5 s each): the level stops at a heartbeat
    after the first failure instead of running on, and each heartbeat says how far it is."""
    with RecordingOpenAIServer(models=["m"]) as server:
        server.fail_status, server.delay_secs = 500, 0.5
        started = time.monotonic()
        with pytest.raises(SweepError, match="stopped early, [0-9]+ request"):
            _tiny_sweep(tmp_path, server.url, 2, 20, heartbeat_secs=1.0, concurrencies=(2,))
        elapsed = time.monotonic() - started
        sent = len(server.chat_requests())
    assert sent < 40, f"the level ran on after its first failure ({sent} requests)"
    assert elapsed < 60
    assert "stopped early" in _level(tmp_path, 2)["error"]


def test_progress_lines_count_answered_and_failed_requests(tmp_path: Path) -> None:
    with RecordingOpenAIServer(models=["m"]) as server:
        server.delay_secs = 0.3
        said = _tiny_sweep(tmp_path, server.url, 1, 20, heartbeat_secs=1.0)
    progress = [s for s in said if "requests done (" in s]
    assert progress, said
    assert all(s.startswith("concurrency 1: ") and " of 20 requests done" in s
               and "failed" in s for s in progress)


def test_a_refused_resume_leaves_the_earlier_run_untouched_and_names_what_differs(
        tmp_path: Path) -> None:
    with RecordingOpenAIServer(models=["m"]) as server:
        first = _small_sweep(tmp_path, server.url)
        assert first.returncode == 0, first.stderr
        run_dir = tmp_path / "run"
        before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
        second = _small_sweep(tmp_path, server.url, "--questions-per-video", "3")
    assert second.returncode == 1
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    last = second.stderr.strip().splitlines()[-1]
    assert "round-robin: workload.questions_per_video: 4 -> 3" in last
    assert "{" not in last


def test_a_resume_keeps_the_provenance_of_each_attempt(tmp_path: Path) -> None:
    with RecordingOpenAIServer(models=["m"]) as server:
        _tiny_sweep(tmp_path, server.url, 2, 2, notes=("first attempt",))
        path = tmp_path / "run" / "round-robin" / MANIFEST_NAME
        manifest = json.loads(path.read_text())
        manifest["attempts"][0]["tools"]["aiperf"] = "0.12.0"  # another client image
        path.write_text(json.dumps(manifest))
        _tiny_sweep(tmp_path, server.url, 2, 2, notes=("second attempt",),
                    concurrencies=(1, 2))
    manifest = json.loads(path.read_text())
    first, second = manifest["attempts"]
    assert first["tools"]["aiperf"] == "0.12.0" and first["notes"] == ["first attempt"]
    assert second["tools"]["aiperf"] == "0.13.0" and second["notes"] == ["second attempt"]
    assert [manifest["levels"][c]["attempt"] for c in ("1", "2")] == [0, 1]


def test_prefix_cache_share_is_na_when_no_response_reported_a_cached_count() -> None:
    from benchmarks.evidence import frontend_counts, prefix_cache_hit_pct

    page = ('dynamo_frontend_input_sequence_tokens_sum{model="m"} {n}\n'
            'dynamo_frontend_cached_tokens_sum{model="m"} {c}\n'
            'dynamo_frontend_cached_tokens_count{model="m"} {k}\n')
    def counts(n: int, c: int, k: int):  # noqa: ANN202
        return frontend_counts(page.replace("{n}", str(n)).replace("{c}", str(c))
                               .replace("{k}", str(k)))

    before = counts(100, 0, 0)
    assert prefix_cache_hit_pct(before, counts(900, 0, 0)) is None, "workers told nothing"
    told = counts(900, 400, 8)
    assert prefix_cache_hit_pct(before, told) == pytest.approx(50.0)


def test_a_chunk_warmer_than_fresh_videos_allow_fails_with_both_numbers(tmp_path: Path) -> None:
    """A frontend whose counters say 90% of prompt tokens were cached, for a chunk of one
    video x 4 questions (at most 75% cold: its first question misses): warm, refused."""
    with RecordingOpenAIServer(models=["m"]) as server:
        server.frontend_prompt_tokens, server.frontend_cached_share = 100, 0.9
        with pytest.raises(SweepError, match=r"90.0% of prompt tokens came from prefix caches, "
                           r"above the 75.0% a chunk of fresh videos can reach"):
            _tiny_sweep(tmp_path, server.url, 1, 4)
        server.frontend_cached_share = 0.5
        _tiny_sweep(tmp_path / "cold", server.url, 1, 4)
    state = _level(tmp_path / "cold")
    assert state["prefix_cache_hit_pct"] == pytest.approx(50.0)
    assert state["prefix_cache_hit_ceiling_pct"] == pytest.approx(75.0)


# --- Blocks: a level's replicates of fresh videos, and the stop rule -------------------------


def test_a_level_is_the_mean_of_its_chunks_its_percentiles_of_all_its_requests(
        sweep_runs: SweepRuns) -> None:  # noqa: F811
    """Level 1 runs one fresh video per chunk; level 2 two in one chunk, the third fills
    none. A level's rates are its chunks' mean, its percentiles over all its requests."""
    run = sweep_runs.affinity
    manifest = json.loads((run.run_dir / MANIFEST_NAME).read_text())
    one, two = manifest["levels"]["1"], manifest["levels"]["2"]
    assert [c["block"] for c in one["chunks"]] == [0, 1, 2]
    # Fewer blocks than the stop rule's least: the videos end both levels.
    assert one["stopped_by"] == two["stopped_by"] == "videos"
    for level in (one, two):
        assert level["replicates"] == len(level["chunks"])
        assert level["interval_method"] == INTERVAL_METHOD
        assert [c["dir"] for c in level["chunks"]] == [
            f"chunk-{k:02d}" for k in range(len(level["chunks"]))]
    chunks = [c["summary"] for c in one["chunks"]]
    assert one["summary"]["requests"] == sum(c["requests"] for c in chunks) == VIDEOS * QUESTIONS
    assert one["summary"]["request_throughput"] == pytest.approx(
        statistics.fmean(c["request_throughput"] for c in chunks))
    ttfts = sorted(json.loads(line)["metrics"]["time_to_first_token"]["value"]
                   for c in one["chunks"] for line in (
                       run.run_dir / level_dir_name(1) / c["dir"] / "profile_export.jsonl"
                   ).read_text().splitlines())
    assert one["summary"]["ttft_p50_ms"] == pytest.approx(statistics.median(ttfts))
    for chunk in one["chunks"]:
        folder = run.run_dir / level_dir_name(1) / chunk["dir"]
        export = json.loads((folder / SUMMARY_EXPORT).read_text())
        assert chunk["summary"]["request_throughput"] == export["request_throughput"]["avg"]
        lines = (folder / CHUNK_DATASET).read_text().splitlines()
        assert [json.loads(line)["session_id"] for line in lines] == [
            f"video-{chunk['videos'][0]:04d}"] * QUESTIONS
    progress = [s for s in run.said if s.startswith("session-affinity, concurrency 1, block ")]
    assert [s.split(":")[0] for s in progress] == [
        f"session-affinity, concurrency 1, block {k} of at most 3" for k in (1, 2, 3)]
    assert "no interval before a second block" in progress[0]
    assert "req/s so far, 95% interval [" in progress[1]


@pytest.mark.parametrize("change,named", [
    ({"stop_within_pct": 5.0}, "workload.stop_within_pct: 3.0 -> 5.0"),
    ({"full": True}, "workload.full: False -> True")])
def test_a_resume_with_another_stop_rule_is_refused(
        sweep_runs: SweepRuns, change: dict, named: str) -> None:  # noqa: F811
    config = sweep_runs.config
    with pytest.raises(SweepError) as err:
        run_sweep(replace(config, workload=replace(config.workload, **change)),
                  say=lambda _: None)
    first_line = str(err.value).splitlines()[0]
    assert f"round-robin: {named}" in first_line and first_line.endswith(NEW_RUN_HINT)


def test_full_sends_every_video_of_a_level_in_one_chunk(tmp_path: Path) -> None:
    """Five videos a level at concurrency 2: one AIPerf run of all five, as the seed's sweep;
    the next level's are five fresh ones."""
    with RecordingOpenAIServer(models=["m"]) as server:
        result = _small_sweep(tmp_path, server.url, "--videos-per-level", "5",
                              "--questions-per-video", "2", "--concurrency", "2", "1",
                              "--full", "--stop-within-pct", "50")
        sent = [_video_of(r) for r in server.chat_requests()]
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(set(sent)) == sorted(_videos(*range(10))) and len(sent) == 20
    manifest = json.loads((tmp_path / "run" / "round-robin" / MANIFEST_NAME).read_text())
    assert (manifest["workload"]["full"], manifest["workload"]["stop_within_pct"]) == (
        True, 50.0)
    level = manifest["levels"]["2"]
    assert (level["stopped_by"], level["replicates"], level["summary"]["requests"]) == (
        "full", 1, 10)
    assert [c["videos"] for c in level["chunks"]] == [[0, 5]]


def test_a_level_stops_after_the_least_blocks_once_its_interval_is_tight(
        tmp_path: Path) -> None:
    """A steady server (0.25 s a request) and a +-50% bound: the stop rule's least of eight."""
    with RecordingOpenAIServer(models=["m"]) as server:
        server.delay_secs = 0.25
        said = _tiny_sweep(tmp_path, server.url, 8, 2, stop_within_pct=50.0)
        sent = {_video_of(r) for r in server.chat_requests()}
    level = _level(tmp_path)
    assert (level["status"], level["stopped_by"], level["replicates"]) == (
        "complete", "interval", MIN_BLOCKS)
    assert sent == _videos(*range(MIN_BLOCKS))
    interval = replicate_interval([c["summary"]["request_throughput"] for c in level["chunks"]])
    assert interval is not None and interval.relative_half_width <= 0.5
    assert any(s.startswith(f"round-robin, concurrency 1, block {MIN_BLOCKS} of at most 8: ")
               for s in said)
    assert level["machine"]["cpus"] == os.cpu_count()


def test_a_wide_interval_runs_on_and_a_resume_keeps_the_finished_blocks_on_fresh_videos(
        tmp_path: Path) -> None:
    """A bound no run meets (+-0.01%): the level runs until its four blocks are done. Killed
    during its third block, the rerun keeps the first two and sends the rest fresh videos:
    the third's, half sent, are never sent again."""
    tokenizer = str(build_tiny_model_dir(tmp_path / "tokenizer"))
    run_dir, profile_dir = tmp_path / "run", tmp_path / "run" / "round-robin"
    with RecordingOpenAIServer(models=["m"]) as server:
        server.delay_secs = 0.4
        _crash_during(server, 4, "4", str(run_dir), tokenizer, "1", "0.01")
        level = json.loads((profile_dir / MANIFEST_NAME).read_text())["levels"]["1"]
        assert level["status"] == "running"
        assert [c["dir"] for c in level["chunks"]] == ["chunk-00", "chunk-01"]
        first_export = profile_dir / level_dir_name(1) / "chunk-00" / SUMMARY_EXPORT
        first_bytes = first_export.read_bytes()
        server.delay_secs = 0.0
        server.clear()
        said: list[str] = []
        run_sweep(replace(_config(server.url, tmp_path, concurrencies=(1,), videos=4,
                                  questions_per_video=2, stop_within_pct=0.01),
                          tokenizer=tokenizer), say=said.append)
        sent = {_video_of(r) for r in server.chat_requests()}
    assert sent == _videos(3, 4)
    assert "round-robin, concurrency 1: keeping 2 finished blocks of an earlier attempt" in said
    level = json.loads((profile_dir / MANIFEST_NAME).read_text())["levels"]["1"]
    assert (level["status"], level["stopped_by"], level["replicates"]) == (
        "complete", "videos", 4)
    assert [c["attempt"] for c in level["chunks"]] == [0, 0, 1, 1]
    assert [c["videos"] for c in level["chunks"]] == [[0, 1], [1, 2], [3, 4], [4, 5]]
    assert first_export.read_bytes() == first_bytes
    assert sorted(p.name for p in (profile_dir / level_dir_name(1)).iterdir()) == [
        f"chunk-{k:02d}" for k in range(4)]
