"""The Pulumi program itself (infra/__main__.py), run under the SDK's mocks per stack."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from infra import cluster, manifests, names
from infra.cluster import LiveObjects
from infra.manifests import GRAPH_LABEL, PROFILE_LABEL, common_labels
from infra.routing import PROFILES, frontend_args
from infra.settings import parse_settings
from tests.support_cluster import (
    api_server,
    as_api_returns,
    gpu_pod,
    healthy,
    healthy_routes,
)
from tests.support_pulumi import (
    SECRET_SIG,
    TEST_NGC_KEY,
    ProgramRun,
    Registration,
    engine_steps,
    refreshed,
    replaced_for,
    run_program,
    stack_config,
)
from tests.support_schemas import graph_errors, validate_k8s

STACKS = sorted(PROFILES)
NS, SECRET, PVC, JOB, GRAPH = (
    "kubernetes:core/v1:Namespace",
    "kubernetes:core/v1:Secret",
    "kubernetes:core/v1:PersistentVolumeClaim",
    "kubernetes:batch/v1:Job",
    "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment",
)
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
COMPONENTS = ("RecipeNamespace", "NetworkPolicies", "ModelCache", "ReasonerGraph")
# The recipe alone; the post-deploy benchmark is tested in tests/test_benchmark_program.py.
RECIPE_ONLY = {"benchmarkSmoke": False, "benchmarkSweep": False}


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    out = {stack: run_program(stack, stack_config(stack, RECIPE_ONLY)) for stack in STACKS}
    for stack, run in out.items():
        assert run.error is None, f"{stack}: {run.error}"
    return out


def _unwrap(value: Any) -> Any:
    """Manifest as the API server would get it: secrets revealed, in a plain dict."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270":
            return _unwrap(value["value"])
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


def _plain_occurrences(value: Any, needle: str) -> list[str]:
    """Paths where `needle` appears outside a secret wrapper."""
    found: list[str] = []

    def walk(v: Any, path: str) -> None:
        if isinstance(v, dict):
            if v.get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270":
                return
            for k, item in v.items():
                walk(item, f"{path}/{k}")
        elif isinstance(v, list):
            for i, item in enumerate(v):
                walk(item, f"{path}/{i}")
        elif needle in str(v):
            found.append(path)

    walk(value, "")
    return found


@pytest.mark.parametrize("stack", STACKS)
def test_stack_declares_the_recipe_in_components(runs: dict[str, ProgramRun], stack: str) -> None:
    run = runs[stack]
    kinds = sorted(r.type for r in run.objects())
    assert kinds == sorted([NS, SECRET, PVC, JOB, GRAPH, *[POLICY] * 5])
    components = {r.type.rsplit(":", 1)[-1]: r for r in run.resources if not r.custom}
    assert set(components) == set(COMPONENTS)
    parent_of = {
        NS: "RecipeNamespace", SECRET: "RecipeNamespace", PVC: "ModelCache",
        JOB: "ModelCache", GRAPH: "ReasonerGraph",
    }
    for kind, component in parent_of.items():
        assert run.one(kind).parent == components[component].urn, kind
    assert {r.parent for r in run.of_type(POLICY)} == {components["NetworkPolicies"].urn}
    own = names.graph_name(stack)
    assert _unwrap(run.one(SECRET).inputs)["metadata"]["name"] == f"{own}-ngc-api-key"
    assert run.one(PVC).inputs["metadata"]["name"] == names.MODEL_CACHE_PVC_NAME
    assert run.one(JOB).inputs["metadata"]["name"] == f"{own}-model-download"
    assert run.one(GRAPH).inputs["metadata"]["name"] == names.graph_name(stack)


