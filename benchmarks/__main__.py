"""`python -m benchmarks <command>`: each module in COMMANDS has `register(subparsers)`; its
parser sets `func` (args in, exit code out) and `errors`, its bad-input exceptions, which main
prints and exits BAD_INPUT with (docs/benchmark-toolkit.md, "Exit codes")."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("videos", "smoke", "sweep", "report", "collect", "plan")
# Every command: 0 done, 1 its work failed, 2 bad input (as argparse's own), 130 interrupted.
BAD_INPUT = 2


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """All commands, or `only` one: a pod then imports just what its command needs."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Cosmos3 Super Reasoner routing benchmark: videos, smoke test, AIPerf "
        "sweep, comparison report, results from the cluster, sweep plan (the local rehearsal: "
        "`python -m rehearsal`).",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in (only,) if only in COMMANDS else COMMANDS:
        importlib.import_module(f"benchmarks.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except getattr(args, "errors", ()) as exc:
        print(f"{args.command}: error: {exc}", file=sys.stderr)
        return BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
