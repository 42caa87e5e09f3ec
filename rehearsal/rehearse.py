"""The whole benchmark on this machine, against a real Dynamo frontend with mock workers.

Per profile (stack) and level, a fresh local Dynamo (cold caches: a mock worker's cache
holds every video of a rehearsal) serves the cluster's sweep of a scaled-down text
stand-in dataset (the sweep's `level_target` hook); then the comparison report, beside the
seed's table. What it models and its limits: docs/rehearsal.md. The same `--run-id` resumes.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from benchmarks.dataset import build_run_dataset
from benchmarks.processes import PeakMemory, sigterm_as_interrupt
from benchmarks.report import ProfileRun, build_report, gain_pct, read_run
from benchmarks.sweep import (
    MANIFEST_NAME,
    LevelRun,
    SweepConfig,
    dist_version,
    level_complete,
    open_run,
    run_sweep,
    write_json,
)
from infra.calibration import (
    SEED_16_LATENCY_P50_MS,
    SEED_16_TTFT_P90_MS,
    SEED_TABLE,
    mock_calibration,
    relative_error,
)
from infra.names import SEED_SHAPE, InputError, levels_problems
from infra.routing import PROFILES, routing_args
from infra.settings import Settings, SettingsError, stack_settings
from rehearsal.local_dynamo import (
    LOOPBACK,
    MOCK_BLOCK_SIZE,
    LocalDynamo,
    LocalDynamoConfig,
    MockFleet,
    find_nats_server,
    local_frontend_command,
    mock_model_dir,
    preflight_problems,
)

# Two of the seed's levels, 8 and 16 (its largest effect), on 32 videos keep the default
# rehearsal of three profiles under 10 minutes on two cores (a request takes ~0.85 s).
REHEARSAL_VIDEOS = 32
REHEARSAL_CONCURRENCIES = (8, 16)
# A 30 s, 2 FPS video is thousands of visual tokens; ~8,400 showed the effect clearly
# (DESIGN.md section 6; 1,600 was within noise).
STANDIN_TOKENS = 8400
CALIBRATED = mock_calibration()  # the mock workers' time, as the seed's H200s (calibration.py)
RESULTS_ROOT = Path("results") / "rehearsal"
REHEARSAL_FILE = "rehearsal.json"
DEFAULT_PROFILES = tuple(PROFILES)  # the recipe's baseline first: gains are over it
MOCK_REQUEST_SECS = 1.2  # one mocked request at speedup 1, to bound a level generously

Say = Callable[[str], None]


@dataclass(frozen=True)
class RehearsalConfig:
    profiles: tuple[str, ...] = DEFAULT_PROFILES
    videos: int = REHEARSAL_VIDEOS
    questions_per_video: int = SEED_SHAPE.questions_per_video
    concurrencies: tuple[int, ...] = REHEARSAL_CONCURRENCIES
    standin_tokens: int = STANDIN_TOKENS
    output_tokens: int = SEED_SHAPE.output_tokens
    speedup_ratio: float = CALIBRATED.speedup_ratio
    decode_speedup_ratio: float = CALIBRATED.decode_speedup_ratio
    results_root: Path = RESULTS_ROOT
    run_id: str | None = None
    level_timeout_secs: float | None = None

    def shape(self) -> dict[str, Any]:
        """What every finished level of a run was measured with (a resume must match)."""
        return {"--videos": self.videos, "--questions-per-video": self.questions_per_video,
                "--standin-tokens": self.standin_tokens, "--speedup-ratio": self.speedup_ratio,
                "--decode-speedup-ratio": self.decode_speedup_ratio,
                "output tokens": self.output_tokens}


def config_problems(config: RehearsalConfig) -> list[str]:
    """Every bad option, naming it and the fix."""
    problems = [] if config.profiles else ["--profiles needs at least one stack name"]
    if len(set(config.profiles)) != len(config.profiles):
        problems.append(f"--profiles repeats a stack ({' '.join(config.profiles)})")
    for option, value, least in (("--videos", config.videos, 1),
                                 ("--questions-per-video", config.questions_per_video, 1)):
        if value < least:
            problems.append(f"{option} must be at least {least} (got {value})")
    problems += [f"--concurrency {p}" for p in levels_problems(config.concurrencies)]
    if config.standin_tokens < MOCK_BLOCK_SIZE:
        problems.append(f"--standin-tokens must be at least {MOCK_BLOCK_SIZE}, one cache "
                        f"block (got {config.standin_tokens}); a video is thousands of tokens")
    if config.speedup_ratio <= 0 or config.decode_speedup_ratio <= 0:
        problems.append(f"--speedup-ratio and --decode-speedup-ratio must be above 0 (got "
                        f"{config.speedup_ratio}, {config.decode_speedup_ratio}); 1 keeps "
                        "the mocker's own timing")
    return problems


def level_timeout(config: RehearsalConfig, concurrency: int) -> float:
    """A generous bound on one level: three times the mocked time, plus AIPerf start-up."""
    if config.level_timeout_secs is not None:
        return config.level_timeout_secs
    requests = config.videos * config.questions_per_video
    return 3 * requests * MOCK_REQUEST_SECS / config.speedup_ratio / concurrency + 300


def cpu_busy(run: ProfileRun, concurrency: int) -> float | None:
    """The share of the machine's CPU a level used, as its `local_stack` measured it."""
    return (run.manifest["levels"][str(concurrency)].get("measured") or {}).get("cpu_busy")


