"""Preflight errors, caused for real: a taken port, no NATS, no Dynamo, a broken Dynamo,
too little memory. Each must be reported before anything starts, naming the fix."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.local_dynamo import find_nats_server
from benchmarks.preflight import (
    PortRequest,
    available_memory,
    check_dynamo,
    run_preflight,
)
from benchmarks.processes import LOOPBACK, free_port, port_in_use
from infra.rules import InputError
from tests.support_rehearsal import child_env


def test_healthy_environment_passes() -> None:
    run_preflight(find_nats_server(), ports=[PortRequest("--frontend-port", free_port())])


def test_port_in_use_is_named_with_its_option() -> None:
    with socket.socket() as busy:
        busy.bind((LOOPBACK, 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert port_in_use(port)
        with pytest.raises(InputError) as failure:
            run_preflight(find_nats_server(), ports=[PortRequest("--nats-port", port)])
    message = str(failure.value)
    assert f"--nats-port {port}" in message and "already in use" in message
    assert "nothing was started" in message


def test_missing_nats_is_reported(tmp_path: Path) -> None:
    assert find_nats_server(str(tmp_path / "python"), search_path=str(tmp_path)) is None
    with pytest.raises(InputError, match="nats-server not found.*setup.sh"):
        run_preflight(None)


def test_missing_dynamo_is_reported(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    problems = check_dynamo(str(venv / "bin" / "python"))
    assert len(problems) == 1 and "not installed" in problems[0] and "setup.sh" in problems[0]


def test_broken_dynamo_install_is_reported(tmp_path: Path) -> None:
    """A `dynamo` package that is present but fails to import (as with a missing library)."""
    package = tmp_path / "shadow" / "dynamo" / "frontend"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(
        "raise ImportError('libdynamo_core.so: cannot open shared object file')\n"
    )
    env = child_env()
    env["PYTHONPATH"] = f"{tmp_path / 'shadow'}:{env['PYTHONPATH']}"
    problems = check_dynamo(sys.executable, env)
    assert len(problems) == 1
    assert "broken" in problems[0] and "libdynamo_core.so" in problems[0]
    with pytest.raises(InputError, match="broken"):
        run_preflight(find_nats_server(), env=env)


def test_too_little_memory_is_reported() -> None:
    available = available_memory()
    assert available is not None and available > 0
    with pytest.raises(InputError, match="too little memory"):
        run_preflight(find_nats_server(), memory_needed=available * 4)


def test_all_problems_are_reported_at_once() -> None:
    with socket.socket() as busy:
        busy.bind((LOOPBACK, 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(InputError) as failure:
            run_preflight(None, ports=[PortRequest("--frontend-port", port)],
                          memory_needed=2**60)
    assert len(failure.value.problems) == 3
