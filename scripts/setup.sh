#!/usr/bin/env bash
# Creates .venv with every pinned dependency. Safe to rerun: it does nothing when the
# pins have not changed since the last successful run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
DYNAMO_VERSION=1.6.1

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: Python 3.11 or newer is required (found: $("$PYTHON" --version 2>&1))." >&2
  echo "setup: install it, or point PYTHON at one: PYTHON=python3.12 ./run.sh" >&2
  exit 1
fi

stamp=.venv/.setup-stamp
if sha256sum --status --check "$stamp" 2>/dev/null; then
  exit 0
fi
pins=$(sha256sum requirements.txt constraints.txt constraints-scan.txt scripts/setup.sh)

echo "setup: creating .venv and installing pinned dependencies (first run takes a few minutes)"
if [ -x .venv/bin/python ] && ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  echo "setup: .venv has no pip (an interrupted or failed creation); making it again"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ] && ! "$PYTHON" -m venv .venv; then
  rm -rf .venv
  echo "setup: '$PYTHON -m venv' failed; on Debian/Ubuntu install the venv module first" \
    "(sudo apt-get install python3-venv), then run this again." >&2
  exit 1
fi
export PIP_QUIET=1 PIP_DISABLE_PIP_VERSION_CHECK=1
.venv/bin/python -m pip install --upgrade pip
.venv/bin/python -m pip install -r requirements.txt -c constraints.txt
# ai-dynamo requires `aisimulate`, a placeholder package that downloads from a host
# outside the package registries; the frontend and the default mocker never import it.
.venv/bin/python -m pip install --no-deps "ai-dynamo==$DYNAMO_VERSION" \
  "ai-dynamo-runtime==$DYNAMO_VERSION"
# The security scan (tests/test_security.py) runs checkov from a venv of its own: its
# pins would clash with the project's.
rm -rf .venv-scan
"$PYTHON" -m venv .venv-scan
.venv-scan/bin/python -m pip install -r constraints-scan.txt
echo "$pins" > "$stamp"
echo "setup: done (.venv)"
