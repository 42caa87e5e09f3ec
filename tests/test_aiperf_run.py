"""AIPerf's side of a chunk as pure functions, no AIPerf process: the command a chunk runs
(each option that shapes what is measured, docs/benchmark-toolkit.md "AIPerf's command"),
its environment, its exports read back into a level's figures and the cause of a failed
run. tests/test_sweep.py runs AIPerf itself; these say why each piece is as it is."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from benchmarks.aiperf_run import (
    RECORDS_EXPORT,
    SUMMARY_EXPORT,
    ExportError,
    LevelSpec,
    _stat,
    aiperf_command,
    aiperf_env,
    failure_cause,
    measured_records,
    pooled_percentiles,
    summarize_file,
)
from infra.names import SESSION_HEADER
from tests.support_aiperf_exports import (
    PROFILING,
    level_dir,
    metric,
    record,
    summary_export,
)

SPEC = LevelSpec(url="http://127.0.0.1:8000", model="m", dataset=Path("/runs/chunk/data.jsonl"),
                 concurrency=16, sessions=8, output_tokens=128,
                 artifact_dir=Path("/runs/chunk"), tokenizer="org/tokenizer", affinity=True,
                 random_seed=7, extra_body={"nvext": {"extra_fields": ["worker_id"]}},
                 request_timeout_secs=600.0)


def options(argv: list[str]) -> dict[str, str | bool]:
    """AIPerf's options in `argv` after `profile`: each flag's value, True for a bare flag;
    no flag given twice (AIPerf would take either)."""
    found: dict[str, str | bool] = {}
    rest = argv[4:]
    for at, token in enumerate(rest):
        if token.startswith("--"):
            assert token not in found, f"{token} given twice"
            value = rest[at + 1] if at + 1 < len(rest) else "--"
            found[token] = True if value.startswith("--") else value
    values = [v for v in found.values() if v is not True]
    assert len(rest) == len(found) + len(values), "a value that belongs to no flag"
    return found


def test_the_command_runs_aiperf_profile_with_the_given_python() -> None:
    """The sweep's own interpreter by default: AIPerf is installed in the same venv."""
    assert aiperf_command(SPEC, "/venv/bin/python")[:4] == [
        "/venv/bin/python", "-m", "aiperf", "profile"]
    assert aiperf_command(SPEC)[0] == sys.executable


def test_the_command_streams_chat_to_the_served_model() -> None:
    """The served model's id at the frontend's URL, over the chat endpoint, streamed: TTFT
    is only measured on a stream."""
    found = options(aiperf_command(SPEC))
    assert (found["--model"], found["--url"]) == ("m", "http://127.0.0.1:8000")
    assert (found["--endpoint-type"], found["--streaming"]) == ("chat", True)


def test_the_command_sends_the_chunks_dataset_once_in_order() -> None:
    """Pre-built messages (mooncake_trace, video first), sequentially: each video once with
    its questions in turn; --num-sessions is the chunk's videos and no request count."""
    found = options(aiperf_command(SPEC))
    assert found["--input-file"] == "/runs/chunk/data.jsonl"
    assert found["--custom-dataset-type"] == "mooncake_trace"
    assert found["--dataset-sampling-strategy"] == "sequential"
    assert found["--num-sessions"] == "8"
    assert "--request-count" not in found


def test_the_command_keeps_the_levels_concurrency_in_flight() -> None:
    assert options(aiperf_command(SPEC))["--concurrency"] == "16"


def test_the_command_paces_requests_and_runs_one_worker_and_one_record_processor() -> None:
    """At most a request a millisecond, evenly: without a rate AIPerf 0.13's scheduler polls
    for free slots and keeps a core busy that the server lacks. One worker and one record
    processor start sooner and still drive 25x the seed's fastest level."""
    found = options(aiperf_command(SPEC))
    assert (found["--request-rate"], found["--arrival-pattern"]) == ("1000", "constant")
    assert (found["--workers-max"], found["--record-processor-service-count"]) == ("1", "1")


def test_the_command_asks_for_exactly_the_output_length_plus_the_callers_extras() -> None:
    """`min_tokens` with `ignore_eos` make every answer the asked length (the dataset's
    `output_length` is the maximum); the caller's extras (Dynamo's worker id) ride along."""
    extra = json.loads(str(options(aiperf_command(SPEC))["--extra-inputs"]))
    assert extra == {"ignore_eos": True, "min_tokens": 128,
                     "nvext": {"extra_fields": ["worker_id"]}}


