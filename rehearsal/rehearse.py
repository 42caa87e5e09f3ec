"""Local rehearsal: the profiles' comparison as the cluster's `compare` stack runs it, one real
Dynamo frontend per profile on one set of CPU mock workers, beside the seed's table, before any
GPU is spent (docs/rehearsal.md)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.dataset import VideoSource, dataset_lines
from benchmarks.report import REPORT_JSON, build_report, seed_lines
from benchmarks.sweep import (
    MANIFEST_NAME,
    Say,
    SweepConfig,
    SweepError,
    Target,
    dist_version,
    open_run,
    run_sweep,
    sigterm_as_interrupt,
    write_json,
)
from infra.calibration import mock_calibration
from infra.names import InputError
from infra.routing import routing_args
from infra.run import Workload, add_options, option
from infra.settings import Settings, SettingsError, stack_settings
from rehearsal.local_dynamo import (
    LOOPBACK,
    MEMORY_NEEDED,
    MOCK_BLOCK_SIZE,
    LocalDynamo,
    LocalDynamoError,
    find_nats_server,
    mock_model_dir,
    peak_memory,
    preflight_problems,
)

DEFAULT_PROFILES = ("round-robin", "session-affinity")  # the baseline first: gains are over it
# A 30 s, 2 FPS video is thousands of visual tokens; ~8,400 showed the effect clearly (1,600
# was within noise).
STANDIN_TOKENS = 8400
CALIBRATED = mock_calibration()  # the mock workers' time, as the seed's H200s (calibration.py)
# The seed's workload, but each level at most 64 videos per profile (4 blocks at 16, the stop
# rule's least) and a gain within +-10 points: the cluster's +-5 take hours on two cores.
REHEARSAL_WORKLOAD = Workload(videos=64, stop_within_pct=10.0)
REHEARSAL_FILE = "rehearsal.json"
MOCK_REQUEST_SECS = 1.2  # one mocked request at speedup 1, to bound a level generously
FLOOR_REQUESTS = 5  # cache hits timed for the TTFT floor (after one that fills the cache)


@dataclass(frozen=True)
class RehearsalConfig:
    """One rehearsal; each `option` field is an option of `python -m rehearsal` (the workload's
    are the sweep's, with REHEARSAL_WORKLOAD's defaults)."""

    profiles: tuple[str, ...] = option(
        "--profiles", DEFAULT_PROFILES, nargs="+", metavar="STACK",
        help="stacks whose routing to compare on one graph, baseline first (kv-routing too)")
    workload: Workload = REHEARSAL_WORKLOAD
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
    results_root: Path = option("--results-root", Path("results") / "rehearsal", type=Path,
                                help="where the run's folder goes")
    run_id: str | None = option("--run-id", None,
                                help="reuse one to resume (default: the UTC time)")
    level_timeout_secs: float | None = option(
        "--level-timeout", None, type=float, metavar="SECS",
        help="seconds per level (default: three times the expected time + 5 min)")

    def shape(self) -> dict[str, Any]:
        """What the mock was (a resume must match; the sweep's fingerprint holds the rest)."""
        return {"--standin-tokens": self.standin_tokens, "--speedup-ratio": self.speedup_ratio,
                "--decode-speedup-ratio": self.decode_speedup_ratio}


def config_problems(config: RehearsalConfig) -> list[str]:
    """Every bad option, naming it and the fix (the workload's are the sweep's)."""
    c = config
    checks = (
        (not c.profiles, "--profiles needs at least one stack name"),
        (len(set(c.profiles)) != len(c.profiles),
         f"--profiles repeats a stack ({' '.join(c.profiles)})"),
        (c.standin_tokens < MOCK_BLOCK_SIZE, f"--standin-tokens must be at least "
         f"{MOCK_BLOCK_SIZE}, one cache block (got {c.standin_tokens}); a video is thousands "
         "of tokens"),
        (c.speedup_ratio <= 0 or c.decode_speedup_ratio <= 0, "--speedup-ratio and "
         f"--decode-speedup-ratio must be above 0 (got {c.speedup_ratio}, "
         f"{c.decode_speedup_ratio}); 1 keeps the mocker's own timing"),
    )
    return [problem for bad, problem in checks if bad]


def level_timeout(config: RehearsalConfig) -> float:
    """A generous bound on any level: three times its mocked time, plus AIPerf start-ups."""
    if config.level_timeout_secs is not None:
        return config.level_timeout_secs
    w = config.workload
    requests = w.videos * w.questions_per_video * len(config.profiles)
    return 3 * requests * MOCK_REQUEST_SECS / config.speedup_ratio / min(w.concurrencies) + 300


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
        "As the cluster's compare stack: one frontend per profile on the same mock workers, "
        "kept across all levels; each chunk's videos fresh (no cache holds them), the "
        "profiles' chunks alternating block by block, never two at once.",
    ]


