"""The code base stays `ruff` clean (lint and import order), its imports run one way, and
its README stays a guide."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def test_ruff_check_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_stays_a_guide() -> None:
    """Reference material lives in docs/; the README's links there resolve."""
    readme = (REPO_ROOT / "README.md").read_text()
    assert len(readme) <= 20_000
    for doc in ("serving-paths", "benchmark-toolkit", "rehearsal", "deploy-reference",
                "development"):
        assert f"(docs/{doc}.md)" in readme and (REPO_ROOT / "docs" / f"{doc}.md").is_file()


@pytest.mark.parametrize("folder,never", [("infra", ("benchmarks", "rehearsal")),
                                           ("benchmarks", ("rehearsal",))])
def test_imports_run_one_way(folder: str, never: tuple[str, ...]) -> None:
    """rehearsal/ -> benchmarks/ -> infra/: infra runs the toolkit as a program (in pods, and
    `collect` from the results hook) and the toolkit knows nothing of the rehearsal, so each
    can be read without the insides of those that use it."""
    offenders = []
    for path in sorted((REPO_ROOT / folder).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names
                          if n.split(".")[0] in never]
    assert offenders == []
