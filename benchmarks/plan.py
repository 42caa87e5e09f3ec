"""`plan`: a stack's sweep before `pulumi up`: each level's wall time, the sweep's hours and
the GPU-hours of download, graph start and sweep (infra/calibration.py), from the stack's
benchmark settings. With `--measured RR_RUN SA_RUN` (a real sweep of both profiles, as
`collect` brought them home) it first says how far the prediction was from what was
measured, then plans again on the hardware those runs measured.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.report import read_run
from benchmarks.sweep import MANIFEST_NAME
from infra.calibration import (
    H200,
    Hardware,
    predicted_req_s,
    recalibrate,
    relative_error,
    stack_plan,
)
from infra.settings import Settings


def measured_levels(run_dir: Path) -> dict[int, float]:
    """Concurrency -> req/s of a sweep's finished levels, as its manifest records them."""
    run = read_run(run_dir / MANIFEST_NAME)
    return {c: summary.request_throughput for c, summary in run.levels.items()}


def feedback(settings: Settings, rr_run: Path, sa_run: Path) -> tuple[list[str], Hardware]:
    """How far the seed-calibrated prediction was from a real run, and the hardware that
    run implies (from the lowest level both profiles finished)."""
    rr, sa = measured_levels(rr_run), measured_levels(sa_run)
    common = sorted(set(rr) & set(sa))
    if not common:
        raise ValueError(f"{rr_run} and {sa_run} share no finished level")
    lines = ["the previous prediction against what was measured (req/s):"]
    workers, questions = settings.workers.replicas, settings.benchmark.questions_per_video
    for c in common:
        for name, runs, sticky in (("round-robin", rr, False), ("session-affinity", sa, True)):
            predicted = predicted_req_s(H200, c, workers, questions, sticky)
            lines.append(f"  {name} at {c}: predicted {predicted:.2f}, measured {runs[c]:.2f} "
                         f"({relative_error(predicted, runs[c]):+.0%})")
    return lines, recalibrate(common[0], rr[common[0]], sa[common[0]], workers, questions)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan", help="predict a stack's sweep time and GPU-hours before `pulumi up`",
        description="Predict each level's wall time, the sweep's hours and the GPU-hours "
        "(download, graph start, sweep) of a stack's benchmark settings.")
    p.add_argument("--stack", required=True, help="stack name (reads Pulumi.<stack>.yaml)")
    p.add_argument("--measured", nargs=2, type=Path, metavar=("RR_RUN", "SA_RUN"),
                   help="run directories of a real sweep of both profiles, to recalibrate")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from infra.settings import stack_settings

    try:
        settings = stack_settings(args.stack)
        hardware = H200
        if args.measured:
            lines, hardware = feedback(settings, *args.measured)
            print("\n".join(lines))
    except (ValueError, OSError, KeyError) as error:
        print(f"plan: error: {error}", file=sys.stderr)
        return 2
    print(f"plan for stack {args.stack}:")
    print("\n".join(stack_plan(settings, hardware).lines()))
    return 0
