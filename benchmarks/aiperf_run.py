"""AIPerf 0.13 for one chunk: its command line (pure: settings in, argv out) and its exports
read back (why each option: docs/benchmark-toolkit.md, "AIPerf's command")."""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from infra.names import SESSION_HEADER

SUMMARY_EXPORT = "profile_export_aiperf.json"
RAW_EXPORT = "profile_export_raw.jsonl"
RECORDS_EXPORT = "profile_export.jsonl"


@dataclass(frozen=True)
class LevelSpec:
    """Everything one AIPerf run (one chunk of a concurrency level) needs."""

    url: str
    model: str
    dataset: Path
    concurrency: int
    sessions: int
    output_tokens: int
    artifact_dir: Path
    tokenizer: str
    affinity: bool
    random_seed: int = 0
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    request_timeout_secs: float = 600.0


def aiperf_command(spec: LevelSpec, python: str = sys.executable) -> list[str]:
    return [
        python, "-m", "aiperf", "profile",
        "--model", spec.model,
        "--url", spec.url,
        "--endpoint-type", "chat",
        "--streaming",
        "--input-file", str(spec.dataset),
        "--custom-dataset-type", "mooncake_trace",
        "--dataset-sampling-strategy", "sequential",
        "--num-sessions", str(spec.sessions),
        "--concurrency", str(spec.concurrency),
        # Paced at most a request a millisecond: without a rate, AIPerf 0.13's scheduler
        # polls for free slots and keeps a whole core busy, a core the server then lacks.
        # One worker and one record processor start sooner and drive 25x the seed's fastest
        # level (tests/perf_client_capacity.py).
        "--request-rate", "1000", "--arrival-pattern", "constant",
        "--workers-max", "1", "--record-processor-service-count", "1",
        # Exact output length, then the caller's extras.
        "--extra-inputs", json.dumps(
            {"ignore_eos": True, "min_tokens": spec.output_tokens, **spec.extra_body}),
        "--random-seed", str(spec.random_seed),
        "--tokenizer", spec.tokenizer,
        "--artifact-dir", str(spec.artifact_dir),
        "--export-level", "raw",
        "--request-timeout-seconds", f"{spec.request_timeout_secs:g}",
        "--ui", "none",
        "--no-gpu-telemetry",
        "--no-server-metrics",
        "--use-server-token-count",
        *(["--session-header", SESSION_HEADER] if spec.affinity else []),
    ]


def aiperf_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """AIPerf's environment: the caller's, minus HF_HUB_OFFLINE, without the extra header."""
    env = dict(os.environ if base is None else base)
    # With it set, AIPerf 0.13 takes a local tokenizer directory for a hub repo id.
    env.pop("HF_HUB_OFFLINE", None)
    # AIPerf reads HTTP behaviour switches from the environment.
    env["AIPERF_HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID"] = "false"
    return env


class ExportError(ValueError):
    pass


def _figure(metric: str, stat: str = "avg", label: str = "", digits: int = 0, unit: str = "",
            **default: Any) -> Any:
    """A LevelSummary figure, read from this AIPerf metric and statistic of the summary export;
    a labelled one is shown (with `digits` and `unit`) in a level's line and the report."""
    return field(metadata={"aiperf": (metric, stat), "shown": (label, digits, unit)}, **default)


@dataclass(frozen=True)
class LevelSummary:
    """The numbers the seed's table reports, for one concurrency level."""

    concurrency: int
    requests: int = _figure("request_count")
    errors: int = _figure("error_request_count")
    request_throughput: float = _figure("request_throughput", label="req/s", digits=2)
    ttft_p50_ms: float | None = _figure("time_to_first_token", "p50", "TTFT p50", unit=" ms")
    ttft_p90_ms: float | None = _figure("time_to_first_token", "p90", "TTFT p90", unit=" ms")
    request_latency_p50_ms: float | None = _figure("request_latency", "p50",
                                                   "request latency p50", unit=" ms")
    output_token_throughput: float | None = _figure("output_token_throughput",
                                                    label="output tokens/s")
    # Share of prompt tokens the workers served from their prefix caches (AIPerf's usage).
    prompt_cache_read_pct: float | None = _figure("overall_usage_prompt_cache_read_pct",
                                                  default=None)

    def line(self) -> str:
        """One human line: what a finished level prints."""
        shown = ", ".join(f"{label} {fmt(getattr(self, name), digits, unit)}"
                          for name, (label, digits, unit) in FIGURES.items())
        return (f"concurrency {self.concurrency}: {shown} ({self.requests} requests, "
                f"{self.errors} errors)")


