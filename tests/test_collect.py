"""`python -m benchmarks collect`: finding the run from the stack, and clear errors.

The stack is read the two ways the command does: from the outputs the real program exports
(run here under the SDK's mocks) and from a project's config files; both must point at
the same place. Bringing files home is tested in test_collect_results.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from benchmarks.collect import (
    CollectError,
    KubernetesClusterIO,
    location_from_config,
    pulumi_benchmark_output,
    resolve_location,
)
from infra.run import Run, Workload, run_seed
from tests.conftest import REPO_ROOT
from tests.support_pulumi import run_program, stack_config

STACK_SETTINGS = {
    "cosmos3-routing:cacheStorageClass": "rwx-nfs",
    "cosmos3-routing:namespace": "vision-bench",
    "cosmos3-routing:benchmarkRunId": "run-9",
    "cosmos3-routing:imagePullSecrets": ["mirror-pull"],
    "cosmos3-routing:ngcApiKey": {"secure": "v1:ciphertext-only-the-cli-opens"},
    "kubernetes:context": "h200-cluster",
}


def project(tmp_path: Path, stack: str, settings: dict) -> Path:
    """A copy of the project's Pulumi.yaml with a stack file as `pulumi config set` writes."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO_ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    stack_file = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())
    stack_file["config"].update(settings)
    (root / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(stack_file))
    return root


def test_config_files_give_the_run_and_the_context(tmp_path) -> None:
    root = project(tmp_path, "session-affinity", STACK_SETTINGS)
    location = location_from_config(root, "session-affinity")
    assert replace(location, notes=(), deployment=()) == Run(
        stack="session-affinity", run_id="run-9", namespace="vision-bench",
        cache_claim="shared-model-cache",
        image="docker.io/library/python:3.11.14-slim-bookworm",
        workload=Workload(seed=run_seed("run-9")),
        frontends=(("session-affinity", "cosmos3-session-affinity-frontend", True),),
        image_pull_secrets=("mirror-pull",), kube_context="h200-cluster",
        kubectl="kubectl --context h200-cluster -n vision-bench",
    )
    # What the run records of the deployment comes from the same files.
    assert location.notes[0] == "cluster run: stack session-affinity, run id run-9"
    assert "--router-session-affinity-ttl-secs" in dict(location.deployment)["routing"]
    assert location.results_path == "benchmarks/session-affinity/run-9"
    # What collect prints for a running sweep points at the stack's cluster.
    assert location.follow_command == ("kubectl --context h200-cluster -n vision-bench logs "
                                        f"-f job/{location.sweep_job}")


def test_outputs_of_the_real_program_point_at_the_same_run(tmp_path) -> None:
    overrides = {"namespace": "vision-bench", "benchmarkRunId": "run-9",
                 "imagePullSecrets": ["mirror-pull"]}
    config = stack_config("session-affinity", overrides)
    config["kubernetes:context"] = "h200-cluster"
    run = run_program("session-affinity", config)
    assert run.error is None, run.error
    from_outputs = Run.from_output(run.outputs["benchmark"])
    assert run.outputs["benchmark"]["followCommand"] == from_outputs.follow_command
    from_files = location_from_config(
        project(tmp_path, "session-affinity", STACK_SETTINGS), "session-affinity")
    assert from_outputs == from_files


def test_an_unknown_stack_lists_the_known_ones(tmp_path) -> None:
    root = project(tmp_path, "round-robin", STACK_SETTINGS)
    with pytest.raises(CollectError, match=r"Pulumi\.kv-trial\.yaml is missing.*round-robin"):
        location_from_config(root, "kv-trial")


def test_a_bad_setting_is_named(tmp_path) -> None:
    root = project(tmp_path, "round-robin", {**STACK_SETTINGS,
                                            "cosmos3-routing:benchmarkRunId": "Run 9"})
    with pytest.raises(CollectError, match="cosmos3-routing:benchmarkRunId"):
        location_from_config(root, "round-robin")


def test_the_run_id_option_picks_another_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no Pulumi CLI here
    assert pulumi_benchmark_output(tmp_path, "round-robin") is None
    root = project(tmp_path, "round-robin", STACK_SETTINGS)
    location = resolve_location(root, "round-robin", "run-3")
    assert (location.run_id, location.namespace) == ("run-3", "vision-bench")
    assert location.sweep_job.endswith("-round-robin-run-3")
    assert location.kube_context == "h200-cluster"


def collect_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "collect", *args], cwd=REPO_ROOT, env=env,
        capture_output=True, text=True, timeout=120,
    )


def test_cli_says_what_is_wrong_without_a_traceback(tmp_path) -> None:
    env = {**os.environ, "PATH": os.path.dirname(sys.executable),
           "KUBECONFIG": str(tmp_path / "no-such-kubeconfig")}
    result = collect_cli("--stack", "no-such-stack", env=env)
    assert result.returncode == 2
    assert "collect: error: no stack 'no-such-stack'" in result.stderr
    assert "Traceback" not in result.stderr
    # A real stack with the repository's own (unconfigured) stack file: collecting needs
    # no storage class or secret, so the next thing it needs, the cluster, is named.
    result = collect_cli("--stack", "round-robin", env=env)
    assert result.returncode == 2
    assert "point KUBECONFIG at" in result.stderr and "Traceback" not in result.stderr


def test_a_missing_kubeconfig_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    with pytest.raises(CollectError, match="context h200-cluster.*point KUBECONFIG"):
        KubernetesClusterIO("h200-cluster")


def test_the_stacks_kubeconfig_setting_is_honoured(tmp_path, monkeypatch) -> None:
    """`kubernetes:kubeconfig` holds a path or the file's content; both load (no request is
    sent until the cluster is used)."""
    kubeconfig = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "other",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "h200-cluster", "context": {"cluster": "c", "user": "u"}},
                     {"name": "other", "context": {"cluster": "c", "user": "u"}}],
    })
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(kubeconfig)
    for value in (kubeconfig, str(path)):
        io = KubernetesClusterIO("h200-cluster", value)
        assert io._api.configuration.host == "https://127.0.0.1:6443"
    with pytest.raises(CollectError, match="context absent"):
        KubernetesClusterIO("absent", str(path))


def test_a_stack_without_secrets_or_worker_image_can_still_be_collected(tmp_path) -> None:
    """Collecting reads neither the NGC key nor the HF token, nor the vLLM image."""
    settings = {k: v for k, v in STACK_SETTINGS.items() if not k.endswith(":ngcApiKey")}
    root = project(tmp_path, "vllm-super-tp4-sa", settings)
    location = location_from_config(root, "vllm-super-tp4-sa")
    assert (location.run_id, location.namespace) == ("run-9", "vision-bench")


def test_the_results_reader_runs_where_the_benchmark_pods_may(tmp_path) -> None:
    """On a cluster whose every node is tainted, the reader needs the benchmark's
    tolerations (and node selector) like the Jobs, or the copy waits for nothing."""
    from infra.benchmark_manifests import results_reader_pod

    settings = {**STACK_SETTINGS, "cosmos3-routing:benchmarkNodeSelector": ["pool=cpu"],
                "cosmos3-routing:benchmarkTolerations": ["dedicated=bench:NoSchedule"]}
    location = location_from_config(project(tmp_path, "round-robin", settings), "round-robin")
    pod = results_reader_pod(location, "reader-x")["spec"]
    assert pod["nodeSelector"] == {"pool": "cpu"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "bench",
                                   "effect": "NoSchedule"}]
