"""AIPerf 0.13's exports of one run, shaped as it writes them (taken from a real run against
tests/support_openai_server.py): the summary export (`profile_export_aiperf.json`: each
metric's `avg` and percentiles, `input_config` with its phases, a count of 0 left out) and
the per-request records export (`profile_export.jsonl`: `metadata.benchmark_phase`,
`metrics.<name>.value`, an `error` on a failed request)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.aiperf_run import RECORDS_EXPORT

# A run's profiling phase as `--concurrency 2 --num-sessions 2 --request-rate 1000
# --arrival-pattern constant` writes it into `input_config`.
PROFILING = {"name": "profiling", "kind": "profiling", "type": "constant", "sessions": 2,
             "concurrency": 2, "rate": 1000.0}


def metric(unit: str, avg: float, **stats: float) -> dict[str, Any]:
    """One metric of the summary export: its unit, mean and whichever statistics it has."""
    return {"unit": unit, "avg": avg, **stats}


def summary_export(*phases: dict[str, Any], requests: int = 4, errors: int = 0,
                   rate: float = 72.22, **more: Any) -> dict[str, Any]:
    """A summary export of a run of `phases` (default: PROFILING) that answered `requests`
    at `rate` req/s; its figures those of the real run; `more` adds or replaces keys."""
    return {
        "schema_version": "1.0", "aiperf_version": "0.13.0",
        "request_throughput": metric("requests/sec", rate),
        "request_count": metric("requests", float(requests)),
        **({"error_request_count": metric("requests", float(errors))} if errors else {}),
        "time_to_first_token": metric("ms", 11.72, p50=12.70, p90=16.30, p99=17.16),
        "request_latency": metric("ms", 11.72, p50=12.69, p90=16.29, p99=17.15),
        "output_token_throughput": metric("tokens/sec", 577.79),
        "input_config": {"endpoint": {"type": "chat", "streaming": True},
                         "phases": list(phases or [PROFILING])},
        "was_cancelled": False, "is_complete": True, "error_summary": [],
        **more,
    }


def record(tokens: int | None, phase: str = "profiling", error: str | None = None,
           ttft: float | None = None) -> dict[str, Any]:
    """One request's line of the records export: `tokens` output tokens (None: no count),
    its TTFT (and request latency) if given, a failed one with its `error`."""
    metrics = {} if tokens is None else {"output_sequence_length": {"value": tokens}}
    if ttft is not None:
        metrics |= {"time_to_first_token": {"value": ttft}, "request_latency": {"value": ttft}}
    return {"metadata": {"benchmark_phase": phase}, "metrics": metrics,
            **({"error": error} if error else {})}


def level_dir(tmp_path: Path, *records: dict[str, Any]) -> Path:
    """`tmp_path` with a records export of `records`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    tmp_path.joinpath(RECORDS_EXPORT).write_text(
        "".join(json.dumps(r) + "\n" for r in records))
    return tmp_path
