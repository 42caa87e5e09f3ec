"""`rehearse`: the whole benchmark on this machine, against a real Dynamo frontend.

For each routing profile (stack) it starts NATS, `dynamo.mocker` with the stack's worker
count and `dynamo.frontend` with the stack's routing flags, all on 127.0.0.1
(benchmarks/local_dynamo.py), fresh for every level (cold caches: a mock worker's cache
holds every video of a rehearsal), and runs the cluster's sweep on a scaled-down text
stand-in dataset through the sweep's `level_target` hook; then the comparison report,
beside the seed's table. What it models, its layout and limits: docs/rehearsal.md (each
run's manifest notes say the same). Rerunning with the same `--run-id` resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.dataset import build_run_datasets
from benchmarks.local_dynamo import (
    MOCK_BLOCK_SIZE,
    LocalDynamo,
    LocalDynamoConfig,
    LocalDynamoError,
    MockFleet,
    find_nats_server,
    local_frontend_command,
)
from benchmarks.preflight import PortRequest, run_preflight
from benchmarks.processes import (
    LOOPBACK,
    PeakMemory,
    cpu_times,
    free_port,
    sigterm_as_interrupt,
)
from benchmarks.report import ProfileRun, build_report, gain_pct, read_run
from benchmarks.sweep import (
    MANIFEST_NAME,
    LevelRun,
    SweepConfig,
    SweepError,
    dist_version,
    level_complete,
    run_sweep,
    write_json,
)
from benchmarks.tiny_model import mock_model_dir
from infra.benchmark_shape import SEED_SHAPE
from infra.calibration import (
    SEED_16_LATENCY_P50_MS,
    SEED_16_TTFT_P90_MS,
    SEED_TABLE,
    mock_calibration,
    relative_error,
)
from infra.routing import PROFILES, routing_args
from infra.rules import InputError, levels_problems
from infra.settings import Settings, SettingsError
from infra.stack_files import stack_settings

# Scaled-down defaults: the seed's 200 videos x 20 questions at 1..16 takes hours on mock
# workers calibrated to H200 time too (a request takes ~0.85 s), so 640 requests at
# concurrency 4 alone would take 3 minutes; two of the seed's levels, 8 and 16 (its largest
# effect), keep the default rehearsal of three profiles under 10 minutes on two cores.
REHEARSAL_VIDEOS = 32
REHEARSAL_CONCURRENCIES = (8, 16)
# Visual tokens of a 30 s, 2 FPS video are in the thousands; ~8,400 is where the effect
# showed clearly in DESIGN.md section 6 (1,600 was within noise).
STANDIN_TOKENS = 8400
# The mock workers' time, calibrated to the seed's H200s (infra/calibration.py).
CALIBRATED = mock_calibration()
RESULTS_ROOT = Path("results") / "rehearsal"
REHEARSAL_FILE = "rehearsal.json"
# Baseline first: the report computes every other profile's gain over the first one.
# Every shipped routing profile, the recipe's baseline first.
DEFAULT_PROFILES = tuple(PROFILES)
# Rough wall time of one mocked request at speedup 1 (128 tokens decode + prefill), used
# only to bound a level's run time generously.
MOCK_REQUEST_SECS = 1.2

Say = Callable[[str], None]
# A run's measured dataset and its warm-up one (None without warm-up videos).
Datasets = tuple[Path, Path | None]


@dataclass(frozen=True)
class RehearsalConfig:
    profiles: tuple[str, ...] = DEFAULT_PROFILES
    videos: int = REHEARSAL_VIDEOS
    questions_per_video: int = SEED_SHAPE.questions_per_video
    concurrencies: tuple[int, ...] = REHEARSAL_CONCURRENCIES
    standin_tokens: int = STANDIN_TOKENS
    output_tokens: int = SEED_SHAPE.output_tokens
    warmup_videos: int = SEED_SHAPE.warmup_videos
    speedup_ratio: float = CALIBRATED.speedup_ratio
    decode_speedup_ratio: float = CALIBRATED.decode_speedup_ratio
    results_root: Path = RESULTS_ROOT
    run_id: str | None = None
    frontend_port: int | None = None
    nats_port: int | None = None
    level_timeout_secs: float | None = None
    memory_needed: int | None = None

    @property
    def requests_per_level(self) -> int:
        return self.videos * self.questions_per_video

    def shape(self) -> dict[str, Any]:
        """The options every finished level of a run was measured with."""
        return {"--videos": self.videos, "--questions-per-video": self.questions_per_video,
                "--standin-tokens": self.standin_tokens, "--speedup-ratio": self.speedup_ratio,
                "--decode-speedup-ratio": self.decode_speedup_ratio,
                "--warmup-videos": self.warmup_videos, "output tokens": self.output_tokens}


def rerun_problems(config: RehearsalConfig, run_dir: Path) -> list[str]:
    """Why resuming `run_dir` with `config` would mix two setups (empty: it wouldn't).
    Read from the profiles' sweep manifests, which record the shape in `deployment`; the
    sweep refuses such a resume too, but only after this run's dataset was rebuilt."""
    before: dict[str, Any] = {}
    for manifest in sorted(run_dir.glob(f"*/{MANIFEST_NAME}")):
        before = (_read_manifest(manifest.parent).get("deployment") or {}).get("shape") or {}
        if before:
            break
    changed = [f"{k} {before.get(k)} -> {v}" for k, v in config.shape().items()
               if before and before.get(k) != v]
    if not changed:
        return []
    return [f"run {run_dir.name} in {run_dir.parent} was made with other settings "
            f"({'; '.join(changed)}); its finished levels can't be mixed with new ones: use "
            "a new --run-id, or the run's own settings to resume it"]


def config_problems(config: RehearsalConfig) -> list[str]:
    """Every bad option, naming it and the fix."""
    problems = []
    if not config.profiles:
        problems.append("--profiles needs at least one stack name")
    if len(set(config.profiles)) != len(config.profiles):
        problems.append(f"--profiles repeats a stack ({' '.join(config.profiles)})")
    if config.videos < 1:
        problems.append(f"--videos must be at least 1 (got {config.videos})")
    if config.warmup_videos < 0:
        problems.append(f"--warmup-videos must be at least 0 (got {config.warmup_videos})")
    if config.questions_per_video < 1:
        problems.append(f"--questions-per-video must be at least 1 (got "
                        f"{config.questions_per_video})")
    problems += [f"--concurrency {p}" for p in levels_problems(config.concurrencies)]
    if config.standin_tokens < MOCK_BLOCK_SIZE:
        problems.append(f"--standin-tokens must be at least {MOCK_BLOCK_SIZE}, one cache "
                        f"block (got {config.standin_tokens}); a video is thousands of tokens")
    if config.speedup_ratio <= 0 or config.decode_speedup_ratio <= 0:
        problems.append(f"--speedup-ratio and --decode-speedup-ratio must be above 0 (got "
                        f"{config.speedup_ratio}, {config.decode_speedup_ratio}); 1 keeps "
                        "the mocker's own timing")
    if config.frontend_port is not None and config.frontend_port == config.nats_port:
        problems.append("--frontend-port and --nats-port must differ")
    return problems


def level_timeout(config: RehearsalConfig, concurrency: int) -> float:
    """A generous bound on one level: three times the mocked time, plus AIPerf start-up."""
    if config.level_timeout_secs is not None:
        return config.level_timeout_secs
    mocked = config.requests_per_level * MOCK_REQUEST_SECS / config.speedup_ratio / concurrency
    return 3 * mocked + 300


def busy_share(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    total = after[1] - before[1]
    return None if total <= 0 else (after[0] - before[0]) / total


def cpu_busy(run: ProfileRun, concurrency: int) -> float | None:
    """The share of the machine's CPU a level used, as its `local_stack` measured it."""
    level = run.manifest["levels"][str(concurrency)]
    return (level.get("measured") or {}).get("cpu_busy")


def direction_notes(baseline: ProfileRun, affinity: ProfileRun, workers: int) -> list[str]:
    """What the rehearsal shows at its highest concurrency, and why when it is not the
    seed's direction (affinity: more req/s and lower TTFT p50). Pure: runs in."""
    common = sorted(set(baseline.levels) & set(affinity.levels))
    if not common:
        return []
    top = common[-1]
    rr, af = baseline.levels[top], affinity.levels[top]
    sticky_rr, sticky_af = baseline.stickiness[top], affinity.stickiness[top]
    gain = gain_pct(af.request_throughput, rr.request_throughput)
    ttft_rr, ttft_af = rr.ttft_p50_ms, af.ttft_p50_ms
    facts = (
        f"at concurrency {top}: {af.request_throughput:.2f} vs "
        f"{rr.request_throughput:.2f} req/s ({gain:+.1f}%), TTFT p50 "
        f"{ttft_af or 0:.0f} vs {ttft_rr or 0:.0f} ms ({affinity.label} vs {baseline.label})"
    )
    notes = []
    faster = gain is not None and gain > 0
    quicker = ttft_rr is not None and ttft_af is not None and ttft_af < ttft_rr
    if faster and quicker:
        notes.append(f"Direction as in the seed {facts}.")
    else:
        notes.append(f"NOT the seed's direction {facts}. Why, from the measurements:")
        if sticky_af["share_single_worker"] < 1.0:
            notes.append(
                f"- affinity did not hold: only {sticky_af['share_single_worker']:.0%} of "
                "videos stayed on one worker, so the frontend ignored or lost the session "
                "binding (check the --router-session-affinity-ttl-secs flag in its log)."
            )
        hits_af, hits_rr = af.prompt_cache_read_pct, rr.prompt_cache_read_pct
        if hits_af is not None and hits_rr is not None:
            if hits_af <= hits_rr:
                notes.append(
                    f"- prefix-cache reuse was no better with affinity ({hits_af:.0f}% "
                    f"vs {hits_rr:.0f}% of prompt tokens), so there was no work to save."
                )
            else:
                notes.append(
                    f"- affinity did save work: {hits_af:.0f}% vs "
                    f"{hits_rr:.0f}% of prompt tokens came from the worker's cache."
                )
        busy = max(v for v in (cpu_busy(affinity, top), cpu_busy(baseline, top), 0.0)
                   if v is not None)
        if busy >= 0.85:
            notes.append(
                f"- the machine was CPU-bound ({busy:.0%} of all cores busy during the level): "
                "AIPerf, the frontend and the mocker competed for the cores, so the simulated "
                "time affinity saved did not turn into throughput. Rerun with lower "
                "--concurrency, or on a machine with more cores."
            )
        if sticky_rr["mean_workers_per_video"] < 2:
            notes.append(
                f"- round robin kept videos on {sticky_rr['mean_workers_per_video']:.1f} "
                f"workers on average (of {workers}), so it lost little cache reuse (see the "
                "note on round robin's spread)."
            )
    return notes + spread_notes(baseline, workers)


def spread_notes(baseline: ProfileRun, workers: int) -> list[str]:
    """Levels where round robin spread videos over fewer workers than it should (under
    three quarters of the fleet), and the likely cause.

    Measured: at concurrency 8 with 8 mock workers, 80% of videos stayed on one worker
    under plain round robin with the mocker's own timing, and 19% (4.1 workers per video,
    the gain at 8 then +16% instead of +27%) in one of two calibrated default runs (the other:
    0%, 6.4). The mock's requests take nearly the same time, so an in-flight video's next
    question can arrive just as the rotation is back at the worker it used before
    (lockstep). Real workers' timing jitter breaks that; the mock's does not.
    """
    notes = []
    for concurrency in sorted(baseline.levels):
        spread = baseline.stickiness[concurrency]
        if spread["videos"] and spread["mean_workers_per_video"] < 0.75 * workers:
            lockstep = " (concurrency = fleet size)" if concurrency == workers else ""
            notes.append(
                f"Round robin at concurrency {concurrency}{lockstep} kept "
                f"{spread['share_single_worker']:.0%} of videos on one worker "
                f"({spread['mean_workers_per_video']:.1f} workers per video of {workers}): the "
                "mock workers' identical request times let round robin's rotation fall into "
                "step with the in-flight videos, so each video's next question reached the "
                "worker that served its last one. Real workers' timing jitter breaks this "
                "lockstep; compare profiles at a concurrency that is not the fleet size."
            )
    return notes


def modelling_notes(config: RehearsalConfig, workers: int) -> list[str]:
    return [
        f"Local rehearsal: real dynamo.frontend with {workers} CPU mock workers "
        f"(dynamo.mocker, speedup {config.speedup_ratio:g}, decode speedup "
        f"{config.decode_speedup_ratio:g}: calibrated so that a first visit costs what a "
        "video costs an H200 in the seed's concurrency-1 row), not the Cosmos3 NIM.",
        f"Each video is a ~{config.standin_tokens}-token per-video text block before the "
        "question (the mock model is text-only); a worker reuses it from its prefix cache "
        "only if it processed that video before.",
        "Each concurrency level ran on a freshly started frontend and mocker (cold caches), "
        "so no level inherits another level's cached videos.",
    ]


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST_NAME
    return json.loads(path.read_text()) if path.is_file() else {}


class Rehearsal:
    """One rehearsal run: the thin layer that starts stacks and sweeps, level by level."""

    def __init__(self, config: RehearsalConfig, say: Say = print) -> None:
        self.config = config
        self.say = say
        run_id = config.run_id or datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        self.run_dir = config.results_root / run_id
        self.nats = find_nats_server()
        self.stacks: dict[str, Settings] = {}

    def check(self) -> None:
        """Options, stacks and machine, before anything starts."""
        problems = config_problems(self.config) + rerun_problems(self.config, self.run_dir)
        for profile in self.config.profiles:
            try:
                self.stacks[profile] = stack_settings(profile)
            except SettingsError as exc:
                problems += [f"--profiles {profile}: {problem}" for problem in exc.problems]
        if problems:
            raise InputError("bad rehearsal settings (nothing was started)", problems)
        ports = [PortRequest(option, port) for option, port in (
            ("--frontend-port", self.config.frontend_port),
            ("--nats-port", self.config.nats_port)) if port is not None]
        kwargs: dict[str, Any] = {}
        if self.config.memory_needed is not None:
            kwargs["memory_needed"] = self.config.memory_needed
        run_preflight(self.nats, ports=ports, out_dir=self.run_dir, **kwargs)

    def prepare(self) -> tuple[Path, Datasets]:
        """The tiny model dir and the stand-in datasets, measured and warm-up
        (deterministic; rebuilt each time)."""
        cfg = self.config
        model = mock_model_dir(self.run_dir / "model")
        datasets = build_run_datasets(
            self.run_dir, cfg.videos, cfg.questions_per_video, cfg.warmup_videos,
            text_standin_tokens=cfg.standin_tokens, output_tokens=cfg.output_tokens,
            video_source="text stand-in (local rehearsal)")
        return model, datasets

    def stack_config(self, stack: Settings, model: Path, port: int, level: int
                     ) -> LocalDynamoConfig:
        assert self.nats is not None
        return LocalDynamoConfig(
            routing=stack.routing,
            model_dir=model,
            fleet=MockFleet(workers=stack.workers.replicas, speedup_ratio=self.config.speedup_ratio,
                            decode_speedup_ratio=self.config.decode_speedup_ratio),
            work_dir=self.run_dir / stack.profile / "stack" / f"concurrency-{level}",
            frontend_port=port,
            nats_port=self.config.nats_port,
            nats_binary=self.nats,
        )

    def sweep_config(self, stack: Settings, model: Path, datasets: Datasets) -> SweepConfig:
        cfg = self.config
        dataset, warmup = datasets
        return SweepConfig(
            # Each level gets its own frontend, on its own port (see `local_stack`).
            url=f"http://{LOOPBACK}", dataset=dataset, profile=stack.profile,
            affinity=stack.routing.affinity, concurrencies=cfg.concurrencies,
            output_tokens=cfg.output_tokens,
            warmup_dataset=warmup,
            tokenizer=str(model.resolve()), run_dir=self.run_dir / stack.profile,
            attribute_workers=True,
            notes=tuple(modelling_notes(cfg, stack.workers.replicas)),
            deployment={
                "target": f"local rehearsal on {LOOPBACK} (CPU, no GPU)",
                "frontend_command": local_frontend_command("python", stack.routing, 0),
                "routing": " ".join(routing_args(stack.routing)),
                "mock_workers": stack.workers.replicas,
                "ai_dynamo": dist_version("ai-dynamo"),
                "cold_caches_per_level": True,
                "shape": cfg.shape(),
            },
            level_target=lambda level, level_dir: self.local_stack(stack, model, level,
                                                                   level_dir),
        )

    @contextmanager
    def local_stack(self, stack: Settings, model: Path, level: int,
                    level_dir: Path) -> Iterator[LevelRun]:
        """The sweep's target for one level: a fresh frontend and mocker (cold caches);
        afterwards, the share of the machine's CPU they and AIPerf used."""
        self.say(f"{stack.profile}: starting dynamo.frontend + {stack.workers.replicas} mock "
                 f"workers for concurrency {level}")
        port = self.config.frontend_port or free_port()
        with LocalDynamo(self.stack_config(stack, model, port, level)) as local:
            run = LevelRun(local.url, timeout_secs=level_timeout(self.config, level))
            before = cpu_times()
            yield run
            run.measured["cpu_busy"] = busy_share(before, cpu_times())

    def run_profile(self, stack: Settings, model: Path, datasets: Datasets
                    ) -> tuple[ProfileRun, int]:
        """The profile's run as its sweep recorded it (this rehearsal's levels), and how
        many of them a resumed run kept from the earlier attempt."""
        run_dir = self.run_dir / stack.profile
        levels = self.config.concurrencies
        earlier = _read_manifest(run_dir)
        kept = sum(level_complete(run_dir, earlier, c) for c in levels)
        run_sweep(self.sweep_config(stack, model, datasets),
                  say=lambda line: self.say(f"{stack.profile}: {line}"))
        run = read_run(run_dir / MANIFEST_NAME)
        run.levels = {c: run.levels[c] for c in levels}
        return run, kept

    def run(self) -> Path:
        self.check()
        started = time.monotonic()
        with PeakMemory() as memory, sigterm_as_interrupt():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.say(
                f"rehearsal {self.run_dir.name}: profiles {', '.join(self.config.profiles)}; "
                f"{self.config.videos} videos x {self.config.questions_per_video} questions "
                f"at concurrency {', '.join(map(str, self.config.concurrencies))}; "
                f"results in {self.run_dir}"
            )
            model, datasets = self.prepare()
            runs, kept = zip(*(self.run_profile(self.stacks[p], model, datasets)
                               for p in self.config.profiles), strict=True)
            notes = self.direction(runs)
            report = build_report([r.source for r in runs], self.run_dir,
                                  warn=lambda line: self.say(f"report: {line}"), notes=notes)
        wall = time.monotonic() - started
        summary = rehearsal_summary(self.config, runs, wall, memory.peak, notes, sum(kept))
        write_json(self.run_dir / REHEARSAL_FILE, summary)
        for line in summary_lines(summary):
            self.say(line)
        report_data = json.loads(report.with_suffix(".json").read_text())
        for line in gain_lines(report_data):
            self.say(line)
        comparison = seed_comparison(report_data)
        with open(report, "a") as markdown:
            markdown.write("\n## Predicted beside the seed\n\n" + "\n".join(comparison) + "\n")
        for line in comparison:
            self.say(line)
        self.say(f"report: {report}")
        return self.run_dir

    def direction(self, runs: Sequence[ProfileRun]) -> list[str]:
        """What the run shows about affinity against the baseline, for the report."""
        baseline = next((r for r in runs if not self.stacks[r.label].routing.affinity), None)
        sticky = next((r for r in runs if self.stacks[r.label].routing.affinity), None)
        if baseline is None or sticky is None:
            return []
        return direction_notes(baseline, sticky, self.stacks[sticky.label].workers.replicas)


def rehearsal_summary(config: RehearsalConfig, runs: Sequence[ProfileRun], wall_secs: float,
                      peak_bytes: int, notes: Sequence[str], kept: int = 0) -> dict[str, Any]:
    """`kept`: levels a resumed run took from the earlier attempt (not in this run's time)."""
    return {
        "settings": {k: (str(v) if isinstance(v, Path) else v)
                     for k, v in asdict(config).items()},
        "wall_time_secs": round(wall_secs, 1),
        "peak_memory_bytes": peak_bytes,
        "levels_kept": kept,
        "levels_total": sum(len(r.levels) for r in runs),
        "profiles": {
            r.label: {
                "run_dir": str(r.source),
                "levels": {
                    str(c): {**asdict(level), "cpu_busy": cpu_busy(r, c),
                             "stickiness": r.stickiness[c]}
                    for c, level in sorted(r.levels.items())
                },
            }
            for r in runs
        },
        "notes": list(notes),
    }


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The human summary: wall time, peak memory, per profile and level the key numbers."""
    kept = summary.get("levels_kept") or 0
    resumed = (f"; resumed: {kept} of {summary['levels_total']} levels kept from the earlier "
               "run, so time and memory cover only the levels run now" if kept else "")
    lines = [
        f"rehearsal done in {summary['wall_time_secs'] / 60:.1f} min, peak memory "
        f"{summary['peak_memory_bytes'] / 2**30:.2f} GiB (this process and all it started"
        f"{resumed})",
        f"{'profile':<18} {'conc':>4} {'req/s':>7} {'TTFT p50':>9} {'cache hit':>9} "
        f"{'1-worker videos':>15} {'workers/video':>13}",
    ]
    for profile, data in summary["profiles"].items():
        for c, lv in data["levels"].items():
            hit = lv["prompt_cache_read_pct"]
            ttft = lv["ttft_p50_ms"]
            lines.append(
                f"{profile:<18} {c:>4} {lv['request_throughput']:>7.2f} "
                f"{'n/a' if ttft is None else f'{ttft:.0f} ms':>9} "
                f"{'n/a' if hit is None else f'{hit:.0f}%':>9} "
                f"{lv['stickiness']['share_single_worker']:>15.0%} "
                f"{lv['stickiness']['mean_workers_per_video']:>13.1f}"
            )
    lines += list(summary.get("notes") or [])
    return lines


def gain_lines(report: Mapping[str, Any]) -> list[str]:
    """Each profile's throughput gain over the baseline with its 95% interval, per level
    (as the report computed them)."""
    lines = []
    for row in report["rows"]:
        gain, low, high = (row.get(k) for k in ("throughput_gain_pct", "throughput_gain_ci95_low",
                                                "throughput_gain_ci95_high"))
        if row["profile"] == report["baseline"] or gain is None:
            continue
        interval = "" if low is None else f", 95% interval {low:+.1f}% to {high:+.1f}%" + (
            ": no measurable difference" if low <= 0 <= high else "")
        lines.append(f"{row['profile']} at concurrency {row['concurrency']}: throughput "
                     f"{gain:+.1f}% over {report['baseline']}{interval}")
    return lines


def _cell(predicted: float | None, seed: float | None, digits: int = 2) -> str:
    if predicted is None or seed is None:
        return "n/a"
    return f"{predicted:.{digits}f} / {seed:.{digits}f} ({relative_error(predicted, seed):+.0%})"


def seed_comparison(report: Mapping[str, Any]) -> list[str]:
    """The rehearsal's numbers (the prediction) beside the seed's measured table, per seed
    level rehearsed, with each cell's relative error, and whether the issue's goal holds:
    affinity's gain within 10 points of the seed's, each profile's req/s within 25%."""
    seed = {row.concurrency: row for row in SEED_TABLE}
    rows = {(r["concurrency"], r["profile"]): r for r in report["rows"]}
    lines = ["| conc | profile | req/s | gain (points off) | TTFT p50 ms | latency p50 ms | "
             "TTFT p90 ms |", "|---|---|---|---|---|---|---|"]
    misses = []
    for c in sorted({c for c, _ in rows if c in seed}):
        row = seed[c]
        for profile, req_s, ttft in (("round-robin", row.rr_req_s, row.rr_ttft_p50_ms),
                                     ("session-affinity", row.sa_req_s, row.sa_ttft_p50_ms)):
            mine = rows.get((c, profile))
            if mine is None:
                continue
            gain = ""
            if profile == "session-affinity" and (c, "round-robin") in rows:
                ours = mine["request_throughput"] / rows[(c, "round-robin")][
                    "request_throughput"] - 1
                theirs = row.sa_req_s / row.rr_req_s - 1
                gain = f"{ours:+.0%} / {theirs:+.0%} ({(ours - theirs) * 100:+.0f})"
                if abs(ours - theirs) > 0.10:
                    misses.append(f"gain at {c}")
            if abs(relative_error(mine["request_throughput"], req_s)) > 0.25:
                misses.append(f"{profile} req/s at {c}")
            latency, p90 = ((SEED_16_LATENCY_P50_MS[profile], SEED_16_TTFT_P90_MS[profile])
                            if c == 16 else (None, None))
            lines.append(
                f"| {c} | {profile} | {_cell(mine['request_throughput'], req_s)} | {gain} | "
                f"{_cell(mine['ttft_p50_ms'], ttft, 0)} | "
                f"{_cell(mine['request_latency_p50_ms'], latency, 0)} | "
                f"{_cell(mine['ttft_p90_ms'], p90, 0)} |")
    verdict = ("goal met: affinity's gain within 10 points of the seed's and every req/s "
               "within 25%" if not misses else f"goal missed: {', '.join(misses)}")
    return ["Predicted (this rehearsal, mock workers calibrated to the seed's concurrency-1 "
            "row) / the seed's measured eight-H200 table (relative error):", "", *lines, "",
            verdict]


def register(subparsers: argparse._SubParsersAction) -> None:
    d = RehearsalConfig()
    p = subparsers.add_parser(
        "rehearse",
        help="run both routing profiles on a local Dynamo frontend with CPU mock workers",
        description="Local rehearsal: for each stack, a real dynamo.frontend with the stack's "
        "routing flags and dynamo.mocker with its worker count, on 127.0.0.1; the same AIPerf "
        "sweep as the cluster (scaled down); worker attribution per video; the comparison "
        "report. Needs no cluster and no GPU.",
    )
    p.add_argument("--profiles", nargs="+", default=list(d.profiles),
                   help=f"stacks to rehearse, baseline first (default: {' '.join(d.profiles)})")
    p.add_argument("--videos", type=int, default=d.videos,
                   help=f"videos per level (default {d.videos}; the seed's is "
                   f"{SEED_SHAPE.videos.count})")
    p.add_argument("--questions-per-video", type=int, default=d.questions_per_video,
                   help=f"default {d.questions_per_video}")
    p.add_argument("--concurrency", type=int, nargs="+", default=list(d.concurrencies),
                   help=f"levels (default {' '.join(map(str, d.concurrencies))}; the seed's: "
                   f"{' '.join(map(str, SEED_SHAPE.concurrencies))})")
    p.add_argument("--standin-tokens", type=int, default=d.standin_tokens,
                   help=f"tokens of each video's text stand-in (default {d.standin_tokens})")
    p.add_argument("--speedup-ratio", type=float, default=d.speedup_ratio,
                   help=f"the mocker's speed-up of every step (default {d.speedup_ratio:g}: "
                   "a first visit costs what a video costs an H200, infra/calibration.py)")
    p.add_argument("--decode-speedup-ratio", type=float, default=d.decode_speedup_ratio,
                   help="the mocker's extra speed-up of decode steps (default "
                   f"{d.decode_speedup_ratio:g}: decode as the seed's cache hits)")
    p.add_argument("--warmup-videos", type=int, default=d.warmup_videos,
                   help="videos outside the measured set, one request each before every "
                   f"level, not measured (default {d.warmup_videos})")
    p.add_argument("--results-root", type=Path, default=d.results_root,
                   help=f"default {d.results_root}")
    p.add_argument("--run-id", default=None, help="default: UTC time; reuse it to resume")
    p.add_argument("--frontend-port", type=int, default=None,
                   help="fixed frontend port on 127.0.0.1 (default: a free one)")
    p.add_argument("--nats-port", type=int, default=None,
                   help="fixed NATS port on 127.0.0.1 (default: a free one)")
    p.add_argument("--level-timeout", type=float, default=None,
                   help="seconds per level (default: three times the expected time + 5 min)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    config = RehearsalConfig(
        profiles=tuple(args.profiles), videos=args.videos,
        questions_per_video=args.questions_per_video, concurrencies=tuple(args.concurrency),
        standin_tokens=args.standin_tokens, warmup_videos=args.warmup_videos,
        speedup_ratio=args.speedup_ratio, decode_speedup_ratio=args.decode_speedup_ratio,
        results_root=args.results_root, run_id=args.run_id,
        frontend_port=args.frontend_port, nats_port=args.nats_port,
        level_timeout_secs=args.level_timeout,
    )
    rehearsal = Rehearsal(config, say=lambda line: print(line, flush=True))
    resume = f"rerun with --run-id {rehearsal.run_dir.name} to resume (finished levels are kept)"
    try:
        rehearsal.run()
    except InputError as exc:
        print(f"rehearse: error: {exc}", file=sys.stderr)
        return 2
    except (LocalDynamoError, SweepError) as exc:
        print(f"rehearse: error: {exc}\nEvery process the rehearsal started was stopped; "
              f"{resume}.", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"rehearse: interrupted; every process it started was stopped; {resume}.",
              file=sys.stderr)
        return 130
    return 0
