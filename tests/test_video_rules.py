"""The videos' rules as pure functions, no FFmpeg run: each setting's edge and message, the
filter graph's pieces that make a video valid and its own (the random ranges, the inset in the
frame, the index spelled in binary along the bottom), and which files of an earlier run a
rerun reuses. A wrong rule here makes videos FFmpeg refuses, or two videos that alias."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.videos import validate_shape
from infra.run import VIDEO_INDEX_BITS, VideoShape

SHAPE = VideoShape()  # 640x360: the inset is 160x90


@pytest.mark.parametrize("edge", [dict(count=1), dict(count=2**VIDEO_INDEX_BITS),
                                  dict(duration_secs=1), dict(fps=1), dict(fps=60),
                                  dict(width=64), dict(height=64)], ids=str)
def test_each_setting_is_accepted_at_its_edge(edge: dict[str, int]) -> None:
    validate_shape(replace(SHAPE, **edge))


@pytest.mark.parametrize(("past", "message"), [
    (dict(count=0), "--count must be at least 1 (got 0)"),
    (dict(count=2**VIDEO_INDEX_BITS + 1), "--count must be at most 65536 (got 65537)"),
    (dict(duration_secs=0), "--duration must be at least 1 second (got 0)"),
    (dict(fps=0), "--fps must be between 1 and 60 (got 0)"),
    (dict(fps=61), "--fps must be between 1 and 60 (got 61)"),
    (dict(width=62), "--width must be even and at least 64 (got 62)"),
    (dict(width=65), "--width must be even and at least 64 (got 65)"),
    (dict(height=62), "--height must be even and at least 64 (got 62)"),
    (dict(height=65), "--height must be even and at least 64 (got 65)"),
], ids=str)
def test_each_setting_is_refused_just_past_its_edge_naming_its_option(
        past: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        validate_shape(replace(SHAPE, **past))
    assert str(refused.value) == message


def test_every_bad_setting_is_named_in_one_error() -> None:
    with pytest.raises(ValueError) as refused:
        validate_shape(replace(SHAPE, count=0, width=101))
    assert str(refused.value) == ("--count must be at least 1 (got 0); "
                                  "--width must be even and at least 64 (got 101)")
