"""The recipe's manifests and NetworkPolicies as plain dicts, pure so the tests validate exactly
what the program declares (docs/deploy-reference.md, 'Manifests')."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from infra import names
from infra import serving as sv
from infra.routing import FRONTEND_COMMAND, frontend_args
from infra.settings import HF_TOKEN, NGC_API_KEY, Settings

GRAPH_API_VERSION = "nvidia.com/v1beta1"

# pulumi-kubernetes await annotations (v4.18+): wait for a condition, bounded in seconds.
WAIT_FOR = "pulumi.com/waitFor"
TIMEOUT_SECONDS = "pulumi.com/timeoutSeconds"
# Replaces a not-ready object on `up`. Never on the download Job: a Job still running
# after an interrupted `up` would restart hours of download (cluster.problems reports a
# failed one instead, with the step to rerun it).
REPLACE_UNREADY = "pulumi.com/replaceUnready"

PROFILE_LABEL = "cosmos3-routing/profile"
RUN_ID_LABEL = "cosmos3-routing/run-id"
# What a pod of ours is (download, videos, smoke, sweep...): NetworkPolicies select on it.
COMPONENT_LABEL = "app.kubernetes.io/component"
CACHE_VOLUME = "model-cache"
GPU_RESOURCE = "nvidia.com/gpu"
# Where a pod runs and pulls from: never what it computes (the stack ignores them on Jobs).
PLACEMENT_KEYS = ("imagePullSecrets", "nodeSelector", "tolerations")
# A cold start (cache check, weight load, warm-up) may take 2 hours, the Dynamo operator's
# own worker default (720 x 10 s). Fixed, not derived from graphTimeoutSecs: the operator
# rolls every worker when their pod template changes, so a wait setting must not touch it.
STARTUP_PROBE_PERIOD_SECS = 30
STARTUP_PROBE_FAILURES = 240
# Dynamo refuses `http://` and private-address media unless this is set where the fetch
# happens; `spec.env` reaches every component. Always set (docs/security.md says why).
ALLOW_INTERNAL_MEDIA = {"name": "DYN_MM_ALLOW_INTERNAL", "value": "1"}
# The Cosmos3 NIM documentation's Dynamo settings ("Dynamo discovery and routing"): one
# request transport on frontend and workers; workers serve their discovery metadata and
# look media up early by UUID, derived from the URL (a video's questions share one).
REQUEST_PLANE_ENV = {"name": "DYN_REQUEST_PLANE", "value": "tcp"}
NIM_DYNAMO_ENV = {
    "DYN_SELF_HOST_METADATA": "true",
    "NIM_INFERENCE_PROTOCOL": "http",
    "VLLM_EARLY_UUID_LOOKUPS": "1",
    "VLLM_UUID_AUTO_DERIVE": "1",
}
# The frontend routes and tokenizes, it runs no model: a few cores, bounded.
FRONTEND_RESOURCES = ("2", "4Gi", "8", "16Gi")
# The benchmark's video server (its NetworkPolicy is here, its manifests in benchmark_manifests).
VIDEO_SERVER_PORT = 8080


def common_labels() -> dict[str, str]:
    """Labels of everything the stack makes; no profile, so shared objects stay equal."""
    return {
        "app.kubernetes.io/name": names.RECIPE,
        "app.kubernetes.io/part-of": "cosmos3-routing",
        "app.kubernetes.io/managed-by": "pulumi",
    }


def labels(profile: str, component: str | None = None, run_id: str | None = None
           ) -> dict[str, str]:
    """The profile label keeps two stacks' objects (and selectors) apart in one namespace."""
    extra = {PROFILE_LABEL: profile, COMPONENT_LABEL: component, RUN_ID_LABEL: run_id}
    return {**common_labels(), **{k: v for k, v in extra.items() if v is not None}}


def metadata(namespace: str, name: str, object_labels: Mapping[str, str] | None = None,
             **more: Any) -> dict[str, Any]:
    """An object's metadata; the common labels unless told."""
    return {"name": name, "namespace": namespace,
            "labels": dict(object_labels or common_labels()), **more}


def env(values: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> dict[str, Any]:
    """Requests and limits both, so a namespace quota that requires limits admits the pod."""
    return {"requests": {"cpu": cpu, "memory": memory},
            "limits": {"cpu": cpu_limit, "memory": memory_limit}}


def namespace(settings: Settings) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": settings.namespace, "labels": common_labels()}}


def token_secret(settings: Settings, config_key: str, value: Any) -> dict[str, Any]:
    """The Secret of a token the runtime needs (`ngcApiKey`, `hfToken`); `value` passes
    through untouched (a Pulumi secret Output)."""
    name, key = settings.secret_refs[config_key]
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": metadata(settings.namespace, name),
            "type": "Opaque", "stringData": {key: value}}


