"""`report DIR [DIR ...] --out OUT`: the side-by-side comparison of routing profiles.

Reads the sweeps' manifests (a run directory, or a folder of them): each finished level's
summary as the sweep recorded it, its routing stickiness and server-side evidence, and the
per-request records beside it for the gain's interval. The first run is the baseline.
Writes report.md/.csv/.json and throughput.png, ttft.png (docs/benchmark-toolkit.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.aiperf_run import (
    RECORDS_EXPORT,
    SUMMARY_EXPORT,
    ExportError,
    LevelSummary,
    latencies_by_video,
)
from benchmarks.sweep import (
    MANIFEST_NAME,
    STATUS_COMPLETE,
    changes,
    dataset_identity,
    level_dir_name,
)
from infra.names import InputError

BAD_INPUT = "bad report input"
STICKINESS_KEYS = ("videos", "share_single_worker", "mean_workers_per_video", "workers_seen")
SPREAD_KEYS = ("requests_per_worker_min", "requests_per_worker_max")
METRICS = (
    ("request_throughput", "req/s"),
    ("ttft_p50_ms", "TTFT p50 (ms)"),
    ("ttft_p90_ms", "TTFT p90 (ms)"),
    ("request_latency_p50_ms", "request latency p50 (ms)"),
    ("output_token_throughput", "output tokens/s"),
)


@dataclass
class ProfileRun:
    """The finished levels of one sweep run (one profile), as its manifest records them."""

    label: str
    source: Path
    manifest: dict[str, Any]
    levels: dict[int, LevelSummary] = field(default_factory=dict)
    stickiness: dict[int, dict[str, Any]] = field(default_factory=dict)

    def export(self, concurrency: int) -> Path:
        return self.source / level_dir_name(concurrency) / SUMMARY_EXPORT


def run_manifests(root: Path) -> list[Path]:
    """The sweep manifests of `root`: a run directory, or a folder of them."""
    if (root / MANIFEST_NAME).is_file():
        return [root / MANIFEST_NAME]
    return sorted(root.glob(f"*/{MANIFEST_NAME}"))


def read_run(manifest_path: Path) -> ProfileRun:
    """A run as its sweep recorded it: each finished level's summary (parsed once, by the
    sweep) and, where workers were attributed, how sticky routing was."""
    manifest = json.loads(manifest_path.read_text())
    run = ProfileRun(manifest.get("profile") or manifest_path.parent.name,
                     manifest_path.parent, manifest)
    for level, state in (manifest.get("levels") or {}).items():
        if state.get("status") != STATUS_COMPLETE or not state.get("summary"):
            continue
        run.levels[int(level)] = LevelSummary(**state["summary"])
        if isinstance(state.get("routing"), dict):
            run.stickiness[int(level)] = {k: state["routing"].get(k) for k in STICKINESS_KEYS}
    return run


def collect_runs(dirs: Sequence[Path], warn: Any = print) -> list[ProfileRun]:
    """Every sweep run under `dirs`, in the order the directories were given."""
    runs = []
    for root in dirs:
        if not root.is_dir():
            raise InputError(BAD_INPUT, [f"{root} is not a directory"])
        manifests = run_manifests(root)
        if not manifests:
            warn(f"report: no sweep run ({MANIFEST_NAME}) under {root}")
        runs += [read_run(m) for m in manifests]
    labels = [r.label for r in runs]
    for run in runs:
        if labels.count(run.label) > 1:
            run.label = f"{run.label} ({run.source.name})"
    return runs


# Deployment facts that differ between the profiles of one comparison by design: the
# routing, and each stack's own graph (its uid) and frontend command (its routing flags).
ROUTING_FACTS = ("routing", "graph_uid", "frontend_command")


def binding(manifest: dict[str, Any]) -> dict[str, Any]:
    """What runs must share to be compared: the workload and the deployment, routing aside.
    The dataset by what its sidecar says it holds (each stack serves the same videos from
    its own server, so their URLs differ), else by its contents' hash."""
    dataset = manifest.get("dataset") or {}
    return {
        "model": manifest.get("model"),
        "videos": manifest.get("sessions_per_level"),
        "questions_per_video": manifest.get("questions_per_video"),
        "output_tokens": manifest.get("output_tokens"),
        "dataset": dataset_identity(dataset, ("path", "video_source")) or dataset.get("sha256"),
        "deployment": {k: v for k, v in (manifest.get("deployment") or {}).items()
                       if k not in ROUTING_FACTS},
    }


