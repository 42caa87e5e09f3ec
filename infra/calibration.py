"""What a request costs on the recipe's hardware, the mock workers calibrated to it, and the
plan of a sweep (its hours and GPU-hours) before `pulumi up` spends them.

Sources, and nothing fitted to the rows the rehearsal is then checked against:
- the seed's "Measured performance" table (`SEED_TABLE`), of which only the concurrency-1
  row feeds the figures below; the other rows are what the rehearsal is compared with;
- its physics (DESIGN.md section 9): at concurrency 1 round robin serves a video's 20
  questions on all 8 workers (8 first visits), affinity on one (1), so the two request
  times, 1/0.94 s and 1/1.16 s, differ by 7 video processings per 20 questions;
- the Dynamo 1.6.1 mocker's own cost of a first visit (`MOCK_MISS_SECS`: prefill of the
  rehearsal's ~8,400-token stand-in at speedup 1, on its default timing model, measured
  by tests/test_calibration.py): the mocker's `--speedup-ratio` stretches every step to H200 time,
  and `--decode-speedup-ratio` gives decode back, since the seed's cache-hit request time
  (TTFT 44 ms and 127 tokens) is what the mock already takes.
KV capacity is left at the mocker's default (16,384 blocks of 64 tokens per worker, about
1M tokens): the numbers don't depend on it, since a video's questions arrive together and
every rehearsed level starts cold, so no cached video is evicted before its last question.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.names import SEED_SHAPE
from infra.settings import Settings


@dataclass(frozen=True)
class SeedRow:
    """One row of the seed's table (req/s; TTFT p50 in ms), round robin then affinity."""

    concurrency: int
    rr_req_s: float
    sa_req_s: float
    rr_ttft_p50_ms: float
    sa_ttft_p50_ms: float

    def figures(self, profile: str) -> dict[str, float | None]:
        """The seed's figures of one profile at this level, by the report's names."""
        rr, at_16 = profile == "round-robin", self.concurrency == 16
        return {"req/s": self.rr_req_s if rr else self.sa_req_s,
                "TTFT p50": self.rr_ttft_p50_ms if rr else self.sa_ttft_p50_ms,
                "request latency p50": SEED_16_LATENCY_P50_MS[profile] if at_16 else None,
                "TTFT p90": SEED_16_TTFT_P90_MS[profile] if at_16 else None}


SEED_TABLE = (
    SeedRow(1, 0.94, 1.16, 45, 44),
    SeedRow(2, 1.90, 2.36, 45, 44),
    SeedRow(4, 3.83, 4.68, 45, 44),
    SeedRow(8, 7.38, 9.35, 48, 44),
    SeedRow(16, 12.65, 17.78, 124, 44),
)
# Only at concurrency 16 the seed also gives request latency p50 and TTFT p90 (ms).
SEED_16_LATENCY_P50_MS = {"round-robin": 1140, "session-affinity": 919}
SEED_16_TTFT_P90_MS = {"round-robin": 757, "session-affinity": 47}
SEED_WORKERS = 8
# "about 2.5 h round robin, 2 h affinity" for the five levels (the recipe's runs).
SEED_SWEEP_HOURS = {"round-robin": 2.5, "session-affinity": 2.0}
# The mocker's first-visit cost for the ~8,400-token stand-in at speedup 1 (seconds):
# first request minus its repeat on one mock worker, 0.179-0.182 s measured by
# tests/test_calibration.py on the pinned Dynamo 1.6.1 mocker (which checks it each run).
MOCK_MISS_SECS = 0.180
# Assumptions the seed does not give, stated in every plan: pulling the NIM's FP8 Super
# files (~67 GiB) and a cold graph start.
DOWNLOAD_SECS = 1800
GRAPH_START_SECS = 900


@dataclass(frozen=True)
class Hardware:
    """A request's cost on one worker: a cache hit, plus `miss_secs` on a first visit."""

    hit_secs: float
    miss_secs: float
    source: str = "the seed's concurrency-1 row"


def first_visits(workers: int, questions: int, affinity: bool) -> int:
    """Workers a video's questions reach at concurrency 1: one, or round robin's spread."""
    return 1 if affinity else min(workers, questions)


