"""The benchmark's manifests, pure so the program, the tests and `collect` build the same
things (docs/deploy-reference.md, 'The benchmark's objects')."""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from infra import manifests as mf
from infra import names
from infra.manifests import REPLACE_UNREADY, TIMEOUT_SECONDS, VIDEO_SERVER_PORT, WAIT_FOR
from infra.routing import routing_args
from infra.run import CACHE_DIR, Run
from infra.settings import BenchmarkSettings, Settings

CODE_DIR = "/opt/benchmark/code"
WORK_DIR = "/work"
VIDEOS_DIR = "/videos"
# A sweep not waited for is awaited until it started (a jsonpath without a value matches
# once the path exists: pulumi-kubernetes provider/pkg/jsonpath/jsonpath.go at 1e54e342).
# Not skipAwait: it skips the delete await too, so a replacement could meet a terminating Job.
STARTED = "jsonpath={.status.startTime}"
# What the cluster autoscaler and Karpenter read before evicting a pod to consolidate
# nodes: a sweep or video server evicted mid-level loses the level.
DO_NOT_DISRUPT = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                  "karpenter.sh/do-not-disrupt": "true"}
CODE_ANNOTATION = "cosmos3-routing/code"
READ_ONLY_ROOT = {**mf.container_security(), "readOnlyRootFilesystem": True}
# The installed client and caches: a few GiB at most.
WORK_VOLUME = {"name": "work", "emptyDir": {"sizeLimit": "8Gi"}}
# The pods prefer nodes without GPUs, so the client never competes with a worker for its
# node's CPUs (a preference: a cluster of GPU nodes only still runs it).
PREFER_NO_GPU = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 100, "preference": {"matchExpressions": [
        {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}]}}]}}

# Source the Jobs need: both packages and the pins (a pod imports only what it runs).
SHIPPED_PACKAGES = ("benchmarks", "infra")
SHIPPED_FILES = ("constraints.txt",)
# Third-party distributions each in-cluster command needs, pinned by constraints.txt
# (measured: AIPerf's tree is about 146 packages and 1.3 GB; the others a few MB).
COMMAND_PACKAGES = {
    "videos": ("imageio-ffmpeg",),
    "smoke": ("openai", "imageio-ffmpeg"),
    "sweep": ("aiperf", "imageio-ffmpeg"),
}
POD_ENTRY_MODULES = ("benchmarks.__main__", *(f"benchmarks.{c}" for c in COMMAND_PACKAGES))
# A ConfigMap holds at most 1 MiB.
CONFIG_MAP_LIMIT_BYTES = 1024 * 1024

# Every benchmark container's entry point (`sh -c RUNNER runner ARGS`): pip installs the
# command's $PACKAGES at the pins (a no-op where the image has them), then `python -m
# benchmarks ARGS`. A failed pod's log tail (its termination message) says why: the
# command's last line, pip's error and the fix, or what a SIGTERM means ($ON_STOP).
RUNNER = """\
python -m pip install --disable-pip-version-check --no-cache-dir \
-c "$PYTHONPATH/constraints.txt" $PACKAGES || { echo "runner: could not install $PACKAGES; \
check benchmarkPipIndexUrl (and that the pods reach it), or set benchmarkImage to an image \
that has the pinned client (docs/deploy-reference.md, 'Clusters without registry \
access')"; exit 1; }
start=$(date +%s)
trap 'kill -TERM $child; wait $child; echo "runner: stopped by SIGTERM after \
$((($(date +%s) - start) / 60)) min: $ON_STOP"; exit 143' TERM INT
python -m benchmarks "$@" &
child=$!
wait $child
"""
VIDEOS_ON_STOP = ("the video server was stopped while it made the videos (a rollout, a node "
                  "drain or `pulumi destroy`); its next pod makes them again")
# Each Job's limits, what to do after a stop, and its Job spec beside the template.
JOBS: dict[str, tuple[tuple[str, str, str, str], str, dict[str, Any]]] = {
    "smoke": (("500m", "1Gi", "2", "2Gi"),
              "if the deadline passed, raise it, then `pulumi up`", {"backoffLimit": 0}),
    "sweep": (("2", "4Gi", "8", "8Gi"),
              "finished levels stay on the claim; if the deadline passed, raise it, then "
              "`pulumi up` with the same benchmarkRunId resumes the run",
              {"backoffLimit": 3, "podFailurePolicy": {"rules": [
                  {"action": "Ignore",
                   "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                  {"action": "FailJob", "onExitCodes": {
                      "containerName": "main", "operator": "NotIn", "values": [0]}}]}}),
}


