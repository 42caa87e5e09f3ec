"""The seed's eight-H200 table (the recipe's "Measured performance"): what the report and the
rehearsal hold runs beside, and the row the calibration solves an H200's costs from."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SeedRow:
    """One row of the seed's table, round robin then affinity: req/s, TTFT p50 (ms) and, at
    concurrency 16 only, request latency p50 and TTFT p90 (ms)."""

    concurrency: int
    rr_req_s: float
    sa_req_s: float
    rr_ttft_p50_ms: float = math.nan
    sa_ttft_p50_ms: float = math.nan
    rr_request_latency_p50_ms: float | None = None
    sa_request_latency_p50_ms: float | None = None
    rr_ttft_p90_ms: float | None = None
    sa_ttft_p90_ms: float | None = None


SEED_TABLE = (
    SeedRow(1, 0.94, 1.16, 45, 44),
    SeedRow(2, 1.90, 2.36, 45, 44),
    SeedRow(4, 3.83, 4.68, 45, 44),
    SeedRow(8, 7.38, 9.35, 48, 44),
    SeedRow(16, 12.65, 17.78, 124, 44, 1140, 919, 757, 47),
)
SEED_WORKERS = 8
# "about 2.5 h round robin, 2 h affinity" for the five levels (the recipe's runs).
SEED_SWEEP_HOURS = {"round-robin": 2.5, "session-affinity": 2.0}