def test_the_command_names_its_seed_tokenizer_and_artifact_folder() -> None:
    found = options(aiperf_command(SPEC))
    assert (found["--random-seed"], found["--tokenizer"], found["--artifact-dir"]) == (
        "7", "org/tokenizer", "/runs/chunk")


def test_the_command_keeps_every_request_verbatim() -> None:
    """The raw export keeps each response (Dynamo's `nvext.worker_id`), the routing evidence."""
    assert options(aiperf_command(SPEC))["--export-level"] == "raw"


def test_the_request_timeout_is_written_as_plain_seconds() -> None:
    """600.0 as "600", a fraction kept: AIPerf reads the number as given."""
    assert options(aiperf_command(SPEC))["--request-timeout-seconds"] == "600"
    half = LevelSpec(**{**SPEC.__dict__, "request_timeout_secs": 2.5})
    assert options(aiperf_command(half))["--request-timeout-seconds"] == "2.5"


def test_the_command_runs_headless_and_counts_tokens_from_the_servers_usage() -> None:
    """No UI in a Job's log, no GPU or server metrics scraping (the client runs apart from the
    GPUs), output lengths from `usage` (the tokenizer only has to load)."""
    found = options(aiperf_command(SPEC))
    assert found["--ui"] == "none"
    assert found["--no-gpu-telemetry"] is True and found["--no-server-metrics"] is True
    assert found["--use-server-token-count"] is True


def test_only_affinity_sends_the_session_header() -> None:
    """Dynamo routes a session's requests by this header; round robin must send none."""
    assert options(aiperf_command(SPEC))["--session-header"] == SESSION_HEADER
    round_robin = LevelSpec(**{**SPEC.__dict__, "affinity": False})
    assert "--session-header" not in options(aiperf_command(round_robin))


def test_aiperf_environment_drops_hf_offline_and_the_extra_affinity_header() -> None:
    """With HF_HUB_OFFLINE AIPerf 0.13 takes a local tokenizer folder for a hub repo id; its
    own X-Session-Affinity header would add a second routing hint."""
    base = {"HF_HUB_OFFLINE": "1", "PATH": "/bin"}
    assert aiperf_env(base) == {
        "PATH": "/bin", "AIPERF_HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID": "false"}
    assert base == {"HF_HUB_OFFLINE": "1", "PATH": "/bin"}, "the caller's mapping is kept"
    assert aiperf_env({})["AIPERF_HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID"] == "false"


def test_aiperf_environment_defaults_to_this_process_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEP_MARKER", "yes")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    env = aiperf_env()
    assert env["SWEEP_MARKER"] == "yes" and "HF_HUB_OFFLINE" not in env
    assert os.environ["HF_HUB_OFFLINE"] == "1", "this process keeps its own"


def test_a_statistic_is_read_as_a_number_or_none() -> None:
    """A missing metric, statistic or a value that is no number is no figure (None), never 0."""
    export = {"time_to_first_token": metric("ms", 11.0, p50=12, p90="n/a"), "odd": [1.0]}
    assert _stat(export, "time_to_first_token", "p50") == 12.0
    assert isinstance(_stat(export, "time_to_first_token", "p50"), float)
    assert _stat(export, "time_to_first_token", "p90") is None
    assert _stat(export, "time_to_first_token", "p99") is None
    assert _stat(export, "request_latency", "p50") is None
    assert _stat(export, "odd", "avg") is None


