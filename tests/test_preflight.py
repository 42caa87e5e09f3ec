"""What the program finds in the cluster before it declares anything, and what it decides.

The objects are the kubernetes client's own models, deserialized from what the API
returns, so the decisions see exactly the shapes `infra.cluster.observe` hands them.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from infra import cluster, manifests
from infra.cluster import LiveObjects
from infra.manifests import GRAPH_LABEL
from infra.names import InputError, benchmark_name
from infra.settings import Settings, parse_settings
from tests.support_cluster import (
    UNREACHABLE,
    api_server,
    as_api_returns,
    gpu_pod,
    healthy,
    healthy_routes,
    node,
    served,
)
from tests.support_pulumi import run_program, stack_config

STACK = "session-affinity"


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
    by_hand = as_api_returns({"metadata": {"name": settings.namespace}}, "V1Namespace")
    [problem] = cluster.problems(settings, replace(healthy(), namespace=by_hand))
    assert problem.startswith("cosmos3-routing:createNamespace:")
    assert "pulumi config set createNamespace false" in problem
    ours = as_api_returns(manifests.namespace(settings), "V1Namespace")
    assert cluster.problems(settings, replace(healthy(), namespace=ours)) == []
    existing = settings_of(createNamespace=False)
    assert cluster.problems(existing, replace(healthy(), namespace=by_hand)) == []
    [missing] = cluster.problems(existing, healthy())
    assert missing == (
        "cosmos3-routing:namespace: namespace cosmos3-reasoner does not exist and "
        "createNamespace is false: create it (`kubectl create namespace cosmos3-reasoner`) "
        "or `pulumi config set createNamespace true`")


def test_a_download_that_needs_the_gpus_the_graph_holds_is_refused() -> None:
    """Without a pinned profile the download Job asks for a worker's GPUs; if it must run
    while this stack's graph holds them, it would wait for downloadTimeoutSecs."""
    settings = settings_of()
    graph = running_graph(settings)
    old = settings_of(nimImage="nvcr.io/nim/nvidia/cosmos3:2.0.0")
    base = healthy()
    [problem] = cluster.problems(settings, replace(base, graph=graph,
                                                   download_job=live_job(old)))
    assert problem.startswith("cosmos3-routing:nimModelProfile:")
    assert f"delete dynamographdeployment {settings.graph_name}" in problem
    assert "pulumi up --refresh" in problem
    # The same content: the Job is not recreated, nothing waits.
    assert cluster.problems(settings, replace(base, graph=graph,
                                              download_job=live_job(settings))) == []
    # Placement and pull secrets don't change the cache (the Job ignores them).
    moved = settings_of(gpuTolerations=["dedicated=gpu:NoSchedule"],
                        imagePullSecrets=["mirror"])
    assert cluster.problems(moved, replace(base, graph=graph, download_job=live_job(old),
                                           pull_secrets=("mirror",))) != []
    assert cluster.problems(moved, replace(base, graph=graph, download_job=live_job(settings),
                                           pull_secrets=("mirror",))) == []
    # A pinned profile downloads without a GPU; no graph holds nothing.
    assert cluster.problems(settings_of(nimModelProfile="p1"), replace(base, graph=graph)) == []
    assert cluster.problems(settings, base) == []


def test_the_stacks_own_download_pod_is_not_a_stranger_holding_a_gpu() -> None:
    """An interrupted first `up` leaves the download running on one GPU: the re-run must not
    count that GPU as taken by someone else (it is free again before the graph starts)."""
    settings = settings_of()
    download = gpu_pod("gpu-1", 1, settings.namespace,
                       manifests.download_pod_labels(settings))
    assert cluster.problems(settings, replace(healthy(), pods=(download,))) == []
    stranger = gpu_pod("gpu-1", 1, settings.namespace, {"app": "other"})
    assert cluster.problems(settings, replace(healthy(), pods=(stranger,))) != []


