"""FFmpeg-made videos: probed for duration, frame rate and frame count; decoded frames
prove every video distinct; reruns reuse intact files and remake damaged ones."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import imageio_ffmpeg
import pytest

from benchmarks.videos import MANIFEST_NAME, make_videos
from infra.names import video_name
from infra.run import VideoShape
from tests.conftest import REPO_ROOT, at_a_terminal

SHAPE = replace(VideoShape(), count=3, duration_secs=4, fps=2, width=160, height=96, seed=7)

def probe(path: Path) -> dict:
    """Codec, size, frame rate and duration as FFmpeg reads them, and the frames it decodes:
    the pinned wheel's FFmpeg, so no machine skips these tests for lack of a system one."""
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    reader.close()
    frames, _secs = imageio_ffmpeg.count_frames_and_secs(str(path))
    return {**meta, "frames": frames}


def frame_hashes(path: Path) -> list[str]:
    """MD5 of every decoded frame: content, whatever the container bytes are."""
    out = subprocess.run(
        [imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "framemd5", "-"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    return [line.split(",")[-1].strip() for line in out.splitlines() if not line.startswith("#")]


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return make_videos(tmp_path_factory.mktemp("videos"), SHAPE, progress=lambda _: None)


def test_duration_frame_rate_and_frame_count(videos: list[Path]) -> None:
    assert [p.name for p in videos] == [video_name(i) for i in range(SHAPE.count)]
    for path in videos:
        info = probe(path)
        assert info["codec"] == "h264"
        assert info["size"] == (SHAPE.width, SHAPE.height)
        assert info["fps"] == SHAPE.fps
        assert info["frames"] == SHAPE.duration_secs * SHAPE.fps
        assert info["duration"] == pytest.approx(SHAPE.duration_secs, abs=0.01)


def test_no_two_videos_share_a_frame(videos: list[Path]) -> None:
    seen: dict[str, Path] = {}
    for path in videos:
        hashes = frame_hashes(path)
        assert len(hashes) == SHAPE.duration_secs * SHAPE.fps
        for digest in set(hashes):
            assert digest not in seen, f"{path.name} shares a frame with {seen[digest].name}"
            seen[digest] = path
        assert len(set(hashes)) > 1, f"{path.name} does not change over time"


def test_same_seed_same_bytes_other_seed_other_content(videos: list[Path], tmp_path: Path) -> None:
    again = make_videos(tmp_path / "again", SHAPE, progress=lambda _: None)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in videos]
    other = make_videos(tmp_path / "other", replace(SHAPE, count=1, seed=8),
                        progress=lambda _: None)
    assert set(frame_hashes(other[0])).isdisjoint(frame_hashes(videos[0]))


def test_rerun_reuses_intact_files_and_remakes_damaged_ones(tmp_path: Path) -> None:
    out = tmp_path / "v"
    shape = replace(SHAPE, count=2)
    make_videos(out, shape, progress=lambda _: None)
    first = out / video_name(0)
    good = first.read_bytes()
    mtime = (out / video_name(1)).stat().st_mtime_ns
    first.write_bytes(good[: len(good) // 2])  # an interrupted copy, say
    said: list[str] = []
    make_videos(out, replace(shape, count=3), progress=said.append)
    assert "1 reused, 2 to make" in said[0]
    assert first.read_bytes() == good
    assert (out / video_name(1)).stat().st_mtime_ns == mtime
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert [v["name"] for v in manifest["videos"]] == [video_name(i) for i in range(3)]
    assert manifest["videos"][2]["sha256"] == hashlib.sha256(
        (out / video_name(2)).read_bytes()).hexdigest()
    said.clear()
    make_videos(out, replace(shape, count=3, width=192), progress=said.append)
    assert "0 reused, 3 to make" in said[0], "other settings never reuse files"


def test_ctrl_c_stops_at_once_and_keeps_what_was_made(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the process group) ends the command within seconds, exit 130, no
    traceback; every video made so far is listed, so the next run reuses it."""
    out = tmp_path / "v"
    args = ["--out", str(out), "--count", "40", "--duration", "4", "--fps", "2",
            "--width", "160", "--height", "96", "--jobs", "1"]
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks", "videos", *args],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=at_a_terminal)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out / video_name(1)).is_file():
        time.sleep(0.1)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    stopped = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - stopped < 10, "kept encoding after Ctrl-C"
    assert proc.returncode == 130 and "Traceback" not in err, err
    listed = json.loads((out / MANIFEST_NAME).read_text())["videos"]
    assert 2 <= len(listed) < 40
    said: list[str] = []
    shape = replace(VideoShape(), count=len(listed), duration_secs=4, fps=2, width=160,
                    height=96)
    make_videos(out, shape, progress=said.append)
    assert f"{len(listed)} reused, 0 to make" in said[0]


def test_a_failed_encode_stops_the_queued_ones_and_keeps_the_made_ones(tmp_path: Path) -> None:
    """An FFmpeg that fails on the third video: the error surfaces and the 17 queued
    encodes behind it never start."""
    calls = tmp_path / "calls"
    fake = tmp_path / "ffmpeg"
    fake.write_text(f"""#!/bin/sh
[ "$2" = -version ] && {{ echo "ffmpeg version fake"; exit 0; }}
for last; do :; done
echo "$last" >> {calls}
case "$last" in *video_0002*) echo broken >&2; exit 1;; esac
sleep 0.2; echo data > "$last"
""")
    fake.chmod(0o755)
    said: list[str] = []
    with pytest.raises(RuntimeError, match="FFmpeg failed on video_0002.mp4"):
        make_videos(tmp_path / "v", replace(SHAPE, count=20), progress=said.append, jobs=1,
                    exe=str(fake))
    assert len(calls.read_text().splitlines()) <= 4
    assert "videos: stopped; 2 of 20 kept for the next run" in said
    listed = json.loads((tmp_path / "v" / MANIFEST_NAME).read_text())["videos"]
    assert [v["name"] for v in listed] == [video_name(0), video_name(1)]


def test_the_ffmpeg_that_the_pinned_wheel_ships_works_too(tmp_path: Path) -> None:
    (path,) = make_videos(tmp_path, replace(SHAPE, count=1), progress=lambda _: None,
                          exe=imageio_ffmpeg.get_ffmpeg_exe())
    info = probe(path)
    assert info["frames"] == SHAPE.duration_secs * SHAPE.fps
