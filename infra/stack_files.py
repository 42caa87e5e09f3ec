"""A stack's config as the Pulumi CLI builds it, read straight from the project files.

Why: tests, and tools that run without the Pulumi CLI, need the exact mapping the program
receives: the `config:` defaults of Pulumi.yaml overlaid by Pulumi.<stack>.yaml, keys
namespaced by project, every value a string (lists and maps as JSON). Secure values
(`{secure: ...}`) stay as they are: they are ciphertext only the CLI can open.

The CLI's own checks of stack config (types, unset keys without a default) stay the CLI's:
this module only reads.
"""

from __future__ import annotations

import json
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
    for key, value in values.items():
        raw[key] = value if is_secure(value) else cli_value(value)
    return name, raw
