"""`sweep`: AIPerf at each concurrency level in blocks (one chunk of fresh videos per profile, the
order alternating) until the level's req/s, or with several profiles each gain, is known; rerun
to resume (why: docs/benchmark-toolkit.md, "Blocks, cold chunks and the stop rule")."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil
from scipy.stats import t as student_t

from benchmarks.aiperf_run import (
    RECORDS_EXPORT,
    SUMMARY_EXPORT,
    ExportError,
    LevelSpec,
    LevelSummary,
    aiperf_command,
    aiperf_env,
    failure_cause,
    length_check,
    pooled_percentiles,
    progress_counts,
    summarize_file,
)
from benchmarks.dataset import VideoSource, dataset_lines
from benchmarks.evidence import (
    WORKER_ID_REQUEST_FIELDS,
    chunk_evidence,
    evidence_line,
    level_evidence,
    routing_problems,
    scrape_frontend,
)
from benchmarks.tiny_model import build_tiny_model_dir, is_tiny_model_dir
from infra.names import RUN_ID, RUN_ID_MAX_LEN, SERVED_MODEL_NAME, SESSION_HEADER, InputError
from infra.routing import PROFILES
from infra.run import CACHE_DIR, MIN_BLOCKS, T_QUANTILE, Run, Workload, add_options, option

# Intervals come from the spread between replicate chunks (each its own AIPerf run): it sees
# what moves a whole run (round robin in step with the workers, a noisy node); a bootstrap
# over one run's videos does not. A gain comes from the blocks: the two chunks of a block ran
# back to back on the same workers, so drift between blocks cancels in their ratio.
INTERVAL_METHOD = ("Student t over the level's blocks (a gain: over its blocks' log ratios), "
                   "at 98.5% for the stop rule's optional stopping, so that 95% hold")


@dataclass(frozen=True)
class Interval:
    """A figure's mean over a level's replicates and its 95% interval."""

    mean: float
    low: float
    high: float
    replicates: int

    @property
    def relative_half_width(self) -> float:
        return (self.high - self.low) / 2 / abs(self.mean) if self.mean else math.inf


def replicate_interval(values: Sequence[float]) -> Interval | None:
    """The mean of `values` (one per replicate) with its 95% interval (`T_QUANTILE`); None
    with fewer than two replicates, which have no spread."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = student_t.ppf(T_QUANTILE, len(values) - 1) * statistics.stdev(values) / math.sqrt(
        len(values))
    return Interval(mean, mean - half, mean + half, len(values))


def paired_gain(base: Sequence[float], other: Sequence[float]) -> Interval | None:
    """The gain of `other` over `base` in %, from blocks (each the ratio of its two chunks'
    req/s): the geometric mean ratio and its 95% interval over the blocks."""
    logs = replicate_interval([math.log(b / a) for a, b in zip(base, other, strict=True)])
    if logs is None:
        return None
    pct = [(math.exp(x) - 1) * 100 for x in (logs.mean, logs.low, logs.high)]
    return Interval(*pct, logs.replicates)


MANIFEST_NAME = "manifest.json"
LEVEL_LOG = "aiperf_console.log"
CHUNK_DATASET = "chunk_dataset.jsonl"
STATUS_COMPLETE, STATUS_RUNNING, STATUS_FAILED = "complete", "running", "failed"
# Deployment facts that say how many workers serve the graph (the cluster's, the
# rehearsal's): a run where more worker ids answer fails (evidence.routing_problems).
WORKER_COUNT_FACTS = ("replicas", "mock_workers")
# A cold chunk's prefix-cache share above its ceiling by more than this fails the chunk (the
# chat template's first tokens may be shared between videos).
CEILING_MARGIN_PCT = 1.0
# Responses that name no worker: more than this share of a chunk fails it.
UNATTRIBUTED_MAX = 0.01
# Other processes' share of the machine's CPUs above which a level is marked busy.
BUSY_PCT = 25.0
BAD_SETTINGS = "bad sweep settings"
# What a refused resume says, in words that fit the CLI, the rehearsal and the cluster.
NEW_RUN_HINT = "use a new --run-id (on the cluster: benchmarkRunId) for these settings"
Say = Callable[[str], None]


