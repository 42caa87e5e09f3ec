"""Local rehearsal: each profile's benchmark as the cluster runs it, against a real Dynamo frontend
with CPU mock workers, beside the seed's table, before any GPU is spent (docs/rehearsal.md)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.dataset import DATASET_FILE, build_dataset
from benchmarks.report import REPORT_JSON, build_report, seed_lines
from benchmarks.sweep import (
    MANIFEST_NAME,
    LevelRun,
    Say,
    SweepConfig,
    SweepError,
    dist_version,
    open_run,
    option,
    run_sweep,
    sigterm_as_interrupt,
    write_json,
)
from infra.calibration import mock_calibration
from infra.names import SEED_SHAPE, InputError, levels_problems
from infra.routing import routing_args
from infra.settings import Settings, SettingsError, stack_settings
from rehearsal.local_dynamo import (
    LOOPBACK,
    MEMORY_NEEDED,
    MOCK_BLOCK_SIZE,
    LocalDynamo,
    LocalDynamoError,
    find_nats_server,
    local_frontend_command,
    mock_model_dir,
    peak_memory,
    preflight_problems,
    stop_descendants,
)

# kv-routing too with --profiles: a third stack side by side does not fit the 12 minutes.
DEFAULT_PROFILES = ("round-robin", "session-affinity")  # the baseline first: gains are over it
# Requests in flight on the machine at once, over the stacks that run side by side: the
# seed's top level, which two cores carried in the measured rehearsals.
IN_FLIGHT_BUDGET = 16
# A 30 s, 2 FPS video is thousands of visual tokens; ~8,400 showed the effect clearly (1,600
# was within noise).
STANDIN_TOKENS = 8400
CALIBRATED = mock_calibration()  # the mock workers' time, as the seed's H200s (calibration.py)
REHEARSAL_FILE = "rehearsal.json"
MOCK_REQUEST_SECS = 1.2  # one mocked request at speedup 1, to bound a level generously
FLOOR_REQUESTS = 5  # cache hits timed for the TTFT floor (after one that fills the cache)


@dataclass(frozen=True)
class RehearsalConfig:
    """One rehearsal; each field is an option of `python -m rehearsal` (the sweep's
    `option`), so the parsed options are the config as they are."""

    profiles: tuple[str, ...] = option(
        "--profiles", DEFAULT_PROFILES, nargs="+", metavar="STACK",
        help="stacks to rehearse, baseline first (kv-routing too, for example)")
    # 64 videos give every level of the seed's table at least three chunks of disjoint videos
    # (four at concurrency 16) for the sweep's stop rule.
    videos: int = option("--videos", 64, type=int,
                         help=f"videos a level may use (the seed's: {SEED_SHAPE.videos.count})")
    questions_per_video: int = option(
        "--questions-per-video", SEED_SHAPE.questions_per_video, type=int,
        help="questions per video, each a request after the last one's answer")
    concurrencies: tuple[int, ...] = option(
        "--concurrency", SEED_SHAPE.concurrencies, type=int, nargs="+", metavar="N",
        help="levels, the seed's by default")
    standin_tokens: int = option("--standin-tokens", STANDIN_TOKENS, type=int,
                                 help="tokens of each video's text stand-in")
    speedup_ratio: float = option(
        "--speedup-ratio", CALIBRATED.speedup_ratio, type=float,
        help="the mocker's speed-up of every step; the default makes a first visit cost what "
        "a video costs an H200 (infra/calibration.py)")
    decode_speedup_ratio: float = option(
        "--decode-speedup-ratio", CALIBRATED.decode_speedup_ratio, type=float,
        help="the mocker's extra speed-up of decode steps; the default makes a cache hit, "
        "with the mean pause before it, cost the seed's")
    # Looser than the cluster's 3%: each chunk pays AIPerf's start-up on two shared cores, and
    # +-3% took ten or more chunks per level (14 for round robin at 4), beyond the 12 minutes.
    stop_within_pct: float = option(
        "--stop-within-pct", 10.0, type=float,
        help="a level stops once its request throughput's 95%% interval is within this many "
        "percent (after at least three chunks)")
    full: bool = option("--full", False, action="store_true",
                        help="every level sends every whole chunk of videos: no early stop")
    results_root: Path = option("--results-root", Path("results") / "rehearsal", type=Path,
                                help="where the run's folder goes")
    run_id: str | None = option("--run-id", None,
                                help="reuse one to resume (default: the UTC time)")
    level_timeout_secs: float | None = option(
        "--level-timeout", None, type=float, metavar="SECS",
        help="seconds per level (default: three times the expected time + 5 min)")

    def shape(self) -> dict[str, Any]:
        """What every finished level of a run was measured with (a resume must match; the
        sweep's own fingerprint holds the stop rule)."""
        return {"--videos": self.videos, "--questions-per-video": self.questions_per_video,
                "--standin-tokens": self.standin_tokens, "--speedup-ratio": self.speedup_ratio,
                "--decode-speedup-ratio": self.decode_speedup_ratio,
                "output tokens": SEED_SHAPE.output_tokens}


def config_problems(config: RehearsalConfig) -> list[str]:
    """Every bad option, naming it and the fix."""
    c, top = config, max(config.concurrencies, default=0)
    checks = (
        (not c.profiles, "--profiles needs at least one stack name"),
        (len(set(c.profiles)) != len(c.profiles),
         f"--profiles repeats a stack ({' '.join(c.profiles)})"),
        (c.videos < 1, f"--videos must be at least 1 (got {c.videos})"),
        (c.questions_per_video < 1,
         f"--questions-per-video must be at least 1 (got {c.questions_per_video})"),
        (1 <= c.videos < top, f"--videos {c.videos} fill no chunk at --concurrency {top} (a "
         "chunk is as many videos as the level's concurrency): use more videos or lower levels"),
        (c.standin_tokens < MOCK_BLOCK_SIZE, f"--standin-tokens must be at least "
         f"{MOCK_BLOCK_SIZE}, one cache block (got {c.standin_tokens}); a video is thousands "
         "of tokens"),
        (c.speedup_ratio <= 0 or c.decode_speedup_ratio <= 0, "--speedup-ratio and "
         f"--decode-speedup-ratio must be above 0 (got {c.speedup_ratio}, "
         f"{c.decode_speedup_ratio}); 1 keeps the mocker's own timing"),
    )
    return ([problem for bad, problem in checks if bad]
            + [f"--concurrency {problem}" for problem in levels_problems(c.concurrencies)])


def level_timeout(config: RehearsalConfig, concurrency: int) -> float:
    """A generous bound on one level: three times the mocked time, plus AIPerf start-up."""
    if config.level_timeout_secs is not None:
        return config.level_timeout_secs
    requests = config.videos * config.questions_per_video
    return 3 * requests * MOCK_REQUEST_SECS / config.speedup_ratio / concurrency + 300


class Schedule:
    """A profile's sweep (a thread) starts a level when its batch is due: every earlier batch's
    profiles have moved past their level (a kept level counts as passed)."""

    def __init__(self, profiles: Sequence[str], levels: Sequence[int]) -> None:
        # Level by level, the profiles that run it side by side: as many as keep the requests
        # in flight within IN_FLIGHT_BUDGET (one at a time above it; each sees the same load).
        self.levels, self.batches = list(levels), []
        for level in levels:
            size = max(1, IN_FLIGHT_BUDGET // max(1, level))  # a bad level is reported by `check`
            self.batches += [(level, tuple(profiles[i:i + size]))
                             for i in range(0, len(profiles), size)]
        self.passed: set[tuple[str, int]] = set()
        self.stopped = False
        self.changed = threading.Condition()

    def wait_turn(self, profile: str, level: int) -> None:
        with self.changed:
            self.passed |= {(profile, lv) for lv in self.levels[:self.levels.index(level)]}
            self.changed.notify_all()
            due = next(i for i, (lv, group) in enumerate(self.batches)
                       if lv == level and profile in group)
            earlier = {(p, lv) for lv, group in self.batches[:due] for p in group}
            self.changed.wait_for(lambda: self.stopped or earlier <= self.passed)
            if self.stopped:
                raise SweepError(f"{profile}: not started, the rehearsal is stopping")

    def finish(self, profile: str) -> None:
        with self.changed:
            self.passed |= {(profile, lv) for lv in self.levels}
            self.changed.notify_all()

    def stop(self) -> None:
        with self.changed:
            self.stopped = True
            self.changed.notify_all()


def modelling_notes(config: RehearsalConfig, workers: int) -> list[str]:
    return [
        f"Local rehearsal: real dynamo.frontend with {workers} CPU mock workers "
        f"(dynamo.mocker, speedup {config.speedup_ratio:g}, decode speedup "
        f"{config.decode_speedup_ratio:g}: calibrated so that a first visit costs what a "
        "video costs an H200 in the seed's concurrency-1 row), not the Cosmos3 NIM.",
        f"Each question after a video's first waits a seeded 0-{CALIBRATED.pause_ms:g} ms "
        "(a mock request's time is fixed by its answer length, an H200's varies: without "
        "it round robin falls into step with the videos); decode pays the mean back.",
        f"Each video is a ~{config.standin_tokens}-token per-video text block before the "
        "question (the mock model is text-only); a worker reuses it from its prefix cache "
        "only if it processed that video before.",
        "Each concurrency level ran on a freshly started frontend and mocker (cold caches), "
        "so no level inherits another level's cached videos; profiles ran a level side by "
        f"side on their own stacks while at most {IN_FLIGHT_BUDGET} requests were in flight "
        "on the machine.",
    ]


def lockstep_notes(manifest: Mapping[str, Any], workers: int) -> list[str]:
    """Levels where round robin kept videos on under three quarters of the fleet (measured
    at 8: 80% of videos on one worker uncalibrated, 19% and 0% in two calibrated runs)."""
    notes = []
    for level, state in sorted((manifest.get("levels") or {}).items(), key=lambda i: int(i[0])):
        spread = state.get("routing") or {}
        if spread.get("videos") and spread["mean_workers_per_video"] < 0.75 * workers:
            lockstep = " (concurrency = fleet size)" if int(level) == workers else ""
            notes.append(
                f"Round robin at concurrency {level}{lockstep} kept "
                f"{spread['share_single_worker']:.0%} of videos on one worker "
                f"({spread['mean_workers_per_video']:.1f} workers per video of {workers}): the "
                "mock workers' even request times (a fixed answer length, which the seeded "
                "pause before each question only partly breaks) let round robin's rotation "
                "fall into step with the in-flight videos, so each video's next question "
                "reached the worker that served its last one. Real workers' timing jitter "
                f"breaks this lockstep, so the gain over round robin at concurrency {level} "
                "understates what real workers would show.")
    return notes


class Rehearsal:
    """One rehearsal run: the thin layer that starts stacks and the profiles' sweeps."""

    def __init__(self, config: RehearsalConfig, say: Say = print) -> None:
        self.config, self.say = config, say
        run_id = config.run_id or datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        self.run_dir = config.results_root / run_id
        self.model = self.run_dir / "model"  # built by `run`, after the checks
        self.stacks: dict[str, Settings] = {}
        self.schedule = Schedule(config.profiles, config.concurrencies)

    def check(self) -> None:
        """Options, stacks and machine, all problems at once, before anything starts."""
        problems = config_problems(self.config)
        for profile in self.config.profiles:
            try:
                self.stacks[profile] = stack_settings(profile)
            except SettingsError as exc:
                problems += [f"--profiles {profile}: {problem}" for problem in exc.problems]
        widest = max((len(group) for _, group in self.schedule.batches), default=1)
        problems += preflight_problems(find_nats_server(), self.run_dir,
                                       memory_needed=widest * MEMORY_NEEDED)
        if problems:
            raise InputError("the rehearsal cannot start (nothing was started)", problems)

    def datasets(self, folder: Path) -> Path:
        cfg = self.config
        build_dataset(folder / DATASET_FILE, video_count=cfg.videos,
                      questions_per_video=cfg.questions_per_video,
                      text_standin_tokens=cfg.standin_tokens,
                      output_tokens=SEED_SHAPE.output_tokens, pause_ms=CALIBRATED.pause_ms,
                      video_source="text stand-in (local rehearsal)")
        return folder / DATASET_FILE

    def sweep_config(self, stack: Settings, dataset: Path) -> SweepConfig:
        cfg = self.config
        return SweepConfig(
            url=f"http://{LOOPBACK}", dataset=dataset,
            profile=stack.profile, affinity=stack.routing.affinity,
            concurrencies=cfg.concurrencies, output_tokens=SEED_SHAPE.output_tokens,
            stop_within_pct=cfg.stop_within_pct, full=cfg.full,
            tokenizer=str(self.model.resolve()), run_dir=self.run_dir / stack.profile,
            attribute_workers=True, notes=tuple(modelling_notes(cfg, stack.serving.replicas)),
            deployment={
                "target": f"local rehearsal on {LOOPBACK} (CPU, no GPU)",
                "frontend_command": local_frontend_command("python", stack.routing, 0),
                "routing": " ".join(routing_args(stack.routing)),
                "mock_workers": stack.serving.replicas,
                "ai_dynamo": dist_version("ai-dynamo"),
                "cold_caches_per_level": True,
                "shape": cfg.shape(),
            },
            level_target=lambda level, _dir: self.local_stack(stack, level),
        )

    def local_dynamo(self, stack: Settings, workers: int, work_dir: Path) -> LocalDynamo:
        return LocalDynamo(stack.routing, self.model, workers, work_dir,
                           self.config.speedup_ratio, self.config.decode_speedup_ratio)

    @contextmanager
    def local_stack(self, stack: Settings, level: int) -> Iterator[LevelRun]:
        """The sweep's target for a level once the schedule says so: a fresh, cold stack."""
        self.schedule.wait_turn(stack.profile, level)
        self.say(f"{stack.profile}: starting dynamo.frontend + {stack.serving.replicas} mock "
                 f"workers for concurrency {level}")
        work_dir = self.run_dir / stack.profile / "stack" / f"concurrency-{level}"
        with self.local_dynamo(stack, stack.serving.replicas, work_dir) as local:
            yield LevelRun(local.url, timeout_secs=level_timeout(self.config, level))

    def ttft_floor_ms(self, dataset: Path) -> float:
        """Median first-token time of a few cache hits on one idle mock worker: a rehearsed
        TTFT near it is the frontend's and mocker's overhead on this machine, not serving."""
        first = json.loads(dataset.read_text().splitlines()[0])["messages"]
        stack = self.stacks[self.config.profiles[0]]
        with self.local_dynamo(stack, 1, self.run_dir / "ttft-floor") as one:
            one.first_token_ms(first)  # fills the worker's cache
            return statistics.median(one.first_token_ms(first) for _ in range(FLOOR_REQUESTS))

    def sweep_profile(self, profile: str, dataset: Path) -> None:
        try:
            run_sweep(self.sweep_config(self.stacks[profile], dataset),
                      say=lambda line: self.say(f"{profile}: {line}"))
        except BaseException:
            self.schedule.stop()  # before `finish` lets another profile's level start
            raise
        finally:
            self.schedule.finish(profile)

    def sweep_side_by_side(self, dataset: Path) -> None:
        """On a failure or Ctrl-C every process started is stopped, as a thread can't be
        interrupted, and twice: the second catches what a sweep's thread started meanwhile."""
        with ThreadPoolExecutor(len(self.config.profiles), thread_name_prefix="sweep") as pool:
            futures = [pool.submit(self.sweep_profile, p, dataset) for p in self.config.profiles]
            try:
                for future in wait(futures, return_when=FIRST_EXCEPTION).done:
                    future.result()
            except BaseException:
                self.schedule.stop()
                stop_descendants()
                pool.shutdown(cancel_futures=True)
                stop_descendants()
                raise

    def run(self) -> None:
        self.check()
        cfg, started = self.config, time.monotonic()
        with peak_memory() as memory, sigterm_as_interrupt():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.say(f"rehearsal {self.run_dir.name} of {', '.join(cfg.profiles)} (each "
                     f"sweep says its levels and stop rule); results in {self.run_dir}")
            self.say(f"schedule (at most {IN_FLIGHT_BUDGET} requests in flight at once):")
            for level, group in self.schedule.batches:
                self.say(f"  concurrency {level}: {' + '.join(group)}")
            mock_model_dir(self.model)
            # The sweeps' own refusals (a resume's other settings too) before a stack starts,
            # on datasets built aside: a refusal leaves an earlier run as it was.
            with tempfile.TemporaryDirectory() as aside:
                built = self.datasets(Path(aside))
                for p in cfg.profiles:
                    open_run(self.sweep_config(self.stacks[p], built))
            dataset = self.datasets(self.run_dir)
            floor = round(self.ttft_floor_ms(dataset), 1)
            self.say(f"TTFT floor of the mock stack: {floor:.0f} ms (median of "
                     f"{FLOOR_REQUESTS} cache hits on one idle worker)")
            self.sweep_side_by_side(dataset)
            report = build_report([self.run_dir / p for p in cfg.profiles], self.run_dir,
                                  warn=lambda line: self.say(f"report: {line}"),
                                  ttft_floor_ms=floor)
        kept, notes = 0, []
        for stack in self.stacks.values():
            m = json.loads((self.run_dir / stack.profile / MANIFEST_NAME).read_text())
            # Levels a resume kept: those the sweep left as an earlier attempt finished them.
            kept += sum(m["levels"][str(level)].get("attempt", 0) < len(m["attempts"]) - 1
                        for level in cfg.concurrencies)
            if stack.routing.router_mode == "round-robin" and not stack.routing.affinity:
                notes += lockstep_notes(m, stack.serving.replicas)
        summary = rehearsal_summary(cfg, time.monotonic() - started, memory.peak, kept, floor,
                                    self.schedule, notes)
        write_json(self.run_dir / REHEARSAL_FILE, summary)
        seed = seed_lines(json.loads(report.with_name(REPORT_JSON).read_text()))
        for line in [done_line(summary), *notes, *seed, f"report: {report}"]:
            self.say(line)


def rehearsal_summary(config: RehearsalConfig, wall_secs: float, peak_bytes: int, kept: int,
                      ttft_floor_ms: float, schedule: Schedule, notes: Sequence[str]
                      ) -> dict[str, Any]:
    """What the run cost and measured beyond the sweeps (their numbers are in the report).
    `kept`: levels a resumed run took from the earlier attempt (not in this run's time)."""
    return {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
        "wall_time_secs": round(wall_secs, 1),
        "peak_memory_bytes": peak_bytes,
        "levels_kept": kept,
        "levels_total": len(config.profiles) * len(config.concurrencies),
        "ttft_floor_ms": ttft_floor_ms,
        "schedule": [{"concurrency": lv, "profiles": list(g)} for lv, g in schedule.batches],
        "notes": list(notes),
    }


def done_line(summary: Mapping[str, Any]) -> str:
    kept = summary["levels_kept"]
    resumed = (f"; resumed: {kept} of {summary['levels_total']} levels kept from the earlier "
               "run, so time and memory cover only the levels run now" if kept else "")
    return (f"rehearsal done in {summary['wall_time_secs'] / 60:.1f} min, peak memory "
            f"{summary['peak_memory_bytes'] / 2**30:.2f} GiB (this process and all it started"
            f"{resumed})")


def main(argv: list[str] | None = None) -> int:
    # RehearsalConfig's options, each named (`dest`) and defaulted as its field; an option
    # left unset whose default is None keeps the field's None.
    parser = argparse.ArgumentParser(
        prog="python -m rehearsal", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=__doc__)
    for f in fields(RehearsalConfig):
        kwargs = dict(f.metadata)
        default = argparse.SUPPRESS if f.default is None else f.default
        parser.add_argument(kwargs.pop("flag"), dest=f.name, default=default, **kwargs)
    args = vars(parser.parse_args(argv)).items()  # nargs="+" options as tuples
    config = RehearsalConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in args})
    rehearsal = Rehearsal(config, say=lambda line: print(line, flush=True))
    try:
        rehearsal.run()
        return 0
    except InputError as exc:
        print(f"rehearse: error: {exc}", file=sys.stderr)
        return 2
    except (LocalDynamoError, SweepError) as exc:
        code, what = 1, f"error: {exc}\nEvery process the rehearsal started was stopped"
    except KeyboardInterrupt:
        code, what = 130, "interrupted; every process it started was stopped"
    print(f"rehearse: {what}; rerun with --run-id {rehearsal.run_dir.name} to resume "
          "(finished levels are kept).", file=sys.stderr)
    return code