def write_summary(folder: Path, export: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SUMMARY_EXPORT
    path.write_text(json.dumps(export))
    return path


def test_a_summary_export_gives_the_levels_figures(tmp_path: Path) -> None:
    """Each figure from its metric's statistic: the rate's mean, TTFT's p50 and p90, request
    latency's p50; counts as whole numbers; a run that read no prompt-cache use has none."""
    summary = summarize_file(write_summary(tmp_path, summary_export(requests=4, errors=2)))
    assert summary.concurrency == 2
    assert (summary.requests, summary.errors) == (4, 2)
    assert isinstance(summary.requests, int) and isinstance(summary.errors, int)
    assert summary.request_throughput == 72.22
    assert (summary.ttft_p50_ms, summary.ttft_p90_ms) == (12.70, 16.30)
    assert summary.request_latency_p50_ms == 12.69
    assert summary.output_token_throughput == 577.79
    assert summary.prompt_cache_read_pct is None


def test_a_count_missing_from_the_export_is_zero(tmp_path: Path) -> None:
    """AIPerf leaves a count of 0 out of its export: no error_request_count is 0 errors, and
    no request_count 0 answers (the sweep's count check then fails the chunk; no request
    is credited that the export does not state)."""
    summary = summarize_file(write_summary(tmp_path, summary_export()))
    assert summary.errors == 0
    export = summary_export()
    del export["request_count"]
    assert summarize_file(write_summary(tmp_path, export)).requests == 0


def test_the_prompt_cache_share_is_read_when_the_server_reports_it(tmp_path: Path) -> None:
    export = summary_export(overall_usage_prompt_cache_read_pct=metric("%", 48.5))
    assert summarize_file(write_summary(tmp_path, export)).prompt_cache_read_pct == 48.5


def test_the_concurrency_is_the_profiling_phases_not_the_warmups(tmp_path: Path) -> None:
    """The export's own record of what ran: a warm-up phase at another concurrency is not
    the level."""
    warmup = {"name": "warmup", "kind": "warmup", "type": "concurrency", "concurrency": 1}
    export = summary_export(warmup, {**PROFILING, "concurrency": 4})
    assert summarize_file(write_summary(tmp_path, export)).concurrency == 4


def test_a_phase_named_profiling_without_a_kind_is_the_profiling_phase(tmp_path: Path) -> None:
    """A config written without `kind` (AIPerf infers it from the reserved name)."""
    phase = {k: v for k, v in PROFILING.items() if k != "kind"}
    assert summarize_file(write_summary(tmp_path, summary_export(phase))).concurrency == 2
    named_other = {**PROFILING, "name": "main"}  # a profiling phase by its kind
    assert summarize_file(write_summary(tmp_path, summary_export(named_other))).concurrency == 2


@pytest.mark.parametrize("config", [
    {"input_config": {"phases": [{**PROFILING, "kind": "warmup", "name": "warmup"}]}},
    {"input_config": {"phases": [{k: v for k, v in PROFILING.items() if k != "concurrency"}]}},
    {"input_config": {"phases": [{**PROFILING, "concurrency": None}]}},
    {"input_config": {"endpoint": {"type": "chat"}}},
    {"input_config": None},
], ids=["warmup-only", "rate-mode", "null-concurrency", "no-phases", "no-config"])
def test_an_export_without_a_profiling_concurrency_is_refused(
        tmp_path: Path, config: dict) -> None:
    """A level's concurrency is what the export says ran, never assumed: a run of another
    mode, or no record of it, is not a level of this sweep."""
    export = summary_export(**config)
    if config["input_config"] is None:
        del export["input_config"]
    path = write_summary(tmp_path, export)
    with pytest.raises(ExportError) as err:
        summarize_file(path)
    assert str(err.value) == (f"{path}: no concurrency in input_config (not a "
                              "concurrency-mode AIPerf run?)")


def test_an_export_without_a_request_rate_is_refused(tmp_path: Path) -> None:
    """No request succeeded: AIPerf writes no throughput, and a level of 0 req/s is no level."""
    export = summary_export()
    del export["request_throughput"]
    path = write_summary(tmp_path, export)
    with pytest.raises(ExportError) as err:
        summarize_file(path)
    assert str(err.value) == (f"{path}: no request_throughput in the export (no request "
                              "succeeded?)")


@pytest.mark.parametrize("text", [None, '{"request_count": {"av', "\xff\xfe"])
def test_an_unreadable_export_is_named_with_its_reason(tmp_path: Path, text: str | None) -> None:
    """Missing, cut short or not text: the error names the file and why, from the cause."""
    path = tmp_path / SUMMARY_EXPORT
    if text is not None:
        path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ExportError) as err:
        summarize_file(path)
    assert str(err.value).startswith(f"{path}: not a readable AIPerf export (")
    assert str(err.value).endswith(f"{err.value.__cause__})")
    assert isinstance(err.value.__cause__, OSError | ValueError)


