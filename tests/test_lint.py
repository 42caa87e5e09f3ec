"""The code base stays `ruff` clean (lint and import order)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_ruff_check_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
