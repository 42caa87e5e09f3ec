"""Mutation testing of the modules that decide (docs/development.md, "Mutation testing").

`./run.sh mutate [MODULE...]`: each module (default: every one in pyproject.toml's
[tool.mutate]) is mutated by mutmut in a workspace of its own, work/mutate/<module>/,
against the tests [tool.mutate] names for it, then its score and survivors are printed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINS = Path(__file__).with_name("mutate-requirements.txt")
# Not copied into a workspace: generated, or mutmut's own.
SKIP = {".git", ".venv", ".venv-scan", "work", "results", "videos", "mutants", "pyproject.toml"}
KILLED = {1, 3, 36, 37, -24, 24, 152, 255}  # failed tests, timeouts, type errors


def ensure_mutmut() -> None:
    """Install the pinned mutmut into .venv, once."""
    want = next(line for line in PINS.read_text().splitlines() if line.startswith("mutmut=="))
    found = subprocess.run([sys.executable, "-m", "pip", "show", "mutmut"],
                           capture_output=True, text=True).stdout
    if f"Version: {want.split('==')[1]}" not in found:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", "-r", str(PINS),
                        "-c", str(ROOT / "constraints.txt")], check=True)


def workspace(module: str, plan: dict, pyproject: dict) -> Path:
    """work/mutate/<module>/: the repository's files (linked) and a pyproject.toml whose
    [tool.mutmut] mutates `module` alone against its tests."""
    ws = ROOT / "work" / "mutate" / module.replace("/", ".").removesuffix(".py")
    # mutmut keeps a test's coverage by its name: a changed test would keep stale coverage.
    shutil.rmtree(ws / "mutants", ignore_errors=True)
    ws.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in ROOT.iterdir() if p.name not in SKIP)
    links = {name: ROOT / name for name in names}
    links["shared"] = ROOT.parent / "shared"  # ../shared/reference, as tests/conftest.py reads it
    links["unmutated"] = ROOT  # the shipped code's real size (tests/conftest.py UNMUTATED_ROOT)
    for name, target in links.items():
        link = ws / name
        if not link.is_symlink():
            link.symlink_to(target)
    mutmut = {
        "source_paths": ["infra", "benchmarks", "rehearsal"],
        "only_mutate": [module],
        "also_copy": [n for n in names if n not in ("infra", "benchmarks", "rehearsal", "tests")],
        # The program tests run Pulumi's mocks over gRPC, which hangs in a plain fork.
        "process_isolation": "forkserver",
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-p", "no:dash", "-q"],
        "pytest_add_cli_args_test_selection": plan["tests"],
    }
    pytest_ini = pyproject["tool"]["pytest"]["ini_options"]
    # Strings and lists of strings, written as JSON: valid TOML.
    lines = ["[tool.pytest.ini_options]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in pytest_ini.items() if k != "addopts"]
    lines += ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in mutmut.items()]
    (ws / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return ws


def score(ws: Path, module: str, globs: list[str], equivalent: list[str]
          ) -> tuple[int, int, list[str]]:
    """(killed, counted, survivors) from mutmut's record of `module`; the mutants listed
    as equivalent (they can't change behaviour; docs/development.md says why) don't count."""
    from fnmatch import fnmatch
    meta = json.loads((ws / "mutants" / f"{module}.meta").read_text())
    codes = {k: v for k, v in meta["exit_code_by_key"].items()
             if any(fnmatch(k, g) for g in globs) and k not in equivalent}
    survivors = sorted(k for k, v in codes.items() if v not in KILLED)
    return len(codes) - len(survivors), len(codes), survivors


def main(argv: list[str]) -> int:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plans = pyproject["tool"]["mutate"]
    modules = argv or list(plans)
    unknown = [m for m in modules if m not in plans]
    if unknown:
        print(f"mutate: no plan for {', '.join(unknown)}; known: {', '.join(plans)}")
        return 2
    ensure_mutmut()
    lines = []
    for module in modules:
        plan = plans[module]
        dotted = module.removesuffix(".py").replace("/", ".")
        globs = [f"{dotted}.x{'ǁ'.join([''] + f.split('.')) if '.' in f else '_' + f}__mutmut_*"
                 for f in plan.get("functions", [])] or [f"{dotted}.*"]
        ws = workspace(module, plan, pyproject)
        print(f"mutate: {module} against {', '.join(plan['tests'])}", flush=True)
        if subprocess.run([sys.executable, "-m", "mutmut", "run", *globs], cwd=ws).returncode:
            lines.append(f"{module}: mutmut failed (its output is above)")
            continue
        killed, total, survivors = score(ws, module, globs, plan.get("equivalent", []))
        lines.append(f"{module}: {killed}/{total} killed ({100 * killed / max(total, 1):.0f}%)")
        lines += [f"  survived or not run: {s}" for s in survivors]
    print("\n".join(["", "mutation scores (cd work/mutate/<module> && mutmut show NAME):"]
                    + lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
