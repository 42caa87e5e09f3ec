"""Manifests of the post-deploy benchmark: code ConfigMap, video server, smoke and sweep Jobs.

Pure: settings in, plain Kubernetes objects out, so the Pulumi program, the tests and the
`collect` command build exactly the same things. Why this shape:

- The project's own `benchmarks` code (and the pure `infra` modules it imports) ships in a
  ConfigMap; every pod runs it in a stock, pinned Python image through
  `infra/job_runner.py`, which installs the pinned client first. No image to build.
- Videos are made inside the cluster by `python -m benchmarks videos` and served over
  HTTP by a Service, so traffic and media never leave the cluster.
- The smoke Job and the sweep Job are awaited by the Kubernetes provider (to completion,
  with `pulumi.com/timeoutSeconds`); a failed Job fails `pulumi up` with the command's last
  log line, which the runner writes to the termination log that the provider reports, and
  is run again by the next `up` (`pulumi.com/replaceUnready`).
- The sweep writes to the model-cache claim under `benchmarks/<stack>/<run-id>/`, which
  outlives the Job (and `pulumi destroy`, by default) until the hook or `collect` fetches it.
- The run id is part of both Job names: a new run id replaces both Jobs (the smoke test
  and the sweep run again) and leaves the graph alone.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.videos import video_name
from infra import recipe
from infra.benchmark_names import (
    code_config_map_name,
    results_subpath,
    smoke_job_name,
    sweep_job_name,
    video_server_name,
)
from infra.benchmark_settings import BenchmarkSettings
from infra.job_runner import config_map_key
from infra.manifests import PROFILE_LABEL, REPLACE_UNREADY, TIMEOUT_SECONDS, common_labels

VIDEO_SERVER_PORT = 8080
VIDEO_SERVICE_PORT = 80

CODE_DIR = "/opt/benchmark/code"
WORK_DIR = "/work"
SRC_DIR = f"{WORK_DIR}/src"
VIDEOS_DIR = "/videos"
CACHE_DIR = "/cache"
RUNNER_KEY = config_map_key("infra/job_runner.py")

# Pulumi Kubernetes provider annotation: create without awaiting (a sweep left running).
SKIP_AWAIT = "pulumi.com/skipAwait"
# Margin so a Job's own deadline (with its reason) fires before the provider gives up.
AWAIT_MARGIN_SECS = 120

# Source the Jobs need: the toolkit, the pure infra modules and the pins.
SHIPPED_PACKAGES = ("benchmarks", "infra")
SHIPPED_FILES = ("constraints.txt",)
# Modules importing these are the Pulumi program itself, never run in a Job.
PULUMI_MODULES = ("pulumi", "pulumi_kubernetes")
# A ConfigMap holds at most 1 MiB.
CONFIG_MAP_LIMIT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class BenchmarkTarget:
    """Where the benchmark runs and what it measures, from the stack's settings."""

    profile: str
    namespace: str
    frontend_service: str
    cache_claim: str
    session_affinity: bool
    image_pull_secrets: tuple[str, ...] = ()
    model: str = recipe.SERVED_MODEL_NAME
    # What produced the run (images, topology), recorded with its results.
    notes: tuple[str, ...] = ()

    @property
    def frontend_url(self) -> str:
        return f"http://{self.frontend_service}.{self.namespace}.svc:{recipe.FRONTEND_PORT}"

    @property
    def video_base_url(self) -> str:
        # `<service>.<namespace>.svc` resolves in any cluster domain through the pod's
        # DNS search path; the port is the Service's.
        service = video_server_name(self.profile)
        return f"http://{service}.{self.namespace}.svc:{VIDEO_SERVICE_PORT}/"


# ---------------------------------------------------------------------------------------
# Names and paths


RUN_ID_LABEL = "cosmos3-routing/run-id"


def labels(component: str, profile: str, run_id: str | None = None) -> dict[str, str]:
    """The profile label keeps two stacks' objects (and selectors) apart in one namespace."""
    out = {
        **common_labels(),
        PROFILE_LABEL: profile,
        "app.kubernetes.io/component": component,
    }
    if run_id is not None:
        out[RUN_ID_LABEL] = run_id
    return out


# ---------------------------------------------------------------------------------------
# Source shipped in the ConfigMap