def model_cache_claim(settings: Settings) -> dict[str, Any]:
    """Not awaited: its binding waits for the download Job's pod anyway (a WaitForFirstConsumer
    class binds only then), and an adopted claim is long Bound."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": metadata(settings.namespace, settings.cache_claim_name,
                                 annotations={"pulumi.com/skipAwait": "true"}),
            "spec": {"accessModes": ["ReadWriteMany"],
                     "storageClassName": settings.cache_storage_class,
                     "resources": {"requests": {"storage": settings.cache_size}}}}


class Served(NamedTuple):
    """What serving, routing and names say about a stack, asked once before any object is
    built: the objects are then assembled here alone."""

    vllm: bool  # runtime vllm (else the NIM)
    model_env: list[dict[str, Any]]  # the runtime's model and token, for download and workers
    download_command: list[str]
    worker_args: list[str]
    frontend_args: list[list[str]]  # each frontend's
    policy_names: dict[str, str]
    source_cidrs: list[str | None]
    cache_volume: dict[str, Any]  # the claim, and where download and workers mount it
    cache_mount: dict[str, Any]


def served(settings: Settings) -> Served:
    serving, profile = settings.serving, settings.nim_model_profile
    vllm, weights = serving.runtime == "vllm", sv.model_dir(serving)
    nim_model = sv.served_by_nim_environment(serving, settings.nim_tags_selector)
    # The token as its Secret's data key names it, read from that Secret.
    name, key = settings.secret_refs[HF_TOKEN if vllm else NGC_API_KEY]
    token = {"name": key, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}
    return Served(
        vllm=vllm,
        model_env=[token, *env({"HF_HOME": sv.HF_HOME})] if vllm else
        [*env({**nim_model, "NIM_CACHE_PATH": names.NIM_CACHE_PATH}), token],
        download_command=sv.hf_download_command(serving, weights) if vllm else
        ["download-to-cache", *(["--profiles", profile] if profile else [])],
        worker_args=sv.vllm_worker_args(serving, weights, settings.served_model) if vllm else [],
        frontend_args=[frontend_args(f.routing) for f in settings.frontends],
        policy_names={p: names.stack_object_name(settings.graph_name, p) for p in POLICIES},
        source_cidrs=[names.cidr(source) for source in settings.network_policy_sources],
        cache_volume={"name": CACHE_VOLUME,
                      "persistentVolumeClaim": {"claimName": settings.cache_claim_name}},
        cache_mount={"name": CACHE_VOLUME,
                     "mountPath": sv.VLLM_CACHE_PATH if vllm else names.NIM_CACHE_PATH})


def container_security() -> dict[str, Any]:
    """No privilege escalation, no capabilities; the root stays writable, as the model servers
    write caches and kernels under their home (the benchmark pods make it read-only)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def pod_spec(containers: list[dict[str, Any]], pull_secrets: Sequence[str],
             nim_user: bool = True, **more: Any) -> dict[str, Any]:
    """Every pod's spec: never root, the pull secrets (where there are any), `more`.
    The NIM's UID/GID own the shared cache (docs/deploy-reference.md, 'Manifests')."""
    # The frontend's image user (`nim_user` False) gets the UID alone: no group, no fsGroup.
    user = {"runAsNonRoot": True, "runAsUser": names.NIM_UID,
            "seccompProfile": {"type": "RuntimeDefault"}}
    group = {"runAsGroup": names.NIM_GID, "fsGroup": names.NIM_GID,
             "fsGroupChangePolicy": "OnRootMismatch"} if nim_user else {}
    secrets = {"imagePullSecrets": [{"name": n} for n in pull_secrets]} if pull_secrets else {}
    return {"securityContext": {**user, **group}, **more, **secrets, "containers": containers}


def download_pod_labels(settings: Settings) -> dict[str, str]:
    """The download pod's labels: this stack's Job by name (its NetworkPolicy selects it)."""
    return {**common_labels(), COMPONENT_LABEL: "model-download",
            "app.kubernetes.io/instance": settings.download_job_name}


