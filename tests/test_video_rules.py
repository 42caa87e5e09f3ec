"""The videos' rules as pure functions, no FFmpeg run: each setting's edge and message, the
filter graph's pieces that make a video valid and its own (the random ranges, the inset in the
frame, the index spelled in binary along the bottom), and which files of an earlier run a
rerun reuses. A wrong rule here makes videos FFmpeg refuses, or two videos that alias."""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from benchmarks import videos
from benchmarks.videos import MANIFEST_NAME, _reusable, filter_graph, validate_shape
from infra.names import video_name
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


class _Edge(random.Random):
    """A generator whose every draw is the bottom (`top` false) or the top of its range."""

    top = False

    def randrange(self, stop: int) -> int:  # type: ignore[override]
        return stop - 1 if self.top else 0

    def uniform(self, a: float, b: float) -> float:
        return b if self.top else a

    def choice(self, seq):  # type: ignore[no-untyped-def]
        return seq[-1] if self.top else seq[0]


def graph_at(monkeypatch: pytest.MonkeyPatch, top: bool, shape: VideoShape = SHAPE) -> str:
    """Video 0's graph with every random draw at the bottom or the top of its range."""
    monkeypatch.setattr(videos.random, "Random", type("Edge", (_Edge,), {"top": top}))
    return filter_graph(shape, 0)


@pytest.mark.parametrize(("top", "pieces"), [
    (False, ["c0=0x000000:c1=0x000000:c2=0x000000", "type=linear", "speed=0.0050", "seed=0[",
             "hue=h=0:s=0.50", "mod(0+10.0*t,", "mod(0+5.0*t,"]),
    (True, ["c0=0xffffff:c1=0xffffff:c2=0xffffff", "type=spiral", "speed=0.0500",
            f"seed={2**32 - 1}[", "hue=h=359:s=2.00", "+60.0*t,", "+40.0*t,"]),
], ids=["bottom", "top"])
def test_each_random_draw_spans_its_range_and_stays_an_ffmpeg_value(
        monkeypatch: pytest.MonkeyPatch, top: bool, pieces: list[str]) -> None:
    """Colours are 24-bit (six hex digits at the top); the gradient is one of FFmpeg's
    linear, radial, circular and spiral, drifts 0.005 to 0.05 a frame, and is seeded over
    FFmpeg's whole 0..2**32-1; the inset's hue turns 0 to 359 degrees at a saturation of
    0.5 to 2, and it glides 10 to 60 px/s across and 5 to 40 down."""
    graph = graph_at(monkeypatch, top)
    assert [piece for piece in pieces if piece not in graph] == []


def test_the_inset_starts_and_wraps_inside_the_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the last start the 160x90 inset's far edge is one pixel short of the frame's, and
    its position wraps at the frame less the inset, so no part of it ever leaves the frame."""
    graph = graph_at(monkeypatch, top=True)
    assert "x='mod(479+60.0*t,480)'" in graph
    assert "y='mod(269+40.0*t,270)'" in graph


@pytest.mark.parametrize(("width", "height", "inset"),
                         [(640, 360, "160x90"), (212, 100, "52x24"), (64, 64, "16x16")])
def test_the_inset_is_a_quarter_of_the_frame_rounded_down_to_even(
        width: int, height: int, inset: str) -> None:
    graph = filter_graph(replace(SHAPE, width=width, height=height), 0)
    assert f"testsrc2=s={inset}:" in graph


def test_the_gradient_blends_as_many_colours_as_it_lists() -> None:
    graph = filter_graph(SHAPE, 0)
    listed = re.findall(r":c(\d)=0x[0-9a-f]{6}", graph)
    assert listed == ["0", "1", "2"]
    assert f":n={len(listed)}:" in graph


BOX = re.compile(r"drawbox=x=(\d+):y=(\d+):w=(\d+):h=(\d+):t=fill:color=(\w+)")


def stamp(graph: str) -> list[tuple[int, int, int, int, str]]:
    """The index strip's boxes in order: x, y, width, height and colour."""
    return [(int(x), int(y), int(w), int(h), color) for x, y, w, h, color in BOX.findall(graph)]


@pytest.mark.parametrize("index", [0, 1, 2, 0b1010_0101_1100_0011, 2**VIDEO_INDEX_BITS - 1])
def test_the_stamp_spells_the_index_in_binary_most_significant_bit_first(index: int) -> None:
    boxes = stamp(filter_graph(SHAPE, index))
    assert len(boxes) == VIDEO_INDEX_BITS
    # FFmpeg reads a colour's name in any case.
    spelled = "".join({"white": "1", "black": "0"}[color.lower()] for *_, color in boxes)
    assert spelled == f"{index:0{VIDEO_INDEX_BITS}b}"


@pytest.mark.parametrize(("width", "height", "cell"), [
    (640, 360, 15),  # a 24th of the height
    (640, 100, 4),   # 100 // 24, whole pixels
    (640, 64, 4),    # at least 4 pixels
])
def test_the_stamp_sits_side_by_side_4px_in_from_the_bottom_left(
        width: int, height: int, cell: int) -> None:
    boxes = stamp(filter_graph(replace(SHAPE, width=width, height=height), 0))
    assert [box[:4] for box in boxes] == [(4 + b * cell, height - cell - 4, cell, cell)
                                         for b in range(VIDEO_INDEX_BITS)]


@pytest.mark.parametrize(("width", "height", "cell"), [
    (72, 96, 4),    # 16 cells of 4 fill the width less 4 px each side
    (70, 96, 3),    # a little narrower: cells of 3
    (64, 64, 3),    # the narrowest frame
    (128, 720, 7),  # a tall one, whose 30 px cells would run off it
])
def test_the_stamp_fits_a_narrow_frame_with_every_bit_in_it(
        width: int, height: int, cell: int) -> None:
    """Boxes past the frame's edge are not drawn: videos whose indexes differ only in those
    bits would carry the same strip."""
    boxes = stamp(filter_graph(replace(SHAPE, width=width, height=height), 0))
    assert [box[:4] for box in boxes] == [(4 + b * cell, height - cell - 4, cell, cell)
                                         for b in range(VIDEO_INDEX_BITS)]
    assert boxes[-1][0] + cell <= width - 4


def earlier_run(folder: Path, shape: VideoShape, count: int) -> dict:
    """`count` intact files of an earlier run of `shape` in `folder`, and its manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for index in range(count):
        (folder / video_name(index)).write_bytes(f"video {index}".encode())
        entries.append({"name": video_name(index), "index": index, "bytes": 7,
                        "sha256": hashlib.sha256(f"video {index}".encode()).hexdigest()})
    manifest = {"settings": asdict(shape), "ffmpeg": "ffmpeg version test", "videos": entries}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    return manifest


def test_a_rerun_for_fewer_videos_reuses_only_the_ones_it_wants(tmp_path: Path) -> None:
    earlier_run(tmp_path, replace(SHAPE, count=3), 3)
    assert sorted(_reusable(tmp_path, replace(SHAPE, count=2))) == [0, 1]


def test_a_manifest_of_the_same_settings_without_a_video_list_reuses_nothing(
        tmp_path: Path) -> None:
    manifest = earlier_run(tmp_path, SHAPE, 2)
    del manifest["videos"]  # hand-made, say
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert _reusable(tmp_path, SHAPE) == {}
