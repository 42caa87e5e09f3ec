"""Settings of the post-deploy benchmark (smoke test and sweep), read and checked up front.

Why a module of its own: the Pulumi program, the `collect` command and the tests read the
same keys and defaults; the benchmark numbers default to the seed's shape
(`infra.benchmark_shape.SEED_SHAPE`), never restated here. Every bad value is
reported through `infra.settings`' reader, naming the config key and the fix, before any
resource exists.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infra.benchmark_names import max_run_id_len
from infra.benchmark_shape import SEED_SHAPE
from infra.rules import IMAGE, RUN_ID, RUN_ID_MAX_LEN, levels_problems

if TYPE_CHECKING:  # settings imports this module: the reader is only a type here
    from infra.settings import ConfigReader

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


def _concurrencies(r: ConfigReader) -> tuple[int, ...]:
    key = "benchmarkConcurrencies"
    text = r.string(key)
    fix = (f"; set the levels one by one, in order: `pulumi config set --path '{key}[0]' 1`, "
           f"then `--path '{key}[1]' 4`, ... (or list them under {key} in Pulumi.<stack>.yaml)")
    try:
        value = json.loads(text) if text else None
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        r.problem(key, f"'{text}' is not a list of whole numbers{fix}")
        return BenchmarkSettings().concurrencies
    for problem in levels_problems(value):
        r.problem(key, f"{problem}{fix}")
    return tuple(value)


def read_benchmark_settings(r: ConfigReader, profile: str) -> BenchmarkSettings:
    """Typed benchmark settings; each bad value is recorded on `r` with its key and fix."""
    run_id = r.string("benchmarkRunId")
    longest = max(1, min(RUN_ID_MAX_LEN, max_run_id_len(profile)))
    if not RUN_ID.match(run_id) or len(run_id) > longest:
        r.problem(
            "benchmarkRunId",
            f"'{run_id}' is not a run id for stack '{profile}'; use lowercase letters, "
            f"digits and '-', at most {longest} characters (it names the Jobs and the "
            "results folder), e.g. `pulumi config set benchmarkRunId run-2`",
        )
    image = r.string("benchmarkImage")
    if not IMAGE.match(image) or image.endswith(":latest"):
        r.problem(
            "benchmarkImage",
            f"'{image}' is not a pinned image; write registry/repository:tag or "
            f"@sha256:<digest>, e.g. {DEFAULT_BENCHMARK_IMAGE} (or your prebuilt image with "
            "the client installed)",
        )
    pip_index = r.string("benchmarkPipIndexUrl")
    if pip_index and not re.match(r"^https?://[^\s/]+", pip_index):
        r.problem("benchmarkPipIndexUrl", f"'{pip_index}' is not an http(s) URL; give your "
                  "package mirror's simple index, e.g. https://pypi.example.com/simple")
    return BenchmarkSettings(
        smoke=r.boolean("benchmarkSmoke"),
        sweep=r.boolean("benchmarkSweep"),
        wait_for_sweep=r.boolean("benchmarkWaitForSweep"),
        run_id=run_id,
        concurrencies=_concurrencies(r),
        videos=r.integer("benchmarkVideos", 1, MAX_VIDEOS, " videos"),
        questions_per_video=r.integer("benchmarkQuestionsPerVideo", 1, MAX_QUESTIONS,
                                      " questions"),
        image=image,
        smoke_timeout_secs=r.seconds("benchmarkSmokeTimeoutSecs"),
        sweep_timeout_secs=r.seconds("benchmarkSweepTimeoutSecs"),
        video_server_timeout_secs=r.seconds("benchmarkVideoServerTimeoutSecs"),
        pip_index_url=pip_index,
    )
