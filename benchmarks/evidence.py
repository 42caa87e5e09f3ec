"""Server-side evidence of a level, why it came out as it did: the frontend's prefix-cache share
and each request's worker (what and why: docs/benchmark-toolkit.md, "Server-side evidence")."""

from __future__ import annotations

import json
import re
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.aiperf_run import RAW_EXPORT, measured_records, parsed

# Each FrontendCounts field: its frontend counter. `cached_reports` counts the responses
# that reported a cached count: none means the share is unknown (n/a), not 0%.
COUNTERS = {"cached_tokens": "dynamo_frontend_cached_tokens_sum",
            "input_tokens": "dynamo_frontend_input_sequence_tokens_sum",
            "cached_reports": "dynamo_frontend_cached_tokens_count"}
# Body fields that make a Dynamo frontend report the worker on every response.
WORKER_ID_REQUEST_FIELDS: dict[str, Any] = {"nvext": {"extra_fields": ["worker_id"]}}
# Per level: which worker served each video's requests (kept when the raw export goes).
ATTRIBUTION_FILE = "worker_attribution.json"


@dataclass(frozen=True)
class FrontendCounts:
    cached_tokens: float = 0.0
    input_tokens: float = 0.0
    cached_reports: float = 0.0


def frontend_counts(text: str) -> FrontendCounts:
    """The counters we use from a /metrics page (summed over models); read with the
    standard library, so the smoke Job (no AIPerf, no Prometheus client) reads them too."""
    sums = dict.fromkeys(COUNTERS.values(), 0.0)
    for line in text.splitlines():
        sample = re.match(r"^([A-Za-z_:][\w:]*)(?:\{[^}]*\})?\s+(\S+)", line)
        if sample and sample.group(1) in sums:
            sums[sample.group(1)] += float(sample.group(2))
    return FrontendCounts(**{field: sums[counter] for field, counter in COUNTERS.items()})


