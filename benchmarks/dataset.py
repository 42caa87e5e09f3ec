"""What the benchmark asks, as the sweep's AIPerf input: one JSON line per request, video first,
each chunk's videos fresh (the format and why: docs/benchmark-toolkit.md, "The dataset")."""

from __future__ import annotations

import base64
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.videos import load_manifest
from infra.names import video_name
from infra.run import MAX_QUESTIONS, Workload

QUESTIONS: tuple[str, ...] = (
    "Describe what happens in this video.",
    "What are the dominant colors in the video?",
    "Which objects move, and in which direction?",
    "How many distinct shapes can you see?",
    "Does the scene change over time? How?",
    "What is in the lower left corner of the frame?",
    "Describe the background of the video.",
    "Is there any text or numbers visible? What do they say?",
    "What happens at the very beginning of the video?",
    "What happens at the end of the video?",
    "Is the camera moving or static?",
    "Summarize the video in one sentence.",
    "What patterns repeat during the video?",
    "Estimate the speed of the moving object.",
    "Which part of the frame changes the most?",
    "Are there any sudden transitions or cuts?",
    "Describe the lighting and contrast of the scene.",
    "What would be a good title for this video?",
    "List three details that a viewer might miss.",
    "Is anything in the video symmetrical? Explain.",
)

# Plain, common English words: one token each in the tiny tokenizer.
STANDIN_WORDS: tuple[str, ...] = tuple(
    """
    red green blue yellow orange purple white black gray brown pink cyan
    circle square line dot stripe wave grid ring arc edge corner center
    left right top bottom middle near far above below inside outside
    moves turns slides spins rises falls grows shrinks fades glows shifts waits
    fast slow steady sudden smooth sharp soft bright dark light heavy thin
    frame scene shot clip view pixel color shape pattern motion speed time
    one two three four five six seven eight nine ten many few
    the a an and or but with from into over under across along behind
    box ball bar cube star arrow panel tile block strip field sky floor wall
    """.split()
)


def standin_text(video_index: int, tokens: int, seed: int = 0) -> str:
    """About `tokens` deterministic words for video `video_index`; the first name the video, so
    two stand-ins differ from their first token and share no cached prefix."""
    if tokens < 4:
        raise ValueError(f"a text stand-in needs at least 4 tokens (got {tokens})")
    rng = random.Random(f"standin:{seed}:{video_index}")
    head = ["video", str(video_index), "shows", ":"]
    return " ".join(head + [rng.choice(STANDIN_WORDS) for _ in range(tokens - len(head))])


def video_url(ref: str) -> str:
    """A URL as is; a local file as a data URL (AIPerf sends `messages` verbatim)."""
    if ref.startswith(("http://", "https://", "data:")):
        return ref
    path = Path(ref)
    if not path.is_file():
        raise ValueError(f"video {ref} does not exist: make the videos first, or give URLs")
    return "data:video/mp4;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


@dataclass(frozen=True)
class VideoSource:
    """Where video `i` comes from, exactly one of: a server (`base_url`, e.g. the cluster's),
    the `videos` command's folder, or a ~N-token text stand-in (a text-only mock model)."""

    base_url: str | None = None
    directory: Path | None = None
    standin_tokens: int | None = None

    def problems(self) -> list[str]:
        given = [self.base_url, self.directory, self.standin_tokens]
        checks = (
            (len(given) - given.count(None) != 1,
             "give one of --video-base-url, --videos or --text-standin-tokens"),
            (bool(self.base_url) and not self.base_url.startswith(("http://", "https://")),
             f"--video-base-url must start with http:// or https:// ({self.base_url})"),
            (self.directory is not None and not (load_manifest(self.directory) or {}).get(
                "videos"), f"--videos {self.directory}: no videos.json there; make the videos "
             f"first with `python -m benchmarks videos --out {self.directory}`"),
            (self.standin_tokens is not None and self.standin_tokens < 4,
             f"--text-standin-tokens must be at least 4 (got {self.standin_tokens})"),
        )
        return [problem for bad, problem in checks if bad]

    def count(self) -> int | None:
        """How many videos there are; None: as many as asked (a server's, the stand-ins)."""
        listed = (load_manifest(self.directory) or {}).get("videos") if self.directory else None
        return None if listed is None else len(listed)

    def seed(self) -> int | None:
        """The seed the folder's videos were made with (None: not a folder)."""
        return (load_manifest(self.directory) or {}).get("settings", {}).get(
            "seed") if self.directory else None

    def heads(self, videos: Sequence[int], seed: int) -> dict[int, str]:
        """Each video's reference (URL, data URL) or stand-in text, by index."""
        if self.standin_tokens is not None:
            return {i: standin_text(i, self.standin_tokens, seed) for i in videos}
        if self.base_url is not None:
            return {i: f"{self.base_url.rstrip('/')}/{video_name(i)}" for i in videos}
        return {i: video_url(str(self.directory / video_name(i))) for i in videos}

    def describe(self) -> dict[str, Any]:
        """What the manifest records of it (the server's address aside: each stack has its own)."""
        return {"kind": "text stand-in" if self.standin_tokens is not None else "video",
                "standin_tokens": self.standin_tokens}


def dataset_lines(heads: Mapping[int, str], workload: Workload, standin: bool = False,
                  pause_ms: float = 0) -> list[dict]:
    """AIPerf's lines for the videos `heads` names (pure): one session per video, each question
    a single user message after the video. `pause_ms`: up to this many ms (seeded, per video)
    before each question after a video's first (AIPerf's `delay`): the rehearsal's model of
    real workers' uneven request times (infra/calibration.py MOCK_PAUSE_MS)."""
    if not 1 <= workload.questions_per_video <= MAX_QUESTIONS:
        raise ValueError(f"--questions-per-video must be between 1 and {MAX_QUESTIONS} "
                         f"(got {workload.questions_per_video})")
    if pause_ms < 0:
        raise ValueError(f"the pause before a question must be >= 0 ms (got {pause_ms})")
    lines = []
    for i, head in heads.items():
        pauses = random.Random(f"pause:{workload.seed}:{i}")
        for q, question in enumerate(QUESTIONS[:workload.questions_per_video]):
            content = (f"{head}\n\n{question}" if standin else
                       [{"type": "video_url", "video_url": {"url": head}},
                        {"type": "text", "text": question}])
            lines.append({"session_id": f"video-{i:04d}",
                          "messages": [{"role": "user", "content": content}],
                          "output_length": workload.output_tokens,
                          **({"delay": round(pauses.uniform(0, pause_ms), 1)}
                             if pause_ms and q else {})})
    return lines
