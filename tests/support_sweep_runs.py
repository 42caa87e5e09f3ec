"""Two small real sweeps (real AIPerf, recording server on 127.0.0.1), run once per test
session and shared by tests/test_sweep.py and tests/test_report.py.

AIPerf takes several seconds to start per run (one per chunk), so the suite runs as few as
it can: session-affinity and round-robin, 3 videos x 3 questions, levels 1 (three chunks of
one video) and 2 (one chunk of two videos; the third fills no chunk and is not sent).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.dataset import build_dataset
from benchmarks.evidence import WORKER_ID_REQUEST_FIELDS
from benchmarks.sweep import SweepConfig, run_sweep
from benchmarks.tiny_model import build_tiny_model_dir
from tests.support_openai_server import RecordedRequest, RecordingOpenAIServer

MODEL = "test-model"
VIDEOS = 3
QUESTIONS = 3
LEVELS = (1, 2)
OUTPUT_TOKENS = 128
VIDEO_BASE_URL = "http://127.0.0.1:9/videos"
# Per-line body fields must reach the wire too (the dataset's `extra`).


@dataclass
class SweepRun:
    run_dir: Path
    said: list[str]
    requests: list[RecordedRequest]  # chat requests, in arrival order

    def level_requests(self, level_index: int) -> list[RecordedRequest]:
        """The requests of the `level_index`-th level (levels run in turn)."""
        start = sum(sent_videos(level) for level in LEVELS[:level_index]) * QUESTIONS
        return self.requests[start:start + sent_videos(LEVELS[level_index]) * QUESTIONS]


def sent_videos(level: int) -> int:
    """The videos a level sends: its whole chunks of `level` videos, in dataset order."""
    return VIDEOS // level * level


@dataclass
class SweepRuns:
    dataset: Path
    affinity: SweepRun
    round_robin: SweepRun
    extra: dict = field(default_factory=dict)


def _sweep(server: RecordingOpenAIServer, config: SweepConfig) -> SweepRun:
    server.clear()
    said: list[str] = []
    run_dir = run_sweep(config, say=said.append)
    return SweepRun(run_dir, said, server.chat_requests())


@functools.cache
def _run_once(base: Path) -> SweepRuns:
    base.mkdir(parents=True, exist_ok=True)
    dataset = base / "dataset.jsonl"
    refs = [f"{VIDEO_BASE_URL}/video_{i:04d}.mp4" for i in range(VIDEOS)]
    build_dataset(dataset, video_refs=refs, questions_per_video=QUESTIONS,
                  output_tokens=OUTPUT_TOKENS, video_source=VIDEO_BASE_URL)
    tokenizer = build_tiny_model_dir(base / "tokenizer")
    with RecordingOpenAIServer(models=[MODEL]) as server:
        common = dict(
            url=server.url, dataset=dataset, model=MODEL, concurrencies=LEVELS,
            output_tokens=OUTPUT_TOKENS, tokenizer=str(tokenizer),
            results_root=base / "results", run_id="test-run", heartbeat_secs=5,
        )
        affinity = _sweep(server, SweepConfig(
            profile="session-affinity",
            extra_body=WORKER_ID_REQUEST_FIELDS, notes=("recording server, not a model",),
            **common,
        ))
        round_robin = _sweep(server, SweepConfig(profile="round-robin", **common))
    return SweepRuns(dataset, affinity, round_robin)


@pytest.fixture(scope="session")
def sweep_runs(tmp_path_factory: pytest.TempPathFactory) -> SweepRuns:
    # Cached per process, so importing this fixture into two modules still runs it once.
    return _run_once(tmp_path_factory.getbasetemp() / "shared-sweep-runs")
