"""The sweep drives the real AIPerf against a recording server on 127.0.0.1: what arrives on
the wire (session header per video, exact output length, video first), the run layout and
manifest, resume after a crash, and bad settings refused up front."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from benchmarks.aiperf_run import RAW_EXPORT, SUMMARY_EXPORT, aiperf_env
from benchmarks.dataset import QUESTIONS as QUESTION_SET
from benchmarks.dataset import build_dataset
from benchmarks.evidence import WORKER_ID_REQUEST_FIELDS, attribute_raw_export
from benchmarks.sweep import (
    CHUNK_DATASET,
    INTERVAL_METHOD,
    MANIFEST_NAME,
    NEW_RUN_HINT,
    SweepConfig,
    SweepError,
    config_problems,
    level_dir_name,
    replicate_interval,
    run_sweep,
)
from benchmarks.tiny_model import build_tiny_model_dir
from infra.names import SEED_SHAPE, SESSION_HEADER, InputError
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


def _parts(request: RecordedRequest) -> list[dict]:
    messages = request.body["messages"]
    assert len(messages) == 1, "each request carries only its own question (no history)"
    return messages[0]["content"]


def _video_of(request: RecordedRequest) -> str:
    return _parts(request)[0]["video_url"]["url"]


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
        videos = set()
        for requests in by_session.values():
            assert len(requests) == QUESTIONS
            assert len({_video_of(r) for r in requests}) == 1
            assert [_parts(r)[1]["text"] for r in requests] == list(QUESTION_SET[:QUESTIONS])
            videos.add(_video_of(requests[0]))
        assert videos == {f"{VIDEO_BASE_URL}/video_{i:04d}.mp4"
                          for i in range(sent_videos(level))}
    # Sessions never span levels: each level's sessions are new.
    first, second = ({r.header(SESSION_HEADER) for r in run.level_requests(i)} for i in range(2))
    assert not first & second


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
    assert all(r.body["nvext"] == {"extra_fields": ["worker_id"]} for r in run.requests)
    assert all("nvext" not in r.body for r in sweep_runs.round_robin.requests)
    raw = run.run_dir / level_dir_name(LEVELS[-1]) / "chunk-00" / RAW_EXPORT  # all videos
    attribution = attribute_raw_export(raw)
    assert attribution.unattributed == 0
    assert sorted(attribution.workers_by_video) == [
        f"video-{i:04d}" for i in range(sent_videos(LEVELS[-1]))]
    assert all(len(w) == QUESTIONS for w in attribution.workers_by_video.values())


def test_run_layout_manifest_and_summary_lines(sweep_runs: SweepRuns) -> None:  # noqa: F811
    run = sweep_runs.affinity
    assert run.run_dir.parts[-2:] == ("session-affinity", "test-run")
    manifest = json.loads((run.run_dir / MANIFEST_NAME).read_text())
    assert manifest["profile"] == "session-affinity"
    assert manifest["session_header"] == SESSION_HEADER
    assert manifest["model"] == MODEL and manifest["endpoint"].startswith("http://127.0.0.1:")
    assert manifest["requests_per_level"] == VIDEOS * QUESTIONS
    assert manifest["sessions_per_level"] == VIDEOS
    assert manifest["output_tokens"] == OUTPUT_TOKENS
    assert manifest["random_seed"] == 0
    assert manifest["dataset"]["info"]["video_source"] == VIDEO_BASE_URL
    assert manifest["tools"]["aiperf"] == "0.13.0"
    assert manifest["notes"] == ["recording server, not a model"]
    for level in LEVELS:
        assert manifest["levels"][str(level)]["status"] == "complete"
        for chunk in manifest["levels"][str(level)]["chunks"]:
            assert (run.run_dir / level_dir_name(level) / chunk["dir"] / SUMMARY_EXPORT).is_file()
        line = next(s for s in run.said if s.startswith(f"concurrency {level}: ")
                    and "req/s" in s)
        assert "TTFT p50" in line and "p90" in line and "output tokens/s" in line
        assert f"({sent_videos(level) * QUESTIONS} requests, 0 errors)" in line
    rr = json.loads((sweep_runs.round_robin.run_dir / MANIFEST_NAME).read_text())
    assert rr["session_header"] is None


def test_rerun_with_other_settings_is_refused(sweep_runs: SweepRuns, tmp_path: Path) -> None:  # noqa: F811
    manifest = json.loads((sweep_runs.affinity.run_dir / MANIFEST_NAME).read_text())
    config = SweepConfig(
        url=manifest["endpoint"], dataset=sweep_runs.dataset, profile="session-affinity",
        model="another-model", run_dir=sweep_runs.affinity.run_dir,
        tokenizer=manifest["tokenizer"],
    )
    with pytest.raises(SweepError, match="other settings.*model"):
        run_sweep(config, say=lambda _: None)


def test_bad_settings_are_all_named_before_anything_runs(tmp_path: Path) -> None:
    config = SweepConfig(url="localhost:8000", dataset=tmp_path / "missing.jsonl",
                         concurrencies=(0, 2, 2), run_id="no spaces")
    problems = "\n".join(config_problems(config))
    for option in ("--url", "--concurrency levels must be >= 1", "repeat", "--run-id",
                   "missing.jsonl"):
        assert option in problems
    with pytest.raises(InputError, match="bad sweep settings"):
        run_sweep(config, say=lambda _: None)
    assert not (tmp_path / "results").exists()
    with pytest.raises(InputError, match="--session-affinity or --no-session-affinity"):
        dataset = tmp_path / "d.jsonl"
        build_dataset(dataset, video_refs=["http://127.0.0.1:9/v.mp4"], questions_per_video=1)
        run_sweep(SweepConfig(url="http://127.0.0.1:9", dataset=dataset, profile="mine"),
                  say=lambda _: None)


SWEEP_SCRIPT = """
import sys
from pathlib import Path
from benchmarks.sweep import SweepConfig, run_sweep
url, dataset, run_dir, tokenizer, levels, within = sys.argv[1:7]
run_sweep(SweepConfig(url=url, dataset=Path(dataset), profile="round-robin", model="m",
                      concurrencies=tuple(map(int, levels.split(","))), run_dir=Path(run_dir),
                      output_tokens=8, stop_within_pct=float(within),
                      tokenizer=tokenizer, heartbeat_secs=2), say=lambda s: print(s, flush=True))
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