def _imports_pulumi(source: str) -> bool:
    for node in ast.parse(source).body:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        if any(name.split(".")[0] in PULUMI_MODULES for name in names):
            return True
    return False


def shipped_sources(repo_root: Path) -> dict[str, str]:
    """Relative path -> text of every file the Jobs run: packages minus the Pulumi layer."""
    files: dict[str, str] = {}
    for package in SHIPPED_PACKAGES:
        for path in sorted((repo_root / package).glob("*.py")):
            text = path.read_text()
            if path.name == "__main__.py" and package == "infra" or _imports_pulumi(text):
                continue
            files[f"{package}/{path.name}"] = text
    for name in SHIPPED_FILES:
        files[name] = (repo_root / name).read_text()
    return files


def code_config_map(
    namespace: str, profile: str, sources: Mapping[str, str]
) -> dict[str, Any]:
    """One ConfigMap with every shipped file under a flat key (see job_runner)."""
    data = {config_map_key(path): text for path, text in sorted(sources.items())}
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIG_MAP_LIMIT_BYTES:
        raise ValueError(
            f"the benchmark code is {size} bytes, over a ConfigMap's 1 MiB; keep generated "
            "or large files out of benchmarks/ and infra/"
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": code_config_map_name(profile), "namespace": namespace,
                     "labels": labels("benchmark-code", profile)},
        "data": data,
    }


# ---------------------------------------------------------------------------------------
# Commands


def runner_command(benchmark_args: list[str]) -> list[str]:
    """Run `python -m benchmarks ARGS` through the runner, straight from the ConfigMap."""
    return [
        "python", f"{CODE_DIR}/{RUNNER_KEY}", "--code", CODE_DIR, "--src", SRC_DIR,
        "--venv", f"{WORK_DIR}/venv", "--", *benchmark_args,
    ]


def videos_args(settings: BenchmarkSettings) -> list[str]:
    return ["videos", "--out", VIDEOS_DIR, "--count", str(settings.videos)]


def smoke_args(target: BenchmarkTarget, settings: BenchmarkSettings) -> list[str]:
    return [
        "smoke", "--url", target.frontend_url, "--model", target.model,
        "--video-url", target.video_base_url + video_name(0),
    ]


def sweep_args(target: BenchmarkTarget, settings: BenchmarkSettings) -> list[str]:
    return [
        "sweep", "--url", target.frontend_url, "--model", target.model,
        "--profile", target.profile,
        "--video-base-url", target.video_base_url,
        "--video-count", str(settings.videos),
        "--questions-per-video", str(settings.questions_per_video),
        "--concurrency", *(str(c) for c in settings.concurrencies),
        "--run-id", settings.run_id,
        "--out", f"{CACHE_DIR}/{results_subpath(target.profile, settings.run_id)}",
        # Explicit either way: the header follows the stack's routing, not its name.
        "--session-affinity" if target.session_affinity else "--no-session-affinity",
        *(arg for note in target.notes for arg in ("--note", note)),
    ]


# ---------------------------------------------------------------------------------------
# Pod pieces


def _env() -> list[dict[str, str]]:
    """A writable home and caches on the work volume (the root filesystem is read-only)."""
    return [
        {"name": "HOME", "value": WORK_DIR},
        {"name": "TMPDIR", "value": WORK_DIR},
        {"name": "XDG_CACHE_HOME", "value": f"{WORK_DIR}/.cache"},
        {"name": "MPLCONFIGDIR", "value": f"{WORK_DIR}/.matplotlib"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]


def _container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _pod_security() -> dict[str, Any]:
    # The NIM's user: the results folder on the cache claim is written as that user.
    return {
        "runAsNonRoot": True,
        "runAsUser": recipe.NIM_UID,
        "runAsGroup": recipe.NIM_GID,
        "fsGroup": recipe.NIM_GID,
        # Never chown the whole model cache on mount, only when its root differs.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _code_volume(profile: str) -> dict[str, Any]:
    return {"name": "code", "configMap": {"name": code_config_map_name(profile)}}


def _work_volume() -> dict[str, Any]:
    # The installed client (a venv) and caches: a few GiB at most.
    return {"name": "work", "emptyDir": {"sizeLimit": "8Gi"}}


def _runner_container(
    name: str, args: list[str], image: str, resources: dict[str, Any],
    extra_mounts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": runner_command(args),
        "workingDir": WORK_DIR,
        "env": _env(),
        "resources": resources,
        "securityContext": _container_security(),
        # The runner writes the command's last line here; failing that, the log's tail.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "code", "mountPath": CODE_DIR, "readOnly": True},
            {"name": "work", "mountPath": WORK_DIR},
            *(extra_mounts or []),
        ],
    }


def _pod_spec(
    target: BenchmarkTarget, containers: list[dict[str, Any]], volumes: list[dict[str, Any]],
    restart_policy: str, init_containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "securityContext": _pod_security(),
        "automountServiceAccountToken": False,
        "containers": containers,
        "volumes": [_code_volume(target.profile), _work_volume(), *volumes],
    }
    if init_containers:
        spec["initContainers"] = init_containers
    if target.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in target.image_pull_secrets]
    return spec