@pytest.mark.parametrize("stack", STACKS)
def test_every_declared_manifest_passes_the_api_schemas(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    """What the program really hands the provider, not just what manifests.py returns."""
    for res in runs[stack].objects():
        manifest = _unwrap(res.inputs)
        if res.type == GRAPH:
            assert graph_errors(manifest) == []
        else:
            validate_k8s(manifest)


@pytest.mark.parametrize("stack", STACKS)
def test_order_and_waits(runs: dict[str, ProgramRun], stack: str) -> None:
    run = runs[stack]
    ns, secret, pvc, job, graph = (run.one(k) for k in (NS, SECRET, PVC, JOB, GRAPH))

    def deps(res: Registration) -> set[str]:
        return set(res.dependencies)

    assert ns.urn in deps(secret)
    assert {secret.urn, pvc.urn} <= deps(job)
    assert ns.urn in deps(pvc)
    assert job.urn in deps(graph), "the graph must wait for the filled cache"
    assert job.timeouts == {"create": "7200s", "update": "7200s"}
    # A first cold start reads 8 x 67 GiB from one share (about 90 min at 100 MiB/s): the
    # wait is the workers' startup-probe bound, past which they restart anyway.
    assert graph.timeouts == {"create": "7200s", "update": "7200s"}
    assert manifests.STARTUP_PROBE_PERIOD_SECS * manifests.STARTUP_PROBE_FAILURES == 7200
    assert graph.inputs["metadata"]["annotations"]["pulumi.com/waitFor"] == "condition=Ready"


@pytest.mark.parametrize("stack", STACKS)
def test_cache_survives_destroy_by_default(runs: dict[str, ProgramRun], stack: str) -> None:
    run = runs[stack]
    assert run.one(PVC).retain_on_delete
    # Deleting the namespace would delete the claim in it.
    assert run.one(NS).retain_on_delete
    assert not any(r.retain_on_delete for r in run.resources if r.type in (SECRET, JOB, GRAPH))
    assert not any(r.protect for r in run.resources), "protect would block `pulumi destroy`"


@pytest.mark.parametrize("stack", STACKS)
def test_only_what_is_meant_to_outlive_a_run_is_adopted(runs: dict[str, ProgramRun],
                                                        stack: str) -> None:
    """Since pulumi-kubernetes 4.29 a create fails with AlreadyExists where an object of
    that name exists, unless the provider upserts. Upsert also turns a URN change into
    "adopt, then delete": so only what `destroy` keeps (namespace, claim) and the Jobs an
    interrupted `up` leaves running (download, smoke test, sweep: the next `up` awaits them
    again instead of failing) are adopted, by the provider `cluster` they always had (its
    URN and config unchanged); every other object is created by `cluster-create`."""
    run = runs[stack]
    providers = {r.name: r for r in run.resources if r.is_provider}
    assert set(providers) == {"cluster", "cluster-create"}
    assert providers["cluster"].inputs["upsertExistingObjects"] == "true"
    assert providers["cluster-create"].inputs.get("upsertExistingObjects") == "false"
    adopting = {r.type for r in run.objects()
                if r.provider.startswith(providers["cluster"].urn + "::")}
    assert adopting == {NS, PVC, JOB}
    assert sorted(r.name for r in run.of_type(JOB)
                  if r.provider.startswith(providers["cluster"].urn + "::")) == sorted(
        r.name for r in run.of_type(JOB))
    assert "download" in [r.name for r in run.of_type(JOB)]
    kept = [r for r in run.objects() if r.retain_on_delete]
    assert sorted(r.type for r in kept) == sorted([NS, PVC])
    # What existing stacks hold keeps its URN (a changed one would need an alias).
    prefix = f"urn:pulumi:{stack}::cosmos3-routing::cosmos3-routing:infra:"
    assert {r.name: r.urn for r in run.objects() if r.type in (NS, PVC, GRAPH)} == {
        "namespace": f"{prefix}RecipeNamespace${NS}::namespace",
        "claim": f"{prefix}ModelCache${PVC}::claim",
        "graph": f"{prefix}ReasonerGraph${GRAPH}::graph",
    }
    assert _download(run).urn == f"{prefix}ModelCache${JOB}::download"
    assert providers["cluster"].urn == f"urn:pulumi:{stack}::cosmos3-routing::" \
        "pulumi:pulumi:Stack$pulumi:providers:kubernetes::cluster"


@pytest.mark.parametrize("keep", [True, False])
def test_a_cache_setting_change_never_replaces_the_claim(keep: bool) -> None:
    """The provider replaces a claim on any spec change, emptying the cache: the spec is
    ignored after creation, also when the cache is not kept on destroy."""
    run = run_program("round-robin", stack_config("round-robin", {
        **RECIPE_ONLY, "cacheKeepOnDestroy": keep}))
    assert run.one(PVC).ignore_changes == ["spec"]
    assert run.logs and not [line for line in run.logs if "model cache claim" in line]


def _claim(storage_class: str, size: str, labels: dict[str, str] | None = None
           ) -> LiveObjects:
    """A claim as the API returns it, under the stack's claim name."""
    return replace(healthy(), claim=client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=names.MODEL_CACHE_PVC_NAME,
                                     labels=labels if labels is not None else common_labels()),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteMany"], storage_class_name=storage_class,
            volume_name="pv-1", resources=client.V1VolumeResourceRequirements(
                requests={"storage": size})),
        status=client.V1PersistentVolumeClaimStatus(phase="Bound"),
    ))


