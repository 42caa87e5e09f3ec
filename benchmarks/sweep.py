"""`sweep`: AIPerf at each concurrency level in chunks of whole videos until its req/s is known;
rerun to resume (why: docs/benchmark-toolkit.md, "Chunks and the stop rule")."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

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
    progress_counts,
    summarize_file,
)
from benchmarks.dataset import DATASET_FILE, build_dataset, load_dataset_info, video_references
from benchmarks.evidence import (
    WORKER_ID_REQUEST_FIELDS,
    chunk_evidence,
    evidence_line,
    level_evidence,
    routing_problems,
    scrape_frontend,
)
from benchmarks.tiny_model import build_tiny_model_dir, is_tiny_model_dir
from benchmarks.videos import load_manifest
from infra.names import (
    RUN_ID,
    RUN_ID_MAX_LEN,
    SEED_SHAPE,
    SERVED_MODEL_NAME,
    SESSION_HEADER,
    InputError,
    levels_problems,
)
from infra.routing import PROFILES

# Intervals come from the spread between replicate chunks (each its own AIPerf run): it sees
# what moves a whole run (round robin in step with the workers, a noisy node); a bootstrap
# over one run's videos does not.
INTERVAL_METHOD = "Student t 95% over the level's replicate chunks"


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
    """The mean of `values` (one per replicate) with its Student t 95% interval; None with
    fewer than two replicates, which have no spread."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = student_t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(
        len(values))
    return Interval(mean, mean - half, mean + half, len(values))


MANIFEST_NAME = "manifest.json"
LEVEL_LOG = "aiperf_console.log"
CHUNK_DATASET = "chunk_dataset.jsonl"
STATUS_COMPLETE, STATUS_RUNNING, STATUS_FAILED = "complete", "running", "failed"

# Deployment facts that say how many workers serve the graph (the cluster's, the
# rehearsal's): a chunk where more worker ids answer fails (evidence.routing_problems).
WORKER_COUNT_FACTS = ("replicas", "mock_workers")
BAD_SETTINGS = "bad sweep settings"
# What a refused resume says, in words that fit the CLI, the rehearsal and the cluster.
NEW_RUN_HINT = "use a new --run-id (on the cluster: benchmarkRunId) for these settings"
Say = Callable[[str], None]


@dataclass
class LevelRun:
    """Where a level's target takes requests, and its bound where the target knows it
    better than `level_timeout_secs`."""

    url: str
    timeout_secs: float | None = None


# Brings up what one level measures, called with its concurrency and folder: the rehearsal
# starts a fresh local Dynamo per level; a fixed endpoint (the cluster's frontend) needs none.
LevelTarget = Callable[[int, Path], AbstractContextManager[LevelRun]]


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
    """A level failed (or timed out): the run resumes from it, finished chunks kept."""


def option(flag: str, default: Any = MISSING, factory: Any = MISSING, **argparse_kwargs: Any
           ) -> Any:
    """A SweepConfig field that is also the sweep's CLI option `flag` (`register` adds it
    with the field's name and default): the option and the run object are one contract."""
    return field(default=default, default_factory=factory,
                 metadata={"flag": flag, **argparse_kwargs})