def test_measured_records_are_the_profiling_phases_whole_lines(tmp_path: Path) -> None:
    """Warm-up lines are not measured; a line AIPerf is still appending, or any line that is
    no record, is skipped, not an error."""
    folder = level_dir(tmp_path, record(8), record(1, "warmup"), record(None, error="500"))
    with open(folder / RECORDS_EXPORT, "a") as lines:
        lines.write("[1, 2]\n3\n")
        lines.write('{"metadata": {"benchmark_ph')
    assert list(measured_records(folder / RECORDS_EXPORT)) == [
        record(8), record(None, error="500")]


def test_a_record_without_a_phase_is_measured(tmp_path: Path) -> None:
    """Only AIPerf's warm-up is left out: a record that names no phase was measured."""
    bare = {"metrics": {"output_sequence_length": {"value": 8}}}
    no_phase = {"metadata": {"conversation_id": "video-0000"}, "metrics": {}}
    folder = level_dir(tmp_path, bare, no_phase, {"metadata": None, "metrics": {}})
    assert len(list(measured_records(folder / RECORDS_EXPORT))) == 3


def test_no_records_file_yet_means_no_records(tmp_path: Path) -> None:
    assert list(measured_records(tmp_path / RECORDS_EXPORT)) == []


# The TTFTs (ms) of a real AIPerf 0.13 run of four requests, and the p50 and p90 its summary
# export gave for them.
REAL_TTFTS = (17.253709999999998, 11.328348, 4.21211, 14.067245999999999)
REAL_P50, REAL_P90 = 12.697797, 16.2977708


def test_pooled_percentiles_are_computed_as_aiperf_computes_one_runs(tmp_path: Path) -> None:
    """One chunk's pool gives AIPerf's own figures (linear interpolation between ranks)."""
    folder = level_dir(tmp_path, *(record(8, ttft=t) for t in REAL_TTFTS))
    pooled = pooled_percentiles([folder / RECORDS_EXPORT])
    assert pooled["ttft_p50_ms"] == pytest.approx(REAL_P50)
    assert pooled["ttft_p90_ms"] == pytest.approx(REAL_P90)
    assert pooled["request_latency_p50_ms"] == pytest.approx(REAL_P50)


def test_pooled_percentiles_pool_every_chunk_of_a_level(tmp_path: Path) -> None:
    """The level's percentile over all its requests, not a mean of its chunks' percentiles."""
    first = level_dir(tmp_path / "chunk-00", *(record(8, ttft=t) for t in (1.0, 2.0, 3.0)))
    second = level_dir(tmp_path / "chunk-01", *(record(8, ttft=t) for t in (10.0, 20.0)))
    pooled = pooled_percentiles([first / RECORDS_EXPORT, second / RECORDS_EXPORT])
    assert pooled["ttft_p50_ms"] == 3.0
    assert pooled["ttft_p90_ms"] == pytest.approx(16.0)


def test_pooled_percentiles_of_two_requests_interpolate_between_them(tmp_path: Path) -> None:
    folder = level_dir(tmp_path, record(8, ttft=10.0), record(8, ttft=20.0))
    pooled = pooled_percentiles([folder / RECORDS_EXPORT])
    assert (pooled["ttft_p50_ms"], pooled["ttft_p90_ms"]) == (15.0, 19.0)


def test_pooled_percentiles_leave_out_failed_and_warmup_requests(tmp_path: Path) -> None:
    """A failed request's time says how fast the server refused, not how fast it served."""
    folder = level_dir(tmp_path, record(8, ttft=10.0), record(8, ttft=20.0),
                       record(8, error="500", ttft=1000.0), record(8, "warmup", ttft=1000.0))
    assert pooled_percentiles([folder / RECORDS_EXPORT])["ttft_p90_ms"] == 19.0


def test_one_request_is_its_own_percentile_and_none_gives_no_figure(tmp_path: Path) -> None:
    """Every percentile figure is named, None where no request measured it: the level's
    line then says n/a rather than a figure of nothing."""
    one = level_dir(tmp_path / "one", record(8, ttft=7.0), record(None))
    assert pooled_percentiles([one / RECORDS_EXPORT]) == {
        "ttft_p50_ms": 7.0, "ttft_p90_ms": 7.0, "request_latency_p50_ms": 7.0}
    none = level_dir(tmp_path / "none", record(8), record(None))
    assert pooled_percentiles([none / RECORDS_EXPORT, tmp_path / "missing.jsonl"]) == {
        "ttft_p50_ms": None, "ttft_p90_ms": None, "request_latency_p50_ms": None}