def _older_job(settings: Settings, complete: bool) -> client.V1Job:
    """The download Job an older version of the project made: no security contexts, no
    component labels (what a stack deployed before they were added still runs)."""
    job = manifests.model_download_job(settings)
    template = job["spec"]["template"]
    template["metadata"]["labels"] = manifests.common_labels()
    del template["spec"]["securityContext"]
    del template["spec"]["containers"][0]["securityContext"]
    if complete:
        job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    return as_api_returns(job, "V1Job")


def test_a_download_the_provider_would_replace_is_seen_from_its_whole_template() -> None:
    """The provider replaces a Job on any change of `.spec.template`, not only of image,
    command, env and GPUs: a running Job made by older code is replaced, so with the GPUs
    held by the graph the new one would wait. A completed Job is never replaced."""
    settings = settings_of()
    base = replace(healthy(), graph=running_graph(settings))
    [problem] = cluster.problems(settings, replace(base, download_job=_older_job(settings,
                                                                                  False)))
    assert problem.startswith("cosmos3-routing:nimModelProfile:")
    assert cluster.problems(settings, replace(base, download_job=_older_job(settings,
                                                                             True))) == []
    assert cluster.completed(_older_job(settings, True))
    assert not cluster.completed(_older_job(settings, False)) and not cluster.completed(None)


def test_the_job_fields_a_change_may_not_replace_are_exactly_the_ignored_ones() -> None:
    from infra.__main__ import DOWNLOAD_PLACEMENT_FIELDS

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
    [problem] = cluster.problems(settings, replace(healthy(),
                                                   download_job=live_job(settings, True)))
    name = settings.download_job_name
    assert f"logs job/{name}" in problem and f"delete job {name}" in problem
    assert "pulumi up --refresh" in problem


def test_problems_found_in_the_cluster_stop_the_program_before_anything_is_declared() -> None:
    settings = settings_of()
    by_hand = as_api_returns({"metadata": {"name": settings.namespace}}, "V1Namespace")
    run = run_program(STACK, stack_config(STACK),
                      cluster_objects=replace(healthy(), namespace=by_hand))
    assert run.resources == []
    assert "createNamespace" in str(run.error) and "nothing was created" in str(run.error)




