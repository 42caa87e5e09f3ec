"""Helpers for rehearsal tests: a tiny model dir, a small real local Dynamo stack."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from infra.routing import Routing
from rehearsal.local_dynamo import (
    LocalDynamo,
    find_nats_server,
    listeners,
    mock_model_dir,
)


def small_stack(work: Path, routing: Routing | dict[str, Routing], workers: int = 3
                ) -> LocalDynamo:
    """A small real local graph: one frontend per profile of `routing` (one Routing: its
    own), fast mock workers."""
    assert find_nats_server() is not None, "nats-server missing: run `bash scripts/setup.sh`"
    return LocalDynamo(
        routings=routing if isinstance(routing, dict) else {"profile": routing},
        model_dir=mock_model_dir(work / "model"),
        workers=workers,
        speedup_ratio=10.0,
        work_dir=work / "stack",
        ready_timeout_secs=90.0,
    )


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: set[int], timeout: float = 20.0) -> set[int]:
    """Wait until none of `pids` runs; return those still running at the deadline."""
    deadline = time.monotonic() + timeout
    left = {p for p in pids if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {p for p in left if alive(p)}
    return left


def ports_of(pids: set[int]) -> set[int]:
    """The ports `pids` listen on now (taken before stopping them)."""
    return {listener.port for listener in listeners(pids)}


def listening_ports() -> set[int]:
    """Every TCP port something listens on here, whoever owns it."""
    return {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN}


def still_listening(ports: set[int], timeout: float = 10.0) -> set[int]:
    """Those of `ports` that anything still listens on after `timeout`: a process that
    escaped tracking would show here, where checking the tracked pids alone could not see
    it. Polled, because a killed multi-threaded server (the Dynamo runtime's) shows as a
    zombie while its other threads still close its sockets (a CI run caught one port open
    just after its process was gone)."""
    deadline = time.monotonic() + timeout
    left = ports & listening_ports()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = ports & listening_ports()
    return left


def child_env() -> dict[str, str]:
    """Environment for a Python child that imports the repository's packages."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
