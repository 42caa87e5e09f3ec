"""The stop rule's intervals: a level's from the spread between its blocks, a gain's from the
ratios of its blocks' two chunks, and both keep their 95% label: simulated levels, run
through the sweep's own stop rule and interval code, cover the truth at least 93% of the time
(1,000 seeded levels a case). Stopping once an interval is tight favours spreads small by
chance; without the sequential correction (Student t at 98.5%, at least MIN_BLOCKS blocks)
these cover 0.88-0.91."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from benchmarks.sweep import paired_gain, replicate_interval, stopped_by
from infra.run import Workload

# Student t at 98.5% two-sided with 3 degrees of freedom: the stop rule's corrected interval
# (infra/run.py T_QUANTILE), which keeps its 95% label (tests/test_stop_rule.py).
T_3 = 5.047292


def test_the_interval_is_students_t_over_the_replicates() -> None:
    values = [8.5, 9.5, 10.5, 11.5]
    interval = replicate_interval(values)
    assert interval is not None and interval.replicates == 4
    sd = (sum((v - 10.0) ** 2 for v in values) / 3) ** 0.5
    assert interval.mean == pytest.approx(10.0)
    assert interval.high - interval.mean == pytest.approx(T_3 * sd / 2, rel=1e-5)
    assert interval.relative_half_width == pytest.approx(T_3 * sd / 2 / 10.0, rel=1e-5)


def test_one_replicate_has_no_interval() -> None:
    assert replicate_interval([12.0]) is None
    assert replicate_interval([]) is None


def test_a_paired_gain_is_the_geometric_mean_of_its_blocks_ratios() -> None:
    """Each block's ratio cancels what moved both of its chunks (here a drift that halves
    the last two blocks): the gain is the same as without it."""
    base, other = [10.0, 10.0, 5.0, 5.0], [12.0, 13.0, 6.0, 6.5]
    gain = paired_gain(base, other)
    logs = [math.log(1.2), math.log(1.3)] * 2
    mean, sd = sum(logs) / 4, (sum((x - sum(logs) / 4) ** 2 for x in logs) / 3) ** 0.5
    assert gain is not None and gain.replicates == 4
    assert gain.mean == pytest.approx((math.exp(mean) - 1) * 100)
    assert gain.low == pytest.approx((math.exp(mean - T_3 * sd / 2) - 1) * 100, rel=1e-5)
    assert gain.high == pytest.approx((math.exp(mean + T_3 * sd / 2) - 1) * 100, rel=1e-5)
    assert paired_gain([10.0], [12.0]) is None
    with pytest.raises(ValueError):
        paired_gain([10.0, 10.0], [12.0])  # blocks pair up, or it is no paired run

LEVELS = 1000
SPREAD = 0.05  # the req/s spread between chunks (infra/calibration.py REPLICATE_CV)
SLOW = 0.85  # a slow chunk's share of the rate


def chunk(rng: random.Random, truth: float, slow_share: float) -> float:
    return truth * (1 + rng.gauss(0, SPREAD)) * (SLOW if rng.random() < slow_share else 1.0)


@pytest.mark.parametrize("slow_share", [0.0, 0.1, 0.2])
@pytest.mark.parametrize("blocks", [12, 25])  # the cluster's cap at concurrency 16 and 8
def test_a_levels_interval_covers_its_mean_rate(slow_share: float, blocks: int) -> None:
    rng, workload, covered = random.Random(f"level:{slow_share}:{blocks}"), Workload(), 0
    truth = 1.0 - (1 - SLOW) * slow_share  # the expected chunk rate
    for _ in range(LEVELS):
        rates: list[float] = []
        while stopped_by([rates], blocks - len(rates), workload) is None:
            rates.append(chunk(rng, 1.0, slow_share))
        interval = replicate_interval(rates)
        covered += interval.low <= truth <= interval.high
    assert covered / LEVELS >= 0.93


@pytest.mark.parametrize("slow_share", [0.0, 0.2])
@pytest.mark.parametrize("gain", [0.23, 0.41])  # the seed's at concurrency 1 and 16
def test_a_paired_gains_interval_covers_the_true_gain(slow_share: float, gain: float) -> None:
    """The compare stack's stop rule (+-5 points); a drift shared by a block's two chunks
    (another tenant, a node's clocks) cancels in its ratio."""
    rng, covered = random.Random(f"paired:{slow_share}:{gain}"), 0
    workload = replace(Workload(), stop_within_pct=5.0)
    for _ in range(LEVELS):
        rates: list[list[float]] = [[], []]
        while stopped_by(rates, 12 - len(rates[0]), workload) is None:
            drift = 1 + rng.gauss(0, SPREAD)
            rates[0].append(drift * chunk(rng, 1.0, slow_share))
            rates[1].append(drift * chunk(rng, 1.0 + gain, slow_share))
        found = paired_gain(*rates)
        covered += found.low <= gain * 100 <= found.high
    assert covered / LEVELS >= 0.93
