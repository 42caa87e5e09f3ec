"""The preflight's GPU decision at its boundaries: which nodes count, which taints the
tolerations cover, how many workers fit. A wrong answer here either waves through a
cluster where the graph stays Pending for hours, or refuses a valid one.

Toleration matching is Kubernetes' `ToleratesTaint` (k8s.io/api core/v1 toleration.go;
the V1Toleration API reference): an empty effect matches every effect, `Exists` (our
`key` without `=value`) matches every value, `Equal` compares the value (an absent taint
value is the empty string), and a `PreferNoSchedule` taint never keeps a pod off a node.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from infra import cluster, manifests
from infra.cluster import JobState
from infra.settings import Settings, parse_settings
from tests.support_cluster import as_api_returns, gpu_pod, healthy, node
from tests.support_pulumi import stack_config
from tests.test_preflight import K, settings_of

TP4 = "vllm-super-tp4-rr"


def tp4_settings(**overrides: Any) -> Settings:
    """Two replicas of four GPUs each (the stack's own shape)."""
    config = stack_config(TP4, {"hfToken": "hf-test", "vllmImage": "registry.test/dynamo:1.0",
                                **overrides})
    return parse_settings(config, TP4)


def taint(key: str, effect: str, value: str | None = None) -> dict[str, str]:
    return {"key": key, "effect": effect, **({"value": value} if value is not None else {})}


def gpu_problems(settings: Settings, *nodes: Any, pods: tuple[Any, ...] = ()) -> list[str]:
    return cluster._gpus(settings, replace(healthy(), nodes=nodes, pods=pods))


def fits(settings: Settings, *nodes: Any, pods: tuple[Any, ...] = ()) -> bool:
    return not [p for p in gpu_problems(settings, *nodes, pods=pods) if "gpuNodeSelector" in p]


TOLERATIONS = [
    # (gpuTolerations, the node's taint, the workers may run there)
    ([], taint("dedicated", "NoSchedule", "gpu"), False),
    ([], taint("dedicated", "NoExecute", "gpu"), False),
    ([], taint("dedicated", "PreferNoSchedule", "gpu"), True),
    (["dedicated=gpu:NoSchedule"], taint("dedicated", "NoSchedule", "gpu"), True),
    (["dedicated=gpu:NoSchedule"], taint("dedicated", "NoSchedule", "cpu"), False),
    (["dedicated=gpu:NoSchedule"], taint("dedicated", "NoSchedule"), False),
    (["dedicated=gpu:NoSchedule"], taint("dedicated", "NoExecute", "gpu"), False),
    (["dedicated=gpu:NoSchedule"], taint("other", "NoSchedule", "gpu"), False),
    (["dedicated=gpu"], taint("dedicated", "NoExecute", "gpu"), True),
    (["dedicated=gpu"], taint("dedicated", "NoSchedule", "gpu"), True),
    (["dedicated"], taint("dedicated", "NoExecute", "anything"), True),
    (["dedicated"], taint("dedicated", "NoSchedule"), True),
    (["dedicated:NoExecute"], taint("dedicated", "NoExecute", "x"), True),
    (["dedicated:NoExecute"], taint("dedicated", "NoSchedule", "x"), False),
    (["other:NoSchedule", "dedicated:NoSchedule"], taint("dedicated", "NoSchedule"), True),
    (["other"], taint("dedicated", "NoSchedule"), False),
]


@pytest.mark.parametrize(("tolerations", "node_taint", "schedulable"), TOLERATIONS)
def test_a_taint_keeps_the_workers_off_unless_a_toleration_matches_it(
        tolerations: list[str], node_taint: dict[str, str], schedulable: bool) -> None:
    settings = settings_of(gpuTolerations=tolerations)
    assert fits(settings, node("gpu-1", taints=[node_taint])) is schedulable


def test_every_taint_of_a_node_must_be_tolerated() -> None:
    settings = settings_of(gpuTolerations=["a:NoSchedule"])
    both = [taint("a", "NoSchedule"), taint("b", "NoSchedule")]
    assert not fits(settings, node("gpu-1", taints=both))
    assert fits(settings_of(gpuTolerations=["a:NoSchedule", "b"]), node("gpu-1", taints=both))


def test_an_empty_value_toleration_matches_a_taint_without_value() -> None:
    """Kubernetes compares an Equal toleration's value with the taint's, both "" when
    absent; the client gives an absent taint value as None."""
    settings = settings_of(gpuTolerations=["dedicated=:NoSchedule"])
    assert fits(settings, node("gpu-1", taints=[taint("dedicated", "NoSchedule")]))


def test_exactly_enough_gpus_pass_and_one_short_is_named() -> None:
    settings = settings_of()  # 8 workers x 1 GPU
    assert gpu_problems(settings, node("gpu-1", 8)) == []
    assert gpu_problems(settings, node("gpu-1", 4), node("gpu-2", 4)) == []
    [short] = gpu_problems(settings, node("gpu-1", 7))
    assert "1 schedulable node(s)" in short and "free GPUs for 7 of 8 workers" in short
    [short] = gpu_problems(settings, node("gpu-1", 8), pods=(gpu_pod("gpu-1", 1),))
    assert "for 7 of 8 workers" in short
    # A pod on another node takes nothing from this one.
    assert gpu_problems(settings, node("gpu-1", 8), pods=(gpu_pod("gpu-2", 8),)) == []


def test_a_replica_never_spans_nodes() -> None:
    settings = tp4_settings()  # 2 workers x 4 GPUs
    assert settings.serving.gpus_per_replica == 4
    assert fits(settings, node("gpu-1", 8))
    assert fits(settings, node("gpu-1", 4), node("gpu-2", 4))
    [short] = gpu_problems(settings, node("gpu-1", 6), node("gpu-2", 2))
    assert "free GPUs for 1 of 2 workers (2 x 4 GPUs" in short
    [short] = gpu_problems(settings, node("gpu-1", 8), pods=(gpu_pod("gpu-1", 1),))
    assert "for 1 of 2 workers" in short


def test_cordoned_and_unselected_nodes_do_not_count() -> None:
    settings = settings_of(gpuNodeSelector=["pool=h200"])
    body = {"metadata": {"name": "gpu-1", "labels": {"pool": "h200", "zone": "a",
                                                     "nvidia.com/gpu.product": "NVIDIA-H200"}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    labelled = as_api_returns(body, "V1Node")
    assert fits(settings, labelled)
    assert not fits(settings, node("gpu-1", 8))  # no pool label
    cordoned = as_api_returns({**body, "spec": {"unschedulable": True}}, "V1Node")
    [problem] = gpu_problems(settings, cordoned)
    assert problem.startswith(f"{K}gpuNodeSelector: 0 schedulable node(s)")
    other_pool = settings_of(gpuNodeSelector=["pool=a100"])
    assert not fits(other_pool, labelled)


def test_only_this_stacks_own_graph_gives_back_its_gpus() -> None:
    settings = settings_of()
    own = {"nvidia.com/dynamo-graph-deployment-name": settings.graph_name}
    ns = settings.namespace
    assert fits(settings, node("gpu-1", 8), pods=(gpu_pod("gpu-1", 8, ns, own),))
    for pod in (gpu_pod("gpu-1", 8, "elsewhere", own),
                gpu_pod("gpu-1", 8, ns, {"nvidia.com/dynamo-graph-deployment-name": "other"}),
                gpu_pod("gpu-1", 8, ns)):
        assert not fits(settings, node("gpu-1", 8), pods=(pod,))


def test_gpus_of_every_container_of_a_pod_count() -> None:
    settings = settings_of()
    pod = as_api_returns({
        "metadata": {"name": "p", "namespace": "other"},
        "spec": {"nodeName": "gpu-1", "containers": [
            {"name": "a", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1"}}},
            {"name": "c"},
            {"name": "d", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}, "V1Pod")
    [short] = gpu_problems(settings, node("gpu-1", 8), pods=(pod,))
    assert "for 6 of 8 workers" in short


def test_a_node_of_another_gpu_class_is_named_but_one_without_the_label_is_not() -> None:
    settings = settings_of()
    unlabelled = as_api_returns({"metadata": {"name": "gpu-2"}, "spec": {},
                                 "status": {"allocatable": {"nvidia.com/gpu": "8"}}}, "V1Node")
    assert gpu_problems(settings, node("gpu-1"), unlabelled) == []
    [problem] = gpu_problems(settings, node("gpu-1"), node("gpu-2", product="NVIDIA-A100"),
                             node("gpu-3", product="NVIDIA-B200"))
    assert problem.startswith(f"{K}gpuProduct: matching GPU nodes are NVIDIA-A100, "
                              "NVIDIA-B200, NVIDIA-H200, not NVIDIA-H200")


def test_the_gpu_check_is_skipped_only_when_nodes_or_pods_were_refused() -> None:
    settings = settings_of()
    for refused in ({"nodes"}, {"pods"}):
        live = replace(healthy(), nodes=(), unreadable=frozenset(refused))
        assert cluster.problems(settings, live) == []
    assert cluster._gpus(settings, replace(healthy(), nodes=(),
                                           unreadable=frozenset({"CRD"}))) != []


def test_a_job_state_comes_from_its_true_conditions_only() -> None:

    def job(*conditions: dict[str, str]) -> Any:
        return as_api_returns({"metadata": {"name": "j"}, "spec": {"template": {}},
                               "status": {"conditions": list(conditions)}}, "V1Job")

    assert cluster.job_status_of(None).state is JobState.MISSING
    assert cluster.job_status_of(job()).state is JobState.RUNNING
    assert cluster.job_status_of(job({"type": "Complete", "status": "False"})).state \
        is JobState.RUNNING
    assert cluster.job_status_of(job({"type": "Complete", "status": "True"})).state \
        is JobState.SUCCEEDED
    failed = cluster.job_status_of(job({"type": "Suspended", "status": "True"},
                                       {"type": "Failed", "status": "True",
                                        "reason": "BackoffLimitExceeded", "message": "3 tries"}))
    assert failed == cluster.JobStatus(JobState.FAILED, "BackoffLimitExceeded: 3 tries")
    assert cluster.job_status_of(job({"type": "Failed", "status": "True",
                                      "message": "gone"})).reason == "gone"
    assert not cluster.completed(None)
    assert not cluster.completed(job({"type": "Complete", "status": "False"}))
    assert cluster.completed(job({"type": "Complete", "status": "True"}))



def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    next(e for e in container["env"] if e["name"] == name)["value"] = value


DOWNLOAD_CHANGES = {
    "image": lambda c: c.update(image="nvcr.io/nim/nvidia/cosmos3:2.0.0"),
    "command": lambda c: c.update(command=["download-to-cache", "--all"]),
    "a model value": lambda c: _set_env(c, "NIM_PRECISION", "bf16"),
    "a model variable": lambda c: c["env"].append({"name": "NIM_MODEL_PROFILE", "value": "x"}),
    "a renamed variable": lambda c: c["env"][0].update(name="NIM_MODEL_KIND"),
    "the GPUs": lambda c: c["resources"]["limits"].update({"nvidia.com/gpu": 2}),
    # Not the cache's content, but the provider replaces a Job on any template change.
    "the env's order": lambda c: c["env"].reverse(),
    "a cpu request": lambda c: c["resources"]["requests"].update(cpu="2"),
}


@pytest.mark.parametrize("change", sorted(DOWNLOAD_CHANGES))
def test_the_download_runs_again_when_what_decides_the_cache_changes(change: str) -> None:
    """A download Job the provider would replace (any pod-template change but placement)
    needs the GPUs this stack's graph holds; a completed one is never replaced."""
    settings = settings_of()
    live = replace(healthy(), graph={"metadata": {"name": settings.graph_name}})

    def problems_with(edit: Any, spec_edit: Any = lambda s: None,
                      status: dict[str, Any] | None = None) -> list[str]:
        job = copy.deepcopy(manifests.model_download_job(settings))
        edit(job["spec"]["template"]["spec"]["containers"][0])
        spec_edit(job["spec"]["template"]["spec"])
        job["status"] = status or {}
        return cluster._download(settings, replace(live, download_job=as_api_returns(
            job, "V1Job")))

    assert problems_with(lambda c: None) == []
    assert problems_with(lambda c: None, lambda s: s.update(
        nodeSelector={"pool": "cpu"}, imagePullSecrets=[{"name": "mirror"}])) == []
    [problem] = problems_with(DOWNLOAD_CHANGES[change])
    assert problem.startswith(f"{K}nimModelProfile: the model download must run (again)")
    done = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert problems_with(DOWNLOAD_CHANGES[change], status=done) == []


def test_only_objects_labelled_by_this_project_are_its_own() -> None:
    ours = manifests.common_labels()["app.kubernetes.io/part-of"]
    for labels, own in (({"app.kubernetes.io/part-of": ours}, True),
                        ({"app.kubernetes.io/part-of": "other"}, False), ({}, False)):
        assert cluster._ours(as_api_returns({"name": "x", "labels": labels},
                                            "V1ObjectMeta")) is own
    assert not cluster._ours(None)


def test_a_read_the_api_refused_skips_exactly_its_own_check() -> None:
    """A 403 is not a verdict: the check that needed the object says nothing."""
    missing_ns = settings_of(createNamespace=False)
    assert cluster._namespace(missing_ns, healthy()) != []
    assert cluster.problems(missing_ns, replace(
        healthy(), unreadable=frozenset({"namespace"}))) == []
    team = settings_of(cacheExistingClaim="team-cache")
    assert cluster._cache(team, healthy()) != []
    assert cluster.problems(team, replace(healthy(), unreadable=frozenset({"claim"}))) == []
    no_class = replace(healthy(), storage_class=None)
    assert cluster._cache(settings_of(), no_class) != []
    assert cluster._cache(settings_of(), replace(
        no_class, unreadable=frozenset({"storage class"}))) == []


def test_a_missing_claim_gets_one_fix_the_first_that_applies() -> None:
    """Naming an existing claim makes the storage class moot: each fix makes the next moot."""
    no_class = replace(healthy(), storage_class=None)
    [class_gone] = cluster._cache(settings_of(cacheStorageClass="rwx-gone"), no_class)
    assert class_gone.startswith(f"{K}cacheStorageClass: storage class rwx-gone does not exist")
    [claim_gone] = cluster._cache(settings_of(cacheStorageClass="rwx-gone",
                                              cacheExistingClaim="team-cache"), no_class)
    assert claim_gone.startswith(f"{K}cacheExistingClaim: claim team-cache is not in namespace")


@pytest.mark.parametrize(("read", "settings", "live"), [
    ("CRD", {}, {"crd": None}),
    ("operator", {}, {"operators": ()}),
    ("graphs", {}, {"graph": {"metadata": {"name": "cosmos3-session-affinity"},
                              "spec": {"components": [{"name": "renamed"}]}}}),
    ("pull secrets", {"imagePullSecrets": ["regcred"]}, {}),
])
def test_each_other_refused_read_skips_the_checks_that_need_it(
        read: str, settings: dict[str, Any], live: dict[str, Any]) -> None:
    """Each check names the reads it needs: one refused (403) leaves its verdict unknown (the
    namespace's, the claim's and the GPUs' reads have the tests above)."""
    stack = settings_of(**settings)
    cluster_now = replace(healthy(), **live)
    assert cluster.problems(stack, cluster_now) != []
    assert cluster.problems(stack, replace(cluster_now, unreadable=frozenset({read}))) == []


def test_a_namespace_made_by_hand_gets_the_whole_reason_and_fix() -> None:
    settings = settings_of()
    by_hand = as_api_returns({"metadata": {"name": settings.namespace}}, "V1Namespace")
    assert cluster._namespace(settings, replace(healthy(), namespace=by_hand)) == [
        f"{K}createNamespace: namespace cosmos3-reasoner exists and was not made by this "
        "project (by hand, for a pull secret?); a stack that creates its namespace deletes "
        "it on destroy, with everything in it. Deploy into it instead: `pulumi config set "
        "createNamespace false`"]


def test_a_crd_that_serves_other_versions_names_them_all() -> None:
    crd = as_api_returns({"metadata": {"name": "x"}, "spec": {
        "group": "nvidia.com", "names": {"kind": "K", "plural": "x"}, "scope": "Namespaced",
        "versions": [{"name": "v1alpha1", "served": True, "storage": False},
                     {"name": "v1beta1", "served": False, "storage": False},
                     {"name": "v1alpha2", "served": True, "storage": True}]}},
        "V1CustomResourceDefinition")
    [problem] = cluster._crd(settings_of(), replace(healthy(), crd=crd))
    assert "serves v1alpha1, v1alpha2, not v1beta1: upgrade the Dynamo platform" in problem


def test_gpu_boundaries_the_mutants_found() -> None:
    """A node whose labels are exactly the selector matches; a node without GPUs adds
    none; a pod after this stack's own still counts."""
    exact = as_api_returns({"metadata": {"name": "gpu-1", "labels": {"pool": "h200"}},
                            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}},
                           "V1Node")
    assert fits(settings_of(gpuNodeSelector=["pool=h200"]), exact)
    settings = settings_of()
    cpu_only = as_api_returns({"metadata": {"name": "cpu-1"}, "spec": {},
                               "status": {"allocatable": {"cpu": "96"}}}, "V1Node")
    [short] = gpu_problems(settings, node("gpu-1", 7), cpu_only)
    assert "for 7 of 8 workers" in short
    own = gpu_pod("gpu-1", 8, settings.namespace,
                  {"nvidia.com/dynamo-graph-deployment-name": settings.graph_name})
    [short] = gpu_problems(settings, node("gpu-1", 8), pods=(own, gpu_pod("gpu-1", 1)))
    assert "for 7 of 8 workers" in short


def test_an_overcommitted_node_takes_nothing_from_the_others() -> None:
    """A node whose pods hold more GPUs than it offers (its device plugin restarting:
    allocatable 0) fits no replica; it takes none from the other nodes."""
    settings = settings_of()
    assert fits(settings, node("gpu-1", 8), node("gpu-2", 0), pods=(gpu_pod("gpu-2", 1),))


def claim(modes: list[str], size: str | None, storage_class: str | None = None) -> Any:
    resources = {"requests": {"storage": size}} if size else None
    return as_api_returns({"metadata": {"name": "shared-model-cache"}, "spec": {
        "accessModes": modes, "resources": resources, "storageClassName": storage_class}},
        "V1PersistentVolumeClaim")


def test_a_claim_of_exactly_the_needed_size_fits_and_one_without_a_size_does_not() -> None:
    settings = settings_of()  # this serving path downloads 100Gi
    assert cluster._cache(settings, replace(healthy(), claim=claim(["ReadWriteMany"],
                                                                   "100Gi"))) == []
    [small] = cluster._cache(settings, replace(healthy(), claim=claim(["ReadWriteMany"],
                                                                      "99Gi")))
    assert "holds 99Gi, less than the 100Gi" in small
    [unsized] = cluster._cache(settings, replace(healthy(), claim=claim(["ReadWriteMany"],
                                                                        None)))
    assert "holds None, less than the 100Gi" in unsized


def test_a_claim_without_a_storage_class_uses_the_default_one() -> None:
    """`storageClassName` unset: the cluster's default class binds it, so a missing class
    named in the settings is no reason to refuse it; an unreadable class says nothing."""
    fits_claim = claim(["ReadWriteMany"], "300Gi")
    assert cluster._cache(settings_of(), replace(healthy(), claim=fits_claim,
                                                 storage_class=None)) == []
    gone = claim(["ReadWriteMany"], "300Gi", "old")
    assert cluster._cache(settings_of(), replace(
        healthy(), claim=gone, storage_class=None,
        unreadable=frozenset({"storage class"}))) == []


def test_a_claim_that_is_not_read_write_many_names_its_modes() -> None:
    [problem] = cluster._cache(settings_of(), replace(healthy(), claim=claim(
        ["ReadWriteOnce", "ReadOnlyMany"], "300Gi")))
    assert "claim shared-model-cache is ReadWriteOnce, ReadOnlyMany; eight workers" in problem


def test_the_download_problems_name_the_settings_and_every_step_of_the_fix() -> None:
    settings = settings_of()
    kubectl, job = settings.kubectl, settings.download_job_name
    [failed] = cluster._download(settings, replace(healthy(), download_job=as_api_returns({
        "metadata": {"name": job}, "spec": {"template": {}},
        "status": {"conditions": [{"type": "Failed", "status": "True"}]}}, "V1Job")))
    assert failed == (
        f"download Job {job} failed in an earlier `up` (`{kubectl} logs job/{job}` says why); "
        f"fix the cause, then `{kubectl} delete job {job}` and `pulumi up --refresh` to run "
        "it again")
    older = as_api_returns(manifests.model_download_job(settings_of(
        nimImage="nvcr.io/nim/nvidia/cosmos3:2.0.0")), "V1Job")  # still running
    [blocked] = cluster._download(settings, replace(healthy(), graph={"metadata": {}},
                                                    download_job=older))
    assert ("it would wait for downloadTimeoutSecs. Set nimModelProfile to the profile id "
            "(the download then needs no GPU), or free the GPUs first: "
            f"`{kubectl} delete dynamographdeployment {settings.graph_name}`, then "
            "`pulumi up --refresh`") in blocked


def test_pull_secrets_that_could_not_be_read_are_not_called_missing() -> None:
    settings = settings_of(imagePullSecrets=["mirror", "backup"])
    [problem] = cluster._pull_secrets(settings, healthy())
    assert problem.startswith(f"{K}imagePullSecrets: mirror, backup not in namespace")
    assert cluster.problems(settings, replace(
        healthy(), unreadable=frozenset({"pull secrets"}))) == []


def test_the_stacks_own_benchmark_pod_gives_back_its_gpus() -> None:
    settings = settings_of()
    bench = gpu_pod("gpu-1", 8, settings.namespace,
                    {manifests.PROFILE_LABEL: settings.profile})
    assert fits(settings, node("gpu-1", 8), pods=(bench,))


def test_a_job_complete_after_a_false_condition_is_complete() -> None:
    job = as_api_returns({"metadata": {"name": "j"}, "spec": {"template": {}}, "status": {
        "conditions": [{"type": "Failed", "status": "False"},
                       {"type": "Complete", "status": "True"}]}}, "V1Job")
    assert cluster.job_status_of(job).state is JobState.SUCCEEDED


def test_the_workers_restart_only_for_what_the_operator_hashes() -> None:
    """ComputeDGDWorkersSpecHash (ai-dynamo/dynamo deploy/operator/api/v1beta1/worker_hash.go
    at 13538f46): the worker components but their replicas, and spec.env; the API server
    adds defaults, which change nothing."""
    settings = settings_of()
    graph = manifests.graph(settings)
    live = replace(healthy(), graph=graph)
    assert cluster.worker_restarts(settings, live) is None
    assert cluster.worker_restarts(settings, healthy()) is None
    assert cluster.worker_restarts(settings, None) is None
    assert cluster.worker_restarts(settings_of(workerReplicas=4), live) is None
    defaulted = copy.deepcopy(graph)
    defaulted["spec"]["components"][1]["podTemplate"]["spec"]["dnsPolicy"] = "ClusterFirst"
    assert cluster.worker_restarts(settings, replace(live, graph=defaulted)) is None
    # A frontend's change (its routing flags) rolls the frontend alone.
    rerouted = copy.deepcopy(graph)
    (frontend,) = [c for c in rerouted["spec"]["components"] if c["type"] == "frontend"]
    frontend["podTemplate"]["spec"]["containers"][0]["args"] = ["--router-mode", "kv"]
    assert cluster.worker_restarts(settings, replace(live, graph=rerouted)) is None
    old = copy.deepcopy(graph)
    old["spec"]["env"] = []
    old["spec"]["components"][1]["replicas"] = 6
    why = "; docs/deploy-reference.md, 'Re-runs and upgrades')"
    assert cluster.worker_restarts(settings, replace(live, graph=old)) == (
        "graph cosmos3-session-affinity: this update restarts 6 workers, each reloading the "
        "model (changed: spec.env" + why)
    worker = old["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]
    worker.update(image="x", command=["y"])
    container = "spec.components[1].podTemplate.spec.containers[0]"
    assert cluster.worker_restarts(settings, replace(live, graph=old)).endswith(
        f"(changed: spec.env, {container}.image, {container}.command" + why)
    worker.update(workingDir="z")
    assert cluster.worker_restarts(settings, replace(live, graph=old)).endswith(
        f"(changed: spec.env, {container}.image, {container}.command ..." + why)