def _resources(cpu: str, memory: str, memory_limit: str) -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory_limit}}


# ---------------------------------------------------------------------------------------
# Video server


def video_server_deployment(
    target: BenchmarkTarget, settings: BenchmarkSettings
) -> dict[str, Any]:
    """Makes the videos (init container), then serves them read-only over HTTP."""
    selector = labels("benchmark-videos", target.profile)
    server = {
        "name": "main",
        "image": settings.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "http.server", str(VIDEO_SERVER_PORT),
                    "--directory", VIDEOS_DIR, "--bind", "0.0.0.0"],
        "ports": [{"name": "http", "containerPort": VIDEO_SERVER_PORT}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"},
                           "periodSeconds": 10, "timeoutSeconds": 5},
        "resources": _resources("250m", "256Mi", "512Mi"),
        "securityContext": _container_security(),
        "volumeMounts": [{"name": "videos", "mountPath": VIDEOS_DIR, "readOnly": True}],
    }
    maker = _runner_container(
        "videos", videos_args(settings), settings.image, _resources("2", "2Gi", "4Gi"),
        [{"name": "videos", "mountPath": VIDEOS_DIR}],
    )
    pod = _pod_spec(target, [server], [{"name": "videos", "emptyDir": {"sizeLimit": "20Gi"}}],
                    "Always", [maker])
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": video_server_name(target.profile), "namespace": target.namespace,
            "labels": selector,
            "annotations": {TIMEOUT_SECONDS: str(settings.video_server_timeout_secs)},
        },
        "spec": {
            "replicas": 1,
            # Making the videos takes minutes: don't call the rollout stuck before the
            # timeout the user chose.
            "progressDeadlineSeconds": settings.video_server_timeout_secs,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": selector}, "spec": pod},
        },
    }


def video_service(target: BenchmarkTarget) -> dict[str, Any]:
    selector = labels("benchmark-videos", target.profile)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": video_server_name(target.profile), "namespace": target.namespace,
                     "labels": selector},
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": VIDEO_SERVICE_PORT, "targetPort": "http"}],
        },
    }


# ---------------------------------------------------------------------------------------
# Jobs


def _job(
    name: str, component: str, target: BenchmarkTarget, run_id: str, pod: dict[str, Any],
    deadline_secs: int, backoff_limit: int, annotations: dict[str, str],
    pod_failure_policy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    job_labels = labels(component, target.profile, run_id)
    spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "activeDeadlineSeconds": deadline_secs,
        "template": {"metadata": {"labels": job_labels}, "spec": pod},
    }
    if pod_failure_policy:
        spec["podFailurePolicy"] = pod_failure_policy
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": target.namespace, "labels": job_labels,
                     "annotations": annotations},
        "spec": spec,
    }


def smoke_job(target: BenchmarkTarget, settings: BenchmarkSettings) -> dict[str, Any]:
    """One video, one question; passes only on a non-empty answer. No retries: a failure
    is a finding, and its reason is what `pulumi up` shows."""
    container = _runner_container(
        "main", smoke_args(target, settings), settings.image, _resources("500m", "1Gi", "2Gi"),
    )
    return _job(
        smoke_job_name(target.profile, settings.run_id), "benchmark-smoke", target, settings.run_id,
        _pod_spec(target, [container], [], "Never"),
        deadline_secs=settings.smoke_timeout_secs, backoff_limit=0,
        annotations={TIMEOUT_SECONDS: str(settings.smoke_timeout_secs + AWAIT_MARGIN_SECS),
                     # After a failed smoke test, the next `up` runs it again.
                     REPLACE_UNREADY: "true"},
    )