def log_tail(path: Path, lines: int = 15) -> str:
    """The last `lines` non-blank lines of a log: what an error shows of a failed process
    (AIPerf here, the rehearsal's servers)."""
    text = []
    with suppress(OSError):
        text = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return "\n".join(text[-lines:]) or "(no output)"


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while inside, so `finally` blocks stop what was started
    (a Job being stopped, the rehearsal's parent going)."""
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class SweepError(RuntimeError):
    """A sweep that cannot start or cannot go on; the message says what to do."""


class LevelFailed(SweepError):
    """A level failed (or timed out): the run resumes from it, finished blocks kept."""


@dataclass(frozen=True)
class Target:
    """One profile of a run: its frontend and whether it sends a session header (None: the
    profile's, `PROFILES`)."""

    profile: str
    url: str
    affinity: bool | None = None


@dataclass(frozen=True)
class SweepConfig:
    """One sweep of one or more profiles (the first the baseline), each `option` field also its
    CLI flag; `tokenizer` None: a tiny local one built in the run directory."""

    targets: tuple[Target, ...]
    source: VideoSource
    workload: Workload = Workload()
    model: str = option("--model", SERVED_MODEL_NAME, help=f"default {SERVED_MODEL_NAME}")
    tokenizer: str | None = option(
        "--tokenizer", None, help="tokenizer name or local directory (default: a tiny local one)")
    results_root: Path = option("--results-root", Path("results"), type=Path)
    run_id: str | None = option("--run-id", None, help="default: UTC time; reuse it to resume")
    run_dir: Path | None = option(
        "--out", None, type=Path, help="run directory (default RESULTS_ROOT/<the profiles "
        "joined by -vs->/RUN_ID; each profile's results in a folder of its own)")
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # merged into every body
    # The rehearsal's pause before each question after a video's first (dataset_lines).
    pause_ms: float = 0
    request_timeout_secs: float = option("--request-timeout", 600.0, type=float,
                                         help="seconds per request")
    level_timeout_secs: float = option("--level-timeout", 8 * 3600.0, type=float,
                                       help="seconds per level (all its blocks)")
    heartbeat_secs: float = 60.0
    notes: tuple[str, ...] = option("--note", (), action="append",
                                    help="free text for the report")
    deployment: Mapping[str, Any] = option(
        "--deployment", {}, action="append", metavar="KEY=VALUE",
        type=lambda fact: tuple(fact.partition("=")[::2]),
        help="what the run measures (image, topology...): recorded, and a resume against "
        "other values is refused")
    # Ask the frontend which worker served each request (AIPerf's raw export), and record
    # per chunk and level how sticky routing was and how requests spread over the workers.
    attribute_workers: bool = option(
        "--attribute-workers", False, action="store_true",
        help="record which worker served each request (the frontend's nvext worker_id) and "
        "per chunk and level the routing's stickiness and spread")
    accept_fewer_workers: bool = option(
        "--accept-fewer-workers", False, action="store_true",
        help="keep a round-robin level that reached fewer workers than the graph has (recorded)")
    set_aside: bool = option(
        "--set-aside", False, action="store_true",
        help="a run directory holding a run of other settings or another deployment is renamed "
        "RUN_ID-<its start> and a new run starts (the cluster's sweep: a new graph is a new "
        "deployment)")


def resolve_affinity(target: Target) -> bool:
    if target.affinity is not None:
        return target.affinity
    if target.profile in PROFILES:
        return PROFILES[target.profile].affinity
    raise InputError(BAD_SETTINGS, [
        f"profile {target.profile!r} is not one of {sorted(PROFILES)}: say whether it sends "
        f"{SESSION_HEADER} with --session-affinity or --no-session-affinity"])


def resolve_run_dir(config: SweepConfig) -> Path:
    if config.run_dir is not None:
        return config.run_dir
    run_id = config.run_id or datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return config.results_root / "-vs-".join(t.profile for t in config.targets) / run_id


def config_problems(config: SweepConfig) -> list[str]:
    """Every bad setting, each naming the option and the fix (checked before anything runs)."""
    c, profiles = config, [t.profile for t in config.targets]
    checks = (
        (not c.targets, "give each profile's frontend: --url URL and --profile NAME"),
        *((not re.match(r"^https?://[^/\s]+", t.url),
           f"--url must look like http://HOST:PORT (got {t.url!r})") for t in c.targets),
        *((not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", p),
           f"--profile {p!r}: use letters, digits, '.', '_' or '-'") for p in profiles),
        (len(set(profiles)) != len(profiles), f"--profile repeats a profile ({profiles})"),
        (not c.model, "--model must not be empty"),
        (c.run_id is not None and (not RUN_ID.match(c.run_id) or len(c.run_id) > RUN_ID_MAX_LEN),
         f"--run-id {c.run_id!r}: use lowercase letters, digits and '-' (at most "
         f"{RUN_ID_MAX_LEN}; it names folders and cluster Jobs)"),
        ((c.tokenizer or "").startswith((".", "/")) and not Path(c.tokenizer).is_dir(),
         f"--tokenizer {c.tokenizer}: no such directory"),
        (c.source.seed() not in (None, c.workload.seed), f"--seed {c.workload.seed} but the "
         f"videos in {c.source.directory} were made with seed {c.source.seed()}: make them "
         f"with `videos --seed {c.workload.seed}`, or pass --seed {c.source.seed()}"),
        ((c.source.count() or math.inf) < c.workload.videos_needed(len(c.targets)),
         f"--videos {c.source.directory} holds {c.source.count()} videos; this sweep may take "
         f"{c.workload.videos_needed(len(c.targets))} fresh ones: make them with `videos "
         f"--count {c.workload.videos_needed(len(c.targets))}`"),
    )
    flag = {f.name: f.metadata["flag"] for f in fields(Workload)}
    return ([problem for bad, problem in checks if bad] + c.source.problems()
            + c.workload.refusals(flag.get, len(c.targets)))


def stopped_by(rates: Sequence[Sequence[float]], blocks_left: int, workload: Workload
               ) -> str | None:
    """Why a level ends after blocks that measured `rates` (req/s, per profile, baseline
    first), None: run the next. One profile stops on its req/s interval, several on every
    gain's (in points), after MIN_BLOCKS blocks."""
    if not workload.full and len(rates[0]) >= MIN_BLOCKS:
        if len(rates) == 1:
            interval = replicate_interval(rates[0])
            tight = interval and interval.relative_half_width <= workload.stop_within_pct / 100
        else:
            gains = [paired_gain(rates[0], other) for other in rates[1:]]
            tight = all(g and (g.high - g.low) / 2 <= workload.stop_within_pct for g in gains)
        if tight:
            return "interval"
    if blocks_left > 0:
        return None
    return "full" if workload.full else "videos"


def level_summary(chunks: Sequence[LevelSummary], records: Sequence[Path]) -> LevelSummary:
    """A level's figures: rates the mean of its chunks' (their intervals are over chunks),
    percentiles over all its requests' `records`, counts the sums."""
    def mean(name: str) -> float | None:
        values = [v for chunk in chunks if (v := getattr(chunk, name)) is not None]
        return statistics.fmean(values) if values else None

    return LevelSummary(**{
        **{f.name: mean(f.name) for f in fields(LevelSummary)}, **pooled_percentiles(records),
        "concurrency": chunks[0].concurrency,
        "requests": sum(c.requests for c in chunks), "errors": sum(c.errors for c in chunks)})


def dist_version(dist: str) -> str | None:
    with suppress(metadata.PackageNotFoundError):
        return metadata.version(dist)
    return None


def tool_versions() -> dict[str, str | None]:
    """The client's packages, Python and the toolkit's commit (None outside a checkout)."""
    commit = None
    with suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, cwd=Path(__file__).parent).stdout.strip() or None
    return {**{dist: dist_version(dist) for dist in ("aiperf", "openai")},
            "python": platform.python_version(), "toolkit_commit": commit}


