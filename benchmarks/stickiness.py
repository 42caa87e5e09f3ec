"""How sticky routing was: which worker served each video's questions.

A Dynamo frontend adds the serving worker's id to every response when the request body
carries `WORKER_ID_REQUEST_FIELDS`. AIPerf's raw export (`--export-level raw`) keeps the
responses, and each record names its conversation, which is the dataset's per-video
session id. From that: the share of videos whose questions all went to one worker (1.0
under session affinity) and how many workers a video touched on average (close to the
fleet size under round robin with 20 questions and 8 workers). The sweep records it per
level in its manifest (`levels.<c>.routing`, see `worker_spread`), where the report reads it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.aiperf_command import RAW_EXPORT

# Body fields that make a Dynamo frontend report the worker on every response.
WORKER_ID_REQUEST_FIELDS: dict[str, Any] = {"nvext": {"extra_fields": ["worker_id"]}}
# Per level: which worker served each video's requests (kept when the raw export goes).
ATTRIBUTION_FILE = "worker_attribution.json"


def worker_id_from_body(body: Mapping[str, Any]) -> int | None:
    """The worker id in one response body or stream chunk, if the frontend put one there.

    Dynamo 1.6.1 reports `{"prefill_worker_id": N, "decode_worker_id": N}` (the same N
    for an aggregated worker); the decode worker is the one that holds the session.
    """
    nvext = body.get("nvext")
    if not isinstance(nvext, Mapping):
        return None
    worker = nvext.get("worker_id")
    if isinstance(worker, Mapping):
        worker = worker.get("decode_worker_id", worker.get("prefill_worker_id"))
    if isinstance(worker, bool) or not isinstance(worker, int | str):
        return None
    try:
        return int(worker)
    except ValueError:
        return None


def _payloads(record: Mapping[str, Any]) -> Iterable[str]:
    """Response texts of one raw record: SSE packets when streaming, else the body."""
    for response in record.get("responses") or []:
        for packet in response.get("packets") or []:
            value = packet.get("value")
            if isinstance(value, str):
                yield value
        text = response.get("text")
        if isinstance(text, str):
            yield text


def worker_of_record(record: Mapping[str, Any]) -> int | None:
    for payload in _payloads(record):
        if "worker_id" not in payload:
            continue
        try:
            body = json.loads(payload)
        except ValueError:
            continue
        if isinstance(body, Mapping) and (worker := worker_id_from_body(body)) is not None:
            return worker
    return None


@dataclass(frozen=True)
class Attribution:
    """Which worker served each request of one level, grouped by video."""

    workers_by_video: dict[str, list[int]]
    unattributed: int

    @property
    def requests(self) -> int:
        return sum(len(w) for w in self.workers_by_video.values()) + self.unattributed


def attribute_raw_export(path: Path) -> Attribution:
    """Read AIPerf's raw export: per video (conversation id), the worker of each request.

    Only profiling-phase records count (warm-up requests are not part of the level).
    """
    by_video: dict[str, list[int]] = defaultdict(list)
    unattributed = 0
    with path.open() as lines:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            meta = record.get("metadata") or {}
            if meta.get("benchmark_phase", "profiling") != "profiling":
                continue
            worker = worker_of_record(record)
            video = meta.get("conversation_id")
            if worker is None or video is None:
                unattributed += 1
            else:
                by_video[str(video)].append(worker)
    return Attribution(dict(by_video), unattributed)


@dataclass(frozen=True)
class Stickiness:
    videos: int
    share_single_worker: float
    mean_workers_per_video: float
    workers_seen: int


def stickiness(workers_by_video: Mapping[str, Iterable[int]]) -> Stickiness:
    """Share of videos served by a single worker, mean distinct workers per video."""
    distinct = [set(workers) for workers in workers_by_video.values()]
    distinct = [d for d in distinct if d]
    if not distinct:
        return Stickiness(0, 0.0, 0.0, 0)
    return Stickiness(
        videos=len(distinct),
        share_single_worker=sum(len(d) == 1 for d in distinct) / len(distinct),
        mean_workers_per_video=sum(len(d) for d in distinct) / len(distinct),
        workers_seen=len(set().union(*distinct)),
    )


def level_attribution(level_dir: Path) -> Attribution:
    """A level's attribution: from its `worker_attribution.json`, else from the raw export
    (then saved beside it, so the large raw export may be deleted afterwards).

    Raises FileNotFoundError naming the level when neither exists (the sweep must run
    AIPerf with `--export-level raw` and the worker-id body fields).
    """
    saved = level_dir / ATTRIBUTION_FILE
    if saved.is_file():
        data = json.loads(saved.read_text())
        return Attribution(data["workers_by_video"], data["unattributed"])
    raw = level_dir / RAW_EXPORT
    if not raw.is_file():
        raise FileNotFoundError(
            f"{raw} is missing: this level ran without AIPerf's raw export, so the worker of "
            "each request is unknown (run it with --export-level raw)"
        )
    attribution = attribute_raw_export(raw)
    saved.write_text(json.dumps(asdict(attribution)) + "\n")
    return attribution


def worker_spread(attribution: Attribution) -> dict[str, Any]:
    """A level's routing evidence: stickiness, and how many requests each worker got."""
    counts = Counter(w for workers in attribution.workers_by_video.values() for w in workers)
    return {**asdict(stickiness(attribution.workers_by_video)),
            "requests_per_worker_min": min(counts.values(), default=0),
            "requests_per_worker_max": max(counts.values(), default=0),
            "unattributed": attribution.unattributed}
