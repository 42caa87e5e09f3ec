"""Preflight problems, caused for real: no NATS, no Dynamo, a broken Dynamo, too little
memory. Each is reported, with its fix, before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from infra.names import InputError
from rehearsal.local_dynamo import find_nats_server, preflight_problems
from rehearsal.rehearse import DEFAULT_PROFILES, Rehearsal, RehearsalConfig
from tests.support_rehearsal import child_env


def test_a_healthy_machine_passes_every_check_and_nothing_is_written(tmp_path: Path) -> None:
    """This machine runs the rehearsal: its checks find nothing, with the memory of one local
    graph and one AIPerf at a time, read every default stack, and start or write nothing."""
    rehearsal = Rehearsal(RehearsalConfig(results_root=tmp_path / "results"))
    rehearsal.check()
    assert set(rehearsal.stacks) == set(DEFAULT_PROFILES)
    assert not any(tmp_path.iterdir())


def test_missing_nats_is_reported(tmp_path: Path) -> None:
    assert find_nats_server(str(tmp_path / "python"), search_path=str(tmp_path)) is None
    (problem,) = preflight_problems(None, tmp_path)
    assert "nats-server not found" in problem and "setup.sh" in problem


def test_missing_dynamo_is_reported(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    (problem,) = preflight_problems(find_nats_server(), tmp_path, str(venv / "bin" / "python"))
    assert "not installed" in problem and "setup.sh" in problem


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
    (problem,) = preflight_problems(find_nats_server(), tmp_path, env=env)
    assert "broken" in problem and "libdynamo_core.so" in problem


def test_too_little_memory_is_reported(tmp_path: Path) -> None:
    available = psutil.virtual_memory().available
    (problem,) = preflight_problems(find_nats_server(), tmp_path, memory_needed=available * 4)
    assert "too little memory" in problem


def test_all_problems_are_reported_at_once_before_anything_starts(tmp_path: Path) -> None:
    assert len(preflight_problems(None, tmp_path, memory_needed=2**60)) == 2
    rehearsal = Rehearsal(RehearsalConfig(standin_tokens=10, profiles=("no-such-stack",),
                                          results_root=tmp_path))
    with pytest.raises(InputError, match="nothing was started") as failure:
        rehearsal.run()
    assert len(failure.value.problems) == 2  # the option and the stack
    assert not any(tmp_path.iterdir())
