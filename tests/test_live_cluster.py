"""End to end on a real cluster with the Automation API: up, /v1/models, destroy.

Runs only where a Pulumi CLI, kubectl and a kubeconfig exist and the cluster-specific
inputs are given in the environment (they are the request to deploy to the kubeconfig's
cluster); otherwise it is skipped with the reason:

  NGC_API_KEY                  the NGC key (stored as the stack's secret ngcApiKey)
  COSMOS3_STORAGE_CLASS        a ReadWriteMany storage class (or COSMOS3_EXISTING_CLAIM)
  COSMOS3_STACK                stack to deploy (default session-affinity)
  COSMOS3_CONFIG_JSON          optional extra settings, e.g. {"gpuNodeSelector": [...]}

The stack lives in a throwaway local backend under the test's tmp dir with a fresh stack
file holding only what the test sets (`cluster_test_config`): a user's own stack file may
hold an `encryptionsalt` and `secure:` values of another passphrase, or
`benchmarkWaitForSweep: false`, and is never read or touched. Allow hours: the download
may take 2 h, the graph 1 h.
The post-deploy benchmark runs at a small size (4 videos x 2 questions, levels 1 and 2,
unless COSMOS3_CONFIG_JSON says otherwise) under a fresh run id; the test checks that the
smoke test passed and that the hook brought a results folder home.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from infra import names
from infra.routing import PROFILES
from infra.settings import cli_value, parse_settings
from tests.conftest import REPO_ROOT
from tests.support_pulumi import project_file, project_name, stack_config


def _missing() -> list[str]:
    reasons = []
    if shutil.which("pulumi") is None:
        reasons.append("no `pulumi` CLI on PATH")
    if shutil.which("kubectl") is None:
        reasons.append("no `kubectl` on PATH (used for the port-forward)")
    kubeconfig = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config"))
    if not any(Path(p).is_file() for p in kubeconfig.split(os.pathsep) if p):
        reasons.append(f"no kubeconfig at {kubeconfig}")
    if not os.environ.get("NGC_API_KEY"):
        reasons.append("NGC_API_KEY is not set")
    if not (os.environ.get("COSMOS3_STORAGE_CLASS") or os.environ.get("COSMOS3_EXISTING_CLAIM")):
        reasons.append("neither COSMOS3_STORAGE_CLASS nor COSMOS3_EXISTING_CLAIM is set")
    return reasons


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _project_copy(tmp: Path) -> Path:
    """The project in a scratch dir (links to infra/ and .venv) with no stack file: the
    Automation API writes a fresh one there, never into the repository's."""
    work = tmp / "project"
    work.mkdir()
    shutil.copy(REPO_ROOT / "Pulumi.yaml", work / "Pulumi.yaml")
    (work / "infra").symlink_to(REPO_ROOT / "infra")
    (work / ".venv").symlink_to(REPO_ROOT / ".venv")
    return work


def _models(port: int, deadline: float) -> dict:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
                return json.loads(r.read())
        except OSError as err:
            last = err
            time.sleep(2)
    raise AssertionError(f"/v1/models did not answer through the port-forward: {last}")


def _check_benchmark(outputs: dict) -> None:
    """`up` returned, so the smoke Job and the sweep Job completed; check what they left."""
    bench = outputs["benchmark"]
    namespace = bench["namespace"]
    if bench["smokeJob"]:
        log = subprocess.run(
            ["kubectl", "-n", namespace, "logs", f"job/{bench['smokeJob']}", "--tail", "1"],
            capture_output=True, text=True, timeout=60,
        ).stdout.strip()
        assert log.startswith("Smoke test passed"), log
    if bench["sweepJob"]:
        run_dir = REPO_ROOT / "results" / bench["stack"] / bench["runId"]
        exports = list(run_dir.rglob("profile_export_aiperf.json"))
        assert exports, f"the hook brought no results to {run_dir}"
        assert (run_dir / "report" / "report.md").is_file()


def _set_config(stack: Any, key: str, value: Any) -> None:
    """As `pulumi config set` does it: a list item by item (`--path`), since the CLI
    refuses a list given as one string."""
    from pulumi import automation as auto

    if isinstance(value, list):
        for index, item in enumerate(value):
            stack.set_config(f"{key}[{index}]", auto.ConfigValue(str(item)), path=True)
    else:
        stack.set_config(key, auto.ConfigValue(str(value).lower() if isinstance(value, bool)
                                               else str(value)))


