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


def test_the_pulumi_process_neither_imports_nor_runs_the_toolkit() -> None:
    """The program's own process (an `up` under the SDK's mocks, every part of the stack on)
    loads no module of the toolkit or the rehearsal, lazily neither: the pods run the
    toolkit, and the results hook runs `collect` as a child process."""
    script = (
        "import sys\n"
        "from tests.support_pulumi import run_program, stack_config\n"
        "run = run_program('session-affinity', stack_config('session-affinity'), "
        "preview=False)\n"
        "assert run.error is None, run.error\n"
        "assert run.of_type('kubernetes:batch/v1:Job'), 'the benchmark was not declared'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('benchmarks', "
        "'rehearsal')))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def _toolkit_reaches(forbidden: str) -> list[str]:
    """Every chain from a `benchmarks/` module, through the infra modules it imports (at any
    depth, lazily too), to an infra module that imports `forbidden`."""
    import ast

    imports: dict[str, set[str]] = {}
    for folder in ("benchmarks", "infra"):
        for path in (REPO_ROOT / folder).glob("*.py"):
            names: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.update({node.module, *(f"{node.module}.{a.name}" for a in node.names)})
            imports[f"{folder}.{path.stem}"] = names
    chains = []
    for start in (m for m in imports if m.startswith("benchmarks.")):
        todo, seen = [(start, start)], set()
        while todo:
            module, chain = todo.pop()
            if module in seen:
                continue
            seen.add(module)
            if module.startswith("infra.") and any(
                    n == forbidden or n.startswith(f"{forbidden}.") for n in imports[module]):
                chains.append(chain)
            todo += [(n, f"{chain} -> {n}") for n in imports[module]
                     if n.startswith("infra.") and n in imports]
    return sorted(chains)


def test_the_toolkit_never_imports_the_pulumi_program() -> None:
    """The program runs the toolkit as a program (the pods, the results hook's `collect`);
    the toolkit imports no module of the program back (`collect` once imported
    the Pulumi program's own benchmark module for the run's output: a loop through the hook)."""
    assert _toolkit_reaches("pulumi_kubernetes") == []


def test_the_toolkit_imports_no_pulumi_at_all() -> None:
    assert _toolkit_reaches("pulumi") == []


def test_the_mutation_plan_names_code_that_exists() -> None:
    """`[tool.mutate]` in pyproject.toml (docs/development.md, "Mutation testing") names
    functions and equivalent mutants by name: a restructure that renames or removes one
    would silently shrink what `./run.sh mutate` checks."""
    import importlib
    import tomllib

    plan = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["mutate"]
    missing = []
    for path, entry in plan.items():
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        names = [*entry.get("functions", []), *(
            # mutmut's names: x_<function>__mutmut_N, xǁ<Class>ǁ<method>__mutmut_N
            mutant.split(".")[-1].removeprefix("xǁ").removeprefix("x_").rsplit("__mutmut_", 1)[0]
            for mutant in entry.get("equivalent", []))]
        for name in names:
            found: object = module
            for part in name.replace("ǁ", ".").split("."):
                found = getattr(found, part, None)
            if found is None:
                missing.append(f"{path}: {name}")
    assert missing == []