def direction_notes(baseline: ProfileRun, affinity: ProfileRun, workers: int) -> list[str]:
    """Whether the highest common level shows the seed's direction (affinity: more req/s,
    lower TTFT p50), and why not, from the measurements."""
    top = max(set(baseline.levels) & set(affinity.levels))
    rr, af = baseline.levels[top], affinity.levels[top]
    sticky_rr, sticky_af = baseline.stickiness[top], affinity.stickiness[top]
    gain = gain_pct(af.request_throughput, rr.request_throughput)
    ttft_rr, ttft_af = rr.ttft_p50_ms, af.ttft_p50_ms
    facts = (f"at concurrency {top}: {af.request_throughput:.2f} vs "
             f"{rr.request_throughput:.2f} req/s ({gain:+.1f}%), TTFT p50 {ttft_af or 0:.0f} vs "
             f"{ttft_rr or 0:.0f} ms ({affinity.label} vs {baseline.label})")
    quicker = ttft_rr is not None and ttft_af is not None and ttft_af < ttft_rr
    if gain is not None and gain > 0 and quicker:
        return [f"Direction as in the seed {facts}.", *spread_notes(baseline, workers)]
    notes = [f"NOT the seed's direction {facts}. Why, from the measurements:"]
    if sticky_af["share_single_worker"] < 1.0:
        notes.append(f"- affinity did not hold: only {sticky_af['share_single_worker']:.0%} of "
                     "videos stayed on one worker, so the frontend ignored or lost the session "
                     "binding (check the --router-session-affinity-ttl-secs flag in its log).")
    hits_af, hits_rr = af.prompt_cache_read_pct, rr.prompt_cache_read_pct
    if hits_af is not None and hits_rr is not None and hits_af <= hits_rr:
        notes.append(f"- prefix-cache reuse was no better with affinity ({hits_af:.0f}% "
                     f"vs {hits_rr:.0f}% of prompt tokens), so there was no work to save.")
    elif hits_af is not None and hits_rr is not None:
        notes.append(f"- affinity did save work: {hits_af:.0f}% vs {hits_rr:.0f}% of prompt "
                     "tokens came from the worker's cache.")
    busy = max(v or 0.0 for v in (cpu_busy(affinity, top), cpu_busy(baseline, top)))
    if busy >= 0.85:
        notes.append(f"- the machine was CPU-bound ({busy:.0%} of all cores busy during the "
                     "level): AIPerf, the frontend and the mocker competed for the cores, so the "
                     "simulated time affinity saved did not turn into throughput. Rerun with "
                     "lower --concurrency, or on a machine with more cores.")
    if sticky_rr["mean_workers_per_video"] < 2:
        notes.append(f"- round robin kept videos on {sticky_rr['mean_workers_per_video']:.1f} "
                     f"workers on average (of {workers}), so it lost little cache reuse (see "
                     "the note on round robin's spread).")
    return notes + spread_notes(baseline, workers)