def binding_changes(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """How `other`'s run differs from `base`'s in anything but routing (manifests)."""
    one, two = binding(base), binding(other)
    return [c for key in one for c in changes(key, one[key], two[key])]


def check_comparable(runs: Sequence[ProfileRun]) -> None:
    """Refuse a comparison of runs of different workloads or deployments: its gains would
    measure the difference, not the routing."""
    problems = [f"{run.label} ({run.source}) differs from {runs[0].label} "
                f"({runs[0].source}) in {c}"
                for run in runs[1:] for c in binding_changes(runs[0].manifest, run.manifest)]
    if problems:
        raise InputError(BAD_INPUT, [*problems, "compare runs of one workload and deployment "
                                     "(routing aside): the same videos, questions, output "
                                     "tokens, dataset, images and topology"])


def _level_state(run: ProfileRun, concurrency: int) -> dict[str, Any]:
    return run.manifest["levels"][str(concurrency)]


def gain_pct(value: float | None, baseline: float | None) -> float | None:
    if value is None or not baseline:
        return None
    return (value / baseline - 1.0) * 100.0


BOOTSTRAP_SAMPLES = 1000


def gain_interval(base: dict[str, list[float]], other: dict[str, list[float]],
                  point: float | None = None, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
                  ) -> tuple[float, float] | None:
    """95% interval of the throughput gain, by a bootstrap over videos.

    At a fixed concurrency the request rate is concurrency / mean request latency
    (Little's law), so the gain is base mean latency / other mean latency - 1. Videos are
    what varies between requests (their questions share a cache), so whole videos are
    resampled, with replacement, on each side. The interval is placed around `point`
    (the gain of AIPerf's request rates, which also count ramp-up and tail, so it can differ
    a little from the latency ratio): the bootstrap gives its spread, never its centre.
    None without per-request records."""
    if not base or not other:
        return None
    rng = random.Random(seed)
    videos = [list(base.values()), list(other.values())]

    def mean_latency(side: list[list[float]], pick: bool = True) -> float:
        chosen = rng.choices(side, k=len(side)) if pick else side
        picked = [lat for video in chosen for lat in video]
        return sum(picked) / len(picked)

    gains = sorted((mean_latency(videos[0]) / mean_latency(videos[1]) - 1.0) * 100.0
                   for _ in range(samples))
    full = (mean_latency(videos[0], False) / mean_latency(videos[1], False) - 1.0) * 100.0
    shift = 0.0 if point is None else point - full
    return gains[int(0.025 * samples)] + shift, gains[int(0.975 * samples) - 1] + shift


def _latencies(run: ProfileRun, concurrency: int) -> dict[str, list[float]]:
    records = run.export(concurrency).parent / RECORDS_EXPORT
    return latencies_by_video(records) if records.is_file() else {}


def report_rows(runs: Sequence[ProfileRun]) -> list[dict[str, Any]]:
    """One row per (concurrency, profile): every metric, the gain over the first profile."""
    baseline = runs[0]
    rows = []
    for concurrency in sorted({c for r in runs for c in r.levels}):
        base = baseline.levels.get(concurrency)
        for run in runs:
            level = run.levels.get(concurrency)
            if level is None:
                continue
            sticky = run.stickiness.get(concurrency, {})
            state = _level_state(run, concurrency)
            gain = gain_pct(level.request_throughput,
                            base.request_throughput if base else None)
            interval = None
            if run is not baseline and base is not None:
                interval = gain_interval(_latencies(baseline, concurrency),
                                         _latencies(run, concurrency), gain)
            rows.append({
                "concurrency": concurrency,
                "profile": run.label,
                "requests": level.requests,
                "errors": level.errors,
                **{name: getattr(level, name) for name, _ in METRICS},
                "throughput_gain_pct": gain,
                "throughput_gain_ci95_low": interval[0] if interval else None,
                "throughput_gain_ci95_high": interval[1] if interval else None,
                **{f"stickiness_{k}": sticky.get(k) for k in STICKINESS_KEYS},
                # Server-side evidence the sweep recorded: the frontend's prefix-cache count
                # and the workers the responses name (benchmarks/evidence.py `level_evidence`).
                "prefix_cache_hit_pct": state.get("prefix_cache_hit_pct"),
                **{k: (state.get("routing") or {}).get(k) for k in SPREAD_KEYS},
                "export": str(run.export(concurrency)),
            })
    return rows


def _fmt(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{suffix}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.0f}%"


def _gain_cell(row: dict[str, Any]) -> str:
    """The gain with its 95% interval, in words where the interval covers zero."""
    low, high = row["throughput_gain_ci95_low"], row["throughput_gain_ci95_high"]
    if low is None:
        return _pct(row["throughput_gain_pct"])
    words = " (no measurable difference)" if low <= 0 <= high else ""
    return f"{_pct(row['throughput_gain_pct'])} [{low:+.0f}%, {high:+.0f}%]{words}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def render_markdown(runs: Sequence[ProfileRun], rows: Sequence[dict[str, Any]],
                    notes: Sequence[str] = ()) -> str:
    by_key = {(r["concurrency"], r["profile"]): r for r in rows}
    levels = sorted({r["concurrency"] for r in rows})
    labels = [r.label for r in runs]
    base = labels[0]

    def cell(c: int, label: str, key: str, fmt: Any) -> str:
        row = by_key.get((c, label))
        return fmt(row[key]) if row else "n/a"

    out = ["# Routing comparison", ""]
    out.append(f"Profiles: {', '.join(labels)}. Throughput gain is over {base}, with its 95% "
               "interval from a bootstrap over videos (the per-request records).")
    out.append("")
    header = ["Concurrency", *(f"{lb} req/s" for lb in labels)]
    header += [f"{lb} throughput gain" for lb in labels[1:]]
    header += [f"{lb} TTFT p50" for lb in labels]
    body = []
    for c in levels:
        row = [str(c)]
        row += [cell(c, lb, "request_throughput", _fmt) for lb in labels]
        row += [_gain_cell(by_key[(c, lb)]) if (c, lb) in by_key else "n/a"
                for lb in labels[1:]]
        row += [cell(c, lb, "ttft_p50_ms", lambda v: _fmt(v, 0, " ms")) for lb in labels]
        body.append(row)
    out += _table(header, body)
    out += ["", "## Latency and token throughput", ""]
    header = ["Concurrency"]
    for lb in labels:
        header += [f"{lb} TTFT p90", f"{lb} request latency p50", f"{lb} output tokens/s"]
    body = []
    for c in levels:
        row = [str(c)]
        for lb in labels:
            row += [cell(c, lb, "ttft_p90_ms", lambda v: _fmt(v, 0, " ms")),
                    cell(c, lb, "request_latency_p50_ms", lambda v: _fmt(v, 0, " ms")),
                    cell(c, lb, "output_token_throughput", lambda v: _fmt(v, 0))]
        body.append(row)
    out += _table(header, body)
    out += ["", "## Requests", ""]
    body = [[str(c)] + [cell(c, lb, "requests", str) + " / " + cell(c, lb, "errors", str)
                        for lb in labels] for c in levels]
    out += _table(["Concurrency", *(f"{lb} requests / errors" for lb in labels)], body)
    sticky_runs = [r for r in runs if r.stickiness]
    if sticky_runs:
        out += ["", "## Routing stickiness (which worker served each video's questions)", ""]
        header = ["Concurrency"]
        for r in sticky_runs:
            header += [f"{r.label} videos on one worker", f"{r.label} workers per video"]
        body = []
        for c in sorted({c for r in sticky_runs for c in r.stickiness}):
            row = [str(c)]
            for r in sticky_runs:
                s = r.stickiness.get(c, {})
                share = s.get("share_single_worker")
                row += [_fmt(None if share is None else share * 100, 0, "%"),
                        _fmt(s.get("mean_workers_per_video"), 2)]
            body.append(row)
        out += _table(header, body)
    if any(r["prefix_cache_hit_pct"] is not None or r[SPREAD_KEYS[0]] is not None
           for r in rows):
        out += ["", "## Server-side evidence", "",
                "Share of prompt tokens the workers served from their prefix caches (the "
                "frontend's own counters), and how the requests spread over the workers that "
                "served them (the worker each response names).", ""]
        header = ["Concurrency"]
        for lb in labels:
            header += [f"{lb} prefix-cache hit", f"{lb} workers (requests each)"]
        body = []
        for c in levels:
            row = [str(c)]
            for lb in labels:
                level = by_key.get((c, lb)) or {}
                low, high = (level.get(k) for k in SPREAD_KEYS)
                spread = "n/a" if low is None else (
                    f"{level['stickiness_workers_seen']} ({low}-{high})")
                row += [_fmt(level.get("prefix_cache_hit_pct"), 0, "%"), spread]
            body.append(row)
        out += _table(header, body)
    if notes:
        out += ["", "## What this run shows", "", *(f"- {n}" for n in notes)]
    out += ["", "## Runs", ""]
    for run in runs:
        m = run.manifest
        routing = (m.get("deployment") or {}).get("routing")
        facts = [
            f"**{run.label}**: `{run.source}`",
            f"endpoint {m.get('endpoint')}, model {m.get('model')}, "
            f"session header {m.get('session_header') or 'none'}"
            + (f", frontend `{routing}`" if routing else "")
            + f"; {m.get('requests_per_level')} requests per level "
            f"({m.get('sessions_per_level')} videos x {m.get('questions_per_video')} "
            f"questions), {m.get('output_tokens')} output tokens, "
            f"seed {m.get('random_seed')}; "
            f"AIPerf {(m.get('tools') or {}).get('aiperf')}",
        ]
        out.append("- " + " ".join(facts))
        for note in m.get("notes") or []:
            out.append(f"  - note: {note}")
    return "\n".join(out) + "\n"