def test_a_claim_that_differs_from_the_settings_gets_the_steps_to_fix_it() -> None:
    run = run_program("round-robin", stack_config("round-robin", {
        **RECIPE_ONLY, "cacheSize": "500Gi"}, storage_class="new-rwx"),
        cluster_objects=_claim("old-rwx", "300Gi"))
    assert run.error is None, run.error
    (warning,) = [line for line in run.logs if "model cache claim" in line]
    assert "cacheStorageClass is 'new-rwx' but the claim uses 'old-rwx'" in warning
    assert "cacheSize is 500Gi but the claim requests 300Gi" in warning
    assert ("kubectl -n cosmos3-reasoner patch pvc shared-model-cache -p "
            '\'{"spec": {"resources": {"requests": {"storage": "500Gi"}}}}\'') in warning
    assert "then `pulumi refresh`" in warning and "cacheExistingClaim" in warning
    # The same size written another way is no change.
    same = run_program("round-robin", stack_config("round-robin", {
        **RECIPE_ONLY, "cacheSize": "0.5Ti"}, storage_class="old-rwx"),
        cluster_objects=_claim("old-rwx", "512Gi"))
    assert same.error is None
    assert not [line for line in same.logs if "model cache claim" in line]


def test_an_existing_claim_is_adopted_without_a_wait_or_a_rewrite() -> None:
    """The provider would apply our whole spec to an adopted claim under its own field
    manager: a value another manager set differently is a conflict. So a claim of this
    project (the other stack's, one `destroy` kept) is declared with its live spec, and
    no claim is awaited (a WaitForFirstConsumer claim binds only with the Job's pod)."""
    run = run_program("round-robin", stack_config("round-robin", {
        **RECIPE_ONLY, "cacheSize": "500Gi"}), cluster_objects=_claim("other-rwx", "200Gi"))
    assert run.error is None, run.error
    claim = run.one(PVC).inputs
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "storageClassName": "other-rwx",
                             "resources": {"requests": {"storage": "200Gi"}}}
    assert claim["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    fresh = run_program("round-robin", stack_config("round-robin", RECIPE_ONLY))
    assert fresh.one(PVC).inputs["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


def test_a_claim_made_outside_the_project_is_used_as_it_is() -> None:
    """The recipe's kubectl steps make `shared-model-cache` too: used by name, never
    declared, so neither rewritten nor deleted by this stack's destroy."""
    run = run_program("round-robin", stack_config("round-robin", {
        **RECIPE_ONLY, "cacheKeepOnDestroy": False}),
        cluster_objects=_claim("rwx-test", "100Gi", labels={}))
    assert run.error is None, run.error
    assert not run.of_type(PVC)
    assert run.outputs["modelCacheClaim"] == names.MODEL_CACHE_PVC_NAME
    volumes = run.one(GRAPH).inputs["spec"]["components"][1]["podTemplate"]["spec"]["volumes"]
    assert volumes[0]["persistentVolumeClaim"]["claimName"] == names.MODEL_CACHE_PVC_NAME
    assert [line for line in run.logs if "not made by this project" in line]


def test_cache_can_be_dropped_on_destroy_or_adopted() -> None:
    dropped = run_program("round-robin", stack_config("round-robin", {
        **RECIPE_ONLY, "cacheKeepOnDestroy": False}))
    assert not dropped.one(PVC).retain_on_delete and not dropped.one(NS).retain_on_delete
    adopted = run_program("round-robin", stack_config("round-robin", {
        **RECIPE_ONLY, "cacheExistingClaim": "team-cache", "createNamespace": False,
        "namespace": "ml"},
        storage_class=None))
    assert adopted.error is None, adopted.error
    assert not adopted.of_type(PVC) and not adopted.of_type(NS)
    volumes = adopted.one(GRAPH).inputs["spec"]["components"][1]["podTemplate"]["spec"]["volumes"]
    assert volumes[0]["persistentVolumeClaim"]["claimName"] == "team-cache"
    assert adopted.outputs["modelCacheClaim"] == "team-cache"
    assert adopted.outputs["namespace"] == "ml"
    assert adopted.one(JOB).inputs["metadata"]["namespace"] == "ml"


def _sorted(run: ProgramRun) -> list[Registration]:
    """Registration order is concurrent; compare by (type, name)."""
    return sorted(run.resources, key=lambda r: (r.type, r.name))


def _keys(run: ProgramRun) -> list[tuple[str, str]]:
    return [(r.type, r.name) for r in _sorted(run)]


def _routing_parts(graph: dict[str, Any], stack: str) -> tuple[dict[str, Any], list[str]]:
    """Split a declared graph into (everything else, frontend args), checking that the
    profile appears exactly where routing requires it: name, profile labels, args."""
    graph = copy.deepcopy(graph)
    assert graph["metadata"].pop("name") == names.graph_name(stack)
    labelled = [graph["metadata"]] + [
        c["podTemplate"]["metadata"] for c in graph["spec"]["components"]
    ]
    for meta in labelled:
        assert meta["labels"].pop(PROFILE_LABEL) == stack
    container = graph["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]
    return graph, container.pop("args")


def test_stacks_differ_only_in_routing(runs: dict[str, ProgramRun]) -> None:
    rr, sa = runs["round-robin"], runs["session-affinity"]
    assert _keys(rr) == _keys(sa)
    rr_graph, sa_graph = (names.graph_name(s) for s in ("round-robin", "session-affinity"))
    for a, b in zip(_sorted(rr), _sorted(sa), strict=True):
        if a.type != GRAPH:  # the stack's own secret and Job differ in their names only
            renamed = json.dumps(a.inputs).replace(rr_graph, sa_graph)
            if a.type == POLICY:  # and its policies in their profile labels too
                renamed = renamed.replace('"round-robin"', '"session-affinity"')
            assert json.loads(renamed) == b.inputs, f"{a.type} differs between stacks"
    rest_a, args_a = _routing_parts(rr.one(GRAPH).inputs, "round-robin")
    rest_b, args_b = _routing_parts(sa.one(GRAPH).inputs, "session-affinity")
    assert args_a == frontend_args(PROFILES["round-robin"], port=names.FRONTEND_PORT)
    assert args_b == frontend_args(PROFILES["session-affinity"], port=names.FRONTEND_PORT)
    assert args_a != args_b
    rest_a = json.loads(json.dumps(rest_a).replace(rr_graph, sa_graph))  # its secret's name
    assert rest_a == rest_b, "beyond names, profile labels and frontend args the graphs match"
    diff = {k for k in rr.outputs if rr.outputs[k] != sa.outputs[k]}
    assert diff == {"graphName", "frontendService", "frontends", "profile",
                    "sessionAffinityTtlSecs", "portForwardCommand"}


@pytest.mark.parametrize("stack", STACKS)
def test_stack_outputs_tell_how_to_verify(runs: dict[str, ProgramRun], stack: str) -> None:
    out = runs[stack].outputs
    graph = names.graph_name(stack)
    assert out["namespace"] == "cosmos3-reasoner"
    assert out["graphName"] == graph
    assert out["frontendService"] == f"{graph}-frontend"
    assert out["frontends"] == {stack: f"{graph}-frontend"}
    assert out["frontendPort"] == 8000
    assert out["servedModel"] == "nvidia/cosmos3-super-reasoner"
    assert out["profile"] == stack
    assert out["sessionAffinityTtlSecs"] == (PROFILES[stack].affinity_ttl_secs or 0)
    assert out["portForwardCommand"] == (
        f"kubectl -n cosmos3-reasoner port-forward service/{graph}-frontend 8000:8000"
    )
    assert out["listModelsCommand"] == "curl -fsS http://localhost:8000/v1/models"


@pytest.mark.parametrize("stack", STACKS)
def test_ngc_key_never_appears_in_plain_form(
    runs: dict[str, ProgramRun], stack: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = runs[stack]
    secret = run.one(SECRET)
    # The one place the key lives: the Secret's data, as a Pulumi secret.
    assert _unwrap(secret.inputs)["stringData"] == {"NGC_API_KEY": TEST_NGC_KEY}
    assert secret.inputs["stringData"][SECRET_SIG]
    for res in run.resources:
        assert _plain_occurrences(res.inputs, TEST_NGC_KEY) == [], res.type
    assert TEST_NGC_KEY not in json.dumps(run.outputs)
    assert run.logs, "the logger captured nothing: the check below would be vacuous"
    assert not [line for line in run.logs if TEST_NGC_KEY in line]
    captured = capsys.readouterr()
    assert TEST_NGC_KEY not in captured.out + captured.err


def test_bad_settings_declare_nothing_and_say_why(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_program("session-affinity", stack_config(
        "session-affinity", {"routerMode": "fastest", "workerReplicas": 0}, storage_class=None))
    assert run.resources == []
    message = str(run.error)
    for key in ("routerMode", "workerReplicas", "cacheStorageClass"):
        assert f"cosmos3-routing:{key}" in message
    assert "nothing was created" in message
    assert TEST_NGC_KEY not in message + " ".join(run.logs) + capsys.readouterr().err


def test_plaintext_ngc_key_is_refused() -> None:
    run = run_program("round-robin", stack_config("round-robin"), secret_keys=[])
    assert run.resources == []
    assert "pulumi config set --secret ngcApiKey" in str(run.error)
    assert TEST_NGC_KEY not in str(run.error)


def test_update_declares_what_preview_declares() -> None:
    preview = run_program("round-robin", stack_config("round-robin"), preview=True)
    update = run_program("round-robin", stack_config("round-robin"), preview=False)
    assert _keys(preview) == _keys(update)
    assert [r.inputs for r in _sorted(preview)] == [r.inputs for r in _sorted(update)]


def test_printed_kubectl_commands_use_the_stacks_kube_context() -> None:
    config = stack_config("session-affinity")
    config["kubernetes:context"] = "h200-cluster"
    run = run_program("session-affinity", config)
    assert run.error is None, run.error
    prefix = "kubectl --context h200-cluster -n cosmos3-reasoner "
    assert run.outputs["portForwardCommand"].startswith(prefix + "port-forward service/")
    assert run.outputs["benchmark"]["followCommand"].startswith(prefix + "logs -f job/")
    providers = [r for r in run.resources if r.is_provider]
    assert len(providers) == 2
    assert all(p.inputs["context"] == "h200-cluster" for p in providers)


# Settings that steer only Pulumi (how long it waits, whether it benchmarks afterwards).
PULUMI_ONLY = {
    "graphTimeoutSecs": {"graphTimeoutSecs": 10800},
    "downloadTimeoutSecs": {"downloadTimeoutSecs": 14400},
    "benchmark off": {"benchmarkSmoke": False, "benchmarkSweep": False},
    "no sweep wait": {"benchmarkWaitForSweep": False},
}


@pytest.mark.parametrize("change", sorted(PULUMI_ONLY))
def test_a_setting_that_only_steers_pulumi_never_changes_the_graph(change: str) -> None:
    """The operator rolls every worker when the hash of the workers' pod templates and
    `spec.env` changes (ai-dynamo/dynamo deploy/operator/api/v1beta1/worker_hash.go at
    955e7fef, ComputeDGDWorkersSpecHash): eight cold model loads for a wait setting."""
    stack = "session-affinity"
    before = run_program(stack, stack_config(stack))
    after = run_program(stack, stack_config(stack, PULUMI_ONLY[change]))
    assert before.error is None and after.error is None, (before.error, after.error)
    assert after.one(GRAPH).inputs["spec"] == before.one(GRAPH).inputs["spec"]
    assert after.one(GRAPH).inputs["metadata"] == before.one(GRAPH).inputs["metadata"]


def _download(run: ProgramRun) -> Registration:
    return next(r for r in run.of_type(JOB) if r.name == "download")


def _job_in_cluster(job: Registration, condition: str | None) -> client.V1Job:
    body = {**copy.deepcopy(job.inputs), "apiVersion": "batch/v1", "kind": "Job"}
    if condition:
        body["status"] = {"conditions": [{"type": condition, "status": "True"}]}
    return as_api_returns(body, "V1Job")


def _older_code(job: Registration) -> Registration:
    """The download Job as an older version of this project declared it (before the
    security contexts and the component labels): the state a `git pull` meets."""
    inputs = copy.deepcopy(job.inputs)
    template = inputs["spec"]["template"]
    template["metadata"]["labels"] = common_labels()
    del template["spec"]["securityContext"]
    for container in template["spec"]["containers"]:
        del container["securityContext"]
    return replace(job, inputs=inputs)


RERUNS = {
    # Ctrl-C during the graph's wait: the download finished, the graph is not Ready yet.
    "interrupted up": ({}, "Complete", False),
    # A `git pull` of this project changed the download Job's template since it completed.
    "git pull": ({}, "Complete", True),
    # After a timed-out `up`, only the waits are raised.
    "wait settings": ({"graphTimeoutSecs": 10800, "downloadTimeoutSecs": 14400}, "Complete",
                      False),
    # Interrupted while the download still ran: the same template, nothing to replace.
    "interrupted download": ({}, None, False),
}


@pytest.mark.parametrize("case", sorted(RERUNS))
def test_a_rerun_replaces_no_download_and_leaves_the_graph_alone(case: str) -> None:
    stack = "session-affinity"
    change, condition, older = RERUNS[case]
    first = run_program(stack, stack_config(stack), preview=False)
    before = _older_code(_download(first)) if older else _download(first)
    live = replace(healthy(), download_job=_job_in_cluster(before, condition),
                   graph={"metadata": {"name": names.graph_name(stack)}})
    again = run_program(stack, stack_config(stack, change), preview=False,
                        cluster_objects=live)
    assert again.error is None, again.error
    assert replaced_for(before, _download(again)) == []
    assert again.one(GRAPH).inputs["spec"] == first.one(GRAPH).inputs["spec"]


def test_the_replace_model_sees_what_the_provider_replaces_for() -> None:
    """The model itself: without the completed Job's protection, the older template or a
    new image would replace it."""
    stack = "session-affinity"
    first = _download(run_program(stack, stack_config(stack)))
    assert replaced_for(_older_code(first), first) == ["spec.template"]
    image = _download(run_program(stack, stack_config(stack, {
        "nimImage": "nvcr.io/nim/nvidia/cosmos3:9.9.9"})))
    assert replaced_for(first, image) == ["spec.template"]
    assert replaced_for(first, first) == []


def test_a_download_job_gone_after_a_refresh_is_not_created_again_while_the_graph_runs() -> None:
    """A TTL, `kubectl delete job` or the docs' own step (delete it, `pulumi up --refresh`):
    the refresh drops the Job from the state, so a declared download would be created again
    and, on a GPU, wait for the GPUs the graph holds. It is not declared; the graph keeps its
    filled cache, and the log says how to download again."""
    stack = "session-affinity"
    first = run_program(stack, stack_config(stack, RECIPE_ONLY), preview=False)
    state = refreshed(first.resources, lambda r: r.type != JOB)  # the Job is gone
    live = replace(healthy(), graph=first.one(GRAPH).inputs)
    again = run_program(stack, stack_config(stack, RECIPE_ONLY), preview=False,
                        cluster_objects=live)
    assert again.error is None, again.error
    assert [step for step in engine_steps(state, again) if step[0] != "update"] == []
    assert not again.of_type(JOB) and again.one(GRAPH).dependencies == []
    [note] = [line for line in again.logs if "is gone while graph" in line]
    assert "pin nimModelProfile" in note and "`kubectl -n cosmos3-reasoner delete " \
        "dynamographdeployment cosmos3-session-affinity`" in note
    # A pinned profile downloads without a GPU: declared, and created again.
    pinned = run_program(stack, stack_config(stack, {**RECIPE_ONLY, "nimModelProfile": "p1"}),
                         preview=False, cluster_objects=live)
    assert ("create", _download(pinned).urn) in engine_steps(state, pinned)
    assert "nvidia.com/gpu" not in json.dumps(_download(pinned).inputs)


def jobs_named(run: ProgramRun) -> dict[str, Registration]:
    return {r.name: r for r in run.of_type(JOB)}


def test_a_new_run_id_while_the_last_sweep_runs_is_refused_on_up_and_warned_on_preview(
) -> None:
    """The engine deletes the old sweep Job only after the program has registered everything
    (`engine_steps`): the new sweep would run beside it for hours, against one frontend."""
    stack, ns = "session-affinity", "cosmos3-reasoner"
    first = run_program(stack, stack_config(stack), preview=False)
    config = stack_config(stack, {"benchmarkRunId": "run-2"})
    second = run_program(stack, config, preview=False)
    steps, old = engine_steps(first.resources, second), jobs_named(first)["sweep"]
    assert steps.index(("delete", old.urn)) > max(
        i for i, (op, _) in enumerate(steps) if op != "delete")
    # The cluster still runs run-1's sweep, read as the preflight reads it.
    job = {**old.inputs, "status": {"active": 1}}
    with api_server({**healthy_routes(), f"/apis/batch/v1/namespaces/{ns}/jobs": {
            "items": [job]}}) as (kubeconfig, _):
        live = cluster.observe(parse_settings(config, stack), kubeconfig, dry_run=False,
                               say=pytest.fail)
    name = old.inputs["metadata"]["name"]
    up = run_program(stack, config, preview=False, cluster_objects=live)
    assert up.resources == [] and f"sweep Job {name} of run run-1 still runs" in str(up.error)
    assert f"logs -f job/{name}" in str(up.error) and f"delete job {name}" in str(up.error)
    preview = run_program(stack, config, cluster_objects=live)
    assert preview.error is None, preview.error
    assert [w for w in preview.warnings if f"sweep Job {name} of run run-1" in w]


def test_a_preview_warns_of_the_moments_gpus_and_an_up_refuses() -> None:
    """A preview answers what the change would do: the GPUs another stack holds now are a
    warning there (and in the pull request's comment); an `up` still refuses."""
    stack = "round-robin"
    other = gpu_pod("gpu-1", 8, "cosmos3-reasoner", {GRAPH_LABEL: "cosmos3-session-affinity"})
    live = replace(healthy(), pods=(other,))
    preview = run_program(stack, stack_config(stack), cluster_objects=live)
    assert preview.error is None, preview.error
    [warning] = [w for w in preview.warnings if "free GPUs for 0 of 8 workers" in w]
    assert "`pulumi destroy -s session-affinity`" in warning
    up = run_program(stack, stack_config(stack), preview=False, cluster_objects=live)
    assert up.resources == [] and warning in str(up.error)


def test_a_change_of_the_workers_pods_is_said_to_restart_them() -> None:
    """The operator rolls every worker when their pod template or spec.env changes: eight
    cold starts, said before they happen; the replicas and the frontend roll no worker."""
    stack = "session-affinity"
    live = replace(healthy(), graph=run_program(stack, stack_config(stack, RECIPE_ONLY)).one(
        GRAPH).inputs)

    def restarts(**change: Any) -> list[str]:
        run = run_program(stack, stack_config(stack, {**RECIPE_ONLY, **change}),
                          cluster_objects=live)
        assert run.error is None, run.error
        return [w for w in run.warnings if "this update restarts" in w]

    assert restarts() == restarts(frontendImage="nvcr.io/nvidia/ai-dynamo/dynamo-frontend:9.9.9"
                                  ) == restarts(graphTimeoutSecs=10800) == []
    assert restarts(nimImage="nvcr.io/nim/nvidia/cosmos3:2.0.0") == [
        "graph cosmos3-session-affinity: this update restarts 8 workers, each reloading the "
        "model (changed: spec.components[1].podTemplate.spec.containers[0].image; "
        "docs/deploy-reference.md, 'Re-runs and upgrades')"]


@pytest.mark.parametrize("condition", [None, "Complete", "Failed"])
def test_a_running_sweep_keeps_its_video_server(condition: str | None) -> None:
    """A code change rolls the video server (its pod template carries the code's hash);
    while the sweep runs, it fetches its videos there: the server's spec is kept."""
    stack = "session-affinity"
    sweep = client.V1Job(metadata=client.V1ObjectMeta(
        name=names.benchmark_name("sweep", stack, "run-1")), status=client.V1JobStatus(
        conditions=[client.V1JobCondition(type=condition, status="True")] if condition else []))
    run = run_program(stack, stack_config(stack), cluster_objects=replace(healthy(),
                                                                          sweep_job=sweep))
    server = run.one("kubernetes:apps/v1:Deployment")
    assert server.ignore_changes == (["spec"] if condition is None else [])
