"""A stack's sweep planned before `pulumi up` spends it: each level's time and the GPU-hours,
on the calibration's H200 costs and the stop rule's blocks (docs/benchmark-toolkit.md, `plan`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from infra.calibration import H200, Hardware, first_visits
from infra.run import MIN_BLOCKS, SEED_WORKLOAD, T_QUANTILE
from infra.settings import Settings

# Assumed, stated in every plan: pulling the NIM's FP8 Super files (~67 GiB); a cold graph,
# eight workers reading their weights from one share (graphTimeoutSecs' default is its bound).
DOWNLOAD_SECS = 1800
GRAPH_START_SECS = 5400
# req/s spread between a level's chunks (sd / mean) until `plan --spread RUN...` measures it:
# 4.4% (0-60 ms pause) and 2.6% (0-300 ms) in docs/rehearsal.md's repeats: the larger, rounded up.
REPLICATE_CV = 0.05
# AIPerf's own start per chunk: about 8 s in the tests' sweeps (tests/support_sweep_runs.py).
CHUNK_START_SECS = 8



def predicted_req_s(hardware: Hardware, concurrency: int, workers: int, questions: int,
                    affinity: bool) -> float:
    """Little's law over a request's mean time (no queueing: optimistic where misses
    contend, i.e. round robin at high concurrency; the rehearsal shows that part)."""
    mean = hardware.hit_secs + first_visits(workers, questions, affinity) * (
        hardware.miss_secs / questions)
    return concurrency / mean


def chunks_needed(concurrency: int, videos: int, cv: float = REPLICATE_CV,
                  within_pct: float = SEED_WORKLOAD.stop_within_pct, paired: bool = False) -> int:
    """Blocks a level runs under the sweep's stop rule: at least MIN_BLOCKS, until the half-width
    t * spread / sqrt(n) is within `within_pct` (a gain's spread: two chunks', in points) or the
    videos run out."""
    from scipy.stats import t as student_t  # the sweep's (AIPerf's); only plans reach this

    available, spread = max(1, videos // concurrency), cv * (math.sqrt(2) if paired else 1)
    n = MIN_BLOCKS
    while n < available and student_t.ppf(T_QUANTILE, n - 1) * spread / math.sqrt(
            n) > within_pct / 100:
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
    profiles: int = 1

    @property
    def sweep_secs(self) -> float:
        return sum(p.secs for p in self.levels)

    @property
    def adaptive_secs(self) -> float:
        return sum(p.adaptive_secs for p in self.levels)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_hours_of(self.sweep_secs)

    def gpu_hours_of(self, sweep_secs: float) -> float:
        """GPUs are held from the graph's start; the download holds one replica's."""
        return (DOWNLOAD_SECS * self.download_gpus
                + (GRAPH_START_SECS + sweep_secs) * self.gpus) / 3600

    def lines(self) -> list[str]:
        out = [f"  concurrency {p.concurrency:>3}: {p.req_s:6.2f} req/s, full "
               f"{p.secs / 60:6.1f} min, adaptive {p.adaptive_secs / 60:5.1f} min "
               f"({p.chunks} blocks of {self.profiles} chunk(s), "
               f"{p.chunks * p.concurrency * self.profiles} videos)" for p in self.levels]
        for mode, secs in (("full", self.sweep_secs), ("adaptive", self.adaptive_secs)):
            out.append(f"  {mode:<8} sweep {secs / 3600:5.2f} h, {secs * self.gpus / 3600:5.1f} "
                       f"GPU-hours ({self.gpu_hours_of(secs):.1f} with download and graph start)")
        return [*out,
                f"  adaptive: {self.adaptive_secs / self.sweep_secs:.0%} of full's sweep "
                f"GPU-hours (stop within +-{self.within_pct:g}"
                f"{'%' if self.profiles == 1 else ' points'}), at a {self.cv:.1%} spread of "
                f"req/s between chunks and {CHUNK_START_SECS} s of AIPerf's start per chunk",
                f"  assumed: download {DOWNLOAD_SECS // 60} min, graph start "
                f"{GRAPH_START_SECS // 60} min; per request {self.hardware.hit_secs:.3f} s, "
                f"+{self.hardware.miss_secs:.3f} s per first visit (from "
                f"{self.hardware.source})", *(design_lines(self) if self.profiles > 1 else [])]


def plan_sweep(videos: int, questions: int, concurrencies: tuple[int, ...], workers: int,
               gpus_per_worker: int, sticky: Sequence[bool], hardware: Hardware = H200,
               cv: float = REPLICATE_CV, within_pct: float = SEED_WORKLOAD.stop_within_pct
               ) -> SweepPlan:
    """Each level's time sending every video (full) and in the stop rule's blocks (adaptive),
    a block one chunk of each profile (`sticky`: whether each keeps a video on one worker)."""
    levels = []
    for c in concurrencies:
        rates = [predicted_req_s(hardware, c, workers, questions, one) for one in sticky]
        blocks = chunks_needed(c, videos, cv, within_pct, paired=len(sticky) > 1)
        levels.append(LevelPlan(c, rates[0], sum(videos * questions / r for r in rates), blocks,
                                blocks * sum(c * questions / r + CHUNK_START_SECS
                                             for r in rates)))
    return SweepPlan(tuple(levels), hardware, cv, within_pct, workers * gpus_per_worker,
                     gpus_per_worker, len(sticky))


def stack_plan(settings: Settings, hardware: Hardware = H200, cv: float = REPLICATE_CV
               ) -> SweepPlan:
    """A stack's plan at its benchmarkStopWithinPct; KV routing keeps videos like affinity."""
    w, serving = settings.benchmark.workload, settings.serving
    sticky = [f.routing.affinity or f.routing.router_mode == "kv" for f in settings.frontends]
    return plan_sweep(w.videos, w.questions_per_video, w.concurrencies, serving.replicas,
                      serving.gpus_per_replica, sticky, hardware, cv, w.stop_within_pct)


def design_lines(plan: SweepPlan) -> list[str]:
    """A paired plan's GPU-hours beside the seed's design (a deployment and a full sweep per
    profile, each with its cold start) and two adaptive per-profile stacks (one download)."""
    def hours(starts: int, sweep_secs: float) -> float:
        return plan.gpu_hours_of(sweep_secs + (starts - 1) * GRAPH_START_SECS)

    w = replace(SEED_WORKLOAD, concurrencies=tuple(p.concurrency for p in plan.levels))
    apart = [plan_sweep(w.videos, w.questions_per_video, w.concurrencies, plan.gpus,
                        1, [one], plan.hardware, plan.cv) for one in (False, True)]
    seed, stacks = (hours(2, sum(getattr(p, k) for p in apart))
                    for k in ("sweep_secs", "adaptive_secs"))
    mine = plan.gpu_hours_of(plan.adaptive_secs)
    return [f"  this stack: {mine:.1f} GPU-hours, one download and one cold start, both "
            f"profiles interleaved (gain within +-{plan.within_pct:g} points): "
            f"{mine / seed:.0%} of the seed's design",
            f"  the seed's design: {seed:.1f} GPU-hours (a deployment, a cold start and a full "
            f"sweep per profile); two adaptive per-profile stacks: {stacks:.1f}",
            f"  a cold start of {GRAPH_START_SECS // 60} min: 8 x 67 GiB of weights read from "
            "one ReadWriteMany share at about 100 MiB/s (docs/deploy-reference.md)"]