def test_a_sweep_killed_during_a_level_resumes_without_redoing_finished_levels(
    tmp_path: Path,
) -> None:
    dataset = tmp_path / "dataset.jsonl"
    build_dataset(dataset, video_refs=[f"http://127.0.0.1:9/v{i}.mp4" for i in range(2)],
                  questions_per_video=2, output_tokens=8)
    tokenizer = str(build_tiny_model_dir(tmp_path / "tokenizer"))
    run_dir = tmp_path / "run"
    per_level = 4  # level 1: two chunks of one video; level 2: one chunk of both
    with RecordingOpenAIServer(models=["m"]) as server:
        server.delay_secs = 0.4  # slow enough to stop the sweep inside level 2
        _crash_during(server, per_level + 1, str(dataset), str(run_dir), tokenizer, "1,2", "3")
        manifest = json.loads((run_dir / MANIFEST_NAME).read_text())
        assert manifest["levels"]["1"]["status"] == "complete"
        assert manifest["levels"]["2"]["status"] == "running"
        level1_export = run_dir / level_dir_name(1) / "chunk-00" / SUMMARY_EXPORT
        level1_bytes = level1_export.read_bytes()

        server.delay_secs = 0.0
        server.clear()
        said: list[str] = []
        run_sweep(SweepConfig(url=server.url, dataset=dataset, profile="round-robin", model="m",
                              concurrencies=(1, 2), run_dir=run_dir,
                              output_tokens=8, tokenizer=tokenizer), say=said.append)
        assert len(server.chat_requests()) == per_level, "only level 2 ran again"
    assert any(s.startswith("concurrency 1: ") and "kept from the earlier run" in s for s in said)
    assert any("removing an unfinished earlier attempt" in s for s in said)
    manifest = json.loads((run_dir / MANIFEST_NAME).read_text())
    assert {k: v["status"] for k, v in manifest["levels"].items()} == {
        "1": "complete", "2": "complete"}
    assert level1_export.read_bytes() == level1_bytes
    assert json.loads((run_dir / level_dir_name(2) / "chunk-00" / SUMMARY_EXPORT).read_text())[
        "request_count"]["avg"] == per_level


