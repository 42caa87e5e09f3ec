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
# The relative spread of req/s between a level's replicate chunks (standard deviation over
# mean) the adaptive plan assumes until chunked runs measure it (`plan --spread RUN...`).
# From the repeat rehearsals in docs/rehearsal.md (calibrated mock, 32 videos a level):
# round robin at 16 gave 9.9 to 10.6 req/s over four runs, 3.1% between runs of two
# 16-video chunks, so 4.4% between chunks; affinity's gain at 8 says 7% between 8-video
# chunks, but round robin fell into step with the mock's even timing there, which real
# workers' jitter breaks. 5%: the former, rounded up.
REPLICATE_CV = 0.05
# AIPerf's own start for each chunk (process, tokenizer, workers): about 8 s a run in the
# tests' sweeps on two cores (tests/support_sweep_runs.py).
CHUNK_START_SECS = 8


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


def chunks_needed(concurrency: int, videos: int, cv: float = REPLICATE_CV,
                  within_pct: float = SEED_SHAPE.stop_within_pct) -> int:
    """Chunks of `concurrency` videos a level runs under the stop rule: at least
    `min_replicates`, then until the Student t 95% half-width of the mean req/s,
    t * cv / sqrt(n), is within `within_pct` %, or the whole chunks run out."""
    from scipy.stats import t as student_t  # the sweep's (AIPerf's); only plans reach this

    available = max(1, videos // concurrency)
    n = SEED_SHAPE.min_replicates
    while n < available and student_t.ppf(0.975, n - 1) * cv / math.sqrt(n) > within_pct / 100:
        n += 1
    return min(n, available)


@dataclass(frozen=True)
class LevelPlan:
    """A level's predicted rate, its time sending every video (the seed's way, one run),
    and its time as the adaptive sweep runs it (chunks, each with AIPerf's start)."""

    concurrency: int
    req_s: float
    secs: float
    chunks: int
    adaptive_secs: float


@dataclass(frozen=True)
class SweepPlan:
    levels: tuple[LevelPlan, ...]
    hardware: Hardware
    cv: float
    within_pct: float
    gpus: int
    download_gpus: int

    @property
    def sweep_secs(self) -> float:
        return sum(p.secs for p in self.levels)

    @property
    def adaptive_secs(self) -> float:
        return sum(p.adaptive_secs for p in self.levels)

    @property
    def gpu_hours(self) -> float:
        return self._gpu_hours(self.sweep_secs)

    @property
    def adaptive_gpu_hours(self) -> float:
        return self._gpu_hours(self.adaptive_secs)

    def _gpu_hours(self, sweep_secs: float) -> float:
        """GPUs are held from the graph's start; the download holds one replica's."""
        return (DOWNLOAD_SECS * self.download_gpus
                + (GRAPH_START_SECS + sweep_secs) * self.gpus) / 3600

    def lines(self) -> list[str]:
        out = [f"  concurrency {p.concurrency:>3}: {p.req_s:6.2f} req/s, full "
               f"{p.secs / 60:6.1f} min, adaptive {p.adaptive_secs / 60:5.1f} min "
               f"({p.chunks} chunks, {p.chunks * p.concurrency} videos)" for p in self.levels]
        for mode, secs, total in (("full", self.sweep_secs, self.gpu_hours),
                                  ("adaptive", self.adaptive_secs, self.adaptive_gpu_hours)):
            out.append(f"  {mode:<8} sweep {secs / 3600:5.2f} h, {secs * self.gpus / 3600:5.1f} "
                       f"GPU-hours ({total:.1f} with download and graph start)")
        out += [f"  adaptive: {self.adaptive_secs / self.sweep_secs:.0%} of full's sweep "
                f"GPU-hours (stop within +-{self.within_pct:g}%), at a {self.cv:.1%} spread of "
                f"req/s between chunks and {CHUNK_START_SECS} s of AIPerf's start per chunk",
                f"  assumed: download {DOWNLOAD_SECS // 60} min, graph start "
                f"{GRAPH_START_SECS // 60} min; per request {self.hardware.hit_secs:.3f} s, "
                f"+{self.hardware.miss_secs:.3f} s per first visit (from "
                f"{self.hardware.source})"]
        return out


def plan_sweep(videos: int, questions: int, concurrencies: tuple[int, ...], workers: int,
               gpus_per_worker: int, affinity: bool, hardware: Hardware = H200,
               cv: float = REPLICATE_CV, within_pct: float = SEED_SHAPE.stop_within_pct
               ) -> SweepPlan:
    """Each level's wall time sending every video (full) and under the stop rule
    (adaptive: whole chunks of `concurrency` videos, each `questions` requests a video)."""
    levels = []
    for c in concurrencies:
        rate = predicted_req_s(hardware, c, workers, questions, affinity)
        chunks = chunks_needed(c, videos, cv, within_pct)
        levels.append(LevelPlan(c, rate, videos * questions / rate, chunks,
                                chunks * (c * questions / rate + CHUNK_START_SECS)))
    return SweepPlan(tuple(levels), hardware, cv, within_pct, workers * gpus_per_worker,
                     gpus_per_worker)


def stack_plan(settings: Settings, hardware: Hardware = H200, cv: float = REPLICATE_CV
               ) -> SweepPlan:
    """The plan of a stack's benchmark settings (its stop rule: benchmarkStopWithinPct); KV
    routing keeps videos like affinity."""
    bench, workers = settings.benchmark, settings.workers
    sticky = settings.routing.affinity or settings.routing.router_mode == "kv"
    return plan_sweep(bench.videos, bench.questions_per_video, bench.concurrencies,
                      workers.replicas, workers.serving.gpus_per_replica, sticky, hardware, cv,
                      bench.stop_within_pct)


def recalibrate(concurrency: int, rr_req_s: float, sa_req_s: float, workers: int,
                questions: int) -> Hardware:
    """The hardware as a real sweep of both profiles measured it at one low level (where
    requests don't queue: concurrency 1 is the seed's and the best)."""
    row = SeedRow(concurrency, rr_req_s, sa_req_s, math.nan, math.nan)
    return seed_hardware(row, workers, questions,
                         source=f"your measured concurrency-{concurrency} level")


def relative_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured else math.nan
