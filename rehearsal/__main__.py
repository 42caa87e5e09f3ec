"""Local rehearsal (`./run.sh`): for each stack, a real dynamo.frontend with the stack's
routing flags and dynamo.mocker with its worker count, on 127.0.0.1; the cluster's adaptive
AIPerf sweep (scaled down), profiles side by side; worker attribution per video; the
comparison report beside the seed's table. Needs no cluster and no GPU."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.sweep import SweepError
from infra.names import SEED_SHAPE, InputError
from rehearsal.local_dynamo import LocalDynamoError
from rehearsal.rehearse import Rehearsal, RehearsalConfig


def build_parser() -> argparse.ArgumentParser:
    """Options named as RehearsalConfig's fields (`dest`), so the config is built from them
    as they are; the defaults are its defaults."""
    d = RehearsalConfig()
    p = argparse.ArgumentParser(
        prog="python -m rehearsal", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=__doc__)
    p.add_argument("--profiles", nargs="+", metavar="STACK", default=d.profiles,
                   help="stacks to rehearse, baseline first (kv-routing too, for example)")
    p.add_argument("--videos", type=int, default=d.videos,
                   help=f"videos a level may use (the seed's: {SEED_SHAPE.videos.count})")
    p.add_argument("--questions-per-video", type=int, default=d.questions_per_video,
                   help="questions per video, each a request after the last one's answer")
    p.add_argument("--concurrency", dest="concurrencies", type=int, nargs="+", metavar="N",
                   default=d.concurrencies, help="levels, the seed's by default")
    p.add_argument("--standin-tokens", type=int, default=d.standin_tokens,
                   help="tokens of each video's text stand-in")
    p.add_argument("--speedup-ratio", type=float, default=d.speedup_ratio,
                   help="the mocker's speed-up of every step; the default makes a first visit "
                   "cost what a video costs an H200 (infra/calibration.py)")
    p.add_argument("--decode-speedup-ratio", type=float, default=d.decode_speedup_ratio,
                   help="the mocker's extra speed-up of decode steps; the default gives the "
                   "seed's cache-hit request time")
    p.add_argument("--stop-within-pct", type=float, default=d.stop_within_pct,
                   help="a level stops once its request throughput's 95%% interval is within "
                   "this many percent (after at least three chunks)")
    p.add_argument("--full", action="store_true",
                   help="every level sends every whole chunk of videos: no early stop")
    p.add_argument("--results-root", type=Path, default=d.results_root,
                   help="where the run's folder goes")
    # Unset, these two keep RehearsalConfig's None (the clock's run id, the computed bound).
    p.add_argument("--run-id", default=argparse.SUPPRESS,
                   help="reuse one to resume (default: the UTC time)")
    p.add_argument("--level-timeout", dest="level_timeout_secs", type=float, metavar="SECS",
                   default=argparse.SUPPRESS,
                   help="seconds per level (default: three times the expected time + 5 min)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    config = RehearsalConfig(**{**args, "profiles": tuple(args["profiles"]),
                                "concurrencies": tuple(args["concurrencies"])})
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


if __name__ == "__main__":
    sys.exit(main())
