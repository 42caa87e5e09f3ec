"""Shared test fixtures. Topic-specific helpers live in tests/support_*.py."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def at_a_terminal() -> None:
    """`preexec_fn` of a child that stands for a command run in the foreground, where Ctrl-C
    reaches it. An ignored SIGINT survives exec, and a suite started in the background of a
    non-interactive shell (`pytest ... &`) has it ignored: such a child never hears Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
SHARED_DIR = REPO_ROOT.parent / "shared"
# The checkout as committed. Mutation testing (tests/mutate.py) runs the tests in a copy whose
# mutated modules are megabytes, too big for the pods' code ConfigMap; it links the checkout.
_LINKED = REPO_ROOT.parent / "unmutated"
UNMUTATED_ROOT = _LINKED if _LINKED.is_dir() else REPO_ROOT


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_reference() -> Path:
    """`../shared/reference/` (published CRDs); tests that need it skip where it is absent."""
    path = SHARED_DIR / "reference"
    if not path.is_dir():
        pytest.skip(f"{path} is absent (it sits beside the repository in CI and dev machines)")
    return path
