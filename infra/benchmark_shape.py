"""The shape of the seed's benchmark: the one place its numbers live.

The CLI defaults, the in-cluster sweep settings (Pulumi.yaml) and the rehearsal's
scaled-down defaults all read from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class VideoShape:
    """Synthetic videos made with FFmpeg before the measured sweep."""

    count: int = 200
    duration_secs: int = 30
    fps: int = 2
    width: int = 640
    height: int = 360
    seed: int = 0


@dataclass(frozen=True)
class SweepShape:
    """What every concurrency level sends."""

    questions_per_video: int = 20
    output_tokens: int = 128
    concurrencies: tuple[int, ...] = (1, 2, 4, 8, 16)
    # The seed sends no warm-up. Where one is wanted, it asks about videos outside the
    # measured set: a measured video's questions warmed under another session would be
    # cached on a worker that video's measured session is not bound to.
    warmup_videos: int = 0
    random_seed: int = 0
    videos: VideoShape = field(default_factory=VideoShape)

    @property
    def requests_per_level(self) -> int:
        return self.videos.count * self.questions_per_video


SEED_SHAPE = SweepShape()
