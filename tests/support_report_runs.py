"""Sweep runs written as the sweep records them (contract: a level's summary is the mean over
its blocks' chunks, each chunk's own summary beside it; a paired run's profiles share a
`run_uid` and their chunks pair up by block), so the report's intervals and its comparison
with the seed can be checked against known chunk figures."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.sweep import INTERVAL_METHOD, MANIFEST_NAME

QUESTIONS = 20
MANIFEST = {"model": "m", "workload": {"concurrencies": [8, 16], "videos": 200,
                                       "questions_per_video": QUESTIONS, "output_tokens": 128,
                                       "seed": 0, "stop_within_pct": 3.0, "full": False},
            "video_source": {"kind": "video", "standin_tokens": None}, "pause_ms": 0,
            "tools": {"aiperf": "0.13.0"}, "deployment": {"replicas": "8"}}
FIGURES = ("request_throughput", "ttft_p50_ms", "ttft_p90_ms", "request_latency_p50_ms",
           "output_token_throughput", "prompt_cache_read_pct")


def chunk(rate: float, ttft: float = 45.0, p90: float = 60.0, latency: float = 900.0
          ) -> dict[str, float]:
    """One chunk's figures; output tokens/s follow the rate (128 tokens a request)."""
    return {"request_throughput": rate, "ttft_p50_ms": ttft, "ttft_p90_ms": p90,
            "request_latency_p50_ms": latency, "output_token_throughput": 128 * rate,
            "prompt_cache_read_pct": 50.0}


def summary(concurrency: int, figures: list[dict[str, float]]) -> dict[str, Any]:
    """A level's (or one chunk's) summary: the mean of each figure, requests summed."""
    return {"concurrency": concurrency, "requests": concurrency * QUESTIONS * len(figures),
            "errors": 0, **{k: statistics.fmean(f[k] for f in figures) for k in FIGURES}}


def write_run(root: Path, profile: str, levels: dict[int, list[dict[str, float]]],
              stopped_by: str = "interval", run_uid: str | None = None, **more: Any) -> Path:
    """A profile's run folder whose level N ran the given chunks, block by block; `run_uid`:
    one profile of a paired run."""
    run = root / profile
    run.mkdir(parents=True)
    manifest = {**MANIFEST, "profile": profile, "run_uid": run_uid,
                "design": "paired" if run_uid else "separate", **more, "levels": {str(c): {
                    "status": "complete", "dir": f"concurrency-{c}", "attempt": 1,
                    "summary": summary(c, chunks), "replicates": len(chunks),
                    "interval_method": INTERVAL_METHOD, "stopped_by": stopped_by,
                    "chunks": [{"dir": f"chunk-{k:02d}", "block": k, "attempt": 1,
                                "summary": summary(c, [figures])}
                               for k, figures in enumerate(chunks)],
                } for c, chunks in levels.items()}}
    (run / MANIFEST_NAME).write_text(json.dumps(manifest))
    return run


def seed_like_runs(root: Path, rr_16: float = 12.0, sa_16: float = 17.0,
                   ttft_16: tuple[float, float] = (120.0, 45.0), paired: bool = False
                   ) -> list[Path]:
    """Round robin and affinity at the seed's levels 8 and 16, three blocks each, near the
    seed's table unless told otherwise (req/s at 16, TTFT p50 at 16 as rr, sa)."""
    rr = {8: [chunk(r, 48) for r in (7.2, 7.4, 7.3)],
          16: [chunk(r, ttft_16[0], 700, 1100) for r in (rr_16 - 0.2, rr_16, rr_16 + 0.2)]}
    sa = {8: [chunk(r, 44) for r in (9.2, 9.3, 9.4)],
          16: [chunk(r, ttft_16[1], 50, 900) for r in (sa_16 - 0.3, sa_16, sa_16 + 0.3)]}
    uid = "paired-run" if paired else None
    return [write_run(root, "round-robin", rr, run_uid=uid),
            write_run(root, "session-affinity", sa, run_uid=uid)]