def manifest_base(config: SweepConfig, target: Target) -> dict[str, Any]:
    """What produced a profile's run (`config` as open_run resolves it): its manifest without
    level states and timestamps, in the shape a resume reads back (JSON's: lists, strings)."""
    return json.loads(json.dumps({
        "profile": target.profile, "design": "paired" if len(config.targets) > 1 else "separate",
        "profiles": [t.profile for t in config.targets],
        "session_header": SESSION_HEADER if target.affinity else None,
        "endpoint": target.url, "model": config.model, "workload": asdict(config.workload),
        "video_source": config.source.describe(), "pause_ms": config.pause_ms,
        "extra_body": dict(config.extra_body), "tokenizer": config.tokenizer,
        "accept_fewer_workers": config.accept_fewer_workers,
        "deployment": dict(config.deployment), "notes": config.notes, "tools": tool_versions(),
    }, default=str))


# Settings that must match for a rerun to resume a run (others may change, e.g. notes; the
# levels too: `workload.concurrencies` is left out; the endpoint's address, a port-forward's or
# the rehearsal's free port). `deployment` is what was measured (images, topology, routing, the
# graph's uid, the code's hash): results of one deployment never resume under another's name.
FINGERPRINT_KEYS = (
    "profile", "profiles", "session_header", "model", "workload", "video_source", "pause_ms",
    "extra_body", "deployment")
# What each attempt at a run records of its own: a resume keeps the earlier ones.
PROVENANCE_KEYS = ("tools", "notes")


def changes(name: str, old: Any, new: Any) -> list[str]:
    """`name: old -> new` for each value that differs, nested ones as `name.key`."""
    if old == new:
        return []
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return [c for k in sorted(old.keys() | new.keys(), key=str)
                for c in changes(f"{name}.{k}", old.get(k), new.get(k))]
    return [f"{name}: {old!r} -> {new!r}"]


def settings_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What a resume would change, each as `setting: old -> new` (nested ones by key)."""
    def fingerprint(manifest: Mapping[str, Any]) -> dict[str, Any]:
        found = {k: manifest.get(k) for k in FINGERPRINT_KEYS}
        return {**found, "workload": {k: v for k, v in (found["workload"] or {}).items()
                                      if k != "concurrencies"}}

    one, two = fingerprint(old), fingerprint(new)
    return [c for k in FINGERPRINT_KEYS for c in changes(k, one[k], two[k])]


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def level_dir_name(concurrency: int) -> str:
    return f"concurrency-{concurrency}"


def chunk_dir_name(block: int) -> str:
    return f"chunk-{block:02d}"


def kept_chunks(level_dir: Path, state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a level that an earlier attempt finished: in block order, each with its
    summary export on disk."""
    kept = []
    for block, chunk in enumerate(state.get("chunks") or []):
        if chunk.get("block") != block or not (
                level_dir / chunk.get("dir", "") / SUMMARY_EXPORT).is_file():
            break
        kept.append(chunk)
    return kept


def level_complete(profile_dir: Path, manifest: Mapping[str, Any], concurrency: int) -> bool:
    """A level the manifest records complete, each of its chunks' summary export on disk."""
    state = (manifest.get("levels") or {}).get(str(concurrency)) or {}
    chunks = state.get("chunks") or []
    return state.get("status") == STATUS_COMPLETE and bool(chunks) and kept_chunks(
        profile_dir / level_dir_name(concurrency), state) == chunks