def model_download_job(settings: Settings, parts: Served | None = None) -> dict[str, Any]:
    """The Job that fills the cache; without a pinned NIM profile it gets one replica's GPUs, on
    the workers' nodes, so the NIM picks the profile the workers will (docs/serving-paths.md)."""
    parts = parts or served(settings)
    on_gpu = not parts.vllm and settings.nim_model_profile is None
    container: dict[str, Any] = {
        "name": "download", "image": settings.worker_image,
        "command": parts.download_command, "env": parts.model_env,
        "volumeMounts": [parts.cache_mount],
        "securityContext": container_security(),
        # It only fetches files (NIM: plus a GPU where the profile is chosen on one).
        "resources": resources("1", "4Gi", "4", "16Gi"),
    }
    if on_gpu:
        container["resources"]["limits"][GPU_RESOURCE] = settings.serving.gpus_per_replica
    # It never calls the Kubernetes API.
    spec = pod_spec([container], settings.image_pull_secrets, restartPolicy="Never",
                    automountServiceAccountToken=False, volumes=[parts.cache_volume],
                    **(settings.placement if on_gpu else {}))
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": metadata(settings.namespace, settings.download_job_name,
                             annotations={TIMEOUT_SECONDS: str(settings.download_timeout_secs)}),
        "spec": {
            "backoffLimit": settings.download_retries,
            "activeDeadlineSeconds": settings.download_timeout_secs,
            "template": {"metadata": {"labels": download_pod_labels(settings)}, "spec": spec},
        },
    }


def _probe(path: str, port: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": STARTUP_PROBE_PERIOD_SECS,
            "timeoutSeconds": 5, "failureThreshold": failures}


def _worker_container(settings: Settings, parts: Served) -> dict[str, Any]:
    """The NIM's own server, or (runtime vllm) `python3 -m dynamo.vllm` on the cached
    weights, its probes on Dynamo's system port."""
    serving, port = settings.serving, names.WORKER_SYSTEM_PORT
    dynamo_env = [{"name": "DYN_SYSTEM_PORT", "value": str(port)}, REQUEST_PLANE_ENV]
    system = {"name": "system", "containerPort": port}
    if parts.vllm:
        container: dict[str, Any] = {
            "command": list(sv.VLLM_WORKER_COMMAND), "args": parts.worker_args,
            "env": [*parts.model_env, *dynamo_env], "ports": [system]}
        ready, live = sv.VLLM_READY_PATH, sv.VLLM_LIVE_PATH
    else:
        nim = env({"NIM_DYNAMO_WORKER": "true", "NIM_DISCOVERY_BACKEND": "kubernetes"})
        # As NVIDIA's Cosmos3 NIM Dynamo manifest starts the worker: a login shell sets up the
        # image's environment, then exec hands PID 1 to the server so it receives SIGTERM.
        container = {
            "command": ["bash", "-lc", "exec /opt/nim/start_server.sh"], "workingDir": "/opt/nim",
            "env": [*parts.model_env, *nim, *dynamo_env, *env(NIM_DYNAMO_ENV)],
            "ports": [{"name": "http", "containerPort": names.FRONTEND_PORT}, system]}
        ready = live = "/v1/health/live"
        port = names.FRONTEND_PORT
    resources = {"cpu": settings.worker_cpu, "memory": settings.worker_memory,
                 GPU_RESOURCE: serving.gpus_per_replica}
    return {"name": "main", "image": settings.worker_image, **container,
            "startupProbe": _probe(ready, port, STARTUP_PROBE_FAILURES),
            "livenessProbe": _probe(live, port, 5),
            "resources": {"requests": resources, "limits": resources},
            "volumeMounts": [parts.cache_mount], "securityContext": container_security()}


def graph(settings: Settings, parts: Served | None = None) -> dict[str, Any]:
    """The DynamoGraphDeployment; its pods keep their service-account token, which the operator
    binds to the graph's discovery Role (EndpointSlices, DynamoWorkerMetadata)."""
    # The wait's bound is the resource's customTimeouts (they take precedence over
    # `pulumi.com/timeoutSeconds`: pulumi-kubernetes provider/pkg/metadata/overrides.go at
    # 00658428), so graphTimeoutSecs changes nothing declared here.
    parts, pull = parts or served(settings), settings.image_pull_secrets
    worker = pod_spec([_worker_container(settings, parts)], pull, **settings.placement,
                      volumes=[parts.cache_volume])
    pod = {"metadata": {"labels": labels(settings.profile)}}  # each component's pod template
    # One frontend per profile: each reaches every worker of the graph (Dynamo discovers them
    # by the graph's namespace), each with its own Deployment and Service.
    frontends = [{"name": f.component, "type": "frontend", "replicas": 1, "podTemplate": {
        **pod, "spec": pod_spec([{
            "name": "main", "image": settings.frontend_image, "command": [*FRONTEND_COMMAND],
            "args": args, "env": [REQUEST_PLANE_ENV], "resources": resources(*FRONTEND_RESOURCES),
            "securityContext": container_security()}], pull, nim_user=False)}}
        for f, args in zip(settings.frontends, parts.frontend_args, strict=True)]
    return {
        "apiVersion": GRAPH_API_VERSION, "kind": "DynamoGraphDeployment",
        "metadata": metadata(settings.namespace, settings.graph_name,
                             labels(settings.profile), annotations={WAIT_FOR: "condition=Ready"}),
        "spec": {
            "backendFramework": "vllm",
            "env": [ALLOW_INTERNAL_MEDIA],
            "components": [
                *frontends,
                {"name": names.WORKER_COMPONENT, "type": "worker",
                 "replicas": settings.serving.replicas,
                 "sharedMemorySize": settings.worker_shared_memory,
                 "runtimeVersionOverride": settings.worker_runtime_version,
                 "podTemplate": {**pod, "spec": worker}}],
        },
    }


