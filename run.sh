#!/usr/bin/env bash
# One entry point for a fresh machine: set up .venv (idempotent), then run.
#   ./run.sh                 the main job: local rehearsal of both routing profiles
#   ./run.sh test [ARGS]     the test suite (pytest ARGS, e.g. -m "not rehearsal")
#   ./run.sh <command> ...   any `python -m benchmarks` command (videos, sweep, report...)
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
if [ "${1:-}" = test ]; then
  shift
  exec .venv/bin/python -m pytest "$@"
fi
if [ "$#" -eq 0 ]; then
  set -- rehearse
fi
exec .venv/bin/python -m benchmarks "$@"