def chunk_problems(summary: LevelSummary, lengths: dict[str, int] | None, expected: int,
                   config: SweepConfig, chunk_dir: Path) -> list[str]:
    """Why a measured chunk, and so its level, is not kept (why none with a failed request:
    docs/benchmark-toolkit.md, "Failed requests fail the level")."""
    found, sent = lengths or {"other": 0}, summary.requests + summary.errors
    checks = (
        (summary.errors, f"{summary.errors} of {sent} requests failed, and a level keeps none "
         f"(details: {chunk_dir / SUMMARY_EXPORT}, error_summary)"),
        (sent != expected, f"{sent} requests were measured of the {expected} its videos ask "
         "(AIPerf skipped or repeated some): rerun the level"),
        (not (chunk_dir / RECORDS_EXPORT).is_file(), f"no per-request records "
         f"({chunk_dir / RECORDS_EXPORT}), so the answers' lengths and the level's "
         "percentiles are unknown: AIPerf must export its records"),
        (found.get("missing"), f"{found.get('missing')} answers carry no output token count "
         "(the server sent no `usage`), so their length is unchecked: make the server report "
         "usage in its stream"),
        (found["other"], f"{found['other']} requests got other than "
         f"{config.workload.output_tokens} output tokens (min {found.get('min')}, max "
         f"{found.get('max')}): the server stops early or ignores the length fields; fix it"),
    )
    return [problem for bad, problem in checks if bad]


def cold_ceiling_pct(requests: int, videos: int, routing: Mapping[str, Any] | None) -> float:
    """The prefix-cache share a chunk of fresh videos can reach: every request but each
    video's first on each worker it reached (without attribution: its first anywhere)."""
    first = videos * (routing["mean_workers_per_video"] if routing and routing["videos"] else 1)
    return 100.0 * (requests - first) / requests if requests else 0.0


def evidence_problems(found: Mapping[str, Any], ceiling: float, requests: int) -> list[str]:
    """Where a chunk's server-side evidence says it was not what it claims: warm, or
    unattributed."""
    hit, routing = found.get("prefix_cache_hit_pct"), found.get("routing") or {}
    unattributed = routing.get("unattributed", 0)
    checks = (
        (hit is not None and hit > ceiling + CEILING_MARGIN_PCT, f"{hit or 0:.1f}% of prompt "
         f"tokens came from prefix caches, above the {ceiling:.1f}% a chunk of fresh videos can "
         "reach: the workers had seen these videos (a run on this graph with the same seed?); "
         "rerun with a new run id"),
        (unattributed > UNATTRIBUTED_MAX * requests, f"{unattributed} of {requests} responses "
         "named no worker: the frontend does not report worker ids (nvext extra_fields), so "
         "routing is unchecked; use Dynamo's frontend or drop --attribute-workers"),
    )
    return [problem for bad, problem in checks if bad]


def cpu_seconds() -> tuple[float, float]:
    """(the machine's busy CPU seconds, this process tree's), to split a level's load."""
    machine = psutil.cpu_times()
    busy = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
    mine = sum(psutil.Process().cpu_times()[:4])
    for child in psutil.Process().children(recursive=True):
        with suppress(psutil.Error):
            mine += sum(child.cpu_times()[:2])
    return busy, mine


def machine_load(start: tuple[float, float, float]) -> dict[str, Any]:
    """Other processes' share of the CPUs since `start` (monotonic time, `cpu_seconds()`)."""
    busy, mine = cpu_seconds()
    capacity = (time.monotonic() - start[0]) * (os.cpu_count() or 1)
    other = max(0.0, 100 * ((busy - start[1]) - (mine - start[2])) / capacity) if capacity else 0
    return {"cpus": os.cpu_count(), "other_busy_pct": round(other, 1), "busy": other > BUSY_PCT}