@dataclass(frozen=True)
class SweepConfig:
    """One sweep, each `option` field also its CLI flag. None means: `affinity` the profile's,
    `tokenizer` a tiny local one built in the run directory (counts come from `usage`)."""

    url: str = option("--url", required=True,
                      help="endpoint base URL, e.g. http://127.0.0.1:8000")
    dataset: Path  # the CLI builds it from the video options
    profile: str = option("--profile", "round-robin",
                          help=f"routing profile label ({', '.join(PROFILES)}, or your own)")
    model: str = option("--model", SERVED_MODEL_NAME, help=f"default {SERVED_MODEL_NAME}")
    affinity: bool | None = option(
        "--session-affinity", None, action=argparse.BooleanOptionalAction,
        help=f"send {SESSION_HEADER} per video (default: the profile's)")
    concurrencies: tuple[int, ...] = option(
        "--concurrency", SEED_SHAPE.concurrencies, type=int, nargs="+",
        help=f"levels (default {' '.join(map(str, SEED_SHAPE.concurrencies))})")
    output_tokens: int = option(
        "--output-tokens", SEED_SHAPE.output_tokens, type=int,
        help=f"exact output tokens per request (default {SEED_SHAPE.output_tokens})")
    random_seed: int = option("--seed", SEED_SHAPE.random_seed, type=int,
                              help=f"default {SEED_SHAPE.random_seed}")
    stop_within_pct: float = option(
        "--stop-within-pct", SEED_SHAPE.stop_within_pct, type=float,
        help=f"a level stops once its req/s 95%% interval is within +- this %% (after "
        f"{SEED_SHAPE.min_replicates} chunks; default {SEED_SHAPE.stop_within_pct:g})")
    full: bool = option("--full", False, action="store_true",
                        help="every level sends every whole chunk of videos (no stop rule)")
    tokenizer: str | None = option(
        "--tokenizer", None, help="tokenizer name or local directory (default: a tiny local one)")
    results_root: Path = option("--results-root", Path("results"), type=Path)
    run_id: str | None = option("--run-id", None, help="default: UTC time; reuse it to resume")
    run_dir: Path | None = option("--out", None, type=Path,
                                  help="run directory (default RESULTS_ROOT/PROFILE/RUN_ID)")
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # merged into every body
    request_timeout_secs: float = option("--request-timeout", 600.0, type=float,
                                         help="seconds per request")
    level_timeout_secs: float = option("--level-timeout", 8 * 3600.0, type=float,
                                       help="seconds per level (all its chunks)")
    heartbeat_secs: float = 60.0
    notes: tuple[str, ...] = option("--note", (), action="append",
                                    help="free text for the report")
    deployment: Mapping[str, Any] = option(
        "--deployment", factory=dict, action="append", metavar="KEY=VALUE",
        type=lambda fact: tuple(fact.partition("=")[::2]),
        help="what the run measures (image, topology...): recorded, and a resume against "
        "other values is refused")
    level_target: LevelTarget | None = None
    # Ask the frontend which worker served each request (AIPerf's raw export), and record
    # per chunk and level how sticky routing was and how requests spread over the workers.
    attribute_workers: bool = option(
        "--attribute-workers", False, action="store_true",
        help="record which worker served each request (the frontend's nvext worker_id) and "
        "per chunk and level the routing's stickiness and spread")


@dataclass(frozen=True)
class Dataset:
    """A dataset file (any origin): each session's (video's) lines, in file order."""

    sha256: str
    sessions: dict[str, list[bytes]]
    output_tokens: frozenset[int]

    @property
    def questions_per_session(self) -> int | None:
        """None when sessions differ in size."""
        sizes = {len(lines) for lines in self.sessions.values()}
        return sizes.pop() if len(sizes) == 1 else None