def test_cli_builds_the_dataset_in_the_run_directory_and_reports_aiperf_failures(
    tmp_path: Path,
) -> None:
    """A dead endpoint: AIPerf fails, the sweep says so with AIPerf's last lines, exit 1,
    and how to resume: without --run-id the run id is the clock's, so it names it."""
    with RecordingOpenAIServer() as server:
        dead_url = server.url  # nothing listens there once the server stops
    result = subprocess.run(
        [sys.executable, "-c",
         "import sys; from benchmarks import sweep; import argparse\n"
         "p = argparse.ArgumentParser(); sweep.register(p.add_subparsers())\n"
         "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))",
         "sweep", "--url", dead_url, "--profile", "round-robin", "--video-base-url",
         "http://127.0.0.1:9/v", "--video-count", "1", "--questions-per-video", "1",
         "--concurrency", "1",
         "--results-root", str(tmp_path), "--request-timeout", "5", "--model", "m"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
    )
    (run_dir,) = (tmp_path / "round-robin").iterdir()
    assert (run_dir / "dataset.jsonl").is_file()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "AIPerf" in result.stderr
    assert f"rerun the same command with --run-id {run_dir.name}" in result.stderr
    manifest = json.loads((run_dir / MANIFEST_NAME).read_text())
    assert manifest["levels"]["1"]["status"] == "failed"


def test_aiperf_environment_drops_hf_offline_and_the_extra_affinity_header() -> None:
    env = aiperf_env({"HF_HUB_OFFLINE": "1", "PATH": "/bin"})
    assert "HF_HUB_OFFLINE" not in env, "AIPerf 0.13 then takes a local tokenizer for a repo id"
    assert env["PATH"] == "/bin"
    assert env["AIPERF_HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID"] == "false"


def test_a_level_over_its_timeout_stops_aiperf_and_says_which_setting(tmp_path: Path) -> None:
    """The level timeout holds to the second, not to the next progress line, and AIPerf
    (with its worker processes) is gone when the error is raised."""
    from rehearsal.local_dynamo import tree_pids

    dataset = tmp_path / "dataset.jsonl"
    build_dataset(dataset, video_refs=["http://127.0.0.1:9/v0.mp4"], questions_per_video=4,
                  output_tokens=8)
    tokenizer = str(build_tiny_model_dir(tmp_path / "tokenizer"))
    before = tree_pids(os.getpid())
    with RecordingOpenAIServer(models=["m"]) as server:
        server.delay_secs = 30.0  # no request finishes inside the timeout
        started = time.monotonic()
        with pytest.raises(SweepError, match="--level-timeout") as raised:
            run_sweep(SweepConfig(url=server.url, dataset=dataset, profile="round-robin",
                                  model="m", concurrencies=(1,),
                                  run_dir=tmp_path / "run", output_tokens=8,
                                  tokenizer=tokenizer, level_timeout_secs=8.0),
                      say=lambda _: None)
        elapsed = time.monotonic() - started
    assert "longer than 8 s" in str(raised.value)
    assert elapsed < 45, f"the 8 s timeout took {elapsed:.0f} s to act"
    assert tree_pids(os.getpid()) - before == set(), "AIPerf processes outlived the timeout"
    manifest = json.loads((tmp_path / "run" / MANIFEST_NAME).read_text())
    assert manifest["levels"]["1"]["status"] != "complete"


def test_a_run_of_another_deployment_is_never_resumed(sweep_runs: SweepRuns) -> None:  # noqa: F811
    """Same run id, same settings, another deployment (image, a recreated graph, new code):
    the earlier levels are not taken for this deployment's; the refusal says what to do."""
    run_dir = sweep_runs.affinity.run_dir
    manifest = json.loads((run_dir / MANIFEST_NAME).read_text())
    config = SweepConfig(
        url=manifest["endpoint"], dataset=sweep_runs.dataset, profile="session-affinity",
        model=manifest["model"], run_dir=run_dir, tokenizer=manifest["tokenizer"],
        concurrencies=tuple(LEVELS),
        output_tokens=OUTPUT_TOKENS,
        deployment={"graph_uid": "a-new-graph", "code": "0123456789ab"},
        notes=tuple(manifest["notes"]),
    )
    with pytest.raises(SweepError) as err:
        run_sweep(config, say=lambda _: None)
    first_line = str(err.value).splitlines()[0]
    assert "deployment" in first_line and "a-new-graph" in first_line
    assert first_line.endswith(NEW_RUN_HINT)


def _small_sweep(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "sweep", "--url", url, "--model", "m",
         "--video-base-url", "http://127.0.0.1:9/", "--video-count", "1",
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
    assert lines[-1].startswith("sweep: error: concurrency 1: 1 of 4 requests failed")
    assert "to resume" in lines[-2]
    manifest = json.loads((tmp_path / "run" / MANIFEST_NAME).read_text())
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


def test_a_server_that_stops_early_is_flagged_and_fails_the_level(tmp_path: Path) -> None:
    """128 tokens asked, 5 given: the level says so and fails."""
    with RecordingOpenAIServer(models=["m"]) as server:
        server.max_tokens = 5
        refused = _small_sweep(tmp_path / "refused", server.url)
    assert refused.returncode == 1
    assert "FLAGGED 4 of 4 requests got other than 8 output tokens (min 5, max 5)" in (
        refused.stdout)
    assert refused.stderr.strip().splitlines()[-1].startswith(
        "sweep: error: concurrency 1: 4 requests got other than 8 output tokens")


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
    """run_sweep on a small dataset of its own (8 output tokens); returns what it said."""
    dataset = tmp_path / "dataset.jsonl"
    build_dataset(dataset, video_refs=[f"http://127.0.0.1:9/v{i}.mp4" for i in range(videos)],
                  questions_per_video=questions, output_tokens=8)
    tokenizer = build_tiny_model_dir(tmp_path.parent / "tokenizer")
    said: list[str] = []
    config = dict(url=url, dataset=dataset, model="m", concurrencies=(1,), output_tokens=8,
                  tokenizer=str(tokenizer), run_dir=tmp_path / "run")
    run_sweep(SweepConfig(**{**config, **options}), say=said.append)
    return said


def test_a_level_is_checked_against_its_own_routing_evidence(tmp_path: Path) -> None:
    """More worker ids than the graph's workers, or affinity with a video on two workers:
    the level fails with the cause; sticky sessions on the graph's workers pass."""
    level = dict(attribute_workers=True, concurrencies=(2,))  # one chunk of both videos
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
    for name, status in (("rollout", "failed"), ("unsticky", "failed"), ("sticky", "complete")):
        manifest = json.loads((tmp_path / name / "run" / MANIFEST_NAME).read_text())
        assert manifest["levels"]["2"]["status"] == status, name
        assert manifest["levels"]["2"]["routing"]["videos"] == 2
    sticky = json.loads((tmp_path / "sticky" / "run" / MANIFEST_NAME).read_text())["levels"]["2"]
    assert sticky["chunks"][0]["frontend"]["routing"] == sticky["routing"]


def test_answers_without_a_token_count_fail_the_level(tmp_path: Path) -> None:
    with RecordingOpenAIServer(models=["m"]) as server:
        server.usage = False
        with pytest.raises(SweepError, match="4 answers carry no output token count"):
            _tiny_sweep(tmp_path, server.url, 1, 4)
    level = json.loads((tmp_path / "run" / MANIFEST_NAME).read_text())["levels"]["1"]
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
            _tiny_sweep(tmp_path, server.url, 2, 20, heartbeat_secs=1.0)
        elapsed = time.monotonic() - started
        sent = len(server.chat_requests())
    assert sent < 40, f"the level ran on after its first failure ({sent} requests)"
    assert elapsed < 60
    manifest = json.loads((tmp_path / "run" / MANIFEST_NAME).read_text())
    assert "stopped early" in manifest["levels"]["1"]["error"]


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
        first = _small_sweep(tmp_path, server.url, "--follow-command", "kubectl logs -f job/x")
        assert first.returncode == 0, first.stderr
        run_dir = tmp_path / "run"
        before = {p.name: p.read_bytes() for p in run_dir.glob("dataset*")}
        second = _small_sweep(tmp_path, server.url, "--questions-per-video", "3")
    assert first.stdout.splitlines()[0] == "follow this sweep: kubectl logs -f job/x"
    assert second.returncode == 1
    assert {p.name: p.read_bytes() for p in run_dir.glob("dataset*")} == before
    assert not list(run_dir.glob(".check-*"))
    last = second.stderr.strip().splitlines()[-1]
    assert "dataset.questions_per_video: 4 -> 3" in last and "dataset.requests: 4 -> 3" in last
    assert "{" not in last and "sha256" not in last


def test_a_resume_keeps_the_provenance_of_each_attempt(tmp_path: Path) -> None:
    with RecordingOpenAIServer(models=["m"]) as server:
        _tiny_sweep(tmp_path, server.url, 2, 2, notes=("first attempt",))
        path = tmp_path / "run" / MANIFEST_NAME
        manifest = json.loads(path.read_text())
        # As a sweep before attempts were recorded wrote it, under another client image.
        del manifest["attempts"]
        manifest["tools"]["aiperf"] = "0.12.0"
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


# --- Chunks: disjoint whole videos as a level's replicates, and the stop rule ---------------


def test_a_level_is_the_mean_of_its_chunks_of_disjoint_whole_videos(
        sweep_runs: SweepRuns) -> None:  # noqa: F811
    """Level 1 runs one video per chunk, in dataset order; level 2 two in one chunk, the
    third fills none. A level's figures are its chunks' mean, its requests their sum."""
    run = sweep_runs.affinity
    manifest = json.loads((run.run_dir / MANIFEST_NAME).read_text())
    assert (manifest["stop_within_pct"], manifest["full"]) == (SEED_SHAPE.stop_within_pct, False)
    one, two = manifest["levels"]["1"], manifest["levels"]["2"]
    assert [c["videos"] for c in one["chunks"]] == [["video-0000"], ["video-0001"],
                                                    ["video-0002"]]
    assert [c["videos"] for c in two["chunks"]] == [["video-0000", "video-0001"]]
    # Three chunks are the stop rule's least: the interval may end level 1, or its videos.
    assert one["stopped_by"] in ("interval", "videos") and two["stopped_by"] == "videos"
    for level in (one, two):
        assert level["replicates"] == len(level["chunks"])
        assert level["interval_method"] == INTERVAL_METHOD
        assert [c["dir"] for c in level["chunks"]] == [
            f"chunk-{k:02d}" for k in range(len(level["chunks"]))]
    first = run.level_requests(0)
    assert [_video_of(r) for r in first] == [f"{VIDEO_BASE_URL}/video_{i:04d}.mp4"
                                             for i in range(VIDEOS) for _ in range(QUESTIONS)]
    chunks = [c["summary"] for c in one["chunks"]]
    assert one["summary"]["requests"] == sum(c["requests"] for c in chunks) == VIDEOS * QUESTIONS
    assert one["summary"]["request_throughput"] == pytest.approx(
        statistics.fmean(c["request_throughput"] for c in chunks))
    for chunk in one["chunks"]:
        folder = run.run_dir / level_dir_name(1) / chunk["dir"]
        export = json.loads((folder / SUMMARY_EXPORT).read_text())
        assert chunk["summary"]["request_throughput"] == export["request_throughput"]["avg"]
        lines = (folder / CHUNK_DATASET).read_text().splitlines()
        assert [json.loads(line)["session_id"] for line in lines] == chunk["videos"] * QUESTIONS
    progress = [s for s in run.said if s.startswith("concurrency 1, chunk ")]
    assert [s.split(":")[0] for s in progress] == [
        f"concurrency 1, chunk {k} of at most 3" for k in (1, 2, 3)]
    assert "no interval before a second chunk" in progress[0]
    assert "req/s so far, 95% interval [" in progress[1]


@pytest.mark.parametrize("change,named", [({"stop_within_pct": 5.0}, "stop_within_pct: 3.0 -> 5.0"),
                                          ({"full": True}, "full: False -> True")])
def test_a_resume_with_another_stop_rule_is_refused(
        sweep_runs: SweepRuns, change: dict, named: str) -> None:  # noqa: F811
    run_dir = sweep_runs.affinity.run_dir
    manifest = json.loads((run_dir / MANIFEST_NAME).read_text())
    config = SweepConfig(
        url=manifest["endpoint"], dataset=sweep_runs.dataset, profile="session-affinity",
        model=MODEL, run_dir=run_dir, tokenizer=manifest["tokenizer"], concurrencies=LEVELS,
        output_tokens=OUTPUT_TOKENS, extra_body=WORKER_ID_REQUEST_FIELDS, **change)
    with pytest.raises(SweepError) as err:
        run_sweep(config, say=lambda _: None)
    first_line = str(err.value).splitlines()[0]
    assert f"({named}); {NEW_RUN_HINT}" in first_line


def test_full_sends_every_whole_chunk_and_leftover_videos_are_not_sent(tmp_path: Path) -> None:
    """Five videos at concurrency 2: two chunks of two; the fifth fills no chunk."""
    with RecordingOpenAIServer(models=["m"]) as server:
        result = _small_sweep(tmp_path, server.url, "--video-count", "5",
                              "--questions-per-video", "2", "--concurrency", "2", "--full",
                              "--stop-within-pct", "90")
        sent = [_video_of(r) for r in server.chat_requests()]
    assert result.returncode == 0, result.stdout + result.stderr
    assert Counter(sent) == {f"http://127.0.0.1:9/video_{i:04d}.mp4": 2 for i in range(4)}
    manifest = json.loads((tmp_path / "run" / MANIFEST_NAME).read_text())
    assert (manifest["full"], manifest["stop_within_pct"]) == (True, 90.0)
    level = manifest["levels"]["2"]
    assert (level["stopped_by"], level["replicates"], level["summary"]["requests"]) == (
        "full", 2, 8)
    assert [c["videos"] for c in level["chunks"]] == [["video-0000", "video-0001"],
                                                      ["video-0002", "video-0003"]]


def _chunked_dataset(tmp_path: Path, videos: int) -> tuple[Path, str]:
    dataset = tmp_path / "dataset.jsonl"
    build_dataset(dataset, video_refs=[f"http://127.0.0.1:9/v{i}.mp4" for i in range(videos)],
                  questions_per_video=2, output_tokens=8)
    return dataset, str(build_tiny_model_dir(tmp_path / "tokenizer"))


def test_a_level_stops_after_three_chunks_once_its_interval_is_tight(tmp_path: Path) -> None:
    """A steady server (0.25 s a request) and a +-50% bound: three of five chunks."""
    with RecordingOpenAIServer(models=["m"]) as server:
        server.delay_secs = 0.25
        said = _tiny_sweep(tmp_path, server.url, 5, 2, stop_within_pct=50.0)
        sent = {_video_of(r) for r in server.chat_requests()}
    level = json.loads((tmp_path / "run" / MANIFEST_NAME).read_text())["levels"]["1"]
    assert (level["status"], level["stopped_by"], level["replicates"]) == (
        "complete", "interval", 3)
    assert sent == {f"http://127.0.0.1:9/v{i}.mp4" for i in range(3)}
    interval = replicate_interval([c["summary"]["request_throughput"] for c in level["chunks"]])
    assert interval is not None and interval.relative_half_width <= 0.5
    assert any(s.startswith("concurrency 1, chunk 3 of at most 5: ") for s in said)


def test_a_wide_interval_runs_on_and_a_resume_keeps_the_finished_chunks(
        tmp_path: Path) -> None:
    """A bound no run meets (+-0.01%): the level runs past three chunks until its four
    videos run out. Killed during its third chunk, the rerun keeps the first two."""
    dataset, tokenizer = _chunked_dataset(tmp_path, 4)
    run_dir = tmp_path / "run"
    with RecordingOpenAIServer(models=["m"]) as server:
        server.delay_secs = 0.4
        _crash_during(server, 4, str(dataset), str(run_dir), tokenizer, "1", "0.01")
        level = json.loads((run_dir / MANIFEST_NAME).read_text())["levels"]["1"]
        assert level["status"] == "running"
        assert [c["dir"] for c in level["chunks"]] == ["chunk-00", "chunk-01"]
        first_export = run_dir / level_dir_name(1) / "chunk-00" / SUMMARY_EXPORT
        first_bytes = first_export.read_bytes()
        server.delay_secs = 0.0
        server.clear()
        said: list[str] = []
        run_sweep(SweepConfig(url=server.url, dataset=dataset, profile="round-robin", model="m",
                              concurrencies=(1,), run_dir=run_dir, output_tokens=8,
                              stop_within_pct=0.01, tokenizer=tokenizer), say=said.append)
        sent = {_video_of(r) for r in server.chat_requests()}
    assert sent == {"http://127.0.0.1:9/v2.mp4", "http://127.0.0.1:9/v3.mp4"}
    assert "concurrency 1: keeping 2 finished chunks of an earlier attempt" in said
    level = json.loads((run_dir / MANIFEST_NAME).read_text())["levels"]["1"]
    assert (level["status"], level["stopped_by"], level["replicates"]) == (
        "complete", "videos", 4)
    assert [c["attempt"] for c in level["chunks"]] == [0, 0, 1, 1]
    assert first_export.read_bytes() == first_bytes
    assert sorted(p.name for p in (run_dir / level_dir_name(1)).iterdir()) == [
        f"chunk-{k:02d}" for k in range(4)]
