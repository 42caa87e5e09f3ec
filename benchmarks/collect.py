"""`collect`: bring a cluster run's results home and print its report, after the fact.

Why: `pulumi up` brings results home itself when it waits for the sweep; this command is
for when it could not (the sweep left running by choice, a lost connection, a laptop
that slept). It finds the run the way the stack describes it: from `pulumi stack output`
when the Pulumi CLI is there, else from the stack's config files (Pulumi.yaml defaults
under Pulumi.<stack>.yaml), and copies `benchmarks/<stack>/<run-id>/` from the cache
claim to `results/<stack>/<run-id>/`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from urllib3.exceptions import HTTPError

from infra.results_hook import (
    ClusterIO,
    CollectError,
    KubernetesClusterIO,
    RunLocation,
    bring_results_home,
    run_location,
)
from infra.stack_files import StackFilesError, config_from_files

REPO_ROOT = Path(__file__).resolve().parent.parent
# The stack output the Pulumi program exports for this command.
OUTPUT_KEY = "benchmark"
PULUMI_TIMEOUT_SECS = 120
KUBE_CONTEXT = "kubernetes:context"


def location_from_config(root: Path, stack: str) -> RunLocation:
    """The run location (and kube context) the stack's config describes."""
    from benchmarks.rehearsal_stack import with_stand_ins
    from infra.settings import SettingsError, parse_settings

    try:
        project, raw = config_from_files(root, stack)
    except StackFilesError as error:
        raise CollectError(str(error)) from None
    # Collecting needs no secret and no worker image: a stack without them can be read.
    kept = {k: v for k, v in raw.items() if k.startswith(f"{project}:") or k == KUBE_CONTEXT}
    try:
        settings = parse_settings(with_stand_ins(project, kept), stack, project)
    except SettingsError as error:
        raise CollectError(str(error)) from None
    return run_location(settings)


def location_from_outputs(stack: str, outputs: dict[str, Any]) -> RunLocation | None:
    """The run location from the stack's `benchmark` output (what was really deployed)."""
    info = outputs.get(OUTPUT_KEY)
    if not isinstance(info, dict):
        return None
    return RunLocation(
        stack=stack,
        run_id=str(info["runId"]),
        namespace=str(info["namespace"]),
        cache_claim=str(info["cacheClaim"]),
        image=str(info["image"]),
        image_pull_secrets=tuple(info.get("imagePullSecrets") or ()),
        kube_context=info.get("kubeContext") or None,
    )


def pulumi_stack_outputs(root: Path, stack: str) -> dict[str, Any] | None:
    """`pulumi stack output --json`, or None where the CLI or the stack's state is absent."""
    exe = shutil.which("pulumi")
    if exe is None:
        return None
    try:
        result = subprocess.run(
            [exe, "stack", "output", "--json", "--stack", stack], cwd=root,
            capture_output=True, text=True, timeout=PULUMI_TIMEOUT_SECS,
        )
    except subprocess.TimeoutExpired:
        return None
    if result.returncode != 0:
        return None
    try:
        outputs = json.loads(result.stdout or "{}")
    except json.JSONDecodeError:
        return None
    return outputs if isinstance(outputs, dict) else None


def resolve_location(root: Path, stack: str, run_id: str | None,
                     context: str | None = None) -> RunLocation:
    """Where the run is: stack outputs first, else the stack's config files. `run_id` and
    `context`, when given, override the stack's."""
    outputs = pulumi_stack_outputs(root, stack)
    location = location_from_outputs(stack, outputs) if outputs else None
    if location is None:
        location = location_from_config(root, stack)
    overrides = {"run_id": run_id, "kube_context": context}
    return replace(location, **{k: v for k, v in overrides.items() if v is not None})


def collect(
    cluster: ClusterIO, location: RunLocation, results_root: Path, wait_secs: float
) -> Path | None:
    return bring_results_home(
        cluster, location, results_root, lambda line: print(line, flush=True), wait_secs
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "collect",
        help="bring a cluster run's results home and print its report",
        description="Copy a stack's sweep results from the cluster's cache claim to "
        "results/<stack>/<run-id>/ and print the report. Uses `pulumi stack output` when "
        "the Pulumi CLI is there, else the stack's config files; the cluster is reached "
        "through your kubeconfig.",
    )
    p.add_argument("--stack", required=True, help="the stack that ran the sweep")
    p.add_argument("--run-id", default=None,
                   help="which run (default: the stack's benchmarkRunId)")
    p.add_argument("--results", type=Path, default=Path("results"),
                   help="local results folder (default: results)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECS",
                   help="wait up to SECS for a sweep still running (default: don't wait)")
    p.add_argument("--context", default=None,
                   help="kubeconfig context (default: the stack's kubernetes:context, else "
                   "the current context)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        location = resolve_location(REPO_ROOT, args.stack, args.run_id, args.context)
        cluster = KubernetesClusterIO(location.kube_context)
        run_dir = collect(cluster, location, args.results, args.wait)
    except CollectError as error:
        print(f"collect: error: {error}", file=sys.stderr)
        return 2
    except (OSError, HTTPError) as error:
        print(f"collect: error: cannot reach the cluster ({type(error).__name__}: {error}); "
              "check your kubeconfig context (--context) and network", file=sys.stderr)
        return 2
    return 0 if run_dir is not None else 3
