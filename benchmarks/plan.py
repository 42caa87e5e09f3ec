"""`plan`: a stack's sweep predicted (infra/planning.py) before `pulumi up` spends it, or
checked against real sweeps (`--measured`, `--spread`: docs/benchmark-toolkit.md, `plan`)."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from benchmarks.report import AFFINITY, ROUND_ROBIN, read_run
from benchmarks.sweep import MANIFEST_NAME
from infra.calibration import H200, Hardware, solve_hardware
from infra.planning import REPLICATE_CV, predicted_req_s, stack_plan
from infra.settings import Settings, stack_settings


def measured_spread(run_dirs: Sequence[Path]) -> float:
    """Relative spread of req/s between chunks (stdev over mean), pooled over every level of
    `run_dirs` with two or more: the squared spreads weighted by degrees of freedom."""
    pooled = []
    for run_dir in run_dirs:
        for chunks in read_run(run_dir / MANIFEST_NAME).chunks.values():
            rates = [chunk.request_throughput for chunk in chunks]
            if len(rates) >= 2:
                pooled.append((len(rates) - 1,
                               statistics.variance(rates) / statistics.fmean(rates) ** 2))
    if not pooled:
        raise ValueError(f"no level of {', '.join(map(str, run_dirs))} ran two or more "
                         "chunks: measure the spread on an adaptive sweep's runs")
    return math.sqrt(sum(df * cv2 for df, cv2 in pooled) / sum(df for df, _ in pooled))


def feedback(settings: Settings, rr_run: Path, sa_run: Path) -> tuple[list[str], Hardware]:
    """How far the seed-calibrated prediction was from a real run, and the hardware that
    run implies (from the lowest level both profiles finished)."""
    rr, sa = ({c: summary.request_throughput for c, summary in
               read_run(run / MANIFEST_NAME).levels.items()} for run in (rr_run, sa_run))
    common = sorted(set(rr) & set(sa))
    if not common:
        raise ValueError(f"{rr_run} and {sa_run} share no finished level")
    lines = ["the previous prediction against what was measured (req/s):"]
    workers, questions = settings.serving.replicas, settings.benchmark.workload.questions_per_video
    for c in common:
        for name, runs, sticky in ((ROUND_ROBIN, rr, False), (AFFINITY, sa, True)):
            predicted = predicted_req_s(H200, c, workers, questions, sticky)
            lines.append(f"  {name} at {c}: predicted {predicted:.2f}, measured {runs[c]:.2f} "
                         f"({predicted / runs[c] - 1 if runs[c] else math.nan:+.0%})")
    return lines, solve_hardware(common[0], rr[common[0]], sa[common[0]], workers, questions)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan", help="predict a stack's sweep time and GPU-hours before `pulumi up`",
        description="Predict each level's wall time, the sweep's hours and the GPU-hours "
        "(download, graph start, sweep) of a stack's benchmark settings, full and adaptive.")
    p.add_argument("--stack", required=True, help="stack name (reads Pulumi.<stack>.yaml)")
    p.add_argument("--measured", nargs=2, type=Path, metavar=("RR_RUN", "SA_RUN"),
                   help="run directories of a real sweep of both profiles, to recalibrate")
    p.add_argument("--spread", nargs="+", type=Path, metavar="RUN",
                   help="run directories of adaptive sweeps: plan at their measured spread "
                   f"of req/s between chunks (default {REPLICATE_CV:.0%})")
    p.set_defaults(func=_run, errors=(ValueError, OSError, KeyError))


def _run(args: argparse.Namespace) -> int:
    settings = stack_settings(args.stack)
    hardware, cv = H200, REPLICATE_CV
    if args.measured:
        lines, hardware = feedback(settings, *args.measured)
        print("\n".join(lines))
    if args.spread:
        cv = measured_spread(args.spread)
        print(f"spread of req/s between chunks: {cv:.1%} (measured in "
              f"{', '.join(map(str, args.spread))})")
    print(f"plan for stack {args.stack}:")
    print("\n".join(stack_plan(settings, hardware, cv).lines()))
    return 0