def run_of(settings: Settings, rendered_graph: Mapping[str, Any] | None = None) -> Run:
    """The stack's run, as the program deploys it and `collect` finds it; its facts hold the
    declared graph's hash, so no setting that changes the graph goes unrecorded."""
    b, serving = settings.benchmark, settings.serving
    facts = {
        "worker_image": settings.worker_image, "frontend_image": settings.frontend_image,
        "runtime": serving.runtime, "variant": serving.variant, "precision": serving.precision,
        "replicas": serving.replicas, "gpus_per_worker": serving.gpus_per_replica,
        "gpu": serving.gpu_product, "model": settings.served_model,
        "routing": "; ".join(f"{f.profile}: {' '.join(routing_args(f.routing))}"
                             for f in settings.frontends),
        "graph": graph_hash(rendered_graph or mf.graph(settings), settings.profile),
        "benchmark_image": b.image,
    }
    workers = ("{runtime} workers: {variant} {precision}, {replicas} x {gpus_per_worker} GPU "
               "({gpu}), image {worker_image}; frontend image {frontend_image}").format(**facts)
    return Run(stack=settings.profile, run_id=b.run_id, namespace=settings.namespace,
               cache_claim=settings.cache_claim_name, image=b.image, workload=b.workload,
               frontends=tuple((f.profile, f.service, f.routing.affinity)
                               for f in settings.frontends),
               model=settings.served_model,
               notes=(f"cluster run: stack {settings.stack}, run id {b.run_id}", workers),
               deployment=tuple((k, str(v)) for k, v in facts.items()),
               image_pull_secrets=tuple(settings.image_pull_secrets),
               kube_context=settings.kube_context or "", kubectl=settings.kubectl,
               pod_placement=dict(settings.benchmark_placement), smoke=b.smoke,
               sweep=b.sweep)


# --- Source shipped in the ConfigMap -------------------------------------------------------


def shipped_sources(repo_root: Path) -> dict[str, str]:
    """Relative path -> text of every file the pods may run: both packages and the pins."""
    files = {f"{package}/{path.name}": path.read_text()
             for package in SHIPPED_PACKAGES for path in sorted((repo_root / package).glob("*.py"))}
    return {**files, **{name: (repo_root / name).read_text() for name in SHIPPED_FILES}}


def pod_sources(sources: Mapping[str, str]) -> dict[str, str]:
    """The files the pods run (entry modules, their imports at any depth, lazy ones too, the
    `__init__`s, the pins): editing any other leaves `code_hash` as it is."""
    modules = {path[:-3].replace("/", "."): path for path in sources if path.endswith(".py")}
    seen: set[str] = set()
    todo = [*POD_ENTRY_MODULES, *(f"{p}.__init__" for p in SHIPPED_PACKAGES)]
    while todo:
        module = todo.pop()
        if module in seen or module not in modules:
            continue
        seen.add(module)
        for node in ast.walk(ast.parse(sources[modules[module]])):
            if isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    paths = [*sorted(modules[m] for m in seen), *SHIPPED_FILES]
    return {path: sources[path] for path in paths if path in sources}


def digest(value: Any) -> str:
    """A short, stable hash of plain data."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


def code_hash(sources: Mapping[str, str]) -> str:
    """What code the pods run (the Pulumi program's own modules are not part of it)."""
    return digest(sorted(pod_sources(sources).items()))


def graph_hash(rendered: Mapping[str, Any], profile: str) -> str:
    """What the graph is, routing aside (less the frontend's arguments and the profile's
    name): any change to it rolls the graph's pods, so a run never spans two."""
    spec = json.loads(json.dumps(rendered["spec"]).replace(profile, "<profile>"))
    for component in spec["components"]:
        if component["type"] == "frontend":
            for container in component["podTemplate"]["spec"]["containers"]:
                container.pop("args", None)
    return digest(spec)


def config_map_key(path: str) -> str:
    """ConfigMap keys cannot hold '/'; the volume's `items` put each file back at `path`."""
    return path.replace("/", ".")


def code_config_map(metadata: dict[str, Any], sources: Mapping[str, str]) -> dict[str, Any]:
    """One ConfigMap with every shipped file, keyed by `config_map_key`, its hash noted."""
    data = {config_map_key(path): text for path, text in sorted(sources.items())}
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIG_MAP_LIMIT_BYTES:
        raise ValueError(
            f"the benchmark code is {size} bytes, over a ConfigMap's 1 MiB; keep generated "
            "or large files out of benchmarks/ and infra/")
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {**metadata, "annotations": {CODE_ANNOTATION: code_hash(sources)}},
            "data": data}


# --- The commands: each pod runs `python -m benchmarks COMMAND --run RUN`, the one object ---