@pytest.mark.parametrize("how", ["content", "path", "missing"])
def test_an_unreachable_cluster_skips_the_checks_quickly(
        how: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kubernetes:kubeconfig` may hold the file's content (as the provider accepts) or a
    path; neither may raise or hang an offline preview, which says it skipped."""
    said: list[str] = []
    path = tmp_path / "config"
    path.write_text(UNREACHABLE)
    value = {"content": UNREACHABLE, "path": str(path), "missing": str(tmp_path / "no")}[how]
    start = time.monotonic()
    assert cluster.observe(settings_of(), value, dry_run=True, say=said.append) is None
    assert time.monotonic() - start < 30
    [line] = said
    assert line.startswith("preflight skipped: ")


@pytest.mark.parametrize("how", ["content", "missing"])
def test_on_up_a_cluster_that_cant_be_read_stops_with_the_cause_and_the_fix(
        how: str, tmp_path: Any) -> None:
    """On a real `up` a skipped preflight would adopt what the checks protect: it stops,
    before anything is declared, without echoing the kubeconfig's content."""
    value = {"content": UNREACHABLE, "missing": str(tmp_path / "no")}[how]
    with pytest.raises(InputError) as raised:
        cluster.observe(settings_of(), value, dry_run=False, say=pytest.fail)
    text = str(raised.value)
    assert "nothing was created" in text and "kubernetes:kubeconfig" in text
    assert "skipPreflight" in text and "not-a-real-token" not in text


def test_a_hanging_read_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exec credential plugin runs without a timeout of its own: the whole read is
    bounded, a preview goes on with one line and an `up` stops."""
    said: list[str] = []
    monkeypatch.setattr(cluster, "READ_DEADLINE_SECS", 0.5)
    monkeypatch.setattr(cluster, "api_client", lambda *_: time.sleep(20))
    start = time.monotonic()
    assert cluster.observe(settings_of(), None, dry_run=True, say=said.append) is None
    with pytest.raises(InputError, match="did not answer"):
        cluster.observe(settings_of(), None, dry_run=False, say=said.append)
    assert time.monotonic() - start < 5
    assert len(said) == 1 and said[0].startswith("preflight skipped: ")


def test_skip_preflight_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    monkeypatch.setattr(cluster, "api_client", lambda *_: pytest.fail("read the cluster"))
    for dry_run in (True, False):
        assert cluster.observe(settings_of(skipPreflight=True), None, dry_run=dry_run,
                               say=said.append) is None
    assert len(said) == 2 and "skipPreflight" in said[0]


def _crd(version: str) -> client.V1CustomResourceDefinition:
    return as_api_returns({"metadata": {"name": "x"}, "spec": {
        "group": "nvidia.com", "names": {"kind": "K", "plural": "x"}, "scope": "Namespaced",
        "versions": [{"name": version, "served": True, "storage": True}]}},
        "V1CustomResourceDefinition")


def _claim(modes: list[str], size: str, storage_class: str | None = None
           ) -> client.V1PersistentVolumeClaim:
    return as_api_returns({"metadata": {"name": "shared-model-cache"}, "spec": {
        "accessModes": modes, "resources": {"requests": {"storage": size}},
        "storageClassName": storage_class}}, "V1PersistentVolumeClaim")


K = "cosmos3-routing:"
PREFLIGHT = {
    "no CRD": ({"crd": None}, [
        "cluster: the DynamoGraphDeployment CRD (dynamographdeployments.nvidia.com) is not "
        "installed: install the Dynamo platform (its Helm chart) before `pulumi up`"]),
    "old CRD": ({"crd": _crd("v1alpha1")}, [
        "cluster: the DynamoGraphDeployment CRD (dynamographdeployments.nvidia.com) serves "
        "v1alpha1, not v1beta1: upgrade the Dynamo platform (its Helm chart) before "
        "`pulumi up`"]),
    "no operator": ({"operators": ()}, [
        f"{K}dynamoOperatorNamespace: no Dynamo operator Deployment (app.kubernetes.io/"
        "part-of=dynamo-operator,control-plane=controller-manager) in any namespace: install "
        "the Dynamo platform, or set dynamoOperatorNamespace to where it runs"]),
    "operator not ready": ({"operators": (as_api_returns({
        "metadata": {"name": "op", "namespace": "dynamo-system"},
        "spec": {"selector": {}, "template": {}}, "status": {}}, "V1Deployment"),)}, [
        "cluster: the Dynamo operator dynamo-system/op has no ready replica; see `kubectl -n "
        "dynamo-system describe deployment op`"]),
    "no storage class": ({"storage_class": None}, [
        f"{K}cacheStorageClass: storage class rwx-test does not exist; pick a ReadWriteMany "
        "one from `kubectl get storageclass`"]),
    "block storage": ({"storage_class": as_api_returns(
        {"metadata": {"name": "rwx-test"}, "provisioner": "ebs.csi.aws.com"}, "V1StorageClass")}, [
        f"{K}cacheStorageClass: rwx-test provisions with ebs.csi.aws.com, which offers "
        "ReadWriteOnce volumes only; the shared cache needs ReadWriteMany (NFS, EFS, "
        "Filestore, Azure Files, CephFS...)"]),
    "claim too small, ReadWriteOnce": ({"claim": _claim(["ReadWriteOnce"], "50Gi")}, [
        f"{K}cacheExistingClaim: claim shared-model-cache is ReadWriteOnce; eight workers on "
        "several nodes share the cache, so it must be ReadWriteMany: use another claim",
        f"{K}cacheExistingClaim: claim shared-model-cache holds 50Gi, less than the 100Gi "
        "this serving path downloads: grow it or use another claim"]),
    "claim fits": ({"claim": _claim(["ReadWriteMany"], "300Gi")}, []),
    "claim of a class that is gone": ({"claim": _claim(["ReadWriteMany"], "300Gi", "old"),
                                       "storage_class": None}, [
        f"{K}cacheExistingClaim: claim shared-model-cache uses storage class old, which does "
        "not exist (`kubectl get storageclass`): the claim can't bind; use another claim"]),
    "GPUs other pods hold": ({"pods": (gpu_pod("gpu-1", 2),)}, [
        f"{K}gpuNodeSelector: 1 schedulable node(s) match gpuNodeSelector and tolerations "
        "with free GPUs for 6 of 8 workers (8 x 1 GPUs, counting what other pods hold); free "
        "GPUs, fix gpuNodeSelector/gpuTolerations, or lower workerReplicas"]),
    "GPUs the stack's own graph holds": ({"pods": (gpu_pod(
        "gpu-1", 8, "cosmos3-reasoner",
        {"nvidia.com/dynamo-graph-deployment-name": "cosmos3-session-affinity"}),)}, []),
    "GPUs on two nodes": ({"nodes": (node("gpu-1", 4), node("gpu-2", 4))}, []),
    # The usual on-premises RWX: a static NFS PersistentVolume under a no-provisioner class.
    "static volumes": ({"storage_class": as_api_returns(
        {"metadata": {"name": "rwx-test"}, "provisioner": "kubernetes.io/no-provisioner"},
        "V1StorageClass")}, []),
    "untolerated taint": ({"nodes": (node("gpu-1", taints=[
        {"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),)}, [
        f"{K}gpuNodeSelector: 0 schedulable node(s) match gpuNodeSelector and tolerations "
        "with free GPUs for 0 of 8 workers (8 x 1 GPUs, counting what other pods hold); free "
        "GPUs, fix gpuNodeSelector/gpuTolerations, or lower workerReplicas"]),
    "tolerated taint": ({"nodes": (node("gpu-1", taints=[
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),)}, []),
    "other GPU class": ({"nodes": (node("gpu-1", product="NVIDIA-A100-SXM4-80GB"),)}, [
        f"{K}gpuProduct: matching GPU nodes are NVIDIA-A100-SXM4-80GB, not NVIDIA-H200: "
        "narrow gpuNodeSelector to nvidia.com/gpu.product=NVIDIA-H200, or set gpuProduct to "
        "theirs"]),
    "what the API refused is skipped": ({"crd": None, "operators": (), "nodes": (),
                                         "unreadable": frozenset({"CRD", "operator", "nodes"})},
                                        []),
}


@pytest.mark.parametrize("case", sorted(PREFLIGHT))
def test_each_preflight_check_passes_or_names_the_setting_and_the_fix(case: str) -> None:
    change, expected = PREFLIGHT[case]
    settings = settings_of()
    assert cluster.problems(settings, replace(healthy(), **change)) == expected


def test_pull_secrets_must_exist_before_the_pods_start() -> None:
    settings = settings_of(imagePullSecrets=["mirror"])
    ours = as_api_returns(manifests.namespace(settings), "V1Namespace")
    live = replace(healthy(), namespace=ours)
    assert cluster.problems(settings, replace(live, pull_secrets=("mirror",))) == []
    assert cluster.problems(settings, live) == [
        f"{K}imagePullSecrets: mirror not in namespace cosmos3-reasoner: create it (`kubectl "
        "-n cosmos3-reasoner create secret docker-registry ...`)"]
    assert cluster.problems(settings, healthy()) == [
        f"{K}imagePullSecrets: mirror not in namespace cosmos3-reasoner: create the namespace "
        "first (`kubectl create namespace cosmos3-reasoner`, then `pulumi config set "
        "createNamespace false`), then create it (`kubectl -n cosmos3-reasoner create secret "
        "docker-registry ...`)"]


def test_an_existing_claim_that_is_missing_is_named() -> None:
    settings = settings_of(cacheExistingClaim="team-cache")
    assert cluster.problems(settings, healthy()) == [
        f"{K}cacheExistingClaim: claim team-cache is not in namespace cosmos3-reasoner: give "
        "an existing claim's name (`kubectl get pvc`), or leave it empty to create one"]


def test_experts_can_skip_the_preflight() -> None:
    settings = settings_of(skipPreflight=True)
    assert cluster.problems(settings, LiveObjects()) == []
    assert cluster.problems(settings_of(), LiveObjects()) != []


def test_a_download_job_gone_while_the_graph_runs_is_taken_as_done() -> None:
    """A TTL, `kubectl delete job` or a refresh removes a completed download Job; while the
    graph runs on the GPUs the download would need, the cache is taken as filled."""
    settings = settings_of()
    live = replace(healthy(), graph=running_graph(settings))
    assert cluster.download_gone(settings, live) and cluster.problems(settings, live) == []
    assert not cluster.download_gone(settings, healthy())  # no graph: the first `up`
    assert not cluster.download_gone(settings_of(nimModelProfile="p1"), live)  # no GPU
    assert not cluster.download_gone(settings, replace(live, download_job=live_job(settings)))
    assert not cluster.download_gone(settings, replace(
        live, unreadable=frozenset({"download Job"})))
    assert not cluster.download_gone(settings, None)


def sweep_job(settings: Settings, run_id: str, condition: str | None = None) -> client.V1Job:
    """A sweep Job of this stack as the API returns it: running, or with `condition`."""
    return as_api_returns({
        "metadata": {"name": benchmark_name("sweep", settings.profile, run_id),
                     "labels": manifests.labels(settings.profile, "benchmark-sweep", run_id)},
        "spec": {"template": {}},
        "status": {"conditions": [{"type": condition, "status": "True"}] if condition else []},
    }, "V1Job")


def test_a_new_run_id_while_the_last_sweep_runs_is_refused_with_both_ways_out() -> None:
    settings = settings_of(benchmarkRunId="run-2")
    old, kubectl = benchmark_name("sweep", STACK, "run-1"), settings.kubectl
    [problem] = cluster.problems(settings, replace(healthy(), sweeps=(
        sweep_job(settings, "run-1"), sweep_job(settings, "run-2"))))
    assert problem == (
        f"{K}benchmarkRunId: sweep Job {old} of run run-1 still runs: a new run id would start "
        "a second sweep before that Job is deleted, both loading the frontend. Wait for it "
        f"(`{kubectl} logs -f job/{old}`) or stop it (`{kubectl} delete job {old}`), then "
        "`pulumi up`")
    for sweeps, settings_now in (((sweep_job(settings, "run-1", "Complete"),), settings),
                                 ((sweep_job(settings, "run-1", "Failed"),), settings),
                                 ((sweep_job(settings, "run-2"),), settings),
                                 ((sweep_job(settings, "run-1"),),
                                  settings_of(benchmarkRunId="run-2", benchmarkSweep=False))):
        assert cluster.problems(settings_now, replace(healthy(), sweeps=sweeps)) == []


def test_this_stacks_sweeps_are_listed_by_their_labels() -> None:
    settings = settings_of(benchmarkRunId="run-2")
    ns, other = settings.namespace, settings_of()
    jobs = [served(sweep_job(settings, run)) for run in ("run-1", "run-2")]
    foreign = served(sweep_job(replace(other, profile="round-robin"), "run-1"))
    routes = {**healthy_routes(), f"/apis/batch/v1/namespaces/{ns}/jobs": {
        "items": [*jobs, foreign]}}
    with api_server(routes) as (kubeconfig, _):
        live = cluster.observe(settings, kubeconfig, dry_run=False, say=pytest.fail)
    assert [j.metadata.name for j in live.sweeps] == [j["metadata"]["name"] for j in jobs]
    assert live.sweep_job.metadata.name == benchmark_name("sweep", STACK, "run-2")


def test_the_gpus_another_stack_of_the_project_holds_are_named_with_its_destroy() -> None:
    settings = settings_of()
    other = gpu_pod("gpu-1", 8, settings.namespace, {GRAPH_LABEL: "cosmos3-round-robin"})
    assert cluster.problems(settings, replace(healthy(), pods=(other,))) == [
        "cluster: 1 schedulable node(s) match gpuNodeSelector and tolerations with free GPUs "
        "for 0 of 8 workers (8 x 1 GPUs, counting what other pods hold): this project's "
        "graph cosmos3-round-robin holds 8 of them (`pulumi destroy -s round-robin` frees "
        "them); the profiles take turns on the GPUs"]
    # Another tenant's graph, or one in another namespace: the settings' fix, as before.
    for pod in (gpu_pod("gpu-1", 8, settings.namespace, {GRAPH_LABEL: "llama"}),
                gpu_pod("gpu-1", 8, "elsewhere", {GRAPH_LABEL: "cosmos3-round-robin"})):
        [problem] = cluster.problems(settings, replace(healthy(), pods=(pod,)))
        assert problem.startswith(f"{K}gpuNodeSelector: ")


def test_gpus_held_are_summed_per_node_and_per_graph_and_the_shortage_is_of_the_moment() -> None:
    """Two pods of one graph on a node hold both their GPUs; every graph of the project that
    holds some is named. Free GPUs are a fact of the moment (a preview warns); a node of
    another GPU class is the settings' fault."""
    settings = settings_of()
    ns = settings.namespace
    pods = (gpu_pod("gpu-1", 4, ns, {GRAPH_LABEL: "cosmos3-round-robin"}),
            gpu_pod("gpu-1", 4, ns, {GRAPH_LABEL: "cosmos3-round-robin"}),
            gpu_pod("gpu-1", 2, ns, {GRAPH_LABEL: "cosmos3-kv-routing"}))
    [short] = cluster._gpus(settings, replace(healthy(), nodes=(node("gpu-1", 12),), pods=pods))
    assert "free GPUs for 2 of 8 workers" in short and isinstance(short, cluster.Moment)
    assert short.endswith(
        "this project's graph cosmos3-round-robin holds 8 of them (`pulumi destroy -s "
        "round-robin` frees them), graph cosmos3-kv-routing holds 2 of them (`pulumi destroy "
        "-s kv-routing` frees them); the profiles take turns on the GPUs")
    [tenant] = cluster._gpus(settings, replace(healthy(), nodes=(node("gpu-1", 7),)))
    assert isinstance(tenant, cluster.Moment)
    other_class = as_api_returns({"metadata": {"name": "gpu-1", "labels": {
        "nvidia.com/gpu.product": "NVIDIA-A100"}}, "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}}}, "V1Node")
    [product] = cluster._gpus(settings, replace(healthy(), nodes=(other_class,)))
    assert product.startswith(f"{K}gpuProduct: ") and not isinstance(product, cluster.Moment)


def _routes_with_claim(settings: Settings, storage_class: str | None) -> dict[str, Any]:
    """A healthy cluster with a claim of class old, serving `storage_class` (None: none) and
    not the settings' rwx-test."""
    routes = {**healthy_routes(), f"/api/v1/namespaces/{settings.namespace}/"
              f"persistentvolumeclaims/{settings.cache_claim_name}": served(
                  _claim(["ReadWriteMany"], "300Gi", "old"))}
    del routes["/apis/storage.k8s.io/v1/storageclasses/rwx-test"]
    if storage_class:
        routes[f"/apis/storage.k8s.io/v1/storageclasses/{storage_class}"] = {
            "metadata": {"name": storage_class}, "provisioner": "nfs.csi.k8s.io"}
    return routes


def test_an_existing_claim_is_checked_against_its_own_storage_class() -> None:
    """The claim is used with its own class: the setting's (for a new claim) is neither read
    nor blamed; the claim's class gone names the claim."""
    settings = settings_of()  # cacheStorageClass rwx-test, which this cluster lacks
    with api_server(_routes_with_claim(settings, "old")) as (kubeconfig, asked):
        live = cluster.observe(settings, kubeconfig, dry_run=False, say=pytest.fail)
    assert "/apis/storage.k8s.io/v1/storageclasses/old" in asked
    assert "/apis/storage.k8s.io/v1/storageclasses/rwx-test" not in asked
    assert cluster.problems(settings, live) == []
    with api_server(_routes_with_claim(settings, None)) as (kubeconfig, _):
        live = cluster.observe(settings, kubeconfig, dry_run=False, say=pytest.fail)
    [problem] = cluster.problems(settings, live)
    assert problem.startswith(f"{K}cacheExistingClaim: claim shared-model-cache uses storage "
                              "class old, which does not exist")


def test_a_stand_in_storage_class_is_never_read_and_named_as_the_setting_to_fix() -> None:
    """What the pull request's preview sets without a cluster's class: a preview warns,
    an `up` refuses, both naming the setting."""
    settings = settings_of(cacheStorageClass=cluster.STAND_IN)
    with api_server(healthy_routes()) as (kubeconfig, asked):
        live = cluster.observe(settings, kubeconfig, dry_run=True, say=pytest.fail)
    assert not [path for path in asked if "storageclasses" in path]
    [problem] = cluster.problems(settings, live)
    assert problem == (
        f"{K}cacheStorageClass: 'stand-in-no-cluster' is a stand-in (a pull request's preview "
        "without the CACHE_STORAGE_CLASS variable), no class of this cluster: `pulumi config "
        "set cacheStorageClass <rwx-class>` (`kubectl get storageclass`)")
    warned: list[str] = []
    assert cluster.problems(settings, live, warned.append) == [] and warned == [problem]


def test_cache_keep_on_destroy_false_is_refused_while_another_stack_uses_the_cache() -> None:
    settings = settings_of(cacheKeepOnDestroy=False)
    own, other = running_graph(settings), {"metadata": {"name": "cosmos3-round-robin"}}
    pod = gpu_pod("cpu-1", 0, settings.namespace, {manifests.PROFILE_LABEL: "kv-routing"})
    [problem] = cluster.problems(settings, replace(healthy(), graphs=(own, other), pods=(pod,)))
    assert problem == (
        f"{K}cacheKeepOnDestroy: is false, so `pulumi destroy` deletes namespace "
        "cosmos3-reasoner and claim shared-model-cache, which stack(s) kv-routing, round-robin "
        "use: the claim would stay Terminating until they stop, then the cache is lost. "
        "`pulumi config set cacheKeepOnDestroy true`, or destroy them first (`pulumi destroy "
        "-s <stack>`)")
    alone = replace(healthy(), graphs=(own,), pods=(gpu_pod(
        "cpu-1", 0, settings.namespace, {manifests.PROFILE_LABEL: STACK}),))
    assert cluster.problems(settings, alone) == []
    assert cluster.problems(settings_of(), replace(healthy(), graphs=(other,))) == []
    # Nothing shared is deleted: a namespace and a claim the stack did not make.
    assert cluster.problems(settings_of(cacheKeepOnDestroy=False, createNamespace=False,
                                        cacheExistingClaim="team-cache"),
                            replace(healthy(), graphs=(other,), namespace=as_api_returns(
                                {"metadata": {"name": "cosmos3-reasoner"}}, "V1Namespace"),
                                claim=_claim(["ReadWriteMany"], "300Gi"))) == []
    # Either one made by the stack goes: the namespace (with any claim in it), or the claim.
    made_by_hand = as_api_returns({"metadata": {"name": "cosmos3-reasoner"}}, "V1Namespace")
    for made, namespace in (({"createNamespace": True, "cacheExistingClaim": "team-cache"}, None),
                            ({"createNamespace": False, "cacheExistingClaim": ""}, made_by_hand)):
        [problem] = cluster.problems(settings_of(cacheKeepOnDestroy=False, **made), replace(
            healthy(), graphs=(other,), claim=_claim(["ReadWriteMany"], "300Gi"),
            namespace=namespace))
        assert problem.startswith(f"{K}cacheKeepOnDestroy: is false"), made


def test_a_new_set_of_frontends_on_a_live_graph_is_refused_even_in_a_preview() -> None:
    """The operator's webhook refuses any change to a graph's components ("component
    topology is immutable"): a preview says so too, with the way out, naming the setting."""
    compare = parse_settings(stack_config("compare"), "compare")
    live = replace(healthy(), graph=manifests.graph(compare))
    assert cluster.problems(compare, live) == []
    fewer = parse_settings(stack_config("compare", {"frontendProfiles": ["round-robin"]}),
                           "compare")
    warned: list[str] = []
    [problem] = cluster.problems(fewer, live, warned.append)
    assert problem.startswith("cosmos3-routing:frontendProfiles: graph cosmos3-compare has "
                              "components ['Worker', 'round-robin', 'session-affinity'], these "
                              "settings ['Worker', 'round-robin']") and not warned
    assert "`pulumi destroy` then `pulumi up`" in problem and "download is kept" in problem
