"""Where FFmpeg comes from: the system's if it is on PATH, else the imageio-ffmpeg wheel's.

The wheel (pinned in requirements.txt) ships a static ffmpeg binary, so making videos
needs no manual install (the tests read videos with it too, so they need no system one).
"""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache


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