def cluster_test_config(stack: str, env: dict[str, str], run_id: str) -> dict[str, Any]:
    """Every setting the cluster test's stack holds: the profile's routing, a small
    benchmark that `up` waits for, the cache from the environment, and the user's extras."""
    routing = PROFILES[stack]
    config: dict[str, Any] = {
        "routerMode": routing.router_mode, "routerKvEvents": routing.kv_events,
        "sessionAffinity": routing.affinity,
        "sessionAffinityTtlSecs": routing.affinity_ttl_secs or 300,
        "benchmarkRunId": run_id, "benchmarkVideos": 4, "benchmarkQuestionsPerVideo": 2,
        "benchmarkConcurrencies": [1, 2], "benchmarkWaitForSweep": True,
    }
    if env.get("COSMOS3_EXISTING_CLAIM"):
        config["cacheExistingClaim"] = env["COSMOS3_EXISTING_CLAIM"]
    else:
        config["cacheStorageClass"] = env["COSMOS3_STORAGE_CLASS"]
    return {**config, **json.loads(env.get("COSMOS3_CONFIG_JSON", "{}"))}


def test_the_cluster_tests_stack_holds_only_what_it_sets() -> None:
    """No secure value or salt of another passphrase, and it waits for the sweep."""
    env = {"COSMOS3_STORAGE_CLASS": "rwx"}
    config = cluster_test_config("session-affinity", env, "ct-1")
    assert config["benchmarkWaitForSweep"] is True and config["cacheStorageClass"] == "rwx"
    assert config["sessionAffinity"] is True and config["sessionAffinityTtlSecs"] == 300
    assert "encryptionsalt" not in json.dumps(config) and "secure" not in json.dumps(config)
    # The program accepts exactly this (plus the key the test sets as a secret).
    raw = stack_config("session-affinity")
    name = project_name()
    fresh = {k: v for k, v in raw.items() if not k.startswith(f"{name}:")}
    defaults = {f"{name}:{k}": cli_value(v["default"])
                for k, v in project_file()["config"].items()}
    chosen = {f"{name}:{k}": cli_value(v) for k, v in config.items()}
    settings = parse_settings({**fresh, **defaults, **chosen,
                               f"{name}:ngcApiKey": "k"}, "session-affinity")
    assert settings.benchmark.wait_for_sweep and settings.routing == PROFILES["session-affinity"]


@pytest.mark.cluster
def test_up_serves_the_model_then_destroy(tmp_path: Path) -> None:
    reasons = _missing()
    if reasons:
        message = "cluster test skipped: " + "; ".join(reasons)
        print(message)
        pytest.skip(message)
    from pulumi import automation as auto

    stack_name = os.environ.get("COSMOS3_STACK", "session-affinity")
    work = _project_copy(tmp_path)
    backend = tmp_path / "backend"
    backend.mkdir()
    env = {
        "PULUMI_BACKEND_URL": backend.as_uri(),
        "PULUMI_CONFIG_PASSPHRASE": "cluster-test-only",
    }
    stack = auto.create_or_select_stack(
        stack_name=stack_name, work_dir=str(work),
        opts=auto.LocalWorkspaceOptions(env_vars=env),
    )
    stack.set_config("ngcApiKey", auto.ConfigValue(os.environ["NGC_API_KEY"], secret=True))
    config = cluster_test_config(stack_name, dict(os.environ), f"ct-{int(time.time())}")
    for key, value in config.items():
        _set_config(stack, key, value)
    try:
        result = stack.up(on_output=print)
        outputs = {k: v.value for k, v in result.outputs.items()}
        assert outputs["graphName"] == names.graph_name(stack_name)
        port = _free_port()
        forward = subprocess.Popen(
            ["kubectl", "-n", outputs["namespace"], "port-forward", "--address", "127.0.0.1",
             f"service/{outputs['frontendService']}", f"{port}:{outputs['frontendPort']}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            models = _models(port, time.monotonic() + 120)
        finally:
            forward.terminate()
            forward.wait(timeout=30)
        served = [m.get("id") for m in models.get("data", [])]
        assert outputs["servedModel"] in served, served
        _check_benchmark(outputs)
    finally:
        stack.destroy(on_output=print)
        print("destroyed; the model cache claim and its namespace are kept by default")