def write_plots(runs: Sequence[ProfileRun], out: Path,
                rows: Sequence[dict[str, Any]] = ()) -> list[Path]:
    """Throughput (a profile's 95% interval as error bars, from its gain's) and TTFT."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_key = {(r["concurrency"], r["profile"]): r for r in rows}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        levels = sorted(run.levels)
        values = [run.levels[c].request_throughput for c in levels]
        errors = [[0.0] * len(levels), [0.0] * len(levels)]
        for i, (c, value) in enumerate(zip(levels, values, strict=True)):
            row = by_key.get((c, run.label)) or {}
            low, high = row.get("throughput_gain_ci95_low"), row.get("throughput_gain_ci95_high")
            if low is not None:
                base = value / (1 + row["throughput_gain_pct"] / 100)
                errors[0][i] = max(0.0, value - base * (1 + low / 100))
                errors[1][i] = max(0.0, base * (1 + high / 100) - value)
        ax.errorbar(levels, values, yerr=errors, marker="o", capsize=3, label=run.label)
    throughput = _save_plot(plt, fig, ax, runs, out / "throughput.png", "requests/s",
                            "Throughput against concurrency")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for index, run in enumerate(runs):
        levels = sorted(run.levels)
        for key, style, name in (("ttft_p50_ms", "-", "p50"), ("ttft_p90_ms", "--", "p90")):
            values = [getattr(run.levels[c], key) for c in levels]
            points = [(c, v) for c, v in zip(levels, values, strict=True) if v is not None]
            if points:
                ax.plot(*zip(*points, strict=True), style, marker="o", color=f"C{index}",
                        label=f"{run.label} TTFT {name}")
    ttft = _save_plot(plt, fig, ax, runs, out / "ttft.png", "milliseconds",
                      "Time to first token against concurrency")
    return [throughput, ttft]


def _save_plot(
    plt: Any, fig: Any, ax: Any, runs: Sequence[ProfileRun], path: Path, ylabel: str,
    title: str,
) -> Path:
    """Concurrency on a log axis with a tick per level, grid, legend; saved as PNG."""
    levels = sorted({c for r in runs for c in r.levels})
    ax.set(xscale="log", xlabel="concurrency", ylabel=ylabel, title=title)
    ax.set_xticks(levels)
    ax.set_xticklabels([str(c) for c in levels])
    ax.minorticks_off()
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def build_report(run_dirs: Sequence[Path], out: Path, warn: Any = print,
                 notes: Sequence[str] = ()) -> Path:
    """Write report.md/.csv/.json and the plots to `out`; returns the report.md path.
    `notes`: what the caller concluded across the runs (the rehearsal's direction)."""
    runs = [r for r in collect_runs([Path(d) for d in run_dirs], warn) if r.levels]
    if not runs:
        raise InputError(BAD_INPUT, [
            f"no finished level of a sweep under {', '.join(map(str, run_dirs))}: "
            "run `python -m benchmarks sweep` first"])
    check_comparable(runs)
    rows = report_rows(runs)
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "report.md"
    markdown.write_text(render_markdown(runs, rows, notes))
    with open(out / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = {
        "baseline": runs[0].label,
        "profiles": [r.label for r in runs],
        "rows": rows,
        "notes": list(notes),
        "runs": [
            {"label": r.label, "dir": str(r.source), "manifest": r.manifest,
             "stickiness": {str(c): s for c, s in sorted(r.stickiness.items())},
             "notes": r.manifest.get("notes") or []}
            for r in runs
        ],
    }
    (out / "report.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_plots(runs, out, rows)
    return markdown


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="compare sweep results: Markdown, CSV, JSON and plots",
        description="Compare AIPerf results of one or more runs side by side: req/s, "
        "throughput gain over the first profile, TTFT p50/p90, request-latency p50, output "
        "tokens/s per concurrency. The first directory's profile is the baseline.",
    )
    p.add_argument("dirs", nargs="+", type=Path, help="run directories (or folders of runs)")
    p.add_argument("--out", type=Path, required=True, help="report directory")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        markdown = build_report(args.dirs, args.out,
                                warn=lambda line: print(line, file=sys.stderr))
    except (InputError, ExportError) as exc:
        print(f"report: error: {exc}", file=sys.stderr)
        return 1
    print(markdown.read_text())
    print(f"report: written to {args.out} (report.md, report.csv, report.json, "
          f"throughput.png, ttft.png)")
    return 0