def command(role: str, run: Run) -> list[str]:
    """A pod's command: the run as the program declared it (the sweep's with the graph's uid):
    the pod's own checks judge the same object preview judged."""
    return [role, "--run", json.dumps(run.output(), sort_keys=True)]


# --- Pods ----------------------------------------------------------------------------------


def _container(name: str, image: str, command: list[str], limits: dict[str, Any],
               mounts: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    """Every benchmark container: the image if not present, a read-only root."""
    return {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
            "command": command, **more, "resources": limits,
            "securityContext": READ_ONLY_ROOT, "volumeMounts": mounts}


def runner_env(settings: BenchmarkSettings, command: str, on_stop: str) -> dict[str, str]:
    """Home, caches and pip's user site on the work volume, as the root is read-only; a
    plain-http package index is trusted, or pip would ignore it."""
    url = settings.pip_index_url
    return {"HOME": WORK_DIR, "TMPDIR": WORK_DIR, "XDG_CACHE_HOME": f"{WORK_DIR}/.cache",
            "MPLCONFIGDIR": f"{WORK_DIR}/.matplotlib", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1", "PYTHONPATH": CODE_DIR, "PIP_USER": "1",
            **({"PIP_INDEX_URL": url} if url else {}),
            **({"PIP_TRUSTED_HOST": url.split("/")[2]} if url.startswith("http://") else {}),
            "PACKAGES": " ".join(COMMAND_PACKAGES[command]), "ON_STOP": on_stop}


def _runner_container(name: str, settings: BenchmarkSettings, args: list[str], on_stop: str,
                      limits: dict[str, Any], *mounts: dict[str, Any]) -> dict[str, Any]:
    """`python -m benchmarks ARGS` through `RUNNER` (ARGS[0]'s packages) from the code ConfigMap."""
    return _container(name, settings.image, ["sh", "-c", RUNNER, "runner", *args], limits,
                      [{"name": "code", "mountPath": CODE_DIR, "readOnly": True},
                       {"name": "work", "mountPath": WORK_DIR}, *mounts],
                      workingDir=WORK_DIR, env=mf.env(runner_env(settings, args[0], on_stop)),
                      terminationMessagePolicy="FallbackToLogsOnError")


def _video_server(run: Run, settings: BenchmarkSettings, pod: dict[str, Any],
                  volume: dict[str, Any], code: str, protected: bool
                  ) -> dict[str, dict[str, Any]]:
    """The PodDisruptionBudget only while `protected` (the sweep unfinished): no drain evicts
    the server mid-level. It binds `::`: Python's DualStackServer takes IPv4 too."""
    # The measured videos, then one for the smoke test alone: the run without what it
    # records of the deployment, so a new image or graph leaves the videos as they are.
    videos = command("videos", replace(run, deployment=(), notes=()))
    maker = _runner_container("videos", settings, [*videos, "--out", VIDEOS_DIR], VIDEOS_ON_STOP,
                              mf.resources("2", "2Gi", "4", "4Gi"),
                              {"name": "videos", "mountPath": VIDEOS_DIR})
    http = {"httpGet": {"path": "/", "port": "http"}}
    server = _container(
        "main", settings.image, ["python", "-m", "http.server", str(VIDEO_SERVER_PORT),
                                 "--directory", VIDEOS_DIR, "--bind", "::"],
        mf.resources("250m", "256Mi", "1", "512Mi"),
        [{"name": "videos", "mountPath": VIDEOS_DIR, "readOnly": True}],
        ports=[{"name": "http", "containerPort": VIDEO_SERVER_PORT}],
        readinessProbe={**http, "periodSeconds": 10, "timeoutSeconds": 5},
        livenessProbe={**http, "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 5})
    wait, selector = settings.video_server_timeout_secs, mf.labels(run.stack, "benchmark-videos")
    meta = mf.metadata(run.namespace, names.benchmark_name("videos", run.stack), selector)
    awaited = {**meta, "annotations": {TIMEOUT_SECONDS: str(wait)}}
    # The code's hash rolls the server when the code changes.
    annotations = {**(DO_NOT_DISRUPT if protected else {}), CODE_ANNOTATION: code}
    volumes = [WORK_VOLUME, volume, {"name": "videos", "emptyDir": {"sizeLimit": "20Gi"}}]
    out = {
        "video-server": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": awaited,
                         "spec": {
            # Making the videos takes minutes: not stuck before the user's timeout.
            "replicas": 1, "progressDeadlineSeconds": wait,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": selector, "annotations": annotations},
                         "spec": {**pod, "volumes": volumes, "restartPolicy": "Always",
                                  "initContainers": [maker], "containers": [server]}}}},
        "video-service": {"apiVersion": "v1", "kind": "Service", "metadata": dict(awaited),
                          "spec": {
            "selector": selector, "ipFamilyPolicy": "PreferDualStack",
            "ports": [{"name": "http", "port": names.VIDEO_SERVICE_PORT, "targetPort": "http"}]}},
    }
    if protected:
        out["video-budget"] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                               "metadata": meta, "spec": {
                                   "maxUnavailable": 0, "selector": {"matchLabels": selector}}}
    return out


