"""What the benchmark asks, as the sweep's AIPerf input: one JSON line per request, video first
(the format and why: docs/benchmark-toolkit.md, "The dataset" and "AIPerf's command")."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.videos import load_manifest
from infra.names import SEED_SHAPE, video_name

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

MODE_VIDEO = "video"
MODE_TEXT_STANDIN = "text-standin"
DATASET_FILE = "dataset.jsonl"


def standin_text(video_index: int, tokens: int, seed: int = 0) -> str:
    """About `tokens` deterministic words for video `video_index`; the first name the video, so
    two stand-ins differ from their first token and share no cached prefix."""
    if tokens < 4:
        raise ValueError(f"a text stand-in needs at least 4 tokens (got {tokens})")
    rng = random.Random(f"standin:{seed}:{video_index}")
    head = ["video", str(video_index), "shows", ":"]
    return " ".join(head + [rng.choice(STANDIN_WORDS) for _ in range(tokens - len(head))])


@dataclass(frozen=True)
class DatasetShape:
    """How each video becomes requests: the lines are made of it, the sidecar records it."""

    questions_per_video: int = SEED_SHAPE.questions_per_video
    output_tokens: int = SEED_SHAPE.output_tokens
    seed: int = SEED_SHAPE.random_seed
    text_standin_tokens: int | None = None
    # Up to this many ms (seeded, per video) before each question after a video's first
    # (AIPerf's per-line `delay`): the rehearsal's model of real workers' uneven request
    # times (infra/calibration.py MOCK_PAUSE_MS). 0 on the cluster, as the seed.
    pause_ms: float = 0

    def __post_init__(self) -> None:
        if not 1 <= self.questions_per_video <= len(QUESTIONS):
            raise ValueError(f"--questions-per-video must be between 1 and {len(QUESTIONS)} "
                             f"(got {self.questions_per_video})")
        if self.output_tokens < 1:
            raise ValueError(f"--output-tokens must be at least 1 (got {self.output_tokens})")
        if self.pause_ms < 0:
            raise ValueError(f"the pause before a question must be >= 0 ms (got {self.pause_ms})")


@dataclass(frozen=True, kw_only=True)
class DatasetInfo(DatasetShape):
    """What a dataset file holds (written beside it as `<name>.meta.json`)."""

    path: str
    mode: str
    videos: int
    requests: int
    video_source: str | None = None
    video_settings: dict | None = None


def meta_path(dataset: Path) -> Path:
    return dataset.with_name(dataset.stem + ".meta.json")


def load_dataset_info(dataset: Path) -> DatasetInfo | None:
    """The sidecar of a dataset made by `build_dataset`, or None for a foreign file."""
    try:
        return DatasetInfo(**json.loads(meta_path(dataset).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def video_url(ref: str) -> str:
    """A URL as is; a local file as a data URL (AIPerf sends `messages` verbatim)."""
    if ref.startswith(("http://", "https://", "data:")):
        return ref
    path = Path(ref)
    if not path.is_file():
        raise ValueError(f"video {ref} does not exist: make the videos first, or give URLs")
    return "data:video/mp4;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def video_references(videos_dir: Path | None = None, base_url: str | None = None,
                     count: int | None = None) -> list[str]:
    """`build_dataset`'s videos in index order: those `videos_dir` lists (under `base_url` if
    given), else `count` of the `videos` command's names under `base_url`, for a server's."""
    if videos_dir is not None:
        listed = (load_manifest(videos_dir) or {}).get("videos")
        if not listed:
            raise ValueError(
                f"--videos {videos_dir}: no videos.json there; make the videos first with "
                f"`python -m benchmarks videos --out {videos_dir}`"
            )
        if count is not None and count > len(listed):
            raise ValueError(f"{videos_dir} holds only {len(listed)} videos, {count} wanted: "
                             "make more with `videos --count`")
        names = [entry["name"] for entry in listed][:count]
    elif base_url is not None and count is not None:
        names = [video_name(i) for i in range(count)]
    else:
        raise ValueError("give --videos DIR, or --video-base-url URL with --video-count N")
    if base_url is not None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"--video-base-url must start with http:// or https:// ({base_url})")
        return [f"{base_url.rstrip('/')}/{name}" for name in names]
    return [str((videos_dir / name).resolve()) for name in names]


def dataset_lines(*, video_refs: Sequence[str] | None = None, video_count: int | None = None,
                  **fields: Any) -> list[dict]:
    """The dataset as data (pure), of `DatasetShape(**fields)`. Exactly one mode:
    `video_refs`, or `text_standin_tokens` with `video_count` (how many stand-in videos)."""
    shape = DatasetShape(**fields)
    standin = shape.text_standin_tokens is not None
    if standin:
        if video_refs:
            raise ValueError("a text stand-in dataset takes no videos: drop "
                             "--videos/--video-base-url")
        if not video_count or video_count < 1:
            raise ValueError("--video-count must be at least 1 with --text-standin-tokens")
        heads = [standin_text(i, shape.text_standin_tokens, shape.seed)
                 for i in range(video_count)]
    elif video_refs:
        heads = [video_url(ref) for ref in video_refs]
    else:
        raise ValueError("no videos: give video references, or a text stand-in size")
    lines = []
    for i, head in enumerate(heads):
        pauses = random.Random(f"pause:{shape.seed}:{i}")
        for q, question in enumerate(QUESTIONS[:shape.questions_per_video]):
            content = (f"{head}\n\n{question}" if standin else
                       [{"type": "video_url", "video_url": {"url": head}},
                        {"type": "text", "text": question}])
            # A single user message (no history), in its video's session.
            lines.append({"session_id": f"video-{i:04d}",
                          "messages": [{"role": "user", "content": content}],
                          "output_length": shape.output_tokens,
                          **({"delay": round(pauses.uniform(0, shape.pause_ms), 1)}
                             if shape.pause_ms and q else {})})
    return lines


def build_dataset(out: Path, *, video_refs: Sequence[str] | None = None,
                  video_count: int | None = None, video_settings: dict | None = None,
                  video_source: str | None = None, **fields: Any) -> DatasetInfo:
    """Write the dataset (`dataset_lines`' arguments, modes and all) to `out` and its
    sidecar; returns what it holds."""
    shape = DatasetShape(**fields)
    lines = dataset_lines(video_refs=video_refs, video_count=video_count, **asdict(shape))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    tmp.write_text("".join(json.dumps(line) + "\n" for line in lines))
    tmp.replace(out)
    info = DatasetInfo(
        **asdict(shape), path=str(out.resolve()), videos=len(lines) // shape.questions_per_video,
        mode=MODE_VIDEO if shape.text_standin_tokens is None else MODE_TEXT_STANDIN,
        requests=len(lines), video_source=video_source, video_settings=video_settings)
    meta_path(out).write_text(json.dumps(asdict(info), indent=2) + "\n")
    return info
