"""Manifests: valid against the Kubernetes and DynamoGraphDeployment schemas, and right."""

from __future__ import annotations

import copy
import json

import kubernetes_validate
import pytest

from infra import manifests, names
from infra.routing import FRONTEND_COMMAND, PROFILES, frontend_args
from infra.settings import Settings, parse_settings
from tests.support_pulumi import stack_config
from tests.support_schemas import graph_errors, validate_k8s, validate_pod_template

STACKS = sorted(PROFILES)


def settings_of(stack: str, **overrides: object) -> Settings:
    return parse_settings(stack_config(stack, overrides), stack)


VARIANTS = {
    "default": {},
    "cluster-specific": {
        "gpuNodeSelector": ["nvidia.com/gpu.product=NVIDIA-H200"],
        "gpuTolerations": ["nvidia.com/gpu:NoSchedule", "dedicated=gpu:NoExecute"],
        "imagePullSecrets": ["registry-pull-secret", "second-mirror"],
        "nimModelProfile": "abc123-h200-fp8-tp1",
    },
    "existing-claim": {"cacheExistingClaim": "team-cache", "createNamespace": False},
}


def all_manifests(settings: Settings) -> list[dict]:
    return [
        manifests.namespace(settings),
        manifests.token_secret(settings, "ngcApiKey", "placeholder-not-a-key"),
        manifests.model_cache_claim(settings),
        manifests.model_download_job(settings),
    ]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("stack", STACKS)
def test_every_manifest_is_a_valid_kubernetes_object(stack: str, variant: str) -> None:
    settings = settings_of(stack, **VARIANTS[variant])
    for manifest in all_manifests(settings):
        validate_k8s(manifest)
    for component in manifests.graph(settings)["spec"]["components"]:
        validate_pod_template(component["podTemplate"])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("stack", STACKS)
def test_graph_is_a_valid_v1beta1_dynamographdeployment(stack: str, variant: str) -> None:
    graph = manifests.graph(settings_of(stack, **VARIANTS[variant]))
    assert graph_errors(graph) == []


