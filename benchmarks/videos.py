"""`videos`: synthetic videos made with FFmpeg, the same bytes for a seed, no frame shared between
two; a rerun reuses intact files (docs/benchmark-toolkit.md, `videos`)."""

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
from dataclasses import asdict, fields
from pathlib import Path

from infra.names import video_name
from infra.run import VIDEO_INDEX_BITS, Run, VideoShape

MANIFEST_NAME = "videos.json"


def ffmpeg_exe() -> str:
    """The system's FFmpeg, else the one the pinned imageio-ffmpeg wheel ships."""
    if system := shutil.which("ffmpeg"):
        return system
    try:
        import imageio_ffmpeg
    except ImportError as exc:
        raise RuntimeError(
            "FFmpeg not found: install it (apt-get install ffmpeg) or run scripts/setup.sh, "
            "which installs the imageio-ffmpeg wheel that ships one"
        ) from exc
    return imageio_ffmpeg.get_ffmpeg_exe()


def ffmpeg(exe: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """One FFmpeg run, quiet (no banner), its output captured."""
    return subprocess.run([exe, "-hide_banner", *args], capture_output=True, text=True,
                          timeout=timeout)


def validate_shape(shape: VideoShape) -> None:
    """One clear error per bad setting, before anything is made."""
    checks = [(shape.count < 1, f"--count must be at least 1 (got {shape.count})"),
              (shape.count > 2**VIDEO_INDEX_BITS,
               f"--count must be at most {2**VIDEO_INDEX_BITS} (got {shape.count})"),
              (shape.duration_secs < 1,
               f"--duration must be at least 1 second (got {shape.duration_secs})"),
              (not 1 <= shape.fps <= 60, f"--fps must be between 1 and 60 (got {shape.fps})")]
    checks += [(value < 64 or value % 2, f"{name} must be even and at least 64 (got {value})")
               for name, value in (("--width", shape.width), ("--height", shape.height))]
    if problems := [problem for bad, problem in checks if bad]:
        raise ValueError("; ".join(problems))


def filter_graph(shape: VideoShape, index: int) -> str:
    """The FFmpeg filter graph of video `index` (pure: same inputs, same graph)."""
    rng = random.Random(f"video:{shape.seed}:{index}")
    w, h, fps = shape.width, shape.height, shape.fps
    colors = ":".join(f"c{i}=0x{rng.randrange(0x1000000):06x}" for i in range(3))
    kind = rng.choice(("linear", "radial", "circular", "spiral"))
    speed = rng.uniform(0.005, 0.05)
    background = (f"gradients=s={w}x{h}:r={fps}:{colors}:n=3:type={kind}:"
                  f"speed={speed:.4f}:seed={rng.randrange(2**32)}")
    iw, ih = w // 4 // 2 * 2, h // 4 // 2 * 2
    inset = f"testsrc2=s={iw}x{ih}:r={fps},hue=h={rng.randrange(360)}:s={rng.uniform(0.5, 2):.2f}"
    vx, vy = rng.uniform(10, 60), rng.uniform(5, 40)
    x0, y0 = rng.randrange(w - iw), rng.randrange(h - ih)
    move = (f"overlay=x='mod({x0}+{vx:.1f}*t,{w - iw})':y='mod({y0}+{vy:.1f}*t,{h - ih})'"
            ":eval=frame:shortest=1")
    cell = min(max(4, h // 24), (w - 8) // VIDEO_INDEX_BITS)  # the strip fits, 4 px in
    bits = [f"drawbox=x={4 + b * cell}:y={h - cell - 4}:w={cell}:h={cell}:t=fill:"
            f"color={'white' if index >> (VIDEO_INDEX_BITS - 1 - b) & 1 else 'black'}"
            for b in range(VIDEO_INDEX_BITS)]
    return f"{background}[bg];{inset}[fg];[bg][fg]{move}," + ",".join(bits) + ",format=yuv420p"


def load_manifest(out_dir: Path) -> dict | None:
    try:
        return json.loads((out_dir / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _reusable(out_dir: Path, shape: VideoShape) -> dict[int, dict]:
    """Entries of an earlier run with the same settings (count aside) that `shape` wants,
    by index, their files intact."""
    manifest = load_manifest(out_dir) or {}
    if {**manifest.get("settings", {}), "count": 0} != {**asdict(shape), "count": 0}:
        return {}
    return {entry["index"]: entry for entry in manifest.get("videos", [])
            if entry["index"] < shape.count and (out_dir / entry["name"]).is_file()
            and _sha256(out_dir / entry["name"]) == entry["sha256"]}


def _make_one(exe: str, shape: VideoShape, index: int, out_dir: Path, made: dict) -> None:
    """Encode video `index` and list it in `made` at once, so a stop keeps it."""
    name = video_name(index)
    tmp = out_dir / f".{name}.partial"
    # MP4, H.264, the exact frame count.
    result = ffmpeg(exe, "-nostdin", "-loglevel", "error", "-y",
                    "-filter_complex", filter_graph(shape, index),
                    "-frames:v", str(shape.duration_secs * shape.fps), "-r", str(shape.fps),
                    "-c:v", "libx264", "-preset", "veryfast", "-threads", "1",
                    "-fflags", "+bitexact", "-flags:v", "+bitexact", "-map_metadata", "-1",
                    "-movflags", "+faststart", "-f", "mp4", str(tmp),
                    timeout=300)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"FFmpeg failed on {name}: {result.stderr.strip()[-500:]}")
    path = tmp.replace(out_dir / name)
    made[index] = {"name": name, "index": index, "sha256": _sha256(path),
                   "bytes": path.stat().st_size}


def make_videos(out_dir: Path, shape: VideoShape | None = None,
                progress: Callable[[str], None] = print, jobs: int | None = None,
                exe: str | None = None) -> list[Path]:
    """Make (or reuse) `shape.count` videos in `out_dir` with FFmpeg `exe` (default:
    `ffmpeg_exe()`); returns their paths in order."""
    shape = shape or VideoShape()
    validate_shape(shape)
    out_dir.mkdir(parents=True, exist_ok=True)
    exe = exe or ffmpeg_exe()
    # The first line of `ffmpeg -version` up to its copyright, e.g. 'ffmpeg version 5.1.9-0'.
    version = (ffmpeg(exe, "-version").stdout or "unknown").splitlines()[0].split(" Copyright")[0]
    entries = _reusable(out_dir, shape)
    todo = [i for i in range(shape.count) if i not in entries]
    progress(f"videos: {shape.count} wanted in {out_dir} ({len(entries)} reused, {len(todo)} "
             f"to make, {shape.duration_secs} s at {shape.fps} FPS, {shape.width}x{shape.height}, "
             f"seed {shape.seed}) with {version}")

    def save() -> None:
        manifest = {"settings": asdict(shape), "ffmpeg": version,
                    "videos": [entries[i] for i in sorted(entries)]}
        tmp = out_dir / (MANIFEST_NAME + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        tmp.replace(out_dir / MANIFEST_NAME)

    step = max(1, len(todo) // 20)
    pool = ThreadPoolExecutor(max_workers=jobs or max(1, min(4, os.cpu_count() or 1)))
    futures = [pool.submit(_make_one, exe, shape, i, out_dir, entries) for i in todo]
    try:
        for done, future in enumerate(as_completed(futures), start=1):
            future.result()
            if done % step == 0 or done == len(todo):
                save()
                progress(f"videos: made {done}/{len(todo)}")
    except BaseException as stop:
        # Ctrl-C or a failed encode: stop at once, and keep every video already made for
        # the next run to reuse.
        pool.shutdown(wait=False, cancel_futures=True)
        save()
        why = "interrupted" if isinstance(stop, KeyboardInterrupt) else "stopped"
        progress(f"videos: {why}; {len(entries)} of {shape.count} kept for the next run")
        raise
    pool.shutdown()
    save()
    return [out_dir / video_name(i) for i in range(shape.count)]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("videos", help="make synthetic videos with FFmpeg",
                              description=__doc__)
    p.add_argument("--out", type=Path, default=Path("videos"), help="output directory")
    for flag, field, what in (("--count", "count", "videos"),
                              ("--duration", "duration_secs", "seconds per video"),
                              ("--fps", "fps", "frames per second"), ("--width", "width", "pixels"),
                              ("--height", "height", "pixels"), ("--seed", "seed", "content seed")):
        default = getattr(VideoShape(), field)
        p.add_argument(flag, dest=field, type=int, default=default,
                       help=f"{what} (default {default})")
    p.add_argument("--jobs", type=int, default=None, help="parallel FFmpeg processes")
    p.add_argument("--run", type=lambda text: Run.from_output(json.loads(text)),
                   help="a cluster run (JSON): as many videos as its sweep may take, and one for "
                   "its smoke test, made with its seed")
    p.set_defaults(func=_run, errors=ValueError)


def _run(args: argparse.Namespace) -> int:
    if args.run is not None:
        args.count = args.run.workload.videos_needed(len(args.run.frontends)) + 1
        args.seed = args.run.workload.seed
    shape = VideoShape(**{field.name: getattr(args, field.name) for field in fields(VideoShape)})
    try:
        paths = make_videos(args.out, shape, jobs=args.jobs)
    except KeyboardInterrupt:
        print("videos: interrupted; rerun the same command to make the rest", file=sys.stderr)
        return 130
    except RuntimeError as exc:  # FFmpeg failed, or is missing
        print(f"videos: error: {exc}", file=sys.stderr)
        return 1
    print(f"videos: {len(paths)} ready in {args.out} (list: {args.out / MANIFEST_NAME})")
    return 0