def recipe(settings: Settings, tokens: Mapping[str, Any]
           ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The recipe's objects by resource name, in the order they come up, and the policies by
    theirs; `tokens` pass through untouched (Pulumi secrets)."""
    parts = served(settings)
    # Each token's Secret resource by its config key (the names pin their URNs).
    secrets = {NGC_API_KEY: "ngc-secret", HF_TOKEN: "hf-token-secret"}
    objects = {**({"namespace": namespace(settings)} if settings.create_namespace else {}),
               **{secrets[key]: token_secret(settings, key, tokens[key])
                  for key in settings.required_secrets},
               "claim": model_cache_claim(settings),
               "download": model_download_job(settings, parts), "graph": graph(settings, parts)}
    return objects, network_policies(settings, parts)


# --- NetworkPolicies: every pod the stack makes accepts only the traffic it needs ---------
# Who may reach what: docs/security.md. Frontend and workers take anything from the graph's
# pods: Dynamo's TCP request plane streams responses back on the workers' own connections;
# workers are "the graph's pods but the frontend", whatever type label the operator gives
# them. The video server takes the graph's pods: the media fetch happens where the request
# is processed. Egress stays open: the cluster's addresses, not ours to list. The operator's
# labels: ai-dynamo/dynamo deploy/operator/internal/consts/consts.go at 0367e404.
GRAPH_LABEL = "nvidia.com/dynamo-graph-deployment-name"
COMPONENT_TYPE_LABEL = "nvidia.com/dynamo-component-type"
# Our pods that take no inbound traffic, and the two that call the frontend.
CLOSED_COMPONENTS = ("benchmark-smoke", "benchmark-sweep", "benchmark-results-reader")
CLIENT_COMPONENTS = ("benchmark-smoke", "benchmark-sweep")
POLICIES = ("frontend", "workers", "videos", "no-ingress", "download")


def graph_pods(settings: Settings, frontend: bool | None = None) -> dict[str, Any]:
    """The graph's pods: all, its frontend, or all but its frontend (the workers)."""
    selector: dict[str, Any] = {"matchLabels": {GRAPH_LABEL: settings.graph_name}}
    if frontend is not None:
        selector["matchExpressions"] = [{"key": COMPONENT_TYPE_LABEL,
                                         "operator": "In" if frontend else "NotIn",
                                         "values": ["frontend"]}]
    return selector


def network_policies(settings: Settings, parts: Served | None = None
                     ) -> dict[str, dict[str, Any]]:
    """Every policy of the stack by its short name (none when `networkPolicies` is off)."""
    if not settings.network_policies:
        return {}
    parts = parts or served(settings)
    # A CIDR becomes an ipBlock, anything else a namespace by name.
    sources = [{"ipBlock": {"cidr": block}} if block is not None else
               {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": source}}}
               for source, block in zip(settings.network_policy_sources, parts.source_cidrs,
                                        strict=True)]
    graph = {"podSelector": graph_pods(settings)}

    def tcp(port: int, peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"from": peers, "ports": [{"protocol": "TCP", "port": port}]}] if peers else []

    def ours(components: tuple[str, ...]) -> dict[str, Any]:
        return {"matchLabels": {PROFILE_LABEL: settings.profile},
                "matchExpressions": [{"key": COMPONENT_LABEL, "operator": "In",
                                      "values": list(components)}]}

    ingress = {
        "frontend": (graph_pods(settings, frontend=True), [
            *tcp(names.FRONTEND_PORT, [{"podSelector": ours(CLIENT_COMPONENTS)}]),
            {"from": [graph]}, *tcp(names.FRONTEND_PORT, sources)]),
        "workers": (graph_pods(settings, frontend=False), [
            {"from": [graph]}, *tcp(names.WORKER_SYSTEM_PORT, sources)]),
        "videos": ({"matchLabels": labels(settings.profile, "benchmark-videos")},
                   tcp(VIDEO_SERVER_PORT, [graph])),
        "no-ingress": (ours(CLOSED_COMPONENTS), []),
        "download": ({"matchLabels": download_pod_labels(settings)}, []),
    }
    return {name: {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": metadata(settings.namespace, parts.policy_names[name],
                             labels(settings.profile)),
        "spec": {"podSelector": selector, "policyTypes": ["Ingress"], "ingress": rules},
    } for name, (selector, rules) in ingress.items()}