def sweep_job(target: BenchmarkTarget, settings: BenchmarkSettings) -> dict[str, Any]:
    """The AIPerf sweep. A pod lost to the cluster (eviction, node drain) is retried and
    resumes the same run; a failing sweep fails the Job at once with its reason."""
    cache_mount = {"name": "cache", "mountPath": CACHE_DIR}
    container = _runner_container(
        "main", sweep_args(target, settings), settings.image, _resources("2", "4Gi", "8Gi"),
        [cache_mount],
    )
    pod = _pod_spec(
        target, [container],
        [{"name": "cache", "persistentVolumeClaim": {"claimName": target.cache_claim}}],
        "Never",
    )
    # Awaited: after a failed sweep, the next `up` runs it again (the same run id resumes
    # it). Not awaited: a running sweep is "unready" too, and must survive the next `up`.
    annotations = {TIMEOUT_SECONDS: str(settings.sweep_timeout_secs + AWAIT_MARGIN_SECS)}
    annotations.update({REPLACE_UNREADY: "true"} if settings.wait_for_sweep
                       else {SKIP_AWAIT: "true"})
    policy = {
        "rules": [
            {"action": "Ignore",
             "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob",
             "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [0]}},
        ]
    }
    return _job(
        sweep_job_name(target.profile, settings.run_id), "benchmark-sweep", target,
        settings.run_id, pod,
        deadline_secs=settings.sweep_timeout_secs, backoff_limit=3, annotations=annotations,
        pod_failure_policy=policy,
    )


def benchmark_manifests(
    target: BenchmarkTarget, settings: BenchmarkSettings, sources: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Every object the enabled parts need, by role, in the order they must come up."""
    if not settings.any_enabled:
        return {}
    out = {
        "code": code_config_map(target.namespace, target.profile, sources),
        "video-server": video_server_deployment(target, settings),
        "video-service": video_service(target),
    }
    if settings.smoke:
        out["smoke"] = smoke_job(target, settings)
    if settings.sweep:
        out["sweep"] = sweep_job(target, settings)
    return out


# ---------------------------------------------------------------------------------------
# Results reader (made and removed by the hook or `collect`, never by the stack)


def results_reader_pod(
    namespace: str, profile: str, claim: str, image: str, name: str,
    image_pull_secrets: tuple[str, ...] = (), owner_job: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A short-lived pod that mounts the cache claim read-only so results can be copied out.

    Same image, user and pull secrets as the Jobs; it only sleeps (bounded) until the copy
    is done and it is deleted. `owner_job` (name, uid) makes the sweep Job its owner, so
    a reader left by a killed hook goes when `pulumi destroy` deletes that Job.
    """
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": _pod_security(),
        "automountServiceAccountToken": False,
        "activeDeadlineSeconds": 3600,
        "containers": [{
            "name": "main",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["python", "-c", "import time; time.sleep(3600)"],
            "resources": _resources("100m", "256Mi", "1Gi"),
            "securityContext": _container_security(),
            "volumeMounts": [{"name": "cache", "mountPath": CACHE_DIR, "readOnly": True}],
        }],
        "volumes": [{"name": "cache",
                     "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
    }
    if image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in image_pull_secrets]
    metadata: dict[str, Any] = {"name": name, "namespace": namespace,
                                "labels": labels("benchmark-results-reader", profile)}
    if owner_job is not None:
        metadata["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                        "name": owner_job[0], "uid": owner_job[1]}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod}


# ---------------------------------------------------------------------------------------
# What the graph needs for in-cluster media

# Dynamo refuses `http://` and private-address media unless this is set where the fetch
# happens; `spec.env` reaches every component (frontend and workers alike).
ALLOW_INTERNAL_MEDIA = {"name": "DYN_MM_ALLOW_INTERNAL", "value": "1"}


def with_internal_media(graph: dict[str, Any]) -> dict[str, Any]:
    """The graph manifest, allowed to fetch the videos from the in-cluster Service."""
    spec = dict(graph["spec"])
    env = [e for e in spec.get("env", []) if e.get("name") != ALLOW_INTERNAL_MEDIA["name"]]
    spec["env"] = [*env, dict(ALLOW_INTERNAL_MEDIA)]
    return {**graph, "spec": spec}