def lockstep_notes(manifest: Mapping[str, Any], workers: int) -> list[str]:
    """Levels where round robin kept videos on under three quarters of the workers a video's
    questions can reach (measured at 8: 80% of videos on one worker uncalibrated, 19% and 0%
    in two calibrated runs)."""
    notes, reach = [], min(workers, (manifest.get("workload") or {}).get(
        "questions_per_video", workers))
    for level, state in sorted((manifest.get("levels") or {}).items(), key=lambda i: int(i[0])):
        spread = state.get("routing") or {}
        if spread.get("videos") and spread["mean_workers_per_video"] < 0.75 * reach:
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
    """One rehearsal run: the thin layer that starts the local graph and the sweep."""

    def __init__(self, config: RehearsalConfig, say: Say = print) -> None:
        self.config, self.say = config, say
        run_id = config.run_id or datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        self.run_dir = config.results_root / run_id
        self.model = self.run_dir / "model"  # built by `run`, after the checks
        self.stacks: dict[str, Settings] = {}

    def check(self) -> None:
        """Options, stacks and machine, all problems at once, before anything starts."""
        problems = config_problems(self.config)
        for profile in self.config.profiles:
            try:
                self.stacks[profile] = stack_settings(profile)
            except SettingsError as exc:
                problems += [f"--profiles {profile}: {problem}" for problem in exc.problems]
        problems += preflight_problems(find_nats_server(), self.run_dir,
                                       memory_needed=MEMORY_NEEDED)
        if problems:
            raise InputError("the rehearsal cannot start (nothing was started)", problems)

    @property
    def workers(self) -> int:
        return self.stacks[self.config.profiles[0]].serving.replicas

    def sweep_config(self, urls: Mapping[str, str]) -> SweepConfig:
        cfg = self.config
        return SweepConfig(
            targets=tuple(Target(p, urls.get(p, f"http://{LOOPBACK}"), s.routing.affinity)
                          for p, s in self.stacks.items()),
            source=VideoSource(standin_tokens=cfg.standin_tokens), workload=cfg.workload,
            pause_ms=CALIBRATED.pause_ms, tokenizer=str(self.model.resolve()),
            run_dir=self.run_dir, level_timeout_secs=level_timeout(cfg), attribute_workers=True,
            notes=tuple(modelling_notes(cfg, self.workers)),
            deployment={
                "target": f"local rehearsal on {LOOPBACK} (CPU, no GPU)",
                "routing": "; ".join(f"{p}: {' '.join(routing_args(s.routing))}"
                                     for p, s in self.stacks.items()),
                "mock_workers": self.workers,
                "ai_dynamo": dist_version("ai-dynamo"),
                "shape": cfg.shape(),
            },
        )

    def local_dynamo(self, profiles: Sequence[str], workers: int, work_dir: Path
                     ) -> LocalDynamo:
        return LocalDynamo({p: self.stacks[p].routing for p in profiles}, self.model, workers,
                           work_dir, self.config.speedup_ratio, self.config.decode_speedup_ratio)

    def ttft_floor_ms(self) -> float:
        """Median first-token time of a few cache hits on one idle mock worker: a rehearsed
        TTFT near it is the frontend's and mocker's overhead on this machine, not serving."""
        w = self.config.workload  # a stand-in after those the sweep may send
        heads = VideoSource(standin_tokens=self.config.standin_tokens).heads(
            [w.videos_needed(len(self.config.profiles))], w.seed)
        first = dataset_lines(heads, w, standin=True)[0]["messages"]
        with self.local_dynamo(self.config.profiles[:1], 1, self.run_dir / "ttft-floor") as one:
            one.first_token_ms(first)  # fills the worker's cache
            return statistics.median(one.first_token_ms(first) for _ in range(FLOOR_REQUESTS))

    def run(self) -> None:
        self.check()
        cfg, started = self.config, time.monotonic()
        with peak_memory() as memory, sigterm_as_interrupt():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.say(f"rehearsal {self.run_dir.name} of {', '.join(cfg.profiles)} on one local "
                     f"graph (the sweep says its levels and stop rule); results in "
                     f"{self.run_dir}")
            mock_model_dir(self.model)
            open_run(self.sweep_config({}))  # a resume's refusal, before anything starts
            floor = round(self.ttft_floor_ms(), 1)
            self.say(f"TTFT floor of the mock stack: {floor:.0f} ms (median of "
                     f"{FLOOR_REQUESTS} cache hits on one idle worker)")
            self.say(f"starting one dynamo.frontend per profile and {self.workers} mock workers")
            with self.local_dynamo(cfg.profiles, self.workers, self.run_dir / "stack") as graph:
                run_sweep(self.sweep_config(graph.urls), say=self.say)
            report = build_report([self.run_dir], self.run_dir,
                                  warn=lambda line: self.say(f"report: {line}"),
                                  ttft_floor_ms=floor)
        manifests = {p: json.loads((self.run_dir / p / MANIFEST_NAME).read_text())
                     for p in cfg.profiles}
        # Levels a resume kept: those the sweep left as an earlier attempt finished them.
        kept = sum(m["levels"][str(level)].get("attempt", 0) < len(m["attempts"]) - 1
                   for m in manifests.values() for level in cfg.workload.concurrencies)
        notes = [note for p, m in manifests.items()
                 if not self.stacks[p].routing.affinity
                 and self.stacks[p].routing.router_mode == "round-robin"
                 for note in lockstep_notes(m, self.workers)]
        summary = rehearsal_summary(cfg, time.monotonic() - started, memory.peak, kept, floor,
                                    notes)
        write_json(self.run_dir / REHEARSAL_FILE, summary)
        seed = seed_lines(json.loads(report.with_name(REPORT_JSON).read_text()))
        for line in [done_line(summary), *notes, *seed, f"report: {report}"]:
            self.say(line)


