"""The AIPerf 0.13 command line of one concurrency level (pure: settings in, argv out).

Why each choice:
- Dataset: `--custom-dataset-type mooncake_trace` with pre-built `messages` (see
  benchmarks/dataset.py): sent verbatim by the chat endpoint, so the video stays first.
- `--num-sessions` = videos in the level, no `--request-count`: every session (video) is
  sent exactly once with all its questions, one after another; concurrency N keeps N
  videos in flight.
- Exact output length: each line's `output_length` becomes `max_completion_tokens`;
  `--extra-inputs` adds `min_tokens` = the same number and `ignore_eos: true`.
- Session affinity: `--session-header X-Dynamo-Session-ID` renames AIPerf's per-session
  `X-Correlation-ID` to the header Dynamo routes on. Round robin sends no such header.
  AIPerf's default extra `X-Session-Affinity` header is switched off (see `aiperf_env`).
- No AIPerf warm-up: its warm-up requests would ask about measured videos (the sweep's
  own warm-up uses videos outside the measured set, see benchmarks/sweep.py).
- Token counts come from the server's `usage` (`--use-server-token-count`), so the
  tokenizer only has to load (offline: a local directory).
- `--export-level raw` keeps every request and response (SSE chunks verbatim, e.g. a
  Dynamo `nvext.worker_id`) in `profile_export_raw.jsonl`; each record's
  `metadata.conversation_id` is the dataset's session id (`video-0000`...) and
  `metadata.benchmark_phase` is `warmup` or `profiling`. Session header values there are
  redacted by AIPerf; `metadata.x_correlation_id` holds the value.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.recipe import SESSION_HEADER

DATASET_TYPE = "mooncake_trace"
EXPORT_LEVELS = ("summary", "records", "raw")
SUMMARY_EXPORT = "profile_export_aiperf.json"
RAW_EXPORT = "profile_export_raw.jsonl"
RECORDS_EXPORT = "profile_export.jsonl"

# AIPerf reads HTTP behaviour switches from the environment.
ENV_EXTRA_AFFINITY_HEADER = "AIPERF_HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID"
# With this set, AIPerf 0.13 takes a local tokenizer directory for a hub repo id.
ENV_HF_OFFLINE = "HF_HUB_OFFLINE"


@dataclass(frozen=True)
class LevelSpec:
    """Everything one AIPerf run (one concurrency level) needs."""

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
    export_level: str = "records"
    request_timeout_secs: float = 600.0


def request_body_extras(output_tokens: int, extra_body: Mapping[str, Any]) -> dict[str, Any]:
    """Body fields added to every request: exact output length, then the caller's extras."""
    return {"ignore_eos": True, "min_tokens": output_tokens, **extra_body}


def aiperf_command(spec: LevelSpec, python: str = sys.executable) -> list[str]:
    argv = [
        python, "-m", "aiperf", "profile",
        "--model", spec.model,
        "--url", spec.url,
        "--endpoint-type", "chat",
        "--streaming",
        "--input-file", str(spec.dataset),
        "--custom-dataset-type", DATASET_TYPE,
        "--dataset-sampling-strategy", "sequential",
        "--num-sessions", str(spec.sessions),
        "--concurrency", str(spec.concurrency),
        "--extra-inputs", json.dumps(request_body_extras(spec.output_tokens, spec.extra_body)),
        "--random-seed", str(spec.random_seed),
        "--tokenizer", spec.tokenizer,
        "--artifact-dir", str(spec.artifact_dir),
        "--export-level", spec.export_level,
        "--request-timeout-seconds", f"{spec.request_timeout_secs:g}",
        "--ui", "none",
        "--no-gpu-telemetry",
        "--no-server-metrics",
        "--use-server-token-count",
    ]
    if spec.affinity:
        argv += ["--session-header", SESSION_HEADER]
    return argv


def aiperf_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """AIPerf's environment: the caller's, minus HF_HUB_OFFLINE, without the extra header."""
    env = dict(os.environ if base is None else base)
    env.pop(ENV_HF_OFFLINE, None)
    env[ENV_EXTRA_AFFINITY_HEADER] = "false"
    return env
