"""A stack's config as the Pulumi CLI builds it, read straight from the project files.

Why: tests, and tools that run without the Pulumi CLI, need the exact mapping the program
receives: the `config:` defaults of Pulumi.yaml overlaid by Pulumi.<stack>.yaml, keys
namespaced by project, every value a string (lists and maps as JSON). Secure values
(`{secure: ...}`) stay as they are: they are ciphertext only the CLI can open.

The CLI also refuses some stack config before the program runs (a typed key with no
default left unset, a value not of its declared type, a `secret: true` key in plain
text). `cli_config_problems` applies the same rules with the CLI's own wording, so a
stack file or a README command the CLI would refuse fails here too, not on a cluster.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml


class StackFilesError(ValueError):
    """Pulumi.yaml or the stack's file is missing; the message says where to run from."""


def cli_value(value: Any) -> str:
    """A config value as the CLI hands it to the program."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def stack_names(root: Path) -> list[str]:
    """The stacks that have a Pulumi.<stack>.yaml under `root`, sorted."""
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def is_secure(value: Any) -> bool:
    """A value stored with `--secret`: ciphertext only the CLI can open."""
    return isinstance(value, dict) and set(value) == {"secure"}


def _matches_type(spec: dict[str, Any], value: Any, in_list: bool = False) -> bool:
    """The CLI's type check: top-level scalars arrive as strings, lists only from YAML
    lists or `--path` (a top-level `pulumi config set` value is always a string); list
    items keep their YAML types."""
    kind = spec.get("type")
    if kind == "array":
        return isinstance(value, list) and all(
            _matches_type(spec["items"], v, in_list=True) for v in value)
    if isinstance(value, list | dict):
        return False
    if in_list and kind == "string":
        return isinstance(value, str)
    text = cli_value(value)
    if kind == "integer":
        return re.fullmatch(r"[+-]?\d+", text) is not None
    if kind == "boolean":
        return text in ("true", "false")
    return True


def _type_name(spec: dict[str, Any]) -> str:
    if spec.get("type") == "array":
        return f"array<{_type_name(spec['items'])}>"
    return str(spec.get("type"))


def cli_config_problems(project: dict[str, Any], stack: str,
                        values: dict[str, Any]) -> list[str]:
    """What `pulumi preview` would refuse in `values` (the stack file's `config:`)."""
    name = project["name"]
    problems: list[str] = []
    missing: list[str] = []
    for key, spec in (project.get("config") or {}).items():
        if not isinstance(spec, dict) or "type" not in spec:
            continue
        full = f"{name}:{key}"
        value = values.get(full, values.get(key))
        if value is None:
            if "default" not in spec:
                missing.append(key)
            continue
        secure = is_secure(value)
        if spec.get("secret") and not secure:
            problems.append(f"Stack '{stack}' with configuration key '{key}' must be "
                            f"encrypted as it's secret (`pulumi config set --secret {key}`)")
        elif not secure and not _matches_type(spec, value):
            fix = (f"; set list items with `pulumi config set --path '{key}[0]' <value>`"
                   if spec.get("type") == "array" else "")
            problems.append(f"Stack '{stack}' with configuration key '{key}' must be of type "
                            f"'{_type_name(spec)}'{fix}")
    if missing:
        keys = ", ".join(f"'{k}'" for k in sorted(missing))
        problems.append(f"Stack '{stack}' is missing configuration value(s) {keys} "
                        "(declared in Pulumi.yaml without a default)")
    return problems


def project_name(root: Path) -> str:
    return yaml.safe_load((root / "Pulumi.yaml").read_text())["name"]


def config_from_files(root: Path, stack: str, require_stack_file: bool = True
                      ) -> tuple[str, dict[str, Any]]:
    """(project name, raw config) for `stack` from the files under `root`."""
    project_file = root / "Pulumi.yaml"
    stack_file = root / f"Pulumi.{stack}.yaml"
    if not project_file.is_file():
        raise StackFilesError(f"no Pulumi.yaml in {root}; run this from the repository root")
    if require_stack_file and not stack_file.is_file():
        stacks = stack_names(root)
        raise StackFilesError(
            f"no stack '{stack}': {stack_file.name} is missing in {root} "
            f"(stacks: {', '.join(stacks) or 'none'})"
        )
    project = yaml.safe_load(project_file.read_text())
    name = project["name"]
    raw: dict[str, Any] = {}
    for key, spec in (project.get("config") or {}).items():
        if isinstance(spec, dict) and "default" in spec:
            raw[f"{name}:{key}"] = cli_value(spec["default"])
    values = {}
    if stack_file.is_file():
        values = yaml.safe_load(stack_file.read_text()).get("config") or {}
    problems = cli_config_problems(project, stack, values)
    if problems:
        raise StackFilesError(f"{stack_file.name}: " + "; ".join(problems))
    for key, value in values.items():
        raw[key] = value if is_secure(value) else cli_value(value)
    return name, raw