def scrape_frontend(base_url: str) -> FrontendCounts | None:
    """The frontend's counters now; None where it serves no Dynamo metrics."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/metrics",  # noqa: S310
                                    timeout=10.0) as response:
            return frontend_counts(response.read().decode())
    except (OSError, ValueError):  # URLError is an OSError
        return None


def prefix_cache_hit_pct(before: FrontendCounts, after: FrontendCounts) -> float | None:
    """The share of a level's prompt tokens served from prefix caches, in percent; None
    when no response reported a cached count (the workers report nothing)."""
    prompt = after.input_tokens - before.input_tokens
    if prompt <= 0 or after.cached_reports <= before.cached_reports:
        return None
    return 100.0 * (after.cached_tokens - before.cached_tokens) / prompt


def worker_id_from_body(body: Any) -> int | None:
    """The worker id in one response body or stream chunk, the decode worker's: it holds the
    session (Dynamo 1.6.1's shape: docs/benchmark-toolkit.md, "Server-side evidence")."""
    nvext = body.get("nvext") if isinstance(body, Mapping) else None
    worker = nvext.get("worker_id") if isinstance(nvext, Mapping) else None
    if isinstance(worker, Mapping):
        worker = worker.get("decode_worker_id", worker.get("prefill_worker_id"))
    if isinstance(worker, str) and worker.isdecimal():
        worker = int(worker)
    return worker if isinstance(worker, int) and not isinstance(worker, bool) else None


def worker_of_record(record: Mapping[str, Any]) -> int | None:
    """The first worker id in one raw record's responses: SSE packets, else the body."""
    for response in record.get("responses") or []:
        texts = [packet.get("value") for packet in response.get("packets") or []]
        for text in [*texts, response.get("text")]:
            # Only the packets that name a worker are parsed (a raw export is large).
            if isinstance(text, str) and "worker_id" in text:
                if (worker := worker_id_from_body(parsed(text))) is not None:
                    return worker
    return None


@dataclass(frozen=True)
class Attribution:
    """Which worker served each request of one level, grouped by video."""

    workers_by_video: dict[str, list[int]]
    unattributed: int


def attribute_raw_export(path: Path) -> Attribution:
    """Per video (conversation id) of AIPerf's raw export, the worker of each measured request."""
    by_video: dict[str, list[int]] = defaultdict(list)
    unattributed = 0
    for record in measured_records(path):
        worker = worker_of_record(record)
        video = (record.get("metadata") or {}).get("conversation_id")
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
    distinct = [d for workers in workers_by_video.values() if (d := set(workers))]
    videos = len(distinct)
    return Stickiness(videos, sum(len(d) == 1 for d in distinct) / (videos or 1),
                      sum(len(d) for d in distinct) / (videos or 1), len(set().union(*distinct)))


def level_attribution(level_dir: Path) -> Attribution:
    """A chunk's attribution: from its `worker_attribution.json`, else from the raw export
    (then saved beside it, so the large raw export may go); FileNotFoundError: neither."""
    saved = level_dir / ATTRIBUTION_FILE
    if saved.is_file():
        return Attribution(**json.loads(saved.read_text()))
    raw = level_dir / RAW_EXPORT
    if not raw.is_file():
        raise FileNotFoundError(f"{raw} is missing: this level ran without AIPerf's raw "
                                "export, so the worker of each request is unknown (rerun the "
                                "level with --attribute-workers)")
    attribution = attribute_raw_export(raw)
    saved.write_text(json.dumps(asdict(attribution)) + "\n")
    return attribution


def worker_spread(*parts: Attribution) -> dict[str, Any]:
    """The routing evidence over attributions (a chunk's, or a level's chunks'): stickiness,
    and how many requests each worker got."""
    by_video = {v: w for part in parts for v, w in part.workers_by_video.items()}
    counts = Counter(w for workers in by_video.values() for w in workers)
    return {**asdict(stickiness(by_video)), "workers": sorted(counts),
            "requests_per_worker_min": min(counts.values(), default=0),
            "requests_per_worker_max": max(counts.values(), default=0),
            "unattributed": sum(part.unattributed for part in parts)}


def chunk_evidence(chunk_dir: Path, before: FrontendCounts | None,
                   after: FrontendCounts | None, attribute_workers: bool) -> dict[str, Any]:
    """A chunk's manifest `frontend` entry: its prefix-cache share and, attributing workers,
    its routing spread, after which the large raw export goes."""
    evidence: dict[str, Any] = {}
    if before and after:
        evidence["prefix_cache_hit_pct"] = prefix_cache_hit_pct(before, after)
    if attribute_workers:
        evidence["routing"] = worker_spread(level_attribution(chunk_dir))
        (chunk_dir / RAW_EXPORT).unlink(missing_ok=True)
    return evidence


def level_evidence(level_dir: Path, chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A level's evidence over its manifest chunks: the mean prefix-cache share and ceiling (chunks
    of equal videos send about equal prompt tokens), the routing over their saved attributions."""
    found = [chunk.get("frontend") or {} for chunk in chunks]
    evidence: dict[str, Any] = {}
    if any("prefix_cache_hit_pct" in entry for entry in found):
        for key, entries in (("prefix_cache_hit_pct", found),
                             ("prefix_cache_hit_ceiling_pct", chunks)):
            values = [v for entry in entries if (v := entry.get(key)) is not None]
            evidence[key] = sum(values) / len(values) if values else None
    if any("routing" in entry for entry in found):
        evidence["routing"] = worker_spread(
            *(level_attribution(level_dir / chunk["dir"]) for chunk in chunks))
    return evidence


def routing_problems(routing: Mapping[str, Any] | None, workers: int | None,
                     affinity: bool) -> list[str]:
    """Where routing evidence contradicts the setup: more worker ids than workers over the run
    (one replaced) or, under session affinity, a video served by more than one worker."""
    if not routing:
        return []
    problems = []
    if workers is not None and routing["workers_seen"] > workers:
        problems.append(f"{routing['workers_seen']} worker ids answered but the graph has "
                        f"{workers} workers: workers were replaced during the run (a "
                        "rollout?); rerun it once the graph is settled")
    if affinity and routing["videos"] and routing["share_single_worker"] < 1.0:
        moved = round((1.0 - routing["share_single_worker"]) * routing["videos"])
        problems.append(f"session affinity is on but {moved} of {routing['videos']} videos "
                        "were served by more than one worker: the frontend did not keep its "
                        "sessions (its affinity flags, or a restart during the level)")
    return problems


def evidence_line(evidence: Mapping[str, Any]) -> str:
    hit, routing = evidence.get("prefix_cache_hit_pct"), evidence.get("routing")
    parts = [] if hit is None else [f"{hit:.0f}% of prompt tokens from prefix caches"]
    if routing:
        parts.append(f"{routing['share_single_worker']:.0%} of videos on one worker, "
                     f"{routing['workers_seen']} workers served "
                     f"{routing['requests_per_worker_min']} to "
                     f"{routing['requests_per_worker_max']} requests each")
    return "; ".join(parts) or "no server-side evidence"
