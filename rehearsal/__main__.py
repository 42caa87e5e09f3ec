"""`python -m rehearsal` (what `./run.sh` runs): every routing profile on a local Dynamo
frontend with CPU mock workers, the same AIPerf sweep as the cluster, the report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.sweep import SweepError
from infra.names import SEED_SHAPE, InputError
from rehearsal.local_dynamo import LocalDynamoError
from rehearsal.rehearse import Rehearsal, RehearsalConfig


def build_parser() -> argparse.ArgumentParser:
    d = RehearsalConfig()
    p = argparse.ArgumentParser(
        prog="python -m rehearsal",
        description="Local rehearsal: for each stack, a real dynamo.frontend with the stack's "
        "routing flags and dynamo.mocker with its worker count, on 127.0.0.1; the same AIPerf "
        "sweep as the cluster (scaled down); worker attribution per video; the comparison "
        "report. Needs no cluster and no GPU.")
    p.add_argument("--profiles", nargs="+", default=list(d.profiles),
                   help=f"stacks to rehearse, baseline first (default: {' '.join(d.profiles)})")
    p.add_argument("--videos", type=int, default=d.videos, help=f"videos per level (default "
                   f"{d.videos}; the seed's is {SEED_SHAPE.videos.count})")
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
    p.add_argument("--results-root", type=Path, default=d.results_root,
                   help=f"default {d.results_root}")
    p.add_argument("--run-id", default=None, help="default: UTC time; reuse it to resume")
    p.add_argument("--level-timeout", type=float, default=None,
                   help="seconds per level (default: three times the expected time + 5 min)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rehearsal = Rehearsal(RehearsalConfig(
        profiles=tuple(args.profiles), videos=args.videos,
        questions_per_video=args.questions_per_video, concurrencies=tuple(args.concurrency),
        standin_tokens=args.standin_tokens,
        speedup_ratio=args.speedup_ratio, decode_speedup_ratio=args.decode_speedup_ratio,
        results_root=args.results_root, run_id=args.run_id,
        level_timeout_secs=args.level_timeout), say=lambda line: print(line, flush=True))
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


if __name__ == "__main__":
    sys.exit(main())
