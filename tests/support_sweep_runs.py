"""One small real paired sweep (real AIPerf, a recording server per profile on 127.0.0.1), run
once per test session and shared by tests/test_sweep.py and tests/test_report.py.

AIPerf takes several seconds to start per run (one per chunk), so the suite runs as few as
it can: round-robin and session-affinity interleaved, at most 3 videos x 3 questions a level,
levels 1 (three blocks of one video each) and 2 (one block of two videos; a third fills none).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.dataset import VideoSource
from benchmarks.evidence import WORKER_ID_REQUEST_FIELDS
from benchmarks.sweep import SweepConfig, Target, run_sweep
from benchmarks.tiny_model import build_tiny_model_dir
from infra.run import Workload
from tests.support_openai_server import RecordedRequest, RecordingOpenAIServer

MODEL = "test-model"
VIDEOS = 3
QUESTIONS = 3
LEVELS = (1, 2)
OUTPUT_TOKENS = 128
VIDEO_BASE_URL = "http://127.0.0.1:9/videos"
WORKLOAD = Workload(concurrencies=LEVELS, videos=VIDEOS, questions_per_video=QUESTIONS,
                    output_tokens=OUTPUT_TOKENS)


@dataclass
class SweepRun:
    run_dir: Path  # the profile's folder of the run
    said: list[str]  # the whole run's lines
    requests: list[RecordedRequest]  # chat requests, in arrival order

    def level_requests(self, level_index: int) -> list[RecordedRequest]:
        """The requests of the `level_index`-th level (levels run in turn)."""
        start = sum(sent_videos(level) for level in LEVELS[:level_index]) * QUESTIONS
        return self.requests[start:start + sent_videos(LEVELS[level_index]) * QUESTIONS]


def sent_videos(level: int) -> int:
    """The videos a profile sends at a level: its whole blocks of `level` videos."""
    return VIDEOS // level * level


@dataclass
class SweepRuns:
    config: SweepConfig  # as run (its URLs now dead)
    round_robin: SweepRun
    affinity: SweepRun

    @property
    def root(self) -> Path:
        return self.round_robin.run_dir.parent


def paired_config(urls: tuple[str, str], base: Path, **more: object) -> SweepConfig:
    """Round robin (baseline) and affinity at `urls`, the shared run's other settings."""
    return SweepConfig(
        targets=(Target("round-robin", urls[0]), Target("session-affinity", urls[1])),
        source=VideoSource(base_url=VIDEO_BASE_URL), workload=WORKLOAD, model=MODEL,
        tokenizer=str(build_tiny_model_dir(base / "tokenizer")), run_dir=base / "test-run",
        extra_body=WORKER_ID_REQUEST_FIELDS, notes=("recording servers, not a model",),
        heartbeat_secs=5, **more)


@functools.cache
def _run_once(base: Path) -> SweepRuns:
    base.mkdir(parents=True, exist_ok=True)
    with RecordingOpenAIServer(models=[MODEL]) as rr, RecordingOpenAIServer(
            models=[MODEL]) as sa:
        config = paired_config((rr.url, sa.url), base)
        said: list[str] = []
        run_dir = run_sweep(config, say=said.append)
        return SweepRuns(config, *(SweepRun(run_dir / profile, said, server.chat_requests())
                                   for profile, server in (("round-robin", rr),
                                                           ("session-affinity", sa))))


@pytest.fixture(scope="session")
def sweep_runs(tmp_path_factory: pytest.TempPathFactory) -> SweepRuns:
    # Cached per process, so importing this fixture into two modules still runs it once.
    return _run_once(tmp_path_factory.getbasetemp() / "shared-sweep-runs")