def test_validators_reject_what_the_api_server_rejects() -> None:
    """Guard the guards: unknown fields and wrong shapes fail both validators."""
    settings = settings_of("round-robin")
    job = manifests.model_download_job(settings)
    job["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(job)
    graph = manifests.graph(settings)
    bad = copy.deepcopy(graph)
    bad["spec"]["components"][1]["extraPodSpec"] = {}  # the deprecated v1alpha1 shape
    bad["spec"]["components"][0]["type"] = "router"
    bad["spec"]["backendFramework"] = "nim"
    errors = " ".join(graph_errors(bad))
    assert "extraPodSpec" in errors and "router" in errors and "nim" in errors


@pytest.mark.parametrize("stack", STACKS)
def test_graph_shape_frontend_then_worker(stack: str) -> None:
    settings = settings_of(stack)
    graph = manifests.graph(settings)
    assert (graph["apiVersion"], graph["kind"]) == ("nvidia.com/v1beta1", "DynamoGraphDeployment")
    assert graph["metadata"]["name"] == names.graph_name(stack)
    # The wait's bound is the resource's customTimeouts: graphTimeoutSecs leaves it alone.
    assert graph["metadata"]["annotations"] == {"pulumi.com/waitFor": "condition=Ready"}
    frontend, worker = graph["spec"]["components"]
    assert (frontend["name"], frontend["type"]) == (names.FRONTEND_COMPONENT, "frontend")
    assert (worker["name"], worker["type"]) == (names.WORKER_COMPONENT, "worker")
    main = frontend["podTemplate"]["spec"]["containers"][0]
    assert main["name"] == "main"
    assert main["command"] == list(FRONTEND_COMMAND)
    assert main["args"] == frontend_args(PROFILES[stack], port=names.FRONTEND_PORT)
    # Bounded, so a namespace quota that requires limits admits it; same transport as workers.
    assert set(main["resources"]) == {"requests", "limits"}
    assert main["env"] == [{"name": "DYN_REQUEST_PLANE", "value": "tcp"}]


def test_routing_flags_differ_exactly_as_the_profiles_do() -> None:
    args = {
        s: manifests.graph(settings_of(s))["spec"]["components"][0]["podTemplate"]["spec"][
            "containers"][0]["args"]
        for s in STACKS
    }
    assert "--router-session-affinity-ttl-secs" not in args["round-robin"]
    ttl = args["session-affinity"].index("--router-session-affinity-ttl-secs")
    assert args["session-affinity"][ttl + 1] == "300"
    assert args["round-robin"] == args["session-affinity"][:ttl]
    # KV routing predicts the caches itself: the NIM workers publish no KV events.
    mode = args["kv-routing"].index("--router-mode")
    assert args["kv-routing"][mode:] == ["--router-mode", "kv", "--no-router-kv-events"]


def test_worker_runs_the_nim_as_the_recipe_says() -> None:
    settings = settings_of("session-affinity", **VARIANTS["cluster-specific"])
    worker = manifests.graph(settings)["spec"]["components"][1]
    assert worker["replicas"] == 8
    assert worker["sharedMemorySize"] == "64Gi"
    assert worker["runtimeVersionOverride"] == settings.worker_runtime_version
    spec = worker["podTemplate"]["spec"]
    main = spec["containers"][0]
    assert main["image"] == settings.nim_image
    assert (main["command"], main["workingDir"]) == (
        ["bash", "-lc", "exec /opt/nim/start_server.sh"], "/opt/nim")
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in main["env"]}
    assert {k: env[k] for k in ("NIM_MODEL_TYPE", "NIM_MODEL_VARIANT", "NIM_PRECISION",
                                "NIM_DYNAMO_WORKER", "NIM_CACHE_PATH", "DYN_SYSTEM_PORT",
                                "NIM_DISCOVERY_BACKEND", "DYN_REQUEST_PLANE",
                                "DYN_SELF_HOST_METADATA", "VLLM_UUID_AUTO_DERIVE",
                                "VLLM_EARLY_UUID_LOOKUPS")} == {
        "NIM_MODEL_TYPE": "reasoner", "NIM_MODEL_VARIANT": "super", "NIM_PRECISION": "fp8",
        "NIM_DYNAMO_WORKER": "true", "NIM_CACHE_PATH": names.NIM_CACHE_PATH,
        "DYN_SYSTEM_PORT": "9090", "NIM_DISCOVERY_BACKEND": "kubernetes",
        "DYN_REQUEST_PLANE": "tcp", "DYN_SELF_HOST_METADATA": "true",
        "VLLM_UUID_AUTO_DERIVE": "1", "VLLM_EARLY_UUID_LOOKUPS": "1",
    }
    assert "NIM_TAGS_SELECTOR" not in env
    assert env["NGC_API_KEY"] == {"secretKeyRef": {
        "name": f"{names.graph_name('session-affinity')}-ngc-api-key", "key": "NGC_API_KEY"}}
    assert main["resources"]["limits"] == {"cpu": "16", "memory": "96Gi", "nvidia.com/gpu": 1}
    assert main["startupProbe"]["httpGet"] == {"path": "/v1/health/live", "port": 8000}
    # The startup probe allows a cold start as long as the graph wait.
    probe = main["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= settings.graph_timeout_secs
    assert main["volumeMounts"] == [{"name": "model-cache", "mountPath": "/opt/nim/.cache"}]
    assert spec["volumes"][0]["persistentVolumeClaim"] == {"claimName": "shared-model-cache"}
    assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["runAsGroup"] == 1000
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert spec["imagePullSecrets"] == [{"name": "registry-pull-secret"},
                                        {"name": "second-mirror"}]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"]


def test_pull_secrets_reach_every_pod_the_stack_makes() -> None:
    settings = settings_of("round-robin", imagePullSecrets=["mirror"])
    graph = manifests.graph(settings)
    pods = [c["podTemplate"]["spec"] for c in graph["spec"]["components"]]
    pods.append(manifests.model_download_job(settings)["spec"]["template"]["spec"])
    assert all(p["imagePullSecrets"] == [{"name": "mirror"}] for p in pods)


def test_download_job_matches_the_workers() -> None:
    settings = settings_of("round-robin", gpuNodeSelector=["nvidia.com/gpu.product=NVIDIA-H200"])
    job = manifests.model_download_job(settings)
    assert job["metadata"]["name"] == settings.download_job_name
    assert job["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == "7200"
    assert job["spec"]["backoffLimit"] == 2
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    worker = manifests.graph(settings)["spec"]["components"][1]["podTemplate"]["spec"]
    assert container["image"] == worker["containers"][0]["image"]
    assert pod["volumes"] == worker["volumes"]
    assert container["command"] == ["download-to-cache"]
    # No pinned profile: one GPU of the workers' class, so the NIM picks the same profile.
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in container["resources"]["requests"]
    assert pod["nodeSelector"] == worker["nodeSelector"]
    assert pod["securityContext"]["runAsUser"] == 1000
    assert pod["restartPolicy"] == "Never"

    pinned = manifests.model_download_job(settings_of("round-robin", nimModelProfile="p1"))
    container = pinned["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["download-to-cache", "--profiles", "p1"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]


def test_cache_claim_is_rwx_with_the_configured_class() -> None:
    claim = manifests.model_cache_claim(settings_of("round-robin", cacheSize="500Gi"))
    assert claim["metadata"]["name"] == names.MODEL_CACHE_PVC_NAME
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"], "storageClassName": "rwx-test",
        "resources": {"requests": {"storage": "500Gi"}},
    }


@pytest.mark.parametrize("other", STACKS[1:])
def test_only_namespace_and_claim_are_shared_across_profiles(other: str) -> None:
    """Namespace and claim are shared by every stack: no profile in them. The secret and
    the download Job are each stack's own (destroying one never deletes the other's), and
    differ only in their names."""
    a, b = settings_of(STACKS[0]), settings_of(other)
    shared_a, shared_b = ([m for m in all_manifests(x) if m["kind"] in ("Namespace",
                           "PersistentVolumeClaim")] for x in (a, b))
    assert shared_a == shared_b and len(shared_a) == 2
    own = [[m for m in all_manifests(x) if m not in shared] for x, shared in
           ((a, shared_a), (b, shared_b))]
    names = [{m["metadata"]["name"] for m in objects} for objects in own]
    assert not names[0] & names[1]
    renamed = json.dumps(own[0]).replace(a.graph_name, b.graph_name)
    assert json.loads(renamed) == own[1]


def test_the_recipe_is_each_builder_s_object_by_its_resource_name() -> None:
    """The names pin the resources' URNs: renaming one replaces the object (a new Secret, or
    worse, a new claim). Each token passes through untouched (a Pulumi secret)."""
    from infra.settings import HF_TOKEN, NGC_API_KEY

    vllm = settings_of("vllm-super-tp4-sa", hfToken="hf_not_real",
                       vllmImage="registry.example.com/team/vllm:1.6.1")
    objects, policies = manifests.recipe(vllm, {HF_TOKEN: "hf-not-real"})
    assert list(objects) == ["namespace", "hf-token-secret", "claim", "download", "graph"]
    assert objects["hf-token-secret"] == manifests.token_secret(vllm, HF_TOKEN, "hf-not-real")
    assert (objects["graph"], objects["download"], policies) == (
        manifests.graph(vllm), manifests.model_download_job(vllm), manifests.network_policies(vllm))
    kept = settings_of("session-affinity", createNamespace=False)
    objects, _ = manifests.recipe(kept, {NGC_API_KEY: "nvapi-not-real"})
    assert list(objects) == ["ngc-secret", "claim", "download", "graph"]
    assert objects["ngc-secret"] == manifests.token_secret(kept, NGC_API_KEY, "nvapi-not-real")


def test_a_set_nim_tags_selector_reaches_the_workers_and_the_download() -> None:
    settings = settings_of("session-affinity", nimTagsSelector="n_gpus=1,nim_tp=1")
    (worker,) = [c for c in manifests.graph(settings)["spec"]["components"]
                 if c["type"] != "frontend"]
    download = manifests.model_download_job(settings)["spec"]["template"]["spec"]
    for container in (worker["podTemplate"]["spec"]["containers"][0],
                      download["containers"][0]):
        assert {"name": "NIM_TAGS_SELECTOR", "value": "n_gpus=1,nim_tp=1"} in container["env"]


def test_each_policy_is_named_after_its_graph_and_a_nim_worker_takes_no_arguments() -> None:
    """One stack's `destroy` never deletes another's policies; the NIM reads its settings from
    the environment, the vLLM worker from its arguments and HF_HOME."""
    settings = settings_of("session-affinity")
    assert sorted(p["metadata"]["name"] for p in manifests.network_policies(settings).values()) \
        == [f"cosmos3-session-affinity-{p}" for p in
            ("download", "frontend", "no-ingress", "videos", "workers")]
    (worker,) = [c for c in manifests.graph(settings)["spec"]["components"]
                 if c["type"] != "frontend"]
    assert "args" not in worker["podTemplate"]["spec"]["containers"][0]
    vllm = settings_of("vllm-super-tp4-sa", hfToken="hf_not_real",
                       vllmImage="registry.example.com/team/vllm:1.6.1")
    (worker,) = [c for c in manifests.graph(vllm)["spec"]["components"]
                 if c["type"] != "frontend"]
    env = {e["name"]: e.get("value") for e in worker["podTemplate"]["spec"]["containers"][0]["env"]}
    assert env["HF_HOME"].endswith("/huggingface")
