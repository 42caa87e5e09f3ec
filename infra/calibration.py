"""An H200's costs from the seed's concurrency-1 row alone (its other rows stay the rehearsal's
test), and the mock workers stretched to them (docs/rehearsal.md, "Calibration")."""

from __future__ import annotations

from dataclasses import dataclass

from infra.run import SEED_WORKLOAD
from infra.seed import SEED_TABLE, SEED_WORKERS

# The levels the mock's calibration reads (its costs from 1, its pause tuned at 2): the
# rehearsal's figures there are in-sample, the others test it.
IN_SAMPLE_LEVELS = (1, 2)
# The mocker's first visit of the ~8,400-token stand-in at speedup 1, minus its repeat (s):
# 0.179-0.182 on the pinned Dynamo 1.6.1 mocker (tests/test_calibration.py checks it).
MOCK_MISS_SECS = 0.180
# The stretched mocker's cache hit of the seed's answer with decode at its own speed (speedup
# x decode speedup = 1: 0.841-0.843 s), and its part that decode does not scale, a one-token
# answer (0.058 s, the rehearsal's TTFT floor). Measured on the pinned mocker;
# tests/test_calibration.py checks the calibrated hit.
MOCK_HIT_SECS = 0.842
MOCK_FLOOR_SECS = 0.058
# The seeded pause before each question after a video's first (the dataset's `pause_ms`): the
# mock's request times are fixed, so without it round robin falls into step with the videos.
# 300, not 60: round robin then falls into step in 2 of 8 chunks at 2, not 5 (docs/rehearsal.md).
MOCK_PAUSE_MS = 300

@dataclass(frozen=True)
class Hardware:
    """A request's cost on one worker: a cache hit, plus `miss_secs` on a first visit."""

    hit_secs: float
    miss_secs: float
    source: str


def first_visits(workers: int, questions: int, affinity: bool) -> int:
    """Workers a video's questions reach at concurrency 1: one, or round robin's spread."""
    return 1 if affinity else min(workers, questions)


def solve_hardware(concurrency: int, rr_req_s: float, sa_req_s: float,
                   workers: int = SEED_WORKERS, questions: int = SEED_WORKLOAD.questions_per_video,
                   source: str | None = None) -> Hardware:
    """Solve one low level of both profiles (no queueing: concurrency 1 is best): a request's
    mean time (concurrency / req/s) is the hit time plus k/q misses, k its first visits."""
    extra = first_visits(workers, questions, False) - first_visits(workers, questions, True)
    rr, sa = concurrency / rr_req_s, concurrency / sa_req_s
    miss = (rr - sa) * questions / extra
    return Hardware(sa - miss / questions, miss,
                    source or f"your measured concurrency-{concurrency} level")


H200 = solve_hardware(1, SEED_TABLE[0].rr_req_s, SEED_TABLE[0].sa_req_s,
                      source="the seed's concurrency-1 row")


@dataclass(frozen=True)
class MockCalibration:
    """`--speedup-ratio` stretches a first visit to the H200's cost; `--decode-speedup-ratio`
    makes a cache hit plus the mean pause cost the H200's hit."""

    speedup_ratio: float
    decode_speedup_ratio: float
    pause_ms: float

    def hit_secs(self) -> float:
        """The calibrated mock's cache hit (its floor does not scale with the knobs)."""
        return MOCK_FLOOR_SECS + (MOCK_HIT_SECS - MOCK_FLOOR_SECS) / (
            self.speedup_ratio * self.decode_speedup_ratio)


def mock_calibration(hardware: Hardware = H200) -> MockCalibration:
    stretch = MOCK_MISS_SECS / hardware.miss_secs
    decode = (MOCK_HIT_SECS - MOCK_FLOOR_SECS) / (
        hardware.hit_secs - MOCK_PAUSE_MS / 2000 - MOCK_FLOOR_SECS)
    return MockCalibration(round(stretch, 3), round(decode / stretch, 3), MOCK_PAUSE_MS)


