"""Settings of the post-deploy benchmark (smoke test and sweep), read and checked up front.

Its keys are read and checked with the stack's (`infra.settings`); the numbers default to
the seed's shape (`infra.names.SEED_SHAPE`), never restated here.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.names import SEED_SHAPE

# A stock, pinned Python image; the Jobs install the pinned client into it at start.
DEFAULT_BENCHMARK_IMAGE = "docker.io/library/python:3.11.14-slim-bookworm"

MAX_VIDEOS = 10_000
MAX_QUESTIONS = 1000


@dataclass(frozen=True)
class BenchmarkSettings:
    """What runs after the graph is Ready, and for how long it may take."""

    smoke: bool = True
    sweep: bool = True
    wait_for_sweep: bool = True
    run_id: str = "run-1"
    concurrencies: tuple[int, ...] = SEED_SHAPE.concurrencies
    videos: int = SEED_SHAPE.videos.count
    questions_per_video: int = SEED_SHAPE.questions_per_video
    image: str = DEFAULT_BENCHMARK_IMAGE
    smoke_timeout_secs: int = 1800
    sweep_timeout_secs: int = 12 * 3600
    video_server_timeout_secs: int = 1800
    # A package index the pods install from (PIP_INDEX_URL), for clusters behind a mirror.
    pip_index_url: str = ""

    @property
    def requests_per_level(self) -> int:
        return self.videos * self.questions_per_video

    @property
    def any_enabled(self) -> bool:
        return self.smoke or self.sweep