def benchmark_objects(run: Run, settings: BenchmarkSettings, sources: Mapping[str, str],
                      rerun_sweep: bool = False, sweep_done: bool = False
                      ) -> dict[str, dict[str, Any]]:
    """Every object the enabled parts need, by role; `rerun_sweep` (the live sweep failed)
    lets `up` replace it, `sweep_done` lifts the drain guard (docs/deploy-reference.md)."""
    if not settings.any_enabled:
        return {}
    code = code_hash(sources)
    items = [{"key": config_map_key(p), "path": p} for p in pod_sources(sources)]
    run = replace(run, deployment=(*run.deployment, ("code", code)))
    # The pods' common spec: never root, no API token, the run's placement and pull secrets.
    config_map = names.benchmark_name("bench-code", run.stack)
    pod = mf.pod_spec([], run.image_pull_secrets, automountServiceAccountToken=False,
                      affinity=PREFER_NO_GPU, **run.pod_placement)
    volume = {"name": "code", "configMap": {"name": config_map, "items": items}}
    meta = mf.metadata(run.namespace, config_map, mf.labels(run.stack, "benchmark-code"))
    out = {"code": code_config_map(meta, sources),
           **_video_server(run, settings, pod, volume, code, not sweep_done)}
    claim = {"name": "cache", "persistentVolumeClaim": {"claimName": run.cache_claim}}
    for role in (role for role in JOBS if getattr(settings, role)):
        limits, after_stop, spec = JOBS[role]
        sweep, deadline = role == "sweep", getattr(settings, f"{role}_timeout_secs")
        stop = (f"the Job's deadline (benchmark{role.title()}TimeoutSecs ({deadline} s)) "
                "passed, or the Job was deleted (`pulumi destroy`, a replaced Job) or the pod "
                "evicted; " + after_stop)
        awaits = {**({WAIT_FOR: STARTED} if sweep and not settings.wait_for_sweep else {}),
                  **({REPLACE_UNREADY: "true"} if not sweep or rerun_sweep else {})}
        # The provider waits 120 s more, so the Job's own deadline (with its reason) fires first.
        meta = mf.metadata(run.namespace, getattr(run, f"{role}_job"),
                           mf.labels(run.stack, f"benchmark-{role}", run.run_id),
                           annotations={TIMEOUT_SECONDS: str(deadline + 120), **awaits})
        container = _runner_container(
            "main", settings, command(role, run), stop, mf.resources(*limits),
            *([{"name": "cache", "mountPath": CACHE_DIR}] if sweep else []))
        out[role] = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                     "spec": {"activeDeadlineSeconds": deadline, **spec, "template": {
                         "metadata": {"labels": meta["labels"], "annotations": {**DO_NOT_DISRUPT}},
                         "spec": {**pod, "restartPolicy": "Never", "containers": [container],
                                  "volumes": [WORK_VOLUME, volume, *([claim] if sweep else [])]}}}}
    return out


def results_reader_pod(run: Run, name: str, owner_job: tuple[str, str] | None = None
                       ) -> dict[str, Any]:
    """A pod the hook or `collect` copies results out of; `owner_job` (name, uid) makes the
    sweep Job its owner, so `pulumi destroy` removes one a killed hook left."""
    # Ready (and alive) while the results are mounted: the copy reads them.
    probe = {"exec": {"command": ["test", "-d", CACHE_DIR]}, "periodSeconds": 10}
    container = _container("main", run.image, ["python", "-c", "import time; time.sleep(3600)"],
                           mf.resources("100m", "256Mi", "1", "1Gi"),
                           [{"name": "cache", "mountPath": CACHE_DIR, "readOnly": True}],
                           readinessProbe=probe, livenessProbe=probe)
    claim = {"claimName": run.cache_claim, "readOnly": True}
    owner = {} if owner_job is None else {"ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": owner_job[0], "uid": owner_job[1]}]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": mf.metadata(run.namespace, name,
                                    mf.labels(run.stack, "benchmark-results-reader"), **owner),
            "spec": mf.pod_spec([container], run.image_pull_secrets, restartPolicy="Never",
                                automountServiceAccountToken=False, affinity=PREFER_NO_GPU,
                                **run.pod_placement, activeDeadlineSeconds=3600,
                                volumes=[{"name": "cache", "persistentVolumeClaim": claim}])}
