"""Shared test fixtures. Topic-specific helpers live in tests/support_*.py."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = REPO_ROOT.parent / "shared"


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