def spread_notes(baseline: ProfileRun, workers: int) -> list[str]:
    """Levels where round robin kept videos on under three quarters of the fleet: the mock's
    near-identical request times let its rotation fall into step with in-flight videos
    (measured at concurrency 8: 80% of videos on one worker uncalibrated, 19% and 0% in two
    calibrated runs). Real workers' jitter breaks that lockstep."""
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
                "lockstep; compare profiles at a concurrency that is not the fleet size.")
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


class Rehearsal:
    """One rehearsal run: the thin layer that starts stacks and sweeps, level by level."""

    def __init__(self, config: RehearsalConfig, say: Say = print) -> None:
        self.config, self.say = config, say
        run_id = config.run_id or datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        self.run_dir = config.results_root / run_id
        self.nats = find_nats_server()
        self.stacks: dict[str, Settings] = {}

    def check(self) -> None:
        """Options, stacks and machine, all problems at once, before anything starts."""
        problems = config_problems(self.config)
        for profile in self.config.profiles:
            try:
                self.stacks[profile] = stack_settings(profile)
            except SettingsError as exc:
                problems += [f"--profiles {profile}: {problem}" for problem in exc.problems]
        problems += preflight_problems(self.nats, self.run_dir)
        if problems:
            raise InputError("the rehearsal cannot start (nothing was started)", problems)

    def datasets(self, folder: Path) -> Path:
        cfg = self.config
        return build_run_dataset(
            folder, cfg.videos, cfg.questions_per_video,
            text_standin_tokens=cfg.standin_tokens, output_tokens=cfg.output_tokens,
            video_source="text stand-in (local rehearsal)")

    def sweep_config(self, stack: Settings, model: Path, dataset: Path) -> SweepConfig:
        cfg = self.config
        return SweepConfig(
            url=f"http://{LOOPBACK}", dataset=dataset,
            profile=stack.profile, affinity=stack.routing.affinity,
            concurrencies=cfg.concurrencies, output_tokens=cfg.output_tokens,
            tokenizer=str(model.resolve()), run_dir=self.run_dir / stack.profile,
            attribute_workers=True, notes=tuple(modelling_notes(cfg, stack.workers.replicas)),
            deployment={
                "target": f"local rehearsal on {LOOPBACK} (CPU, no GPU)",
                "frontend_command": local_frontend_command("python", stack.routing, 0),
                "routing": " ".join(routing_args(stack.routing)),
                "mock_workers": stack.workers.replicas,
                "ai_dynamo": dist_version("ai-dynamo"),
                "cold_caches_per_level": True,
                "shape": cfg.shape(),
            },
            level_target=lambda level, _dir: self.local_stack(stack, model, level),
        )

    @contextmanager
    def local_stack(self, stack: Settings, model: Path, level: int) -> Iterator[LevelRun]:
        """The sweep's target for one level: a fresh frontend and mocker (cold caches) on
        its own port; afterwards, the share of the machine's CPU they and AIPerf used."""
        self.say(f"{stack.profile}: starting dynamo.frontend + {stack.workers.replicas} mock "
                 f"workers for concurrency {level}")
        cfg = self.config
        config = LocalDynamoConfig(
            routing=stack.routing, model_dir=model, nats_binary=str(self.nats),
            fleet=MockFleet(stack.workers.replicas, cfg.speedup_ratio, cfg.decode_speedup_ratio),
            work_dir=self.run_dir / stack.profile / "stack" / f"concurrency-{level}")
        with LocalDynamo(config) as local:
            run = LevelRun(local.url, timeout_secs=level_timeout(cfg, level))
            before = psutil.cpu_times()
            yield run
            after = psutil.cpu_times()
            idle = (after.idle - before.idle) + (getattr(after, "iowait", 0.0)
                                                 - getattr(before, "iowait", 0.0))
            total = sum(after) - sum(before)
            run.measured["cpu_busy"] = None if total <= 0 else 1 - idle / total

    def run_profile(self, stack: Settings, model: Path, dataset: Path
                    ) -> tuple[ProfileRun, int]:
        """The profile's run as its sweep recorded it (this rehearsal's levels), and how
        many of them a resumed run kept from the earlier attempt."""
        run_dir, levels = self.run_dir / stack.profile, self.config.concurrencies
        manifest = run_dir / MANIFEST_NAME
        earlier = json.loads(manifest.read_text()) if manifest.is_file() else {}
        kept = sum(level_complete(run_dir, earlier, c) for c in levels)
        run_sweep(self.sweep_config(stack, model, dataset),
                  say=lambda line: self.say(f"{stack.profile}: {line}"))
        run = read_run(manifest)
        run.levels = {c: run.levels[c] for c in levels}
        return run, kept

    def run(self) -> Path:
        self.check()
        cfg, started = self.config, time.monotonic()
        with PeakMemory() as memory, sigterm_as_interrupt():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.say(f"rehearsal {self.run_dir.name}: profiles {', '.join(cfg.profiles)}; "
                     f"{cfg.videos} videos x {cfg.questions_per_video} questions at "
                     f"concurrency {', '.join(map(str, cfg.concurrencies))}; results in "
                     f"{self.run_dir}")
            model = mock_model_dir(self.run_dir / "model")
            if any((self.run_dir / p / MANIFEST_NAME).is_file() for p in cfg.profiles):
                # A resume: its settings are checked on datasets built aside, so a refusal
                # leaves the earlier run as it was (the sweep's CLI does the same).
                with tempfile.TemporaryDirectory() as aside:
                    built = self.datasets(Path(aside))
                    for p in cfg.profiles:
                        open_run(self.sweep_config(self.stacks[p], model, built))
            dataset = self.datasets(self.run_dir)
            runs, kept = zip(*(self.run_profile(self.stacks[p], model, dataset)
                               for p in cfg.profiles), strict=True)
            notes = self.direction(runs)
            report = build_report([r.source for r in runs], self.run_dir,
                                  warn=lambda line: self.say(f"report: {line}"), notes=notes)
        summary = rehearsal_summary(cfg, runs, time.monotonic() - started, memory.peak, notes,
                                    sum(kept))
        write_json(self.run_dir / REHEARSAL_FILE, summary)
        report_data = json.loads(report.with_suffix(".json").read_text())
        comparison = seed_comparison(report_data)
        with open(report, "a") as markdown:
            markdown.write("\n## Predicted beside the seed\n\n" + "\n".join(comparison) + "\n")
        for line in [*summary_lines(summary), *gain_lines(report_data), *comparison,
                     f"report: {report}"]:
            self.say(line)
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
        "profiles": {r.label: {"run_dir": str(r.source), "levels": {
            str(c): {**asdict(level), "cpu_busy": cpu_busy(r, c), "stickiness": r.stickiness[c]}
            for c, level in sorted(r.levels.items())}} for r in runs},
        "notes": list(notes),
    }


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The human summary: wall time, peak memory, per profile and level the key numbers."""
    kept = summary["levels_kept"]
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
            hit, ttft = lv["prompt_cache_read_pct"], lv["ttft_p50_ms"]
            lines.append(
                f"{profile:<18} {c:>4} {lv['request_throughput']:>7.2f} "
                f"{'n/a' if ttft is None else f'{ttft:.0f} ms':>9} "
                f"{'n/a' if hit is None else f'{hit:.0f}%':>9} "
                f"{lv['stickiness']['share_single_worker']:>15.0%} "
                f"{lv['stickiness']['mean_workers_per_video']:>13.1f}")
    return lines + list(summary["notes"])


def gain_lines(report: Mapping[str, Any]) -> list[str]:
    """Each profile's throughput gain over the baseline with its 95% interval, per level."""
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
    """The rehearsal's numbers beside the seed's table per seed level rehearsed, each cell's
    relative error, and the issue's goal: affinity's gain within 10 points of the seed's,
    each profile's req/s within 25%."""
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
