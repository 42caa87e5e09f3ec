"""`report DIR [DIR ...] --out OUT`: routing profiles side by side from the sweeps' manifests,
the first run the baseline, the seed's table beside it (docs/benchmark-toolkit.md, `report`)."""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from itertools import groupby
from pathlib import Path
from typing import Any

from scipy.stats import t as student_t

from benchmarks import sweep
from benchmarks.aiperf_run import FIGURES, LevelSummary, fmt
from benchmarks.evidence import Stickiness
from infra.calibration import IN_SAMPLE_LEVELS
from infra.names import InputError
from infra.run import T_QUANTILE
from infra.seed import SEED_TABLE

BAD_INPUT = "bad report input"
SPREAD_KEYS = ("requests_per_worker_min", "requests_per_worker_max")
GAIN_KEYS = ("throughput_gain_pct", "throughput_gain_ci95_low", "throughput_gain_ci95_high")
# Deployment facts that differ between the profiles of one comparison by design: the
# routing, and each stack's own graph (its uid) and frontend command (its routing flags).
ROUTING_FACTS = ("routing", "graph_uid", "frontend_command")
PLOTS = (("throughput.png", "requests/s", "Throughput against concurrency",
          ("request_throughput",)),
         ("ttft.png", "milliseconds", "Time to first token against concurrency",
          ("ttft_p50_ms", "ttft_p90_ms")))
PAIRED = ("Design: paired. The profiles ran interleaved on the same workers, one chunk each per "
          "block, in alternating order; a gain is over its blocks' ratios, so drift between "
          "blocks cancels. TTFT and latency percentiles are over all of a level's requests.")
SEPARATE = ("Design: separate runs. A gain's interval combines both runs' spreads (delta method "
            "on the log of the ratio, Welch degrees of freedom), and drift between the runs is "
            "in it. TTFT and latency percentiles are over all of a level's requests.")
# The report as data, beside report.md (the rehearsal prints its seed section from it).
REPORT_JSON = "report.json"


@dataclass
class ProfileRun:
    """One sweep run (one profile): its manifest and each finished level's summaries."""

    label: str
    source: Path
    manifest: dict[str, Any]
    levels: dict[int, LevelSummary] = field(default_factory=dict)
    chunks: dict[int, list[LevelSummary]] = field(default_factory=dict)


def read_run(manifest_path: Path) -> ProfileRun:
    """A run as its sweep recorded it: each finished level's summary and its chunks'."""
    manifest = json.loads(manifest_path.read_text())
    run = ProfileRun(manifest.get("profile") or manifest_path.parent.name,
                     manifest_path.parent, manifest)
    for level, state in (manifest.get("levels") or {}).items():
        if state.get("status") != sweep.STATUS_COMPLETE or not state.get("summary"):
            continue
        run.levels[int(level)] = LevelSummary(**state["summary"])
        run.chunks[int(level)] = [LevelSummary(**chunk["summary"])
                                  for chunk in state.get("chunks") or [] if chunk.get("summary")]
    return run


def collect_runs(dirs: Sequence[Path], warn: Any = print) -> list[ProfileRun]:
    """Every sweep run under `dirs` (a run directory, or a folder of them), in their order."""
    runs = []
    for root in dirs:
        if not root.is_dir():
            raise InputError(BAD_INPUT, [f"{root} is not a directory"])
        manifests = ([root / sweep.MANIFEST_NAME] if (root / sweep.MANIFEST_NAME).is_file()
                     else sorted(root.glob(f"*/{sweep.MANIFEST_NAME}")))
        if not manifests:
            warn(f"report: no sweep run ({sweep.MANIFEST_NAME}) under {root}")
        # A paired run's profiles in its own order: its first is the baseline.
        found = [read_run(m) for m in manifests]
        runs += sorted(found, key=lambda r: [*(r.manifest.get("profiles") or []),
                                             r.label].index(r.label))
    labels = [r.label for r in runs]
    for run in runs:
        if labels.count(run.label) > 1:
            run.label = f"{run.label} ({run.source.name})"
    return runs