def rehearsal_summary(config: RehearsalConfig, wall_secs: float, peak_bytes: int, kept: int,
                      ttft_floor_ms: float, notes: Sequence[str]) -> dict[str, Any]:
    """What the run cost and measured beyond the sweep (its numbers are in the report).
    `kept`: levels a resumed run took from the earlier attempt (not in this run's time)."""
    return {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
        "wall_time_secs": round(wall_secs, 1),
        "peak_memory_bytes": peak_bytes,
        "levels_kept": kept,
        "levels_total": len(config.profiles) * len(config.workload.concurrencies),
        "ttft_floor_ms": ttft_floor_ms,
        "notes": list(notes),
    }


def done_line(summary: Mapping[str, Any]) -> str:
    kept = summary["levels_kept"]
    resumed = (f"; resumed: {kept} of {summary['levels_total']} levels kept from the earlier "
               "run, so time and memory cover only the levels run now" if kept else "")
    return (f"rehearsal done in {summary['wall_time_secs'] / 60:.1f} min, peak memory "
            f"{summary['peak_memory_bytes'] / 2**30:.2f} GiB (this process and all it started"
            f"{resumed})")


def parse_config(argv: list[str] | None = None) -> RehearsalConfig:
    """RehearsalConfig from the command line: its options and the workload's."""
    parser = argparse.ArgumentParser(
        prog="python -m rehearsal", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=__doc__)
    add_options(parser, RehearsalConfig)
    add_options(parser, Workload, REHEARSAL_WORKLOAD)
    args = {k: tuple(v) if isinstance(v, list) else v
            for k, v in vars(parser.parse_args(argv)).items()}  # nargs="+" options as tuples
    workload = {k: args.pop(k) for k in list(args) if k in Workload.__dataclass_fields__}
    return replace(RehearsalConfig(**args), workload=Workload(**workload))


def main(argv: list[str] | None = None) -> int:
    rehearsal = Rehearsal(parse_config(argv), say=lambda line: print(line, flush=True))
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
