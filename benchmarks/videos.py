"""`videos`: synthetic videos made with FFmpeg, deterministic for a seed, distinct per video.

Each video is a moving color gradient (colors, kind and speed drawn from a generator
seeded by (seed, index)), a test-pattern inset with its own hue gliding across it, and a
strip of boxes along the bottom that spells the video's index in binary. The index strip
alone makes every frame of one video differ from every frame of another, so no cache can
alias two videos. Files are encoded single-threaded with bit-exact flags: the same FFmpeg
and settings give the same bytes. FFmpeg is the system's if it is on PATH, else the
pinned imageio-ffmpeg wheel's static binary (the tests read videos with it too).

`videos.json` in the output directory records the settings, the FFmpeg version and each
file's SHA-256: a rerun reuses every listed file whose bytes still match and makes the
rest, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, replace
from functools import lru_cache
from pathlib import Path

from infra.names import SEED_SHAPE, VideoShape, video_name


class FFmpegMissing(RuntimeError):
    pass


@lru_cache(maxsize=1)
def ffmpeg_exe() -> str:
    system = shutil.which("ffmpeg")
    if system:
        return system
    try:
        import imageio_ffmpeg
    except ImportError as exc:
        raise FFmpegMissing(
            "FFmpeg not found: install it (apt-get install ffmpeg) or run scripts/setup.sh, "
            "which installs the imageio-ffmpeg wheel that ships one"
        ) from exc
    return imageio_ffmpeg.get_ffmpeg_exe()


def ffmpeg_version(exe: str | None = None) -> str:
    """First line of `ffmpeg -version`, e.g. 'ffmpeg version 5.1.9-0+deb12u1 ...'."""
    out = subprocess.run(
        [exe or ffmpeg_exe(), "-hide_banner", "-version"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    return out.splitlines()[0].strip() if out else "unknown"


MANIFEST_NAME = "videos.json"
INDEX_BITS = 12
GRADIENT_KINDS = ("linear", "radial", "circular", "spiral")
FFMPEG_TIMEOUT_SECS = 300


def validate_shape(shape: VideoShape) -> None:
    """One clear error per bad setting, before anything is made."""
    problems = []
    if shape.count < 1:
        problems.append(f"--count must be at least 1 (got {shape.count})")
    if shape.count > 2**INDEX_BITS:
        problems.append(f"--count must be at most {2**INDEX_BITS} (got {shape.count})")
    if shape.duration_secs < 1:
        problems.append(f"--duration must be at least 1 second (got {shape.duration_secs})")
    if not 1 <= shape.fps <= 60:
        problems.append(f"--fps must be between 1 and 60 (got {shape.fps})")
    for name, value in (("--width", shape.width), ("--height", shape.height)):
        if value < 64 or value % 2:
            problems.append(f"{name} must be even and at least 64 (got {value})")
    if problems:
        raise ValueError("; ".join(problems))


def _color(rng: random.Random) -> str:
    return f"0x{rng.randrange(0x1000000):06x}"


def filter_graph(shape: VideoShape, index: int) -> str:
    """The FFmpeg filter graph of video `index` (pure: same inputs, same graph)."""
    rng = random.Random(f"video:{shape.seed}:{index}")
    w, h, fps = shape.width, shape.height, shape.fps
    colors = ":".join(f"c{i}={_color(rng)}" for i in range(3))
    kind = rng.choice(GRADIENT_KINDS)
    speed = rng.uniform(0.005, 0.05)
    background = (
        f"gradients=s={w}x{h}:r={fps}:{colors}:n=3:type={kind}:"
        f"speed={speed:.4f}:seed={rng.randrange(2**32)}"
    )
    iw, ih = w // 4 // 2 * 2, h // 4 // 2 * 2
    inset = f"testsrc2=s={iw}x{ih}:r={fps},hue=h={rng.randrange(360)}:s={rng.uniform(0.5, 2):.2f}"
    vx, vy = rng.uniform(10, 60), rng.uniform(5, 40)
    x0, y0 = rng.randrange(w - iw), rng.randrange(h - ih)
    move = (
        f"overlay=x='mod({x0}+{vx:.1f}*t,{w - iw})':y='mod({y0}+{vy:.1f}*t,{h - ih})'"
        ":eval=frame:shortest=1"
    )
    cell = max(4, h // 24)
    bits = [
        f"drawbox=x={4 + b * cell}:y={h - cell - 4}:w={cell}:h={cell}:t=fill:"
        f"color={'white' if index >> (INDEX_BITS - 1 - b) & 1 else 'black'}"
        for b in range(INDEX_BITS)
    ]
    return f"{background}[bg];{inset}[fg];[bg][fg]{move}," + ",".join(bits) + ",format=yuv420p"


def ffmpeg_command(exe: str, shape: VideoShape, index: int, out: Path) -> list[str]:
    """Command that writes video `index` to `out` (MP4, H.264, exact frame count)."""
    frames = shape.duration_secs * shape.fps
    return [
        exe, "-hide_banner", "-nostdin", "-loglevel", "error", "-y",
        "-filter_complex", filter_graph(shape, index),
        "-frames:v", str(frames), "-r", str(shape.fps),
        "-c:v", "libx264", "-preset", "veryfast", "-threads", "1",
        "-fflags", "+bitexact", "-flags:v", "+bitexact", "-map_metadata", "-1",
        "-movflags", "+faststart", "-f", "mp4", str(out),
    ]


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def load_manifest(out_dir: Path) -> dict | None:
    path = out_dir / MANIFEST_NAME
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _reusable(out_dir: Path, shape: VideoShape) -> dict[str, dict]:
    """Entries of an earlier run with the same settings whose files are intact."""
    manifest = load_manifest(out_dir)
    if not manifest:
        return {}
    earlier = manifest.get("settings", {})
    if {k: v for k, v in earlier.items() if k != "count"} != {
        k: v for k, v in asdict(shape).items() if k != "count"
    }:
        return {}
    reusable = {}
    for entry in manifest.get("videos", []):
        path = out_dir / entry["name"]
        if path.is_file() and path.stat().st_size == entry["bytes"]:
            if sha256_file(path) == entry["sha256"]:
                reusable[entry["name"]] = entry
    return reusable


def _write_manifest(out_dir: Path, shape: VideoShape, version: str, entries: list[dict]) -> None:
    manifest = {"settings": asdict(shape), "ffmpeg": version, "videos": entries}
    tmp = out_dir / (MANIFEST_NAME + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(out_dir / MANIFEST_NAME)


def _make_one(exe: str, shape: VideoShape, index: int, out_dir: Path) -> dict:
    name = video_name(index)
    tmp = out_dir / f".{name}.partial"
    cmd = ffmpeg_command(exe, shape, index, tmp)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=FFMPEG_TIMEOUT_SECS)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"FFmpeg failed on {name}: {result.stderr.strip()[-500:]}")
    tmp.replace(out_dir / name)
    path = out_dir / name
    return {"name": name, "index": index, "sha256": sha256_file(path),
            "bytes": path.stat().st_size}


def make_videos(
    out_dir: Path,
    shape: VideoShape = SEED_SHAPE.videos,
    progress: Callable[[str], None] = print,
    jobs: int | None = None,
    exe: str | None = None,
) -> list[Path]:
    """Make (or reuse) `shape.count` videos in `out_dir`; returns their paths in order.

    `exe` overrides which FFmpeg binary runs (default: `benchmarks.videos.ffmpeg_exe()`).
    """
    validate_shape(shape)
    out_dir.mkdir(parents=True, exist_ok=True)
    exe = exe or ffmpeg_exe()
    version = ffmpeg_version(exe)
    reusable = _reusable(out_dir, shape)
    entries: dict[int, dict] = {}
    todo = []
    for index in range(shape.count):
        entry = reusable.get(video_name(index))
        if entry is not None:
            entries[index] = {**entry, "index": index}
        else:
            todo.append(index)
    progress(
        f"videos: {shape.count} wanted in {out_dir} ({len(entries)} reused, {len(todo)} to make, "
        f"{shape.duration_secs} s at {shape.fps} FPS, {shape.width}x{shape.height}, "
        f"seed {shape.seed}) with {version.split(' Copyright')[0]}"
    )
    step = max(1, len(todo) // 20)
    workers = jobs or max(1, min(4, os.cpu_count() or 1))
    pool = ThreadPoolExecutor(max_workers=workers)
    futures = [pool.submit(_make_one, exe, shape, i, out_dir) for i in todo]
    try:
        for done, future in enumerate(as_completed(futures), start=1):
            entry = future.result()
            entries[entry["index"]] = entry
            if done % step == 0 or done == len(todo):
                _write_manifest(out_dir, shape, version, [entries[i] for i in sorted(entries)])
                progress(f"videos: made {done}/{len(todo)}")
    except BaseException as stop:
        # Ctrl-C or a failed encode: stop at once, and keep every video already made for
        # the next run to reuse.
        pool.shutdown(wait=False, cancel_futures=True)
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is None:
                entry = future.result()
                entries[entry["index"]] = entry
        _write_manifest(out_dir, shape, version, [entries[i] for i in sorted(entries)])
        why = "interrupted" if isinstance(stop, KeyboardInterrupt) else "stopped"
        progress(f"videos: {why}; {len(entries)} of {shape.count} kept for the next run")
        raise
    pool.shutdown()
    _write_manifest(out_dir, shape, version, [entries[i] for i in range(shape.count)])
    return [out_dir / video_name(i) for i in range(shape.count)]


def register(subparsers: argparse._SubParsersAction) -> None:
    d = SEED_SHAPE.videos
    p = subparsers.add_parser(
        "videos",
        help="make synthetic videos with FFmpeg",
        description="Make deterministic, mutually distinct synthetic videos with FFmpeg "
        "(system ffmpeg, else the one imageio-ffmpeg ships). Valid files from an earlier "
        "run with the same settings are reused.",
    )
    p.add_argument("--out", type=Path, default=Path("videos"), help="output directory")
    p.add_argument("--count", type=int, default=d.count, help=f"videos (default {d.count})")
    p.add_argument("--duration", type=int, default=d.duration_secs,
                   help=f"seconds per video (default {d.duration_secs})")
    p.add_argument("--fps", type=int, default=d.fps, help=f"frames per second (default {d.fps})")
    p.add_argument("--width", type=int, default=d.width, help=f"pixels (default {d.width})")
    p.add_argument("--height", type=int, default=d.height, help=f"pixels (default {d.height})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"content seed (default {d.seed})")
    p.add_argument("--jobs", type=int, default=None, help="parallel FFmpeg processes")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    shape = replace(
        SEED_SHAPE.videos, count=args.count, duration_secs=args.duration, fps=args.fps,
        width=args.width, height=args.height, seed=args.seed,
    )
    try:
        paths = make_videos(args.out, shape, jobs=args.jobs)
    except (ValueError, RuntimeError) as exc:
        print(f"videos: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("videos: interrupted; rerun the same command to make the rest", file=sys.stderr)
        return 130
    print(f"videos: {len(paths)} ready in {args.out} (list: {args.out / MANIFEST_NAME})")
    return 0