def open_run(config: SweepConfig, say: Say = print) -> _Sweep:
    """The attempt ready to run, its config resolved; refused, naming each setting that
    differs, before any file of the directory's earlier run changes (or, `set_aside`, that run
    renamed)."""
    if problems := config_problems(config):
        raise InputError(BAD_SETTINGS, problems)
    extra = WORKER_ID_REQUEST_FIELDS if config.attribute_workers else {}
    targets = tuple(replace(t, affinity=resolve_affinity(t)) for t in config.targets)
    run_dir = resolve_run_dir(config)
    config = replace(config, run_dir=run_dir, targets=targets,
                     extra_body={**config.extra_body, **extra})
    if config.tokenizer is None:
        config = replace(config, tokenizer=str((run_dir / "tokenizer").resolve()))
    bases = {t.profile: manifest_base(config, t) for t in targets}
    earlier = {p: json.loads(m.read_text()) for p in bases
               if (m := run_dir / p / MANIFEST_NAME).is_file()}
    changed = [f"{p}: {c}" for p, m in earlier.items() for c in settings_changes(m, bases[p])]
    if earlier and len({m.get("run_uid") for m in earlier.values()}) > 1:
        changed.append("its profiles' manifests are of different runs")
    if changed and config.set_aside:
        started = min(m.get("created_at") or "" for m in earlier.values())
        aside = run_dir.with_name(f"{run_dir.name}-{re.sub(r'[^0-9]', '', started)[:14]}")
        run_dir.rename(aside)
        say(f"{run_dir} held a run of other settings or another deployment "
            f"({'; '.join(changed)}); kept as {aside} (`collect --run-id {aside.name}`), and "
            "a new run starts")
        earlier = {}
    elif changed:
        raise SweepError(f"{run_dir} holds a run of other settings or another deployment "
                         f"({'; '.join(changed)}); {NEW_RUN_HINT}")
    tokenizer = Path(config.tokenizer)
    if tokenizer.parent == run_dir.resolve() and not is_tiny_model_dir(tokenizer):
        build_tiny_model_dir(tokenizer)
    run_uid = next(iter(earlier.values()), {}).get("run_uid") or uuid.uuid4().hex[:12]
    manifests = {}
    for profile, base in bases.items():
        old = earlier.get(profile, {})
        attempts = [*old.get("attempts", []), {"started_at": _now(),
                                               **{k: base[k] for k in PROVENANCE_KEYS}}]
        manifests[profile] = {**base, "run_uid": run_uid,
                              "created_at": old.get("created_at") or _now(),
                              "attempts": attempts, "levels": old.get("levels") or {},
                              "videos_sent": old.get("videos_sent", 0),
                              "worker_ids": old.get("worker_ids", [])}
    return _Sweep(config, run_dir, manifests, say)


def run_sweep(config: SweepConfig, say: Say = print) -> Path:
    """Run or resume the sweep, each chunk's and level's line through `say` as it ends;
    returns the run directory. A bad setting or failed level raises with what to do."""
    sweep = open_run(config, say)
    sweep.save()
    config, run_dir, w = sweep.config, sweep.run_dir, sweep.config.workload
    rule = ("one chunk of every video per profile (--full)" if w.full else
            f"until the {'req/s' if len(config.targets) == 1 else 'gain'} interval is within "
            f"+-{w.stop_within_pct:g}{'%' if len(config.targets) == 1 else ' points'} after "
            f"{MIN_BLOCKS} blocks")
    say(f"sweep of {', '.join(f'{t.profile} at {t.url}' for t in config.targets)}, model "
        f"{config.model}: levels {list(w.concurrencies)}, each in blocks of one chunk per "
        f"profile of fresh videos (N at concurrency N) x {w.questions_per_video} questions, "
        f"{rule}; at most {w.videos_needed(len(config.targets))} videos; results in {run_dir}")
    for concurrency in w.concurrencies:
        sweep.level(concurrency)
    say(f"sweep done: {run_dir} (compare profiles and runs with `report`: ./run.sh report "
        f"{run_dir} ... --out REPORT)")
    return run_dir