def read_dataset(path: Path) -> Dataset:
    """The file's sessions (held to write each chunk's file) and its hash."""
    text, sessions, lengths = path.read_bytes(), {}, set()
    for number, raw in enumerate(text.splitlines(keepends=True), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError as exc:
            raise SweepError(f"dataset {path} line {number} is not JSON: {exc}") from exc
        if not isinstance(line, dict) or not isinstance(line.get("messages"), list):
            raise SweepError(f"dataset {path} line {number} has no `messages`: build it "
                             "with benchmarks.dataset.build_dataset")
        session = str(line.get("session_id", f"line-{number}"))
        sessions.setdefault(session, []).append(raw.rstrip(b"\n") + b"\n")
        if isinstance(line.get("output_length"), int):
            lengths.add(line["output_length"])
    return Dataset(hashlib.sha256(text).hexdigest(), sessions, frozenset(lengths))


def level_chunks(videos: Sequence[str], concurrency: int) -> list[list[str]]:
    """`concurrency` whole videos each, in dataset order, leftovers unsent (why:
    docs/benchmark-toolkit.md, "Chunks and the stop rule")."""
    return [list(videos[start:start + concurrency])
            for start in range(0, len(videos) - concurrency + 1, concurrency)]


def stopped_by(rates: Sequence[float], chunks_left: int, config: SweepConfig) -> str | None:
    """Why a level ends after chunks that measured `rates` (req/s), None: run the next."""
    if not config.full and len(rates) >= SEED_SHAPE.min_replicates:
        interval = replicate_interval(rates)
        if interval and interval.relative_half_width <= config.stop_within_pct / 100:
            return "interval"
    if chunks_left > 0:
        return None
    return "full" if config.full else "videos"


def level_summary(chunks: Sequence[LevelSummary]) -> LevelSummary:
    """A level's figures: its chunks' mean (of those that have it); counts are sums."""
    def mean(name: str) -> float | None:
        values = [v for chunk in chunks if (v := getattr(chunk, name)) is not None]
        return statistics.fmean(values) if values else None

    return LevelSummary(**{
        **{f.name: mean(f.name) for f in fields(LevelSummary)},
        "concurrency": chunks[0].concurrency,
        "requests": sum(c.requests for c in chunks), "errors": sum(c.errors for c in chunks)})


def resolve_affinity(config: SweepConfig) -> bool:
    if config.affinity is not None:
        return config.affinity
    if config.profile in PROFILES:
        return PROFILES[config.profile].affinity
    raise InputError(BAD_SETTINGS, [
        f"profile {config.profile!r} is not one of {sorted(PROFILES)}: say whether it sends "
        f"{SESSION_HEADER} with --session-affinity or --no-session-affinity"])


def resolve_run_dir(config: SweepConfig) -> Path:
    if config.run_dir is not None:
        return config.run_dir
    run_id = config.run_id or datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return config.results_root / config.profile / run_id


def config_problems(config: SweepConfig) -> list[str]:
    """Every bad setting, each naming the option and the fix (checked before anything runs)."""
    c = config
    checks = (
        (not re.match(r"^https?://[^/\s]+", c.url),
         f"--url must look like http://HOST:PORT (got {c.url!r})"),
        (not c.model, "--model must not be empty"),
        (c.output_tokens < 1, f"--output-tokens must be >= 1 (got {c.output_tokens})"),
        (not c.stop_within_pct > 0, f"--stop-within-pct must be above 0 (got "
         f"{c.stop_within_pct:g}); --full sends every video instead"),
        (c.run_id is not None and (not RUN_ID.match(c.run_id) or len(c.run_id) > RUN_ID_MAX_LEN),
         f"--run-id {c.run_id!r}: use lowercase letters, digits and '-' (at most "
         f"{RUN_ID_MAX_LEN}; it names folders and cluster Jobs)"),
        (not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", c.profile),
         f"--profile {c.profile!r}: use letters, digits, '.', '_' or '-'"),
        (not Path(c.dataset).is_file(), f"dataset {c.dataset} does not exist: build it with "
         "benchmarks.dataset.build_dataset (the CLI builds it from --videos)"),
        ((c.tokenizer or "").startswith((".", "/")) and not Path(c.tokenizer).is_dir(),
         f"--tokenizer {c.tokenizer}: no such directory"),
    )
    return ([problem for bad, problem in checks if bad]
            + [f"--concurrency {problem}" for problem in levels_problems(c.concurrencies)])


def check_dataset(config: SweepConfig, data: Dataset) -> None:
    """The dataset must ask for the sweep's output length and fill one chunk per level."""
    short = [c for c in config.concurrencies if c > len(data.sessions)]
    checks = (
        (data.output_tokens and data.output_tokens != {config.output_tokens},
         f"the dataset asks for {sorted(data.output_tokens)} output tokens but the sweep "
         f"for {config.output_tokens}: rebuild the dataset with --output-tokens "
         f"{config.output_tokens}, or pass the dataset's value to --output-tokens"),
        (short, f"--concurrency {' '.join(map(str, short))}: a level at concurrency N sends "
         f"chunks of N videos but the dataset has {len(data.sessions)}: use more videos or "
         "lower levels"),
    )
    if problems := [problem for bad, problem in checks if bad]:
        raise InputError(BAD_SETTINGS, problems)


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


def manifest_base(config: SweepConfig, data: Dataset) -> dict[str, Any]:
    """What produced a run (`config` as open_run resolves it): the manifest without level
    states and timestamps, in the shape a resume reads it back in (JSON's: lists, strings)."""
    info = load_dataset_info(Path(config.dataset))
    return json.loads(json.dumps({
        "profile": config.profile, "session_header": SESSION_HEADER if config.affinity else None,
        "endpoint": config.url, "model": config.model, "concurrencies": config.concurrencies,
        # The dataset's: a level sends the whole chunks it runs (at most these).
        "requests_per_level": sum(map(len, data.sessions.values())),
        "sessions_per_level": len(data.sessions), "questions_per_video": data.questions_per_session,
        "output_tokens": config.output_tokens, "random_seed": config.random_seed,
        "stop_within_pct": config.stop_within_pct, "full": config.full,
        "dataset": {"path": Path(config.dataset).resolve(), "sha256": data.sha256,
                    "info": info and asdict(info)},
        "video_settings": info and info.video_settings,
        "extra_body": dict(config.extra_body), "tokenizer": config.tokenizer,
        "deployment": dict(config.deployment), "notes": config.notes, "tools": tool_versions(),
    }, default=str))


# Settings that must match for a rerun to resume a run (others may change, e.g. notes).
# `deployment` is what was measured (images, topology, routing, the graph's uid, the code's
# hash): results of one deployment never resume under another's name.
FINGERPRINT_KEYS = (
    "profile", "session_header", "endpoint", "model", "sessions_per_level", "output_tokens",
    "random_seed", "extra_body", "stop_within_pct", "full", "deployment")

# What each attempt at a run records of its own: a resume keeps the earlier ones.
PROVENANCE_KEYS = ("tools", "notes", "video_settings")


def changes(name: str, old: Any, new: Any) -> list[str]:
    """`name: old -> new` for each value that differs, nested ones as `name.key`."""
    if old == new:
        return []
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return [c for k in sorted(old.keys() | new.keys(), key=str)
                for c in changes(f"{name}.{k}", old.get(k), new.get(k))]
    return [f"{name}: {old!r} -> {new!r}"]


def dataset_identity(dataset: Mapping[str, Any], leave_out: tuple[str, ...]) -> dict[str, Any]:
    """What a manifest's dataset sidecar says it holds, without the keys left out."""
    return {k: v for k, v in (dataset.get("info") or {}).items() if k not in leave_out}


def settings_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What a resume would change, each as `setting: old -> new` (nested ones by key; the
    dataset by what its sidecar says it holds, its contents' hash when that says nothing)."""
    found = [c for k in FINGERPRINT_KEYS for c in changes(k, old.get(k), new.get(k))]
    sets = [manifest.get("dataset") or {} for manifest in (old, new)]
    was, now = (str(dataset.get("sha256")) for dataset in sets)
    if was != now:
        found += changes("dataset", *(dataset_identity(d, ("path",)) for d in sets)) or [
            f"dataset contents: sha256 {was[:12]} -> {now[:12]}"]
    return found


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def level_dir_name(concurrency: int) -> str:
    return f"concurrency-{concurrency}"


def chunk_dir_name(index: int) -> str:
    return f"chunk-{index:02d}"


def kept_chunks(level_dir: Path, state: Mapping[str, Any], planned: Sequence[list[str]]
                ) -> list[dict[str, Any]]:
    """The chunks of a level that an earlier attempt finished: in order, each over the
    videos planned for it, with its summary export on disk."""
    kept = []
    for chunk, videos in zip(state.get("chunks") or [], planned, strict=False):
        if chunk.get("videos") != videos or not (
                level_dir / chunk.get("dir", "") / SUMMARY_EXPORT).is_file():
            break
        kept.append(chunk)
    return kept


def level_complete(run_dir: Path, manifest: Mapping[str, Any], concurrency: int) -> bool:
    """A level the manifest records complete, each of its chunks' summary export on disk."""
    state = (manifest.get("levels") or {}).get(str(concurrency)) or {}
    chunks = state.get("chunks") or []
    return state.get("status") == STATUS_COMPLETE and bool(chunks) and kept_chunks(
        run_dir / level_dir_name(concurrency), state, [c.get("videos") for c in chunks]) == chunks


def _level_problems(summary: LevelSummary, lengths: dict[str, int] | None,
                    config: SweepConfig, level_dir: Path) -> list[str]:
    """Why a measured chunk, and so its level, is not kept (why none with a failed request:
    docs/benchmark-toolkit.md, "Failed requests fail the level")."""
    found = lengths or {"other": 0}
    checks = (
        (summary.errors, f"{summary.errors} of {summary.requests + summary.errors} requests "
         f"failed, and a level keeps none (details: {level_dir / SUMMARY_EXPORT}, error_summary)"),
        (found.get("missing"), f"{found.get('missing')} answers carry no output token count "
         "(the server sent no `usage`), so their length is unchecked: make the server report "
         "usage in its stream"),
        (found["other"], f"{found['other']} requests got other than {config.output_tokens} "
         f"output tokens (min {found.get('min')}, max {found.get('max')}): the server stops "
         "early or ignores the length fields; fix it"),
    )
    return [problem for bad, problem in checks if bad]


def open_run(config: SweepConfig, say: Say = print) -> _Sweep:
    """The attempt ready to run, its config resolved; refused, naming each setting that
    differs, before any file of the directory's earlier run changes."""
    if problems := config_problems(config):
        raise InputError(BAD_SETTINGS, problems)
    extra = WORKER_ID_REQUEST_FIELDS if config.attribute_workers else {}
    run_dir = resolve_run_dir(config)
    config = replace(config, run_dir=run_dir, affinity=resolve_affinity(config),
                     extra_body={**config.extra_body, **extra})
    data = read_dataset(Path(config.dataset))
    run_dir.mkdir(parents=True, exist_ok=True)
    if config.tokenizer is None:
        tokenizer = run_dir / "tokenizer"
        if not is_tiny_model_dir(tokenizer):
            build_tiny_model_dir(tokenizer)
        config = replace(config, tokenizer=str(tokenizer.resolve()))
    base = manifest_base(config, data)
    path = run_dir / MANIFEST_NAME
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    if earlier and (changed := settings_changes(earlier, base)):
        raise SweepError(f"{run_dir} holds a run of other settings or another deployment "
                         f"({'; '.join(changed)}); {NEW_RUN_HINT}")
    check_dataset(config, data)
    # A manifest from before attempts were recorded holds its one attempt's at the top.
    attempts = earlier.get("attempts") or (
        [{k: earlier.get(k) for k in PROVENANCE_KEYS}] if earlier else [])
    attempts.append({"started_at": _now(), **{k: base[k] for k in PROVENANCE_KEYS}})
    manifest = {**base, "created_at": earlier.get("created_at") or _now(), "attempts": attempts,
                "levels": earlier.get("levels") or {}}
    return _Sweep(config, run_dir, data, manifest, say)


def run_sweep(config: SweepConfig, say: Say = print) -> Path:
    """Run or resume the sweep, each chunk's and level's line through `say` as it ends;
    returns the run directory. A bad setting or failed level raises with what to do."""
    sweep = open_run(config, say)
    sweep.save()
    config, run_dir = sweep.config, sweep.run_dir
    header = f"with {SESSION_HEADER} per video" if config.affinity else f"no {SESSION_HEADER}"
    rule = ("every whole chunk (--full)" if config.full else
            f"until the req/s interval is within +-{config.stop_within_pct:g}% after "
            f"{SEED_SHAPE.min_replicates} chunks")
    say(f"sweep {config.profile} ({header}) against {config.url}, model {config.model}: "
        f"{len(sweep.data.sessions)} videos x {sweep.data.questions_per_session or '?'} "
        f"questions, levels {list(config.concurrencies)} in chunks of N videos at "
        f"concurrency N, {rule}; results in {run_dir}")
    for concurrency in config.concurrencies:
        sweep.level(concurrency)
    say(f"sweep done: {run_dir} (compare runs with the `report` command: ./run.sh report "
        f"{run_dir} ... --out REPORT)")
    return run_dir


@dataclass
class _Sweep:
    """One attempt at a run, its config resolved: its levels, each run chunk by chunk into
    the manifest."""

    config: SweepConfig
    run_dir: Path
    data: Dataset
    manifest: dict[str, Any]
    say: Say

    @property
    def attempt(self) -> int:
        return len(self.manifest["attempts"]) - 1

    def save(self) -> None:
        write_json(self.run_dir / MANIFEST_NAME, self.manifest)

    def level(self, concurrency: int) -> None:
        """Run one level's chunks until the stop rule ends it (finished chunks of an
        earlier attempt kept); mark it complete, or failed and raise LevelFailed."""
        name, level_dir = f"concurrency {concurrency}", self.run_dir / level_dir_name(concurrency)
        earlier = self.manifest["levels"].get(str(concurrency)) or {}
        if level_complete(self.run_dir, self.manifest, concurrency):
            self.say(f"{LevelSummary(**earlier['summary']).line()} [kept from the earlier run]")
            return
        planned = level_chunks(list(self.data.sessions), concurrency)
        chunks = kept_chunks(level_dir, earlier, planned)
        if level_dir.exists():
            self.say(f"{name}: keeping {len(chunks)} finished chunks of an earlier attempt"
                     if chunks else f"{name}: removing an unfinished earlier attempt")
            for path in level_dir.iterdir():
                if path.name not in {chunk["dir"] for chunk in chunks}:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        level = self.manifest["levels"][str(concurrency)] = {
            "status": STATUS_RUNNING, "dir": level_dir.name, "started_at": _now(),
            "attempt": self.attempt, "interval_method": INTERVAL_METHOD, "chunks": chunks}
        self.save()
        target = self.config.level_target or (lambda *_: nullcontext(LevelRun(self.config.url)))
        try:
            if (stop := self.stop(level, planned)) is None:
                with target(concurrency, level_dir) as run:
                    bound = run.timeout_secs or self.config.level_timeout_secs
                    deadline = time.monotonic() + bound
                    while stop is None:
                        self.chunk(level, planned, run.url, bound, deadline)
                        stop = self.stop(level, planned)
        except SweepError as exc:
            level.update(status=STATUS_FAILED, error=str(exc))
            self.save()
            raise LevelFailed(str(exc)) from exc
        summary = level_summary([LevelSummary(**c["summary"]) for c in level["chunks"]])
        level.update(level_evidence(level_dir, level["chunks"]))
        level.update(status=STATUS_COMPLETE, finished_at=_now(), summary=asdict(summary),
                     replicates=len(level["chunks"]), stopped_by=stop)
        self.save()
        self.say(f"{summary.line()}; {len(level['chunks'])} chunks, stopped by {stop}")
        if "routing" in level or "prefix_cache_hit_pct" in level:
            self.say(f"{name}: {evidence_line(level)}")

    def chunk(self, level: dict[str, Any], planned: list[list[str]], url: str, bound: float,
              deadline: float) -> None:
        """Run the level's next chunk and record it, or raise with why the level fails."""
        config, index = self.config, len(level["chunks"])
        videos, concurrency = planned[index], len(planned[0])
        name = f"concurrency {concurrency}"
        chunk_dir = self.run_dir / level["dir"] / chunk_dir_name(index)
        chunk_dir.mkdir(parents=True)
        dataset = chunk_dir / CHUNK_DATASET
        dataset.write_bytes(b"".join(b"".join(self.data.sessions[v]) for v in videos))
        shared = {f.name for f in fields(LevelSpec)} & vars(config).keys()  # as open_run set
        spec = LevelSpec(**{**{k: getattr(config, k) for k in shared}, "url": url,
                            "dataset": dataset.resolve(), "concurrency": concurrency,
                            "sessions": len(videos), "artifact_dir": chunk_dir.resolve()})
        before = scrape_frontend(url)
        summary = self.run_aiperf(spec, sum(len(self.data.sessions[v]) for v in videos), bound,
                                  deadline)
        found = chunk_evidence(chunk_dir, before, scrape_frontend(url), config.attribute_workers)
        entry = {"dir": chunk_dir.name, "videos": videos, "summary": asdict(summary),
                 "attempt": self.attempt, **({"frontend": found} if found else {})}
        lengths = length_check(chunk_dir, config.output_tokens)
        if lengths:
            level["output_lengths"] = lengths
            self.say(f"{name}: FLAGGED {lengths['other']} of {lengths['requests']} requests got "
                     f"other than {config.output_tokens} output tokens (min {lengths['min']}, "
                     f"max {lengths['max']})")
        facts = config.deployment  # how many workers serve the graph, where it says so
        workers = next((int(facts[k]) for k in WORKER_COUNT_FACTS
                        if str(facts.get(k, "")).isdigit()), None)
        problems = _level_problems(summary, lengths, config, chunk_dir) + routing_problems(
            found.get("routing"), workers, bool(config.affinity))
        if problems:
            level.update(level_evidence(chunk_dir.parent, [*level["chunks"], entry]))
            raise SweepError(f"{name}: {'; '.join(problems)}")
        level["chunks"].append(entry)
        self.save()
        interval = replicate_interval(self.rates(level))
        self.say(f"{name}, chunk {index + 1} of at most {len(planned)}: "
                 f"{summary.request_throughput:.2f} req/s; " + (
                     f"{interval.mean:.2f} req/s so far, 95% interval [{interval.low:.2f}, "
                     f"{interval.high:.2f}] (+-{interval.relative_half_width:.1%})"
                     if interval else "no interval before a second chunk"))

    def run_aiperf(self, spec: LevelSpec, requests: int, bound: float, deadline: float
                   ) -> LevelSummary:
        """One chunk's AIPerf; each heartbeat relays progress and stops at the first failure (it
        fails the level anyway): a stall costs a request timeout, not the chunks' shared `bound`."""
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
                            f"{name} ran longer than {bound:g} s; raise --level-timeout or "
                            f"check the endpoint (AIPerf output: {log})")
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

    def stop(self, level: Mapping[str, Any], planned: Sequence[list[str]]) -> str | None:
        return stopped_by(self.rates(level), len(planned) - len(level["chunks"]), self.config)

    @staticmethod
    def rates(level: Mapping[str, Any]) -> list[float]:
        return [c["summary"]["request_throughput"] for c in level["chunks"]]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------
# CLI


def register(subparsers: argparse._SubParsersAction) -> None:
    """The sweep's options: SweepConfig's (`option`), then what builds its dataset."""
    p = subparsers.add_parser(
        "sweep", help="run AIPerf at each concurrency level (resumable)", description=__doc__)
    for f in fields(SweepConfig):
        if "flag" in f.metadata:
            kwargs = dict(f.metadata)
            # argparse appends to a list of its own
            default = [] if kwargs.get("action") == "append" else f.default
            p.add_argument(kwargs.pop("flag"), dest=f.name, default=default, **kwargs)
    src = p.add_argument_group("dataset (built in the run directory)")
    src.add_argument("--videos", type=Path, help="directory made by `videos`")
    src.add_argument("--video-base-url", help="URL the videos are served from")
    src.add_argument("--video-count", type=int, help="videos to use")
    src.add_argument("--text-standin-tokens", type=int,
                     help="text-only: a ~N-token per-video block instead of the video")
    src.add_argument("--questions-per-video", type=int,
                     default=SEED_SHAPE.questions_per_video,
                     help=f"default {SEED_SHAPE.questions_per_video}")
    p.add_argument("--follow-command",
                   help="the command that follows this sweep's log, printed at its start")
    p.set_defaults(func=_run)


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    """The run object straight from the parsed options (the dataset comes later)."""
    given = {f.name: getattr(args, f.name) for f in fields(SweepConfig) if hasattr(args, f.name)}
    return SweepConfig(**{**given, "dataset": Path("."), "concurrencies": tuple(
        args.concurrencies), "notes": tuple(args.notes), "deployment": dict(args.deployment)})


def _datasets_for(args: argparse.Namespace, run_dir: Path) -> Path:
    """The dataset, built in `run_dir` from the video options (or text stand-ins)."""
    videos = args.text_standin_tokens is None
    local = videos and args.videos is not None
    try:
        build_dataset(
            run_dir / DATASET_FILE, video_count=args.video_count,
            questions_per_video=args.questions_per_video, output_tokens=args.output_tokens,
            seed=args.random_seed, text_standin_tokens=args.text_standin_tokens,
            video_refs=video_references(args.videos, args.video_base_url, args.video_count)
            if videos else None,
            video_settings=(load_manifest(args.videos) or {}).get("settings") if local else None,
            video_source=(args.video_base_url or "local files") if videos else None)
    except ValueError as exc:
        raise InputError(BAD_SETTINGS, [f"cannot build the dataset: {exc}"]) from exc
    return run_dir / DATASET_FILE


def _run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    run_dir = resolve_run_dir(config)  # once: a run id of the clock's names one folder
    # How to resume, in words that fit the CLI and the cluster's Job (whose run id is
    # `benchmarkRunId`): a run id of the clock's is not "the same".
    resume = (f"to resume {run_dir}, run it again with the same run id (the cluster's "
              "benchmarkRunId) or --out: finished levels and chunks are kept"
              if args.run_id or args.run_dir else
              f"to resume {run_dir}, rerun the same command with --run-id {run_dir.name}")
    # A Job being stopped (SIGTERM) ends the level cleanly: AIPerf is stopped too.
    with sigterm_as_interrupt():
        try:
            if problems := [p for p in config_problems(config) if not p.startswith("dataset ")]:
                raise InputError(BAD_SETTINGS, problems)
            run_dir.mkdir(parents=True, exist_ok=True)
            config = replace(config, run_dir=run_dir)
            if (run_dir / MANIFEST_NAME).is_file():
                # A resume: check the settings on datasets built aside, so a refusal
                # leaves the earlier run's files as they were.
                with tempfile.TemporaryDirectory(dir=run_dir, prefix=".check-") as aside:
                    open_run(replace(config, dataset=_datasets_for(args, Path(aside))))
            config = replace(config, dataset=_datasets_for(args, run_dir))
            if args.follow_command:
                print(f"follow this sweep: {args.follow_command}", flush=True)
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
            return 1
        except KeyboardInterrupt:
            hint = resume if run_dir.exists() else "nothing started"
            print(f"sweep: interrupted; {hint}", file=sys.stderr)
            return 130
    return 0
