"""What the program finds in the cluster before it declares anything, and what it decides.

The objects are the kubernetes client's own models, deserialized from what the API
returns, so the decisions see exactly the shapes `infra.cluster.observe` hands them.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client

from infra import cluster, manifests
from infra.cluster import LiveObjects
from infra.settings import Settings, parse_settings
from tests.support_pulumi import run_program, stack_config

STACK = "session-affinity"


class _Response:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body)


def as_api_returns(body: dict[str, Any], kind: str) -> Any:
    return client.ApiClient().deserialize(_Response(body), kind)


def settings_of(**overrides: Any) -> Settings:
    return parse_settings(stack_config(STACK, overrides), STACK)


def running_graph(settings: Settings) -> dict[str, Any]:
    return {"metadata": {"name": settings.graph_name}, "status": {"state": "successful"}}


def live_job(settings: Settings, failed: bool = False) -> client.V1Job:
    job = manifests.model_download_job(settings)
    if failed:
        job["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    return as_api_returns(job, "V1Job")


def test_a_namespace_made_by_hand_is_refused_while_the_stack_would_create_it() -> None:
    settings = settings_of()
    by_hand = as_api_returns({"metadata": {"name": settings.namespace.name}}, "V1Namespace")
    [problem] = cluster.problems(settings, LiveObjects(namespace=by_hand))
    assert problem.startswith("cosmos3-routing:createNamespace:")
    assert "pulumi config set createNamespace false" in problem
    ours = as_api_returns(manifests.namespace(settings), "V1Namespace")
    assert cluster.problems(settings, LiveObjects(namespace=ours)) == []
    assert cluster.problems(settings_of(createNamespace=False),
                            LiveObjects(namespace=by_hand)) == []


def test_a_download_that_needs_the_gpus_the_graph_holds_is_refused() -> None:
    """Without a pinned profile the download Job asks for a worker's GPUs; if it must run
    while this stack's graph holds them, it would wait for downloadTimeoutSecs."""
    settings = settings_of()
    graph = running_graph(settings)
    old = settings_of(nimImage="nvcr.io/nim/nvidia/cosmos3:2.0.0")
    for live in (LiveObjects(graph=graph), LiveObjects(graph=graph, download_job=live_job(old))):
        [problem] = cluster.problems(settings, live)
        assert problem.startswith("cosmos3-routing:nimModelProfile:")
        assert f"delete dynamographdeployment {settings.graph_name}" in problem
        assert "pulumi up --refresh" in problem
    # The same content: the Job is not recreated, nothing waits.
    assert cluster.problems(settings, LiveObjects(graph=graph,
                                                  download_job=live_job(settings))) == []
    # Placement and pull secrets don't change the cache (the Job ignores them).
    moved = settings_of(gpuTolerations=["dedicated=gpu:NoSchedule"],
                        imagePullSecrets=["mirror"])
    assert cluster.problems(moved, LiveObjects(graph=graph, download_job=live_job(old))) != []
    assert cluster.problems(moved, LiveObjects(graph=graph,
                                               download_job=live_job(settings))) == []
    # A pinned profile downloads without a GPU; no graph holds nothing.
    assert cluster.problems(settings_of(nimModelProfile="p1"), LiveObjects(graph=graph)) == []
    assert cluster.problems(settings, LiveObjects()) == []


def test_the_job_fields_a_change_may_not_replace_are_exactly_the_ignored_ones() -> None:
    from infra.components import DOWNLOAD_PLACEMENT_FIELDS

    settings = settings_of()
    moved = settings_of(gpuTolerations=["dedicated=gpu:NoSchedule"], imagePullSecrets=["m"],
                        gpuNodeSelector=["pool=h200"], downloadTimeoutSecs=100,
                        downloadRetries=0)
    a, b = (manifests.model_download_job(s)["spec"] for s in (settings, moved))

    def flat(tree: Any, prefix: str = "spec") -> dict[str, Any]:
        if not isinstance(tree, dict):
            return {prefix: tree}
        return {k: v for key, sub in tree.items() for k, v in flat(sub, f"{prefix}.{key}")
                .items()}

    fa, fb = flat(a), flat(b)
    changed = {k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k)}
    assert {next(f for f in DOWNLOAD_PLACEMENT_FIELDS if k.startswith(f)) for k in changed} \
        == set(DOWNLOAD_PLACEMENT_FIELDS)


def test_a_failed_download_says_how_to_rerun_it() -> None:
    settings = settings_of()
    [problem] = cluster.problems(settings, LiveObjects(download_job=live_job(settings, True)))
    name = settings.download_job_name
    assert f"logs job/{name}" in problem and f"delete job {name}" in problem
    assert "pulumi up --refresh" in problem


def test_problems_found_in_the_cluster_stop_the_program_before_anything_is_declared() -> None:
    settings = settings_of()
    by_hand = as_api_returns({"metadata": {"name": settings.namespace.name}}, "V1Namespace")
    run = run_program(STACK, stack_config(STACK), cluster_objects=LiveObjects(namespace=by_hand))
    assert run.resources == []
    assert "createNamespace" in str(run.error) and "nothing was created" in str(run.error)


UNREACHABLE = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize("how", ["content", "path", "missing"])
def test_an_unreachable_cluster_skips_the_checks_quickly(how: str, tmp_path: Any) -> None:
    """`kubernetes:kubeconfig` may hold the file's content (as the provider accepts) or a
    path; neither may raise or hang an offline preview."""
    path = tmp_path / "config"
    path.write_text(UNREACHABLE)
    value = {"content": UNREACHABLE, "path": str(path), "missing": str(tmp_path / "no")}[how]
    start = time.monotonic()
    assert cluster.observe(settings_of(), value) is None
    assert time.monotonic() - start < 30