@dataclass
class _Sweep:
    """One attempt at a run, its config resolved: its levels, each run block by block into
    the profiles' manifests."""

    config: SweepConfig
    run_dir: Path
    manifests: dict[str, dict[str, Any]]
    say: Say

    @property
    def workers(self) -> int | None:
        """How many workers serve the graph, where the deployment's facts say so."""
        facts = self.config.deployment
        return next((int(facts[k]) for k in WORKER_COUNT_FACTS
                     if str(facts.get(k, "")).isdigit()), None)

    @property
    def attempt(self) -> int:
        return len(next(iter(self.manifests.values()))["attempts"]) - 1

    def save(self) -> None:
        # One cursor of fresh videos and one set of worker ids for the whole run.
        sent = max(m["videos_sent"] for m in self.manifests.values())
        workers = sorted(set().union(*(m["worker_ids"] for m in self.manifests.values())))
        for profile, manifest in self.manifests.items():
            manifest.update(videos_sent=sent, worker_ids=workers)
            (self.run_dir / profile).mkdir(parents=True, exist_ok=True)
            write_json(self.run_dir / profile / MANIFEST_NAME, manifest)

    def states(self, concurrency: int) -> dict[str, dict[str, Any]]:
        return {p: m["levels"][str(concurrency)] for p, m in self.manifests.items()}

    def level(self, concurrency: int) -> None:
        """Run one level's blocks until the stop rule ends it (whole blocks of an earlier
        attempt kept); mark it complete, or failed and raise LevelFailed."""
        name, dir_name = f"concurrency {concurrency}", level_dir_name(concurrency)
        if all(level_complete(self.run_dir / p, m, concurrency)
               for p, m in self.manifests.items()):
            for p, m in self.manifests.items():
                summary = LevelSummary(**m["levels"][str(concurrency)]["summary"])
                self.say(f"{p}: {summary.line()} [kept from the earlier run]")
            return
        earlier = {p: kept_chunks(self.run_dir / p / dir_name, m["levels"].get(
            str(concurrency)) or {}) for p, m in self.manifests.items()}
        blocks = min(map(len, earlier.values()))  # a block counts once each profile ran it
        for profile, manifest in self.manifests.items():
            chunks, level_dir = earlier[profile][:blocks], self.run_dir / profile / dir_name
            if level_dir.exists():
                self.say(f"{profile}, {name}: keeping {blocks} finished blocks of an earlier "
                         "attempt" if blocks else f"{name}: removing an unfinished earlier "
                         "attempt")
                for path in level_dir.iterdir():
                    if path.name not in {chunk["dir"] for chunk in chunks}:
                        shutil.rmtree(path) if path.is_dir() else path.unlink()
            manifest["levels"][str(concurrency)] = {
                "status": STATUS_RUNNING, "dir": dir_name, "started_at": _now(),
                "attempt": self.attempt, "interval_method": INTERVAL_METHOD, "chunks": chunks}
        self.save()
        start, deadline = (time.monotonic(), *cpu_seconds()), (
            time.monotonic() + self.config.level_timeout_secs)
        try:
            while (stop := self.stop(concurrency)) is None:
                self.block(concurrency, deadline)
            self.finish(concurrency, stop, machine_load(start))
        except SweepError as exc:
            for state in self.states(concurrency).values():
                state.update(status=STATUS_FAILED, error=str(exc))
            self.save()
            raise LevelFailed(str(exc)) from exc

    def block(self, concurrency: int, deadline: float) -> None:
        """One chunk per profile, the order reversed every other block (AB, BA, ...), so
        neither profile always runs first."""
        targets = self.config.targets
        block = len(self.states(concurrency)[targets[0].profile]["chunks"])
        for target in targets if block % 2 == 0 else targets[::-1]:
            self.chunk(target, concurrency, block, deadline)
        if len(targets) > 1 and block >= 1:
            rates = self.rates(concurrency)
            gains = ", ".join(f"{t.profile} {g.mean:+.1f}% [{g.low:+.1f}, {g.high:+.1f}]"
                              for t, r in zip(targets[1:], rates[1:], strict=True)
                              if (g := paired_gain(rates[0], r)))
            self.say(f"concurrency {concurrency}, block {block + 1}: gains so far {gains}")

    def chunk(self, target: Target, concurrency: int, block: int, deadline: float) -> None:
        """Run a profile's chunk of the block on fresh videos and record it, or raise with
        why the level fails."""
        config, w, profile = self.config, self.config.workload, target.profile
        state, name = self.states(concurrency)[profile], f"{profile}, concurrency {concurrency}"
        chunk_dir = self.run_dir / profile / state["dir"] / chunk_dir_name(block)
        chunk_dir.mkdir(parents=True)
        first = max(m["videos_sent"] for m in self.manifests.values())
        videos = list(range(first, first + w.chunk_videos(concurrency)))
        if videos[-1] >= (config.source.count() or math.inf):
            raise SweepError(f"{name}: the run has sent all {first} videos (each chunk takes "
                             "fresh ones, a retried chunk too): start a new run, or make more")
        self.manifests[profile]["videos_sent"] = videos[-1] + 1
        self.save()  # taken before they are sent: a retry never sends them again
        lines = dataset_lines(config.source.heads(videos, w.seed), w,
                              config.source.standin_tokens is not None, config.pause_ms)
        dataset = chunk_dir / CHUNK_DATASET
        dataset.write_text("".join(json.dumps(line) + "\n" for line in lines))
        shared = {f.name for f in fields(LevelSpec)} & vars(config).keys()
        spec = LevelSpec(**{k: getattr(config, k) for k in shared}, url=target.url,
                         dataset=dataset.resolve(), concurrency=concurrency,
                         sessions=len(videos), output_tokens=w.output_tokens,
                         affinity=bool(target.affinity), random_seed=w.seed,
                         artifact_dir=chunk_dir.resolve())
        before = scrape_frontend(target.url)
        summary = self.run_aiperf(spec, len(lines), deadline)
        found = chunk_evidence(chunk_dir, before, scrape_frontend(target.url),
                               config.attribute_workers)
        ceiling = cold_ceiling_pct(len(lines), len(videos), found.get("routing"))
        entry = {"dir": chunk_dir.name, "block": block, "videos": [videos[0], videos[-1] + 1],
                 "summary": asdict(summary), "attempt": self.attempt,
                 "prefix_cache_hit_ceiling_pct": ceiling, **({"frontend": found} if found else {})}
        if lengths := length_check(chunk_dir, w.output_tokens):
            state["output_lengths"] = lengths
        # The worker ids answering over the whole run: one new to it was replaced meanwhile.
        seen = set().union(*(m["worker_ids"] for m in self.manifests.values()),
                           (found.get("routing") or {}).get("workers", []))
        self.manifests[profile]["worker_ids"] = sorted(seen)
        over_run = found.get("routing") and {**found["routing"], "workers_seen": len(seen)}
        problems = (chunk_problems(summary, lengths, len(lines), config, chunk_dir)
                    + evidence_problems(found, ceiling, len(lines))
                    + routing_problems(over_run, self.workers, bool(target.affinity)))
        if problems:
            state.update(level_evidence(chunk_dir.parent, [*state["chunks"], entry]))
            raise SweepError(f"{name}: {'; '.join(problems)}")
        state["chunks"].append(entry)
        self.save()
        interval = replicate_interval(self.rates(concurrency)[
            [t.profile for t in config.targets].index(profile)])
        self.say(f"{name}, block {block + 1} of at most {w.max_blocks(concurrency)}: "
                 f"{summary.request_throughput:.2f} req/s; " + (
                     f"{interval.mean:.2f} req/s so far, 95% interval [{interval.low:.2f}, "
                     f"{interval.high:.2f}] (+-{interval.relative_half_width:.1%})"
                     if interval else "no interval before a second block"))

    def finish(self, concurrency: int, stop: str, load: dict[str, Any]) -> None:
        """The level's summary and evidence per profile, its gains over the baseline; a known
        round robin profile (PROFILES; another's router is not known) that reached fewer workers
        than the graph has fails it (unless accepted)."""
        config, rates, workers = self.config, self.rates(concurrency), self.workers
        for target, own in zip(config.targets, rates, strict=True):
            state = self.states(concurrency)[target.profile]
            level_dir = self.run_dir / target.profile / state["dir"]
            chunks = state["chunks"]
            summary = level_summary([LevelSummary(**c["summary"]) for c in chunks],
                                    [level_dir / c["dir"] / RECORDS_EXPORT for c in chunks])
            state.update(level_evidence(level_dir, chunks))
            seen = (state.get("routing") or {}).get("workers_seen")
            spreads = not target.affinity and target.profile in PROFILES and PROFILES[
                target.profile].router_mode == "round-robin"
            if spreads and workers and seen is not None and seen < workers:
                if not config.accept_fewer_workers:
                    raise SweepError(
                        f"{target.profile}, concurrency {concurrency}: round robin reached "
                        f"{seen} of the graph's {workers} workers: some are not serving (see "
                        "the graph's pods); rerun once all are, or --accept-fewer-workers to "
                        "keep it (recorded)")
                state["fewer_workers_accepted"] = True
            gain = paired_gain(rates[0], own) if target != config.targets[0] else None
            state.update(status=STATUS_COMPLETE, finished_at=_now(), summary=asdict(summary),
                         replicates=len(chunks), stopped_by=stop, machine=load,
                         **({"gain": asdict(gain)} if gain else {}))
            self.say(f"{target.profile}: {summary.line()}; {len(chunks)} blocks, stopped by "
                     f"{stop}" + (f"; gain {gain.mean:+.1f}% [{gain.low:+.1f}, "
                                  f"{gain.high:+.1f}]" if gain else ""))
            if "routing" in state or "prefix_cache_hit_pct" in state:
                self.say(f"{target.profile}, concurrency {concurrency}: {evidence_line(state)}")
        if load["busy"]:
            self.say(f"concurrency {concurrency}: other processes used {load['other_busy_pct']}"
                     f"% of the {load['cpus']} CPUs: a busy machine (recorded)")
        self.save()

    def run_aiperf(self, spec: LevelSpec, requests: int, deadline: float) -> LevelSummary:
        """One chunk's AIPerf; each heartbeat relays progress and stops at the first failure (it
        fails the level anyway): a stall costs a request timeout, not the level's bound."""
        log, records = spec.artifact_dir / LEVEL_LOG, spec.artifact_dir / RECORDS_EXPORT
        started, name = time.monotonic(), f"concurrency {spec.concurrency}"
        with open(log, "w") as out, subprocess.Popen(
                aiperf_command(spec), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=aiperf_env()) as process:
            try:
                while (code := process.poll()) is None:
                    with suppress(subprocess.TimeoutExpired):  # to the next heartbeat
                        process.wait(timeout=max(0.0, min(self.config.heartbeat_secs,
                                                           deadline - time.monotonic())))
                        continue
                    if time.monotonic() >= deadline:
                        raise SweepError(
                            f"{name} ran longer than {self.config.level_timeout_secs:g} s; "
                            f"raise --level-timeout or check the endpoint (AIPerf output: "
                            f"{log})")
                    answered, failed = progress_counts(records)
                    self.say(f"{name}: {answered + failed} of {requests} requests done "
                             f"({answered} answered, {failed} failed, up to "
                             f"{spec.concurrency} in flight) in {spec.artifact_dir.name}, "
                             f"{(time.monotonic() - started) / 60:.1f} min")
                    if failed:
                        raise SweepError(
                            f"{name}: stopped early, {failed} request(s) failed (a level keeps"
                            f" none; see `error` in {records}); check the endpoint, then "
                            "resume")
            finally:  # AIPerf stops its workers on SIGTERM; both signals skip an exited one
                process.terminate()
                with suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=30)
                process.kill()
        if code != 0:
            raise SweepError(
                f"AIPerf failed at {name} (exit code {code}): {failure_cause(log)}\n"
                f"Its last lines:\n{log_tail(log)}\nFull output: {log}")
        try:
            return summarize_file(spec.artifact_dir / SUMMARY_EXPORT)
        except ExportError as exc:
            raise SweepError(f"{name}: {exc}\nAIPerf's last lines:\n{log_tail(log)}") from exc

    def stop(self, concurrency: int) -> str | None:
        rates = self.rates(concurrency)
        return stopped_by(rates, self.config.workload.max_blocks(concurrency) - len(rates[0]),
                          self.config.workload)

    def rates(self, concurrency: int) -> list[list[float]]:
        """Each profile's chunk req/s of the level, in block order (baseline first)."""
        return [[c["summary"]["request_throughput"] for c in state["chunks"]]
                for state in self.states(concurrency).values()]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------
