"""Reading AIPerf 0.13's summary export (`profile_export_aiperf.json`) of one level.

The sweep prints a level's line from it and the report tabulates it, so both read the
same numbers the same way.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


class ExportError(ValueError):
    pass


@dataclass(frozen=True)
class LevelSummary:
    """The numbers the seed's table reports, for one concurrency level."""

    concurrency: int
    requests: int
    errors: int
    request_throughput: float
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    request_latency_p50_ms: float | None
    output_token_throughput: float | None
    # Share of prompt tokens the workers served from their prefix caches (AIPerf's usage).
    prompt_cache_read_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One human line: what a finished level prints."""
        return (
            f"concurrency {self.concurrency}: {self.request_throughput:.2f} req/s, "
            f"TTFT p50 {_ms(self.ttft_p50_ms)} p90 {_ms(self.ttft_p90_ms)}, "
            f"request latency p50 {_ms(self.request_latency_p50_ms)}, "
            f"{_num(self.output_token_throughput)} output tokens/s "
            f"({self.requests} requests, {self.errors} errors)"
        )


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _stat(export: dict[str, Any], metric: str, stat: str) -> float | None:
    entry = export.get(metric)
    if isinstance(entry, dict) and isinstance(entry.get(stat), int | float):
        return float(entry[stat])
    return None


def concurrency_of(export: dict[str, Any]) -> int:
    """The run's concurrency from the export's own `input_config` (its profiling phase)."""
    config = export.get("input_config") or {}
    for phase in config.get("phases") or []:
        if phase.get("kind", phase.get("name")) == "profiling" and phase.get("concurrency"):
            return int(phase["concurrency"])
    # Older layouts keep it under loadgen.
    loadgen = config.get("loadgen") or {}
    if loadgen.get("concurrency"):
        return int(loadgen["concurrency"])
    raise ExportError("no concurrency in input_config (not a concurrency-mode AIPerf run?)")


def read_export(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ExportError(f"{path}: not a readable AIPerf export ({exc})") from exc


def summarize(export: dict[str, Any]) -> LevelSummary:
    throughput = _stat(export, "request_throughput", "avg")
    if throughput is None:
        raise ExportError("no request_throughput in the export (no request succeeded?)")
    requests = _stat(export, "request_count", "avg") or 0.0
    errors = _stat(export, "error_request_count", "avg") or 0.0
    return LevelSummary(
        concurrency=concurrency_of(export),
        requests=int(requests),
        errors=int(errors),
        request_throughput=throughput,
        ttft_p50_ms=_stat(export, "time_to_first_token", "p50"),
        ttft_p90_ms=_stat(export, "time_to_first_token", "p90"),
        request_latency_p50_ms=_stat(export, "request_latency", "p50"),
        output_token_throughput=_stat(export, "output_token_throughput", "avg"),
        prompt_cache_read_pct=_stat(export, "overall_usage_prompt_cache_read_pct", "avg"),
    )


def summarize_file(path: Path) -> LevelSummary:
    try:
        return summarize(read_export(path))
    except ExportError as exc:
        raise ExportError(f"{path}: {exc}") from exc


def _measured(records: Path) -> list[dict[str, Any]]:
    """AIPerf's per-request records of the measured phase (warm-up excluded)."""
    with open(records) as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return [r for r in rows
            if (r.get("metadata") or {}).get("benchmark_phase", "profiling") == "profiling"]


def _metric(record: dict[str, Any], name: str) -> float | None:
    return ((record.get("metrics") or {}).get(name) or {}).get("value")


def output_lengths(records: Path) -> list[int]:
    """Output tokens of every measured request (a request without a count, e.g. a failed
    one, is left out)."""
    values = (_metric(r, "output_sequence_length") for r in _measured(records))
    return [int(v) for v in values if v is not None]


def latencies_by_video(records: Path) -> dict[str, list[float]]:
    """Request latencies (ms) of the measured requests, by session (one per video)."""
    out: dict[str, list[float]] = {}
    for record in _measured(records):
        latency = _metric(record, "request_latency")
        if latency is not None:
            video = str((record.get("metadata") or {}).get("conversation_id"))
            out.setdefault(video, []).append(float(latency))
    return out