def binding(manifest: dict[str, Any]) -> dict[str, Any]:
    """What runs must share to be compared: the workload (its stop rule too; the videos'
    content seed and the levels aside), the client, and the deployment, routing aside."""
    return {
        "model": manifest.get("model"),
        "workload": {k: v for k, v in (manifest.get("workload") or {}).items()
                     if k not in ("seed", "concurrencies")},
        "video_source": manifest.get("video_source"), "pause_ms": manifest.get("pause_ms"),
        "aiperf": (manifest.get("tools") or {}).get("aiperf"),
        "deployment": {k: v for k, v in (manifest.get("deployment") or {}).items()
                       if k not in ROUTING_FACTS},
    }


def binding_changes(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """How `other`'s run differs from `base`'s in anything but routing (manifests)."""
    one, two = binding(base), binding(other)
    return [c for key in one for c in sweep.changes(key, one[key], two[key])]


def check_comparable(runs: Sequence[ProfileRun]) -> None:
    """Refuse runs of other workloads or deployments: gains would measure that, not routing."""
    problems = [f"{run.label} ({run.source}) differs from {runs[0].label} "
                f"({runs[0].source}) in {c}"
                for run in runs[1:] for c in binding_changes(runs[0].manifest, run.manifest)]
    if problems:
        raise InputError(BAD_INPUT, [*problems, "compare runs of one workload and deployment "
                                     "(routing aside): the same videos, questions, output "
                                     "tokens, stop rule, AIPerf, images and topology"])


def design(runs: Sequence[ProfileRun]) -> str:
    """"paired": the profiles of one interleaved run (their blocks ran side by side), else
    "separate" runs, each its own deployment or time."""
    uids = {run.manifest.get("run_uid") for run in runs}
    paired = len(runs) > 1 and len(uids) == 1 and None not in uids
    return "paired" if paired and all(r.manifest.get("design") == "paired" for r in runs) \
        else "separate"


def gain_pct(value: float | None, baseline: float | None) -> float | None:
    if value is None or not baseline:
        return None
    return (value / baseline - 1.0) * 100.0


def gain_interval(base: Sequence[float], other: Sequence[float]) -> tuple[float, float] | None:
    """95% interval (in %) of the gain mean(other) / mean(base) - 1 of separate runs: delta
    method on the log ratio, Student t (T_QUANTILE) with Welch-Satterthwaite degrees of
    freedom. None unless each side has two replicates and a mean."""
    means = [statistics.fmean(side) if len(side) >= 2 else 0.0 for side in (base, other)]
    if not all(means):
        return None
    parts = [statistics.variance(side) / len(side) / mean**2
             for side, mean in zip((base, other), means, strict=True)]
    ratio = means[1] / means[0]
    if not any(parts):
        return (ratio - 1) * 100, (ratio - 1) * 100
    half = student_t.ppf(T_QUANTILE, welch_df(parts, [len(base), len(other)])) * math.sqrt(
        sum(parts))
    return (ratio * math.exp(-half) - 1) * 100, (ratio * math.exp(half) - 1) * 100


def welch_df(parts: Sequence[float], counts: Sequence[int]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variances of means (`parts`), each
    estimated from `counts` replicates."""
    return sum(parts) ** 2 / sum(p**2 / (n - 1) for p, n in zip(parts, counts, strict=True))


def _figures(chunks: Sequence[LevelSummary], name: str) -> list[float]:
    values = [getattr(chunk, name) for chunk in chunks]
    return [] if None in values else values


def _gain(base: Sequence[LevelSummary], other: Sequence[LevelSummary], paired: bool
          ) -> tuple[float, float, float] | None:
    """(gain, low, high) in %: over the blocks' ratios (paired), or of the mean rates with the
    delta method (separate); None without two replicates each."""
    rates = [_figures(side, "request_throughput") for side in (base, other)]
    if paired:
        found = sweep.paired_gain(*rates)
        return (found.mean, found.low, found.high) if found else None
    interval = gain_interval(*rates)
    return (gain_pct(*(statistics.fmean(r) for r in rates[::-1])), *interval) \
        if interval else None


def report_rows(runs: Sequence[ProfileRun]) -> list[dict[str, Any]]:
    """One row per (concurrency, profile): every figure with its 95% interval over the
    level's chunks, and the gain over the first profile (paired: over their blocks)."""
    baseline, rows, paired = runs[0], [], design(runs) == "paired"
    for concurrency in sorted({c for r in runs for c in r.levels}):
        base = baseline.levels.get(concurrency)
        for run in [r for r in runs if concurrency in r.levels]:
            level, chunks = run.levels[concurrency], run.chunks.get(concurrency, [])
            state = run.manifest["levels"][str(concurrency)]
            routing = state.get("routing") or {}
            figures = {}
            for name in FIGURES:
                interval = sweep.replicate_interval(_figures(chunks, name))
                figures |= {name: getattr(level, name),
                            f"{name}_ci95_low": interval.low if interval else None,
                            f"{name}_ci95_high": interval.high if interval else None}
            gain = None if run is baseline else _gain(
                *(r.chunks.get(concurrency, []) for r in (baseline, run)), paired)
            if gain is None and base:
                gain = (gain_pct(level.request_throughput, base.request_throughput), None, None)
            rows.append({
                "concurrency": concurrency,
                "profile": run.label,
                **{k: state.get(k) for k in ("replicates", "interval_method", "stopped_by")},
                "requests": level.requests, "errors": level.errors,
                **figures,
                **dict(zip(GAIN_KEYS, gain or (None, None, None), strict=True)),
                # Server-side evidence the sweep recorded: the workers the responses name and
                # the frontend's prefix-cache count (benchmarks/evidence.py `level_evidence`).
                **{f"stickiness_{f.name}": routing.get(f.name) for f in fields(Stickiness)},
                **{k: state.get(k) for k in ("prefix_cache_hit_pct",
                                             "prefix_cache_hit_ceiling_pct")},
                "other_busy_pct": (state.get("machine") or {}).get("other_busy_pct"),
                **{k: routing.get(k) for k in SPREAD_KEYS},
                "dir": str(run.source / sweep.level_dir_name(concurrency)),
            })
    return rows


# The goal beside the seed (issue 28): req/s and request latency within 25%, affinity's gain
# within 10 points, TTFT in the seed's direction (tolerance None) unless near the mock's floor.
ROUND_ROBIN, AFFINITY = "round-robin", "session-affinity"
SEED_SIDES = {ROUND_ROBIN: "rr", AFFINITY: "sa"}  # each profile's columns in the seed's table
GAIN_POINTS = 10.0
# A gain whose whole interval is within GAIN_POINTS of the seed's matches it; one whose
# interval reaches that band is consistent with it; otherwise it differs.
GAIN_VERDICTS = ("matches", "consistent with", "differs")
NEAR_FLOOR = 1.25
SEED_GOALS = {"request_throughput": 0.25, "ttft_p50_ms": None, "request_latency_p50_ms": 0.25,
              "ttft_p90_ms": None}
SEED_NAMES = {"request_throughput": "req_s"}


def gain_verdict(low: float | None, high: float | None, run: float, seed: float) -> str:
    """What a gain's interval (None: only its point) says of the seed's, by GAIN_VERDICTS."""
    low, high = (run, run) if low is None or high is None else (low, high)
    if seed - GAIN_POINTS <= low and high <= seed + GAIN_POINTS:
        return GAIN_VERDICTS[0] if low < high else GAIN_VERDICTS[1]
    overlaps = low <= seed + GAIN_POINTS and high >= seed - GAIN_POINTS
    return GAIN_VERDICTS[1] if overlaps else GAIN_VERDICTS[2]


def seed_comparison(rows: Sequence[dict[str, Any]], ttft_floor_ms: float | None = None,
                    in_sample: Sequence[int] = (), baseline: str = ROUND_ROBIN
                    ) -> dict[str, Any]:
    """The run's figures beside the seed's at each seed level it ran, and one verdict line
    per figure (the goal above); `in_sample`: levels the mock was calibrated on."""
    seed = {row.concurrency: row for row in SEED_TABLE}
    mine = {(r["concurrency"], r["profile"]): r for r in rows if r["concurrency"] in seed}
    cells = [{"concurrency": c, "profile": p, "figure": FIGURES[key][0], "run": mine[(c, p)][key],
              "seed": getattr(seed[c], f"{SEED_SIDES[p]}_{SEED_NAMES.get(key, key)}")}
             for c, p in sorted(mine) if p in SEED_SIDES for key in SEED_GOALS]
    # Affinity's gain as its row has it when round robin is the baseline, else the ratio alone.
    gains = [{"concurrency": c, "seed": gain_pct(seed[c].sa_req_s, seed[c].rr_req_s),
              **dict(zip(("run", "low", "high"), (sa[k] for k in GAIN_KEYS), strict=True)
                     if baseline == ROUND_ROBIN else
                     {"run": gain_pct(sa["request_throughput"], rr["request_throughput"]),
                      "low": None, "high": None})}
             for c in sorted(seed) if (c, AFFINITY) in mine and (c, ROUND_ROBIN) in mine
             and (rr := mine[(c, ROUND_ROBIN)])["request_throughput"]
             and (sa := mine[(c, AFFINITY)])]
    for g in gains:
        g["verdict"] = gain_verdict(g["low"], g["high"], g["run"], g["seed"])
    verdicts = [_figure_verdict(cells, FIGURES[key][0], tolerance, ttft_floor_ms)
                for key, tolerance in SEED_GOALS.items()]
    star = {c: f"{c}*" if c in in_sample else str(c) for c in seed}
    if gains:
        verdicts.insert(1, f"gain beside the seed's +-{GAIN_POINTS:.0f} points: " + "; ".join(
            f"{verdict} at " + (", ".join(star[g["concurrency"]] for g in gains
                                          if g["verdict"] == verdict) or "no level")
            for verdict in GAIN_VERDICTS))
    if set(in_sample) & {c for c, _ in mine}:
        verdicts.append(f"* in-sample: the mock's costs come from the seed's concurrency-"
                        f"{in_sample[0]} row and its pause was tuned at {in_sample[-1]}, so "
                        "these levels do not test it; the others do")
    return {"cells": cells, "gains": gains, "ttft_floor_ms": ttft_floor_ms,
            "in_sample": list(in_sample), "verdicts": [v for v in verdicts if v]}


def _verdict(rule: str, judged: int, misses: Sequence[str], unit: str) -> str:
    return (f"{rule} at {judged - len(misses)} of {judged} {unit}"
            + (f"; not {', '.join(misses)}" if misses else ""))


def _figure_verdict(cells: Sequence[dict[str, Any]], figure: str, tolerance: float | None,
                    floor: float | None) -> str | None:
    """Each cell within `tolerance` of the seed's; None: affinity's at or below round robin's,
    judged above the mock's floor only (below is its own overhead: docs/benchmark-toolkit.md)."""
    judged = [c for c in cells if c["figure"] == figure and None not in (c["run"], c["seed"])]
    if tolerance is not None:
        misses = [f"{c['profile']} at {c['concurrency']} ({c['run'] / c['seed'] - 1:+.0%})"
                  for c in judged if abs(c["run"] / c["seed"] - 1) > tolerance]
        return _verdict(f"{figure}: within {tolerance:.0%} of the seed", len(judged), misses,
                        "cells") if judged else None
    by_level: dict[int, dict[str, float]] = {}
    for c in judged:
        by_level.setdefault(c["concurrency"], {})[c["profile"]] = c["run"]
    pairs = {c: (v[ROUND_ROBIN], v[AFFINITY]) for c, v in by_level.items() if len(v) == 2}
    if not pairs:
        return None
    floored = [c for c, both in pairs.items() if floor is not None
               and max(both) <= floor * NEAR_FLOOR]
    misses = [f"at {c} ({sa:.0f} vs {rr:.0f} ms)" for c, (rr, sa) in pairs.items()
              if c not in floored and sa > rr]
    line = _verdict(f"{figure}: affinity's at or below round robin's, as in the seed,",
                    len(pairs) - len(floored), misses, "levels")
    if not floored:
        return line
    return (f"{figure}: at {len(floored)} of {len(pairs)} levels both profiles are within "
            f"{NEAR_FLOOR - 1:.0%} of the mock's TTFT floor ({floor:.0f} ms), which is the "
            "mock's own overhead, not routing"
            + (f"; above it, {line.split(': ', 1)[1]}" if len(floored) < len(pairs) else ""))


def _beside(run: float | None, seed: float | None, digits: int) -> str:
    return "n/a" if run is None or seed is None else (
        f"{run:.{digits}f} / {seed:.{digits}f} ({run / seed - 1:+.0%})")


def seed_lines(report: Mapping[str, Any]) -> list[str]:
    """A report.json's "Beside the seed" section, heading first: the run's figures / the
    seed's, then the verdicts. Empty when the run has no seed level of a seed profile."""
    comparison = report.get("seed_comparison") or {}
    if not comparison.get("cells"):
        return []
    digits = {label: d for label, d, _ in FIGURES.values()}
    gains = {g["concurrency"]: f"{g['run']:+.0f}%" + (
        "" if g["low"] is None else f" [{g['low']:+.0f}, {g['high']:+.0f}]")
        + f" / {g['seed']:+.0f}%: {g['verdict']}" for g in comparison["gains"]}
    # The columns in SEED_GOALS' order, as `seed_comparison` made the cells.
    first, *others = (label + unit for label, _, unit in map(FIGURES.get, SEED_GOALS))
    body = []
    for (c, p), group in groupby(comparison["cells"], lambda c: (c["concurrency"], c["profile"])):
        req_s, *rest = (_beside(x["run"], x["seed"], digits[x["figure"]]) for x in group)
        label = f"{c}*" if c in comparison.get("in_sample", ()) else str(c)
        body.append([label, p, req_s, gains.get(c, "") if p == AFFINITY else "", *rest])
    return ["## Beside the seed", "",
            "This run / the seed's eight-H200 table (relative error); the seed gives "
            "request latency p50 and TTFT p90 at concurrency 16 only.", "",
            *_table(["conc", "profile", first, "gain [95%] / seed's: verdict", *others], body),
            "", *comparison["verdicts"]]


def _figure(row: Mapping[str, Any], key: str, interval: bool = False) -> str:
    """A row's figure as FIGURES formats it, and its 95% interval when asked and known."""
    _, digits, unit = FIGURES[key]
    low, high = row[f"{key}_ci95_low"], row[f"{key}_ci95_high"]
    bounds = f" [{fmt(low, digits)}, {fmt(high, digits)}]" if interval and low is not None else ""
    return fmt(row[key], digits, unit) + bounds


def _gain_cell(row: dict[str, Any]) -> str:
    """The gain with its 95% interval, in words where the interval covers zero."""
    gain, low, high = (row[f"throughput_gain{k}"] for k in ("_pct", "_ci95_low", "_ci95_high"))
    if low is None:
        return "n/a" if gain is None else f"{gain:+.0f}%"
    words = " (no measurable difference)" if low <= 0 <= high else ""
    return f"{gain:+.0f}% [{low:+.0f}%, {high:+.0f}%]{words}"


# The comparison's columns: label, from which profile on (the gain is over the first), cell.
SUMMARY = (("req/s", 0, partial(_figure, key="request_throughput", interval=True)),
           ("throughput gain", 1, _gain_cell),
           ("TTFT p50", 0, partial(_figure, key="ttft_p50_ms")))
# The per-row sections after it: heading, words, and each row's cells by column.
DETAILS = (
    ("## Requests, latency and token throughput", "", {
        "requests / errors": lambda r: f"{r['requests']} / {r['errors']}" + (
            "" if r["replicates"] is None else
            f" in {r['replicates']} blocks (stopped by {r['stopped_by']})") + (
            f"; busy machine ({r['other_busy_pct']:.0f}% of its CPUs for others)"
            if (r["other_busy_pct"] or 0) > sweep.BUSY_PCT else ""),
        **{FIGURES[k][0]: partial(_figure, key=k)
           for k in ("ttft_p90_ms", "request_latency_p50_ms", "output_token_throughput")}}),
    ("## Routing stickiness (which worker served each video's questions)", "", {
        "videos on one worker": lambda r: "n/a" if r["stickiness_share_single_worker"] is None
        else f"{r['stickiness_share_single_worker']:,.0%}",
        "workers per video": lambda r: fmt(r["stickiness_mean_workers_per_video"], 2)}),
    ("## Server-side evidence", "Share of prompt tokens the workers served from their prefix "
     "caches (the frontend's own counters) beside the most a chunk of fresh videos can reach "
     "(each video's first request on each worker misses), and how the requests spread over the "
     "workers that served them (the worker each response names).", {
         "prefix-cache hit / cold ceiling": lambda r: fmt(r["prefix_cache_hit_pct"], 0, "%")
         + " / " + fmt(r["prefix_cache_hit_ceiling_pct"], 0, "%"),
         "workers (requests each)": lambda r: "n/a" if r[SPREAD_KEYS[0]] is None else
         f"{r['stickiness_workers_seen']} ({r[SPREAD_KEYS[0]]}-{r[SPREAD_KEYS[1]]})"}),
)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def render_markdown(report: Mapping[str, Any]) -> str:
    rows, labels = report["rows"], report["profiles"]
    by_key = {(r["concurrency"], r["profile"]): r for r in rows}
    method = next((r["interval_method"] for r in rows if r["interval_method"]), None)
    columns = [(f"{lb} {name}", lb, cell) for name, first, cell in SUMMARY for lb in labels[first:]]
    out = ["# Routing comparison", "",
           f"Profiles: {', '.join(labels)}. Throughput gain is over {labels[0]}. "
           + (f"95% intervals: {method}. " if method else
              "No level ran replicate chunks, so no interval. ")
           + (PAIRED if report["design"] == "paired" else SEPARATE), "",
           *_table(["Concurrency", *(head for head, _, _ in columns)],
                   [[str(c), *(cell(by_key[(c, lb)]) if (c, lb) in by_key else "n/a"
                               for _, lb, cell in columns)]
                    for c in sorted({r["concurrency"] for r in rows})])]
    for heading, words, cells in DETAILS:
        shown = [r for r in rows if any(cell(r) != "n/a" for cell in cells.values())]
        if shown:
            out += ["", heading, "", *([words, ""] if words else []),
                    *_table(["Concurrency", "profile", *cells],
                            [[str(r["concurrency"]), r["profile"],
                              *(cell(r) for cell in cells.values())] for r in shown])]
    seed = seed_lines(report)
    out += ["", *seed] if seed else []
    out += ["", "## Runs", ""]
    for run in report["runs"]:
        m = run["manifest"]
        routing = (m.get("deployment") or {}).get("routing")
        out.append(
            f"- **{run['label']}**: `{run['dir']}` endpoint {m.get('endpoint')}, model "
            f"{m.get('model')}, session header {m.get('session_header') or 'none'}"
            + (f", frontend `{routing}`" if routing else "")
            + f"; a dataset of {m.get('requests_per_level')} requests "
            f"({m.get('sessions_per_level')} videos x {m.get('questions_per_video')} "
            f"questions; a level sends what its stop rule needs), "
            f"{m.get('output_tokens')} output tokens, seed {m.get('random_seed')}; "
            f"AIPerf {(m.get('tools') or {}).get('aiperf')}")
        out += [f"  - note: {note}" for note in m.get("notes") or []]
    return "\n".join(out) + "\n"


def write_plots(labels: Sequence[str], rows: Sequence[dict[str, Any]], out: Path) -> None:
    """Throughput and TTFT against concurrency (log axis), 95% intervals as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({r["concurrency"] for r in rows})
    for name, ylabel, title, keys in PLOTS:
        fig, ax = plt.subplots(figsize=(7, 4.5), layout="tight")
        for index, label in enumerate(labels):
            for key, style in zip(keys, ("-", "--"), strict=False):
                points = [r for r in rows if r["profile"] == label and r[key] is not None]
                bars = [[abs(r[key] - r[f"{key}_ci95_{end}"]) if r[f"{key}_ci95_{end}"]
                         is not None else 0.0 for r in points] for end in ("low", "high")]
                ax.errorbar([r["concurrency"] for r in points], [r[key] for r in points],
                            yerr=bars, fmt=style, marker="o", capsize=3, color=f"C{index}",
                            label=label + (f" {FIGURES[key][0]}" if len(keys) > 1 else ""))
        ax.set(xscale="log", xlabel="concurrency", ylabel=ylabel, title=title)
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)


def build_report(run_dirs: Sequence[Path], out: Path, warn: Any = print,
                 ttft_floor_ms: float | None = None) -> Path:
    """Write report.md/.csv/.json and the plots to `out`; returns the report.md path.
    `ttft_floor_ms`: the mock's own TTFT (the rehearsal's)."""
    runs = [r for r in collect_runs([Path(d) for d in run_dirs], warn) if r.levels]
    if not runs:
        raise InputError(BAD_INPUT, [
            f"no finished level of a sweep under {', '.join(map(str, run_dirs))}: "
            "run `python -m benchmarks sweep` first"])
    check_comparable(runs)
    rows = report_rows(runs)
    mock = any("mock_workers" in (r.manifest.get("deployment") or {}) for r in runs)
    report = {"baseline": runs[0].label, "profiles": [r.label for r in runs],
              "design": design(runs), "rows": rows,
              "seed_comparison": seed_comparison(rows, ttft_floor_ms,
                                                 IN_SAMPLE_LEVELS if mock else (), runs[0].label),
              "runs": [{"label": r.label, "dir": str(r.source), "manifest": r.manifest}
                       for r in runs]}
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "report.md"
    markdown.write_text(render_markdown(report))
    with open(out / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / REPORT_JSON).write_text(json.dumps(report, indent=2) + "\n")
    write_plots(report["profiles"], rows, out)
    return markdown


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report", help="compare sweep results: Markdown, CSV, JSON and plots", description=__doc__)
    p.add_argument("dirs", nargs="+", type=Path, help="run directories (or folders of runs)")
    p.add_argument("--out", type=Path, required=True, help="report directory")
    p.set_defaults(func=_run, errors=InputError)


def _run(args: argparse.Namespace) -> int:
    markdown = build_report(args.dirs, args.out, warn=lambda line: print(line, file=sys.stderr))
    print(markdown.read_text())
    print(f"report: written to {args.out} (report.md, report.csv, report.json, "
          f"{', '.join(name for name, *_ in PLOTS)})")
    return 0
