#!/usr/bin/env bash
# One entry point for a fresh machine: set up .venv (idempotent), then run.
#   ./run.sh                 the main job: local rehearsal of every routing profile
#                            (python -m rehearsal; ./run.sh rehearse [OPTIONS] takes its options)
#   ./run.sh test [ARGS]     the test suite (pytest ARGS, e.g. -m "not rehearsal")
#   ./run.sh mutate [MODULE] mutation testing of the modules that decide (not in CI)
#   ./run.sh <command> ...   any `python -m benchmarks` command (videos, sweep, report...)
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
if [ "${1:-}" = test ]; then
  shift
  exec .venv/bin/python -m pytest "$@"
fi
if [ "${1:-}" = mutate ]; then
  shift
  exec .venv/bin/python tests/mutate.py "$@"
fi
if [ "$#" -eq 0 ] || [ "$1" = rehearse ]; then
  shift "$(( $# > 0 ))"
  exec .venv/bin/python -m rehearsal "$@"
fi
exec .venv/bin/python -m benchmarks "$@"