# CLI


def register(subparsers: argparse._SubParsersAction) -> None:
    """The sweep's options: its profiles, the workload's, SweepConfig's (`option`), the videos."""
    p = subparsers.add_parser(
        "sweep", help="run AIPerf at each concurrency level (resumable)", description=__doc__)
    p.add_argument("--run", type=lambda text: Run.from_output(json.loads(text)),
                   help="a cluster run as the program declared it (JSON): every other option "
                   "comes from it")
    p.add_argument("--url", action="append", default=[],
                   help="a profile's frontend, e.g. http://127.0.0.1:8000 (once per --profile)")
    p.add_argument("--profile", action="append", default=[],
                   help=f"its routing profile ({', '.join(PROFILES)}, or your own); the first "
                   "is the baseline (default round-robin)")
    p.add_argument("--session-affinity", action=argparse.BooleanOptionalAction,
                   help=f"send {SESSION_HEADER} per video (default: each profile's)")
    add_options(p, Workload)
    add_options(p, SweepConfig)
    src = p.add_argument_group("videos: each chunk takes fresh ones, in index order")
    src.add_argument("--videos", dest="videos_dir", type=Path,
                     help="directory made by `videos`")
    src.add_argument("--video-base-url", help="URL the `videos` command's files are served from")
    src.add_argument("--text-standin-tokens", type=int,
                     help="text-only: a ~N-token per-video block instead of the video")
    p.set_defaults(func=_run)


