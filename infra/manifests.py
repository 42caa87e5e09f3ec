"""Kubernetes manifests of the recipe, built as plain dicts from `Settings`.

Pure so that tests validate exactly what the program declares against the Kubernetes and
DynamoGraphDeployment schemas, without Pulumi. `infra/components.py` wraps each in a
resource; nothing here talks to a cluster.

Resources shared by both stacks (namespace, NGC secret, cache claim, download Job) carry no
profile label, so switching stacks adopts them unchanged; the graph carries its profile.
"""

from __future__ import annotations

import math
from typing import Any

from infra import recipe
from infra.routing import frontend_args, frontend_command
from infra.settings import Settings

GRAPH_API_VERSION = "nvidia.com/v1beta1"
GRAPH_KIND = "DynamoGraphDeployment"
BACKEND_FRAMEWORK = "vllm"

# pulumi-kubernetes await annotations (v4.18+): wait for a condition, bounded in seconds.
WAIT_FOR = "pulumi.com/waitFor"
TIMEOUT_SECONDS = "pulumi.com/timeoutSeconds"
# A Job that failed in an earlier `up` is replaced (rerun) instead of awaited forever.
REPLACE_UNREADY = "pulumi.com/replaceUnready"

PROFILE_LABEL = "cosmos3-routing/profile"
CACHE_VOLUME = "model-cache"
NIM_ENTRYPOINT = "/opt/nim/start_server.sh"
NIM_WORKDIR = "/opt/nim"
NIM_HEALTH_PATH = "/v1/health/live"
NIM_DISCOVERY_BACKEND = "kubernetes"
DOWNLOAD_COMMAND = "download-to-cache"
GPU_RESOURCE = "nvidia.com/gpu"
STARTUP_PROBE_PERIOD_SECS = 30


def common_labels() -> dict[str, str]:
    """Labels of everything the stack makes; no profile, so shared objects stay equal."""
    return {
        "app.kubernetes.io/name": recipe.RECIPE,
        "app.kubernetes.io/part-of": "cosmos3-routing",
        "app.kubernetes.io/managed-by": "pulumi",
    }


def profile_labels(settings: Settings) -> dict[str, str]:
    return {**common_labels(), PROFILE_LABEL: settings.profile}