def seed_hardware(row: SeedRow = SEED_TABLE[0], workers: int = SEED_WORKERS,
                  questions: int = SEED_SHAPE.questions_per_video,
                  source: str = "the seed's concurrency-1 row") -> Hardware:
    """Solve one row of both profiles: a request's mean time (concurrency / req/s) is the
    hit time plus k/q misses, k = the first visits per video (round robin 8, affinity 1)."""
    extra = first_visits(workers, questions, False) - first_visits(workers, questions, True)
    rr, sa = row.concurrency / row.rr_req_s, row.concurrency / row.sa_req_s
    miss = (rr - sa) * questions / extra
    return Hardware(hit_secs=sa - miss / questions, miss_secs=miss, source=source)


H200 = seed_hardware()


@dataclass(frozen=True)
class MockCalibration:
    """The mocker's knobs that give its first visit the H200's cost and keep decode."""

    speedup_ratio: float
    decode_speedup_ratio: float


def mock_calibration(hardware: Hardware = H200) -> MockCalibration:
    stretch = MOCK_MISS_SECS / hardware.miss_secs
    return MockCalibration(speedup_ratio=round(stretch, 3),
                           decode_speedup_ratio=round(1 / stretch, 3))


def predicted_req_s(hardware: Hardware, concurrency: int, workers: int, questions: int,
                    affinity: bool) -> float:
    """Little's law over a request's mean time (no queueing: optimistic where misses
    contend, i.e. round robin at high concurrency; the rehearsal shows that part)."""
    mean = hardware.hit_secs + first_visits(workers, questions, affinity) * (
        hardware.miss_secs / questions)
    return concurrency / mean


@dataclass(frozen=True)
class LevelPlan:
    concurrency: int
    req_s: float
    secs: float


@dataclass(frozen=True)
class SweepPlan:
    levels: tuple[LevelPlan, ...]
    gpu_hours: float
    hardware: Hardware

    @property
    def sweep_secs(self) -> float:
        return sum(p.secs for p in self.levels)

    def lines(self) -> list[str]:
        out = [f"  concurrency {p.concurrency:>3}: {p.req_s:6.2f} req/s, "
               f"{p.secs / 60:6.1f} min" for p in self.levels]
        out.append(f"  sweep {self.sweep_secs / 3600:.1f} h; with download "
                   f"({DOWNLOAD_SECS // 60} min assumed) and graph start "
                   f"({GRAPH_START_SECS // 60} min assumed) {self.gpu_hours:.1f} GPU-hours "
                   f"(per request {self.hardware.hit_secs:.3f} s, "
                   f"+{self.hardware.miss_secs:.3f} s per first visit; from "
                   f"{self.hardware.source})")
        return out


def plan_sweep(videos: int, questions: int, concurrencies: tuple[int, ...], workers: int,
               gpus_per_worker: int, affinity: bool, hardware: Hardware = H200) -> SweepPlan:
    """Each level's wall time and the GPU-hours of download, graph start and sweep (GPUs
    are held from the graph's start; the download holds one replica's)."""
    requests = videos * questions
    levels = []
    for c in concurrencies:
        rate = predicted_req_s(hardware, c, workers, questions, affinity)
        levels.append(LevelPlan(c, rate, requests / rate))
    sweep = sum(p.secs for p in levels)
    gpu_secs = (DOWNLOAD_SECS * gpus_per_worker
                + (GRAPH_START_SECS + sweep) * workers * gpus_per_worker)
    return SweepPlan(tuple(levels), gpu_secs / 3600, hardware)


def stack_plan(settings: Settings, hardware: Hardware = H200) -> SweepPlan:
    """The plan of a stack's benchmark settings; KV routing keeps videos like affinity."""
    bench, workers = settings.benchmark, settings.workers
    sticky = settings.routing.affinity or settings.routing.router_mode == "kv"
    return plan_sweep(bench.videos, bench.questions_per_video, bench.concurrencies,
                      workers.replicas, workers.serving.gpus_per_replica, sticky, hardware)


def recalibrate(concurrency: int, rr_req_s: float, sa_req_s: float, workers: int,
                questions: int) -> Hardware:
    """The hardware as a real sweep of both profiles measured it at one low level (where
    requests don't queue: concurrency 1 is the seed's and the best)."""
    row = SeedRow(concurrency, rr_req_s, sa_req_s, math.nan, math.nan)
    return seed_hardware(row, workers, questions,
                         source=f"your measured concurrency-{concurrency} level")


def relative_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured else math.nan