def config_from_run(run: Run) -> SweepConfig:
    """The cluster's sweep: its frontends, workload, videos and results folder, from the run
    the program declared; a run directory of another deployment is set aside, not resumed."""
    return SweepConfig(
        targets=tuple(Target(*target) for target in run.targets), workload=run.workload,
        source=VideoSource(base_url=run.video_base_url), model=run.model,
        run_dir=Path(CACHE_DIR) / run.results_path, notes=run.notes,
        deployment=dict(run.deployment), attribute_workers=True, set_aside=True)


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    """The run object straight from the parsed options (or their `--run`)."""
    if args.run is not None:
        return config_from_run(args.run)
    profiles = args.profile or ["round-robin"]
    if len(profiles) != len(args.url):
        raise InputError(BAD_SETTINGS, [f"--url and --profile pair up: give one --profile per "
                                        f"--url (got {len(args.url)} and {len(profiles)})"])
    given = {f.name: getattr(args, f.name) for f in fields(SweepConfig) if "flag" in f.metadata}
    return SweepConfig(**{**given, "notes": tuple(args.notes),
                          "deployment": dict(args.deployment)},
                       targets=tuple(Target(p, u, args.session_affinity)
                                     for p, u in zip(profiles, args.url, strict=True)),
                       workload=Workload(**{f.name: tuple(v) if isinstance(
                           v := getattr(args, f.name), list) else v for f in fields(Workload)}),
                       source=VideoSource(args.video_base_url, args.videos_dir,
                                          args.text_standin_tokens))


def _run(args: argparse.Namespace) -> int:
    # A Job being stopped (SIGTERM) ends the level cleanly: AIPerf is stopped too.
    resume, run_dir = "nothing started", None
    with sigterm_as_interrupt():
        try:
            config = config_from_args(args)
            run_dir = resolve_run_dir(config)  # once: a run id of the clock's names one folder
            config = replace(config, run_dir=run_dir)
            # How to resume, in words that fit the CLI and the cluster's Job (whose run id is
            # `benchmarkRunId`): a run id of the clock's is not "the same".
            resume = (f"to resume {run_dir}, run it again with the same run id (the cluster's "
                      "benchmarkRunId) or --out: finished levels and blocks are kept"
                      if args.run_id or args.run_dir or args.run else
                      f"to resume {run_dir}, rerun the same command with --run-id "
                      f"{run_dir.name}")
            if args.run is not None and args.run.sweep:
                print(f"follow this sweep: {args.run.follow_command}", flush=True)
            run_sweep(config, say=lambda line: print(line, flush=True))
        except (SweepError, InputError) as exc:
            # The cause comes last, on one line: it is the line a Job's failure (and so
            # `pulumi up`) shows; the details and the way to resume come before it.
            first, _, details = str(exc).partition("\n")
            if isinstance(exc, InputError):
                first, details = f"{exc.heading}: {'; '.join(exc.problems)}", ""
            hint = resume if isinstance(exc, LevelFailed) else ""
            for line in filter(None, (details, hint, f"error: {first}")):
                print(f"sweep: {line}", file=sys.stderr, flush=True)
            return 2 if isinstance(exc, InputError) else 1
        except KeyboardInterrupt:
            hint = resume if run_dir is not None and run_dir.exists() else "nothing started"
            print(f"sweep: interrupted; {hint}", file=sys.stderr)
            return 130
    return 0
