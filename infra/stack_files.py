"""A stack's config as the Pulumi CLI builds it, read straight from the project files.

Why: tests, and tools that run without the Pulumi CLI (the rehearsal, `collect`, `plan`),
need the exact mapping the program receives: the `config:` defaults of Pulumi.yaml
overlaid by Pulumi.<stack>.yaml, keys namespaced by project, every value a string (lists
and maps as JSON). Secure values (`{secure: ...}`) stay as they are: ciphertext only the
CLI can open. The CLI's own checks of stack config stay the CLI's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from infra.names import PLACEHOLDER
from infra.settings import HF_TOKEN, NGC_API_KEY, Settings, SettingsError, parse_settings

REPO_ROOT = Path(__file__).resolve().parent.parent
# Stand-ins for cluster-only settings; never sent anywhere. Secrets are always replaced,
# the others only where the stack leaves the placeholder (or nothing).
SECRET_STAND_INS = {NGC_API_KEY: "stand-in-no-ngc-key", HF_TOKEN: "stand-in-no-hf-token"}
PLACEHOLDER_STAND_INS = {"cacheStorageClass": "stand-in-no-cluster",
                         "vllmImage": "stand-in.invalid/no-vllm-image:none"}


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
        raise SettingsError(stack, [f"no Pulumi.yaml in {root}; run this from the "
                                    "repository root"])
    if require_stack_file and not stack_file.is_file():
        stacks = stack_names(root)
        raise SettingsError(stack, [f"no stack '{stack}': {stack_file.name} is missing in "
                                    f"{root} (stacks: {', '.join(stacks) or 'none'})"])
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


def with_stand_ins(project: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """A stack's config as tools that read it without deploying it need it: cluster-only
    settings stood in, so only what they use is checked, and no secret is ever read."""
    out = dict(raw)
    out.update({f"{project}:{k}": v for k, v in SECRET_STAND_INS.items()})
    for key, stand_in in PLACEHOLDER_STAND_INS.items():
        value = str(out.get(f"{project}:{key}") or "")
        if not value or PLACEHOLDER.search(value):
            out[f"{project}:{key}"] = stand_in
    return out


def stack_settings(stack: str, root: Path = REPO_ROOT) -> Settings:
    """A stack's validated settings from its files, cluster-only settings stood in.
    Raises the program's `SettingsError` (each problem naming its key) before anything."""
    project, raw = config_from_files(root, stack)
    return parse_settings(with_stand_ins(project, raw), stack, project)
