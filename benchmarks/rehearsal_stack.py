"""What the rehearsal takes from a stack: its routing and its worker count, validated.

Why: the rehearsal must run what `pulumi up --stack <profile>` would deploy, so it reads
the same files (Pulumi.yaml defaults overlaid by Pulumi.<profile>.yaml) and validates
them with the program's own `parse_settings`. Settings that only matter on a cluster (the
NGC key, a placeholder storage class) are filled with rehearsal stand-ins first: a laptop
rehearsal needs neither, and the NGC key is never read from the stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.routing import Routing
from infra.settings import NGC_API_KEY, PLACEHOLDER, Settings, parse_settings
from infra.stack_files import config_from_files

REPO_ROOT = Path(__file__).resolve().parent.parent
# Stand-ins for cluster-only settings; never sent anywhere.
NO_CLUSTER_KEY = "rehearsal-no-ngc-key"
NO_CLUSTER_STORAGE_CLASS = "rehearsal-no-cluster"


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
    raw = dict(raw)
    raw[f"{project}:{NGC_API_KEY}"] = NO_CLUSTER_KEY
    storage_key = f"{project}:cacheStorageClass"
    if PLACEHOLDER.search(str(raw.get(storage_key, ""))) or not raw.get(storage_key):
        raw[storage_key] = NO_CLUSTER_STORAGE_CLASS
    return parse_settings(raw, profile, project)


def rehearsal_stack(profile: str, root: Path = REPO_ROOT) -> RehearsalStack:
    settings = stack_settings(profile, root)
    return RehearsalStack(
        profile=profile,
        routing=settings.routing,
        workers=settings.workers.replicas,
        settings=settings,
    )
