"""What the rehearsal takes from a stack: its routing and its worker count, validated.

Why: the rehearsal must run what `pulumi up --stack <profile>` would deploy, so it reads
the same files (Pulumi.yaml defaults overlaid by Pulumi.<profile>.yaml) and validates
them with the program's own `parse_settings`. Settings that only matter on a cluster (the
NGC key and HF token, a placeholder storage class or vLLM image) are filled with stand-ins
first: a laptop rehearsal needs none of them, and no secret is ever read from the stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.routing import Routing
from infra.settings import HF_TOKEN, NGC_API_KEY, PLACEHOLDER, Settings, parse_settings
from infra.stack_files import config_from_files

REPO_ROOT = Path(__file__).resolve().parent.parent
# Stand-ins for cluster-only settings; never sent anywhere. Secrets are always replaced,
# the others only where the stack leaves the placeholder (or nothing).
SECRET_STAND_INS = {NGC_API_KEY: "stand-in-no-ngc-key", HF_TOKEN: "stand-in-no-hf-token"}
PLACEHOLDER_STAND_INS = {"cacheStorageClass": "stand-in-no-cluster",
                         "vllmImage": "stand-in.invalid/no-vllm-image:none"}


def with_stand_ins(project: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """A stack's config as tools that read it without deploying it (the rehearsal,
    `collect`) need it: cluster-only settings stood in, so only what they use is checked."""
    out = dict(raw)
    out.update({f"{project}:{k}": v for k, v in SECRET_STAND_INS.items()})
    for key, stand_in in PLACEHOLDER_STAND_INS.items():
        value = str(out.get(f"{project}:{key}") or "")
        if not value or PLACEHOLDER.search(value):
            out[f"{project}:{key}"] = stand_in
    return out


@dataclass(frozen=True)
class RehearsalStack:
    """The stack facts a rehearsal reproduces locally."""

    profile: str
    routing: Routing
    workers: int
    settings: Settings


def stack_settings(profile: str, root: Path = REPO_ROOT) -> Settings:
    """The stack's validated settings, with cluster-only settings stood in.

    Raises the program's `SettingsError` (every problem, each naming its key) or
    `StackFilesError` (no such stack file) before anything starts.
    """
    project, raw = config_from_files(root, profile)
    return parse_settings(with_stand_ins(project, raw), profile, project)


def rehearsal_stack(profile: str, root: Path = REPO_ROOT) -> RehearsalStack:
    settings = stack_settings(profile, root)
    return RehearsalStack(
        profile=profile,
        routing=settings.routing,
        workers=settings.workers.replicas,
        settings=settings,
    )