def _metadata(settings: Settings, name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": settings.namespace.name, "labels": common_labels(), **extra}


def namespace(settings: Settings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": settings.namespace.name, "labels": common_labels()},
    }


def ngc_secret(settings: Settings, api_key: Any) -> dict[str, Any]:
    """The NGC secret; `api_key` is passed through untouched (a Pulumi secret Output)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(settings, settings.secrets.ngc_secret_name),
        "type": "Opaque",
        "stringData": {settings.secrets.ngc_secret_key: api_key},
    }


def model_cache_claim(settings: Settings) -> dict[str, Any]:
    cache = settings.cache
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(settings, cache.claim_name),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": cache.storage_class,
            "resources": {"requests": {"storage": cache.size}},
        },
    }


def _ngc_env(settings: Settings) -> dict[str, Any]:
    return {
        "name": recipe.NGC_SECRET_KEY,
        "valueFrom": {
            "secretKeyRef": {
                "name": settings.secrets.ngc_secret_name,
                "key": settings.secrets.ngc_secret_key,
            }
        },
    }


def _nim_model_env(settings: Settings) -> list[dict[str, Any]]:
    """What the NIM reads to pick the model profile (shared by download Job and workers)."""
    workers = settings.workers
    return [
        {"name": "NIM_MODEL_TYPE", "value": "reasoner"},
        {"name": "NIM_MODEL_VARIANT", "value": workers.model_variant},
        {"name": "NIM_PRECISION", "value": workers.precision},
        {"name": "NIM_TAGS_SELECTOR", "value": workers.nim_tags_selector},
        {"name": "NIM_CACHE_PATH", "value": recipe.NIM_CACHE_PATH},
        _ngc_env(settings),
    ]


def _cache_volume(settings: Settings) -> dict[str, Any]:
    return {
        "name": CACHE_VOLUME,
        "persistentVolumeClaim": {"claimName": settings.cache.claim_name},
    }


def _cache_mount() -> dict[str, Any]:
    return {"name": CACHE_VOLUME, "mountPath": recipe.NIM_CACHE_PATH}


def _nim_security_context() -> dict[str, Any]:
    """The NIM runs as UID/GID 1000; fsGroup makes the cache writable where supported."""
    return {
        "runAsUser": recipe.NIM_UID,
        "runAsGroup": recipe.NIM_GID,
        "fsGroup": recipe.NIM_GID,
        "fsGroupChangePolicy": "OnRootMismatch",
    }


def _pull_secrets(settings: Settings) -> dict[str, Any]:
    names = settings.secrets.image_pull_secrets
    return {"imagePullSecrets": [{"name": n} for n in names]} if names else {}


def _gpu_placement(settings: Settings) -> dict[str, Any]:
    placement = settings.placement
    out: dict[str, Any] = {}
    if placement.node_selector:
        out["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:
        out["tolerations"] = [t.manifest() for t in placement.tolerations]
    return out


def model_download_job(settings: Settings) -> dict[str, Any]:
    """The NIM's own download-to-cache, same image and claim as the workers.

    Without a pinned NIM profile the Job gets one GPU of the workers' class, so the NIM
    selects the profile those workers will also select.
    """
    profile = settings.workers.nim_model_profile
    command = [DOWNLOAD_COMMAND, *(["--profiles", profile] if profile else [])]
    container: dict[str, Any] = {
        "name": "download",
        "image": settings.images.nim,
        "command": command,
        "env": _nim_model_env(settings),
        "volumeMounts": [_cache_mount()],
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": _nim_security_context(),
        **_pull_secrets(settings),
        "containers": [container],
        "volumes": [_cache_volume(settings)],
    }
    if profile is None:
        container["resources"] = {"limits": {GPU_RESOURCE: 1}}
        pod_spec.update(_gpu_placement(settings))
    timeouts = settings.timeouts
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(
            settings,
            recipe.MODEL_DOWNLOAD_JOB_NAME,
            annotations={
                TIMEOUT_SECONDS: str(timeouts.download_secs),
                REPLACE_UNREADY: "true",
            },
        ),
        "spec": {
            "backoffLimit": timeouts.download_retries,
            "activeDeadlineSeconds": timeouts.download_secs,
            "template": {"metadata": {"labels": common_labels()}, "spec": pod_spec},
        },
    }


def frontend_component(settings: Settings) -> dict[str, Any]:
    """Routing lives here: the arguments come from `infra.routing.frontend_args`."""
    return {
        "name": recipe.FRONTEND_COMPONENT,
        "type": "frontend",
        "replicas": 1,
        "podTemplate": {
            "metadata": {"labels": profile_labels(settings)},
            "spec": {
                **_pull_secrets(settings),
                "containers": [
                    {
                        "name": "main",
                        "image": settings.images.frontend,
                        "command": frontend_command(),
                        "args": frontend_args(settings.routing, port=recipe.FRONTEND_PORT),
                    }
                ],
            },
        },
    }


def _health_probe(failure_threshold: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": NIM_HEALTH_PATH, "port": recipe.FRONTEND_PORT},
        "periodSeconds": STARTUP_PROBE_PERIOD_SECS,
        "timeoutSeconds": 5,
        "failureThreshold": failure_threshold,
    }


def worker_component(settings: Settings) -> dict[str, Any]:
    workers = settings.workers
    resources = {
        "cpu": workers.cpu,
        "memory": workers.memory,
        GPU_RESOURCE: workers.gpus_per_worker,
    }
    # A cold start (cache check, weight load, warm-up) may take as long as the graph wait.
    startup_failures = max(1, math.ceil(settings.timeouts.graph_secs / STARTUP_PROBE_PERIOD_SECS))
    return {
        "name": recipe.WORKER_COMPONENT,
        "type": "worker",
        "replicas": workers.replicas,
        "sharedMemorySize": workers.shared_memory,
        "runtimeVersionOverride": settings.images.worker_runtime_version,
        "podTemplate": {
            "metadata": {"labels": profile_labels(settings)},
            "spec": {
                "securityContext": _nim_security_context(),
                **_pull_secrets(settings),
                **_gpu_placement(settings),
                "containers": [
                    {
                        "name": "main",
                        "image": settings.images.nim,
                        "command": [NIM_ENTRYPOINT],
                        "workingDir": NIM_WORKDIR,
                        "env": [
                            *_nim_model_env(settings),
                            {"name": "NIM_DYNAMO_WORKER", "value": "true"},
                            {"name": "NIM_DISCOVERY_BACKEND", "value": NIM_DISCOVERY_BACKEND},
                            {"name": "DYN_SYSTEM_PORT", "value": str(recipe.WORKER_SYSTEM_PORT)},
                        ],
                        "ports": [
                            {"name": "http", "containerPort": recipe.FRONTEND_PORT},
                            {"name": "system", "containerPort": recipe.WORKER_SYSTEM_PORT},
                        ],
                        "startupProbe": _health_probe(startup_failures),
                        "livenessProbe": _health_probe(5),
                        "resources": {"requests": resources, "limits": resources},
                        "volumeMounts": [_cache_mount()],
                    }
                ],
                "volumes": [_cache_volume(settings)],
            },
        },
    }


def graph(settings: Settings) -> dict[str, Any]:
    """The DynamoGraphDeployment: Frontend at components[0], Worker at components[1]."""
    return {
        "apiVersion": GRAPH_API_VERSION,
        "kind": GRAPH_KIND,
        "metadata": {
            "name": settings.graph_name,
            "namespace": settings.namespace.name,
            "labels": profile_labels(settings),
            "annotations": {
                WAIT_FOR: "condition=Ready",
                TIMEOUT_SECONDS: str(settings.timeouts.graph_secs),
            },
        },
        "spec": {
            "backendFramework": BACKEND_FRAMEWORK,
            "components": [frontend_component(settings), worker_component(settings)],
        },
    }


def verify_commands(settings: Settings) -> dict[str, str]:
    """The two commands that show the deployment serves the model."""
    port = recipe.FRONTEND_PORT
    return {
        "portForward": (
            f"kubectl -n {settings.namespace.name} port-forward "
            f"service/{settings.frontend_service} {port}:{port}"
        ),
        "listModels": f"curl -fsS http://localhost:{port}/v1/models",
    }