def test_pooled_percentiles_skip_values_that_are_no_number(tmp_path: Path) -> None:
    """A per-chunk list (inter_chunk_latency) or an empty entry is no request time."""
    odd = {"metadata": {"benchmark_phase": "profiling"},
           "metrics": {"time_to_first_token": {"value": [1.0, 2.0]}, "request_latency": None,
                       "inter_chunk_latency": {}}}
    folder = level_dir(tmp_path, odd, record(8, ttft=5.0), {"metadata": {}})
    pooled = pooled_percentiles([folder / RECORDS_EXPORT])
    assert (pooled["ttft_p50_ms"], pooled["request_latency_p50_ms"]) == (5.0, 5.0)


# The end of a real failed AIPerf 0.13 run's console output (every request got a 500).
FAILED_RUN = "\n".join([
    "16:21:20.040 INFO     Processed 0 valid requests and 4 errors (4 total). "
    "(records_manager.py:1207)",
    "16:21:20.047 WARNING  ColumnStore.numeric: unknown tag 'output_sequence_length' "
    "(column_store.py:136)",
    "16:21:20.348 INFO     All results received, initiating shutdown (system_controller.py:1630)",
    "16:21:20.957 ERROR    All 4 inference request(s) failed; no successful responses were "
    "collected. (system_controller.py:2370)",
    "",
    "╭─ AIPerf System Exit Errors ──────────────────────────────────────────────────╮",
    "│ • Service: system_controller                                                 │",
    "╰──────────────────────────────────────────────────────────────────────────────╯",
    "Log File: /runs/chunk/logs/aiperf.log", ""])


def write_log(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aiperf.log"
    path.write_text(text)
    return path


def test_the_cause_is_the_last_error_without_its_source_location(tmp_path: Path) -> None:
    """The ERROR line says what went wrong; its last line only names its log file."""
    assert failure_cause(write_log(tmp_path, FAILED_RUN)) == (
        "All 4 inference request(s) failed; no successful responses were collected.")


def test_the_last_of_several_errors_or_criticals_is_the_cause(tmp_path: Path) -> None:
    log = ("10:00:00.000 ERROR    first failure (worker.py:1)\n"
           "10:00:01.500 CRITICAL the run stopped: port in use\n"
           "10:00:02.000 INFO     shutting down (system_controller.py:9)\n")
    assert failure_cause(write_log(tmp_path, log)) == "the run stopped: port in use"


def test_only_a_timestamped_error_line_is_an_error(tmp_path: Path) -> None:
    """A message that merely mentions ERROR is not AIPerf's error line; then the last line
    is the cause."""
    log = ("10:00:00.000 INFO     retrying after ERROR 500 (http.py:3)\n"
           "Traceback: RuntimeError: no tokenizer (tokenizer.py:40)\n")
    assert failure_cause(write_log(tmp_path, log)) == (
        "Traceback: RuntimeError: no tokenizer (tokenizer.py:40)")


def test_without_errors_the_last_line_other_than_the_log_file_is_the_cause(
        tmp_path: Path) -> None:
    log = "usage: aiperf profile [OPTIONS]\n\nno such option: --bogus   \n\n" \
          "Log File: /runs/chunk/logs/aiperf.log\n  \n"
    assert failure_cause(write_log(tmp_path, log)) == "no such option: --bogus"


def test_no_output_is_said_so(tmp_path: Path) -> None:
    """No log, an empty one, or one naming only its log file: nothing to quote."""
    assert failure_cause(tmp_path / "never-written.log") == "no output"
    assert failure_cause(write_log(tmp_path, "\n  \n")) == "no output"
    assert failure_cause(write_log(tmp_path, "Log File: /runs/chunk/aiperf.log\n")) == (
        "no output")


def test_undecodable_bytes_do_not_hide_the_cause(tmp_path: Path) -> None:
    path = tmp_path / "aiperf.log"
    path.write_bytes(b"10:00:00.000 ERROR    bad byte \xff in the answer (http.py:3)\n")
    assert failure_cause(path) == "bad byte \ufffd in the answer"
