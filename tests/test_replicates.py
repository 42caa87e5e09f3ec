"""A level's interval comes from the spread between its replicate chunks; a gain's from the
ratios of its blocks' two chunks."""

from __future__ import annotations

import math

import pytest

from benchmarks.sweep import paired_gain, replicate_interval

# Student t at 98.5% two-sided with 3 degrees of freedom: the stop rule's corrected interval
# (infra/run.py T_QUANTILE), which keeps its 95% label (tests/test_coverage.py).
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