# Each shown figure of a level: key -> (label, digits, unit), the one list the level's line
# and every table, plot and the seed's comparison of the report draw on.
FIGURES = {f.name: f.metadata["shown"] for f in fields(LevelSummary)
           if f.metadata and f.metadata["shown"][0]}


def fmt(value: float | None, digits: int = 2, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{unit}"


def _stat(export: dict[str, Any], metric: str, stat: str) -> float | None:
    entry = export.get(metric)
    if isinstance(entry, dict) and isinstance(entry.get(stat), int | float):
        return float(entry[stat])
    return None


def summarize_file(path: Path) -> LevelSummary:
    """A run's figures from its summary export; ExportError names the file and what lacks."""
    try:
        export = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ExportError(f"{path}: not a readable AIPerf export ({exc})") from exc
    figures = {f.name: _stat(export, *f.metadata["aiperf"]) for f in fields(LevelSummary)
               if f.metadata}
    if figures["request_throughput"] is None:
        raise ExportError(f"{path}: no request_throughput in the export (no request "
                          "succeeded?)")
    # The run's concurrency from the export's own `input_config` (its profiling phase).
    concurrency = next((int(phase["concurrency"])
                        for phase in (export.get("input_config") or {}).get("phases") or []
                        if phase.get("kind", phase.get("name")) == "profiling"
                        and phase.get("concurrency")), None)
    if concurrency is None:
        raise ExportError(f"{path}: no concurrency in input_config (not a concurrency-mode "
                          "AIPerf run?)")
    return LevelSummary(**{**figures, "requests": int(figures["requests"] or 0),
                           "errors": int(figures["errors"] or 0)}, concurrency=concurrency)


def parsed(text: Any) -> Any:
    """The value of JSON `text`; None for text that is not JSON (yet: a line being written)."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def measured_records(records: Path) -> Iterator[dict[str, Any]]:
    """Measured-phase records of either per-request export, one at a time (a raw one is large);
    a line AIPerf is still appending is skipped, and no file yet means none."""
    try:
        with open(records) as lines:
            for record in map(parsed, lines):
                if isinstance(record, dict) and (record.get("metadata") or {}).get(
                        "benchmark_phase", "profiling") == "profiling":
                    yield record
    except FileNotFoundError:
        return


def length_check(chunk_dir: Path, wanted: int) -> dict[str, int] | None:
    """Answered requests with other than `wanted` output tokens or no count (no `usage`);
    None: all got it, or the run kept no per-request records."""
    lengths = [((record.get("metrics") or {}).get("output_sequence_length") or {}).get("value")
               for record in measured_records(chunk_dir / RECORDS_EXPORT)
               if not record.get("error")]
    counted = [int(n) for n in lengths if n is not None]
    other, missing = sum(n != wanted for n in counted), len(lengths) - len(counted)
    if not other and not missing:
        return None
    return {"requests": len(lengths), "other": other, **({"missing": missing} if missing else {}),
            "min": min(counted, default=0), "max": max(counted, default=0)}


def pooled_percentiles(records: Sequence[Path]) -> dict[str, float | None]:
    """Each percentile figure of LevelSummary over every measured request of `records` (a
    level's chunks), as AIPerf computes one run's (linear interpolation): the level's own."""
    values: dict[str, list[float]] = {}
    for record in (r for path in records for r in measured_records(path) if not r.get("error")):
        for name, entry in (record.get("metrics") or {}).items():
            if isinstance((entry or {}).get("value"), int | float):
                values.setdefault(name, []).append(float(entry["value"]))
    out = {}
    for f in fields(LevelSummary):
        metric, stat = f.metadata.get("aiperf", ("", ""))
        if stat.startswith("p") and len(found := values.get(metric, [])) >= 2:
            out[f.name] = statistics.quantiles(found, n=100, method="inclusive")[int(stat[1:]) - 1]
        elif stat.startswith("p"):
            out[f.name] = found[0] if found else None
    return out


def progress_counts(records: Path) -> tuple[int, int]:
    """(answered, failed) measured requests so far, from the records export as written."""
    failed = [bool(record.get("error")) for record in measured_records(records)]
    return failed.count(False), failed.count(True)


def failure_cause(log: Path) -> str:
    """The cause of a failed AIPerf run in its console output: its last ERROR message (its
    very last line only names its log file), else its last line."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()
             if line.strip()] if log.is_file() else []
    cause = re.compile(r"^[\d:.]+\s+(?:ERROR|CRITICAL)\s+(.*?)(?:\s+\([\w.]+:\d+\))?$")
    errors = [found.group(1) for line in lines if (found := cause.match(line))]
    others = [line for line in lines if not line.startswith("Log File:")]
    return (errors or others or ["no output"])[-1]
