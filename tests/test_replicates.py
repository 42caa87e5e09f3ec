"""A level's interval comes from the spread between its replicate chunks."""

from __future__ import annotations

import pytest

from benchmarks.sweep import replicate_interval


def test_the_interval_is_students_t_over_the_replicates() -> None:
    values = [8.5, 9.5, 10.5, 11.5]
    interval = replicate_interval(values)
    assert interval is not None and interval.replicates == 4
    sd = (sum((v - 10.0) ** 2 for v in values) / 3) ** 0.5
    assert interval.mean == pytest.approx(10.0)
    assert interval.high - interval.mean == pytest.approx(3.182446 * sd / 2, rel=1e-5)
    assert interval.relative_half_width == pytest.approx(3.182446 * sd / 2 / 10.0, rel=1e-5)


def test_one_replicate_has_no_interval() -> None:
    assert replicate_interval([12.0]) is None
    assert replicate_interval([]) is None
