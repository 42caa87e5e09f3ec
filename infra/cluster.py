"""The preflight: the provider finds what exists only hours into `up`, so it is read first and
adopted as it is or refused with the fix (docs/deploy-reference.md, 'The preflight')."""

from __future__ import annotations

import enum
import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from infra import manifests
from infra.manifests import COMPONENT_LABEL, GRAPH_LABEL, PROFILE_LABEL, RUN_ID_LABEL
from infra.names import benchmark_name, graph_name
from infra.serving import GPU_PRODUCT_LABEL, cache_gib_needed
from infra.settings import PROJECT, STAND_INS, Settings, SettingsError, quantity_amount

# Bounds all the reads together: a kubeconfig's exec credential plugin has no timeout.
READ_DEADLINE_SECS = 60.0
GRAPH_GROUP, GRAPH_VERSION = manifests.GRAPH_API_VERSION.split("/")
GRAPH_PLURAL = "dynamographdeployments"
GRAPH_CRD = f"{GRAPH_PLURAL}.{GRAPH_GROUP}"
# The Dynamo platform chart's operator Deployment (deploy/helm/charts/platform/components/
# operator/templates/deployment.yaml in ai-dynamo/dynamo at 05da1f97).
OPERATOR_SELECTOR = "app.kubernetes.io/part-of=dynamo-operator,control-plane=controller-manager"
RUNNING_PODS = "status.phase!=Succeeded,status.phase!=Failed"
# What a pull request's preview sets without a cluster's storage class (.github/workflows/pr.yml).
STAND_IN = STAND_INS["cacheStorageClass"]
# Provisioners whose volumes are ReadWriteOnce only: the shared cache can't live there.
# Not `kubernetes.io/no-provisioner`: static volumes (on premises often RWX NFS) use it.
RWO_ONLY_PROVISIONERS = frozenset({
    "ebs.csi.aws.com", "kubernetes.io/aws-ebs", "pd.csi.storage.gke.io",
    "kubernetes.io/gce-pd", "disk.csi.azure.com", "kubernetes.io/azure-disk",
    "rancher.io/local-path",
})


@dataclass(frozen=True)
class LiveObjects:
    """What the cluster holds, as the API returns it (None: absent). `unreadable` names the
    reads the API refused (401/403): their checks are skipped, not failed."""

    namespace: client.V1Namespace | None = None
    claim: client.V1PersistentVolumeClaim | None = None
    download_job: client.V1Job | None = None
    sweep_job: client.V1Job | None = None  # this run's, one of `sweeps` (the stack's, any run)
    sweeps: tuple[client.V1Job, ...] = ()
    graph: dict[str, Any] | None = None  # this stack's, one of `graphs` (the namespace's)
    graphs: tuple[dict[str, Any], ...] = ()
    crd: client.V1CustomResourceDefinition | None = None
    operators: tuple[client.V1Deployment, ...] = ()
    storage_class: client.V1StorageClass | None = None
    nodes: tuple[client.V1Node, ...] = ()
    pods: tuple[client.V1Pod, ...] = ()
    pull_secrets: tuple[str, ...] = ()
    unreadable: frozenset[str] = field(default_factory=frozenset)


def api_client(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """`kubernetes:kubeconfig` may hold a path or the file's content (as the provider
    accepts); unset means KUBECONFIG or ~/.kube/config."""
    if kubeconfig and ("\n" in kubeconfig or kubeconfig.lstrip().startswith("{")):
        return config.new_client_from_config_dict(yaml.safe_load(kubeconfig), context=context)
    return config.new_client_from_config(config_file=kubeconfig or None, context=context)


def observe(settings: Settings, kubeconfig: str | None, dry_run: bool,
            say: Callable[[str], None]) -> LiveObjects | None:
    """What the checks need, or None (said in one line) if skipped or, on a preview, unread; a
    real `up` that can't read raises: unchecked, it would adopt what the checks protect."""
    if settings.skip_preflight:
        say("preflight skipped: skipPreflight is true; nothing is read, so an existing "
            "claim, a completed download Job or a failed sweep is not recognised and each "
            "is declared as if new")
        return None
    outcome: list[LiveObjects | str] = []

    def read() -> None:
        try:
            outcome.append(_read(settings, kubeconfig))
        except ApiException as err:
            outcome.append(f"the API refused a read ({err.status} {err.reason})")
        except (HTTPError, OSError) as err:
            outcome.append(f"the cluster is not reachable ({type(err).__name__})")
        except Exception as err:  # noqa: BLE001 (said below, not lost in the thread)
            outcome.append(f"the read failed ({type(err).__name__})")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(READ_DEADLINE_SECS)
    found = outcome[0] if outcome else (
        f"the cluster did not answer within {READ_DEADLINE_SECS:.0f} s (an exec credential "
        "plugin waiting for a login?)")
    if isinstance(found, LiveObjects):
        return found
    if not dry_run:
        raise SettingsError(settings.stack, [
            f"cluster: the preflight could not read the cluster: {found}. Unchecked, `up` "
            "would adopt a namespace or claim it exists to protect. Fix the connection "
            f"(kubernetes:kubeconfig, kubernetes:context; `{settings.kubectl} get pods` must "
            "work), or `pulumi config set skipPreflight true` to deploy without the checks"])
    say(f"preflight skipped: {found}; the cluster is checked, and what exists adopted, when "
        "`pulumi up` can read it")
    return None


def _read(settings: Settings, kubeconfig: str | None) -> LiveObjects | str:
    """The reads themselves: the objects, or why the kubeconfig is of no use."""
    try:
        api = api_client(kubeconfig, settings.kube_context)
    except (ConfigException, OSError, yaml.YAMLError, TypeError, ValueError) as err:
        return f"no usable kubeconfig ({type(err).__name__})"
    api.configuration.retries = 1
    core, batch, apps = client.CoreV1Api(api), client.BatchV1Api(api), client.AppsV1Api(api)
    ns, operator_ns = settings.namespace, settings.dynamo_operator_namespace
    refused: set[str] = set()

    def read(what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:  # connect and read timeouts of each request, seconds: no read may hang a preview
            return call(*args, _request_timeout=(3, 10), **kwargs)
        except ApiException as err:
            if err.status not in (401, 403, 404):
                raise
            if err.status != 404:
                refused.add(what)
            return None

    def items(what: str, call: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return tuple(getattr(read(what, call, *args, **kwargs), "items", ()))

    claim = read("claim", core.read_namespaced_persistent_volume_claim,
                 settings.cache_claim_name, ns)
    # The class the claim uses: an existing claim's own, else the setting's (a stand-in is
    # no class of any cluster: not read).
    storage_class = claim.spec.storage_class_name if claim is not None else (
        settings.cache_storage_class)
    sweeps = items("sweep Jobs", batch.list_namespaced_job, ns, label_selector=(
        f"{PROFILE_LABEL}={settings.profile},{COMPONENT_LABEL}=benchmark-sweep"))
    graphs = tuple((read("graphs", client.CustomObjectsApi(api).list_namespaced_custom_object,
                         GRAPH_GROUP, GRAPH_VERSION, ns, GRAPH_PLURAL) or {}).get("items", ()))
    sweep = benchmark_name("sweep", settings.profile, settings.benchmark.run_id)
    return LiveObjects(
        namespace=read("namespace", core.read_namespace, ns),
        claim=claim,
        download_job=read("download Job", batch.read_namespaced_job,
                          settings.download_job_name, ns),
        sweep_job=next((j for j in sweeps if j.metadata.name == sweep), None), sweeps=sweeps,
        graph=next((g for g in graphs if g["metadata"]["name"] == settings.graph_name), None),
        graphs=graphs,
        crd=read("CRD", client.ApiextensionsV1Api(api).read_custom_resource_definition,
                 GRAPH_CRD),
        operators=items(
            "operator", *((apps.list_namespaced_deployment, operator_ns) if operator_ns
                          else (apps.list_deployment_for_all_namespaces,)),
            label_selector=OPERATOR_SELECTOR),
        storage_class=read("storage class", client.StorageV1Api(api).read_storage_class,
                           storage_class) if storage_class not in (None, STAND_IN) else None,
        nodes=items("nodes", core.list_node),
        pods=items("pods", core.list_pod_for_all_namespaces, field_selector=RUNNING_PODS),
        pull_secrets=tuple(
            name for name in settings.image_pull_secrets
            if read("pull secrets", core.read_namespaced_secret, name, ns) is not None),
        unreadable=frozenset(refused),
    )


def _ours(metadata: client.V1ObjectMeta | None) -> bool:
    labels = (metadata.labels if metadata else None) or {}
    part_of = "app.kubernetes.io/part-of"
    return labels.get(part_of) == manifests.common_labels()[part_of]


def _requests(claim: client.V1PersistentVolumeClaim) -> dict[str, str]:
    return (claim.spec.resources.requests if claim.spec.resources else None) or {}


def claim_spec(settings: Settings, live: LiveObjects | None) -> dict[str, Any] | None:
    """The claim's spec to declare, None for a claim not ours (used by name); one of ours is
    declared as it is live, so server-side apply finds no conflict, and never rewritten."""
    claim, wanted = live.claim if live else None, manifests.model_cache_claim(settings)["spec"]
    if claim is None:
        return wanted
    if not _ours(claim.metadata):
        return None
    spec = client.ApiClient().sanitize_for_serialization(claim.spec)
    return {k: spec.get(k) for k in wanted}  # the fields the built claim declares


def claim_drift(settings: Settings, live: LiveObjects | None) -> str | None:
    """What to tell a user whose cacheSize or cacheStorageClass no longer matches the live
    claim (its spec is fixed: a replacement would empty the cache); None when they match."""
    claim, wanted = live.claim if live else None, settings.cache_storage_class
    if claim is None:
        return None
    live_class, live_size = claim.spec.storage_class_name, _requests(claim).get("storage")
    amount = quantity_amount(live_size or "")
    changes = [text for differs, text in (
        (live_class not in (None, wanted) and wanted != STAND_IN,
         f"cacheStorageClass is '{wanted}' but the claim uses '{live_class}'"),
        (amount is not None and quantity_amount(settings.cache_size) != amount,
         f"cacheSize is {settings.cache_size} but the claim requests {live_size}")) if differs]
    if not changes:
        return None
    name = settings.cache_claim_name
    patch = json.dumps({"spec": {"resources": {"requests": {"storage": settings.cache_size}}}})
    return (
        f"model cache claim {name}: {'; '.join(changes)}. A claim's spec can't change once "
        "it exists, so the stack leaves it as it is (replacing it would empty the cache). "
        f"To grow it, where the storage class allows expansion: {settings.kubectl} patch "
        f"pvc {name} -p '{patch}', then `pulumi refresh` so the stack records the new size. "
        "For another storage class: make a new ReadWriteMany claim and set "
        "cacheExistingClaim to it. Or set the two settings back to the claim's values."
    )


def _changed(live: Any, wanted: Any, path: str = "") -> list[str]:
    """Where `live` does not say what `wanted` says; the API server only adds defaults."""
    if isinstance(wanted, dict) and isinstance(live, dict):
        return [p for k, v in wanted.items() for p in _changed(live.get(k), v, f"{path}.{k}")]
    if isinstance(wanted, list) and isinstance(live, list) and len(live) == len(wanted):
        return [p for i, v in enumerate(wanted) for p in _changed(live[i], v, f"{path}[{i}]")]
    return [] if live == wanted or str(live) == str(wanted) else [path]


def download_differs(settings: Settings, job: client.V1Job) -> bool:
    """The live download Job's pod template is not what these settings render, placement
    aside (ignored by the stack): the provider would replace a Job that is not complete."""
    wanted = manifests.model_download_job(settings)["spec"]["template"]
    spec = {k: v for k, v in wanted["spec"].items() if k not in manifests.PLACEMENT_KEYS}
    live = client.ApiClient().sanitize_for_serialization(job.spec.template)
    return bool(_changed(live, {**wanted, "spec": spec}))


def _download_on_gpu(settings: Settings) -> bool:
    container = manifests.model_download_job(settings)["spec"]["template"]["spec"]["containers"][0]
    return manifests.GPU_RESOURCE in container["resources"].get("limits", {})


def download_gone(settings: Settings, live: LiveObjects | None) -> bool:
    """The download Job is gone (a TTL, `kubectl delete job`, a refresh dropped it) while the
    graph runs, and it would need the graph's GPUs: the cache is taken as filled."""
    return bool(live and live.download_job is None and live.graph is not None
                and "download Job" not in live.unreadable and _download_on_gpu(settings))


def worker_restarts(settings: Settings, live: LiveObjects | None) -> str | None:
    """What the update costs when the live graph's worker pods would change: every worker
    restarts and reloads the model."""
    spec = (live.graph or {}).get("spec") if live else None
    wanted = manifests.graph(settings)["spec"]
    # What the operator hashes to roll the workers: the worker components but their replicas,
    # and spec.env (ComputeDGDWorkersSpecHash, ai-dynamo/dynamo deploy/operator/api/v1beta1/
    # worker_hash.go at 13538f46).
    changed = _changed(spec, {"env": wanted["env"], "components": [
        {k: v for k, v in c.items() if k != "replicas"} if c["type"] == "worker" else {}
        for c in wanted["components"]]}, "spec") if spec else []
    workers = sum(c.get("replicas") or 0 for c in (spec or {}).get("components", [])
                  if c.get("type") == "worker")
    return (f"graph {settings.graph_name}: this update restarts {workers} workers, each "
            f"reloading the model (changed: {', '.join(changed[:3])}{' ...' * bool(changed[3:])}"
            "; docs/deploy-reference.md, 'Re-runs and upgrades')") if changed else None


JobState = enum.StrEnum("JobState", "MISSING RUNNING SUCCEEDED FAILED")  # values: lower case


@dataclass(frozen=True)
class JobStatus:
    state: JobState
    reason: str = ""


def job_status_of(job: client.V1Job | None) -> JobStatus:
    """A Job's state from the conditions Kubernetes sets (None: no such Job); one reading
    for the next `up` (a failed sweep runs again) and for `collect`."""
    if job is None:
        return JobStatus(JobState.MISSING)
    for c in (job.status.conditions if job.status else None) or []:
        if c.status == "True" and c.type == "Complete":
            return JobStatus(JobState.SUCCEEDED)
        if c.status == "True" and c.type == "Failed":
            return JobStatus(JobState.FAILED, ": ".join(x for x in (c.reason, c.message) if x))
    return JobStatus(JobState.RUNNING)


def completed(job: client.V1Job | None) -> bool:
    """The cluster reports the Job Complete: the stack keeps it, whatever the code renders."""
    return job_status_of(job).state is JobState.SUCCEEDED


def problems(settings: Settings, live: LiveObjects | None,
             warn: Callable[[str], None] | None = None) -> list[str]:
    """What would fail hours into `up`, one line each with the setting and the fix (a refused
    read skips its checks); with `warn` (a preview), the facts of the moment go there."""
    if live is None or settings.skip_preflight:
        return []
    checks = ((_crd, {"CRD"}), (_operator, {"operator"}), (_namespace, {"namespace"}),
              (_cache, {"claim"}), (_download, set()), (_gpus, {"nodes", "pods"}),
              (_components, {"graphs"}), (_pull_secrets, {"pull secrets"}), (_moment, set()))
    found = [line for check, needs in checks if not needs & live.unreadable
             for line in check(settings, live)]
    warned = [line for line in found if warn and isinstance(line, Moment)]
    for line in warned:
        warn(line)
    return [line for line in found if line not in warned]


class Moment(str):
    """A fact of the moment (free GPUs, another stack, a running sweep), not of the change."""


def _found(*rows: tuple[Any, str | None, str], moment: bool = False) -> list[str]:
    """The messages whose condition holds, each after the setting that fixes it (None: the
    fix is in the cluster, no setting)."""
    return [(Moment if moment else str)(f"{f'{PROJECT}:{key}' if key else 'cluster'}: {text}")
            for bad, key, text in rows if bad]


def _crd(settings: Settings, live: LiveObjects) -> list[str]:
    served = [v.name for v in (live.crd.spec.versions if live.crd else []) if v.served]
    fix = f"serves {', '.join(served)}, not {GRAPH_VERSION}: upgrade" if served else (
        "is not installed: install")
    return _found((GRAPH_VERSION not in served, None, f"the DynamoGraphDeployment CRD "
                   f"({GRAPH_CRD}) {fix} the Dynamo platform (its Helm chart) before `pulumi up`"))


def _operator(settings: Settings, live: LiveObjects) -> list[str]:
    if live.operators and not any((d.status.ready_replicas or 0) > 0 for d in live.operators):
        d = live.operators[0].metadata
        return [f"cluster: the Dynamo operator {d.namespace}/{d.name} has no ready replica; "
                f"see `kubectl -n {d.namespace} describe deployment {d.name}`"]
    return _found((not live.operators, "dynamoOperatorNamespace",
                   f"no Dynamo operator Deployment ({OPERATOR_SELECTOR}) in "
                   f"{settings.dynamo_operator_namespace or 'any namespace'}: install the "
                   "Dynamo platform, or set dynamoOperatorNamespace to where it runs"))


def _namespace(settings: Settings, live: LiveObjects) -> list[str]:
    ns, create, found = settings.namespace, settings.create_namespace, live.namespace
    return _found(
        (not create and found is None, "namespace",
         f"namespace {ns} does not exist and createNamespace is false: create it (`kubectl "
         f"create namespace {ns}`) or `pulumi config set createNamespace true`"),
        (create and found and not _ours(found.metadata), "createNamespace",
         f"namespace {ns} exists and was not made by this project (by hand, for a pull "
         "secret?); a stack that creates its namespace deletes it on destroy, with "
         "everything in it. Deploy into it instead: `pulumi config set createNamespace "
         "false`"))


def _cache(settings: Settings, live: LiveObjects) -> list[str]:
    claim, name, storage_class = live.claim, settings.cache_claim_name, settings.cache_storage_class
    class_gone = live.storage_class is None and "storage class" not in live.unreadable and (
        claim is not None or storage_class != STAND_IN)
    if claim is None:  # the first that applies: each fix makes the next moot
        provisioner = getattr(live.storage_class, "provisioner", None)
        return _found(
            (settings.cache_existing_claim, "cacheExistingClaim",
             f"claim {settings.cache_existing_claim} is not in namespace {settings.namespace}: "
             "give an existing claim's name (`kubectl get pvc`), or leave it empty to create "
             "one"),
            (class_gone, "cacheStorageClass", f"storage class {storage_class} does not "
             "exist; pick a ReadWriteMany one from `kubectl get storageclass`"),
            (provisioner in RWO_ONLY_PROVISIONERS, "cacheStorageClass",
             f"{storage_class} provisions with {provisioner}, which offers "
             "ReadWriteOnce volumes only; the shared cache needs ReadWriteMany (NFS, EFS, "
             "Filestore, Azure Files, CephFS...)"))[:1]
    used, modes = claim.spec.storage_class_name, claim.spec.access_modes
    size, need = _requests(claim).get("storage"), cache_gib_needed(settings.serving)
    return _found(
        (used and class_gone, "cacheExistingClaim", f"claim {name} uses storage class {used}, "
         "which does not exist (`kubectl get storageclass`): the claim can't bind; use "
         "another claim"),
        ("ReadWriteMany" not in (modes or []), "cacheExistingClaim",
         f"claim {name} is {', '.join(modes or [])}; eight workers on several nodes share "
         "the cache, so it must be ReadWriteMany: use another claim"),
        ((quantity_amount(str(size or 0)) or 0) < need * 2**30, "cacheExistingClaim",
         f"claim {name} holds {size}, less than the {need}Gi this serving path downloads: "
         "grow it or use another claim"))


def _download(settings: Settings, live: LiveObjects) -> list[str]:
    job, kubectl, name = live.download_job, settings.kubectl, settings.download_job_name
    if job_status_of(job).state is JobState.FAILED:
        return [f"download Job {name} failed in an earlier `up` (`{kubectl} logs job/{name}` "
                f"says why); fix the cause, then `{kubectl} delete job {name}` and "
                "`pulumi up --refresh` to run it again"]
    # A missing Job is not declared while the graph runs (`download_gone`).
    rerun = job is not None and not completed(job) and download_differs(settings, job)
    return _found((
        _download_on_gpu(settings) and rerun and live.graph is not None, "nimModelProfile",
        "the model download must run (again) for these settings and, without a pinned "
        f"profile, needs a worker's GPUs, which this stack's graph {settings.graph_name} "
        "holds: it would wait for downloadTimeoutSecs. Set nimModelProfile to the profile "
        "id (the download then needs no GPU), or free the GPUs first: "
        f"`{kubectl} delete dynamographdeployment {settings.graph_name}`, then "
        "`pulumi up --refresh`"))


def _components(settings: Settings, live: LiveObjects) -> list[str]:
    """A live graph's components never change (the operator's webhook: "component topology is
    immutable", deploy/operator/internal/webhook/validation/dynamographdeployment.go)."""
    old, new = ({c["name"] for c in (g.get("spec") or {}).get("components", [])}
                for g in (live.graph or {}, manifests.graph(settings)))
    return _found((old and old != new, "frontendProfiles", f"graph {settings.graph_name} has "
                   f"components {sorted(old)}, these settings {sorted(new)}, and the operator "
                   "never changes them: restore the list, or make a new graph, `pulumi destroy` "
                   "then `pulumi up` (the download is kept; the workers start cold)"))


def _tolerates(tolerations: tuple[Any, ...], taint: client.V1Taint) -> bool:
    # An absent taint value is "" to Kubernetes (ToleratesTaint), None from the client.
    return taint.effect == "PreferNoSchedule" or any(
        t["key"] == taint.key and t.get("value", taint.value or "") == (taint.value or "")
        and t.get("effect") in (None, taint.effect) for t in tolerations)


def _gpu_count(quantities: dict[str, Any] | None) -> float:
    return float((quantities or {}).get(manifests.GPU_RESOURCE, 0))


def _gpus(settings: Settings, live: LiveObjects) -> list[str]:
    """Enough schedulable GPUs of the workers' class: per matching node, its allocatable GPUs
    minus what running pods other than this stack's request (a replica can't span nodes)."""
    serving, placement = settings.serving, settings.placement
    nodes = {
        n.metadata.name: n for n in live.nodes
        if placement.get("nodeSelector", {}).items() <= (n.metadata.labels or {}).items()
        and all(_tolerates(placement.get("tolerations", ()), t) for t in n.spec.taints or [])
        and not n.spec.unschedulable
    }
    used: Counter[str] = Counter()
    held: Counter[str] = Counter()  # by this project's other graphs: named, with the fix
    for pod in live.pods:
        if not _stack_owns(settings, pod):  # its GPUs are the ones this stack will use
            gpus = sum(_gpu_count(c.resources.requests if c.resources else None)
                       for c in pod.spec.containers)
            used[pod.spec.node_name] += gpus
            graph = (pod.metadata.labels or {}).get(GRAPH_LABEL, "")
            if (pod.metadata.namespace == settings.namespace and pod.spec.node_name in nodes
                    and graph.startswith(graph_name("")) and gpus):
                held[graph] += gpus
    replicas = sum(max(0, int((_gpu_count(n.status.allocatable) - used[name])
                              // serving.gpus_per_replica)) for name, n in nodes.items())
    products = {(n.metadata.labels or {}).get(GPU_PRODUCT_LABEL) for n in nodes.values()} - {None}
    short = replicas < serving.replicas
    free = (f"{len(nodes)} schedulable node(s) match gpuNodeSelector and tolerations with free "
            f"GPUs for {replicas} of {serving.replicas} workers ({serving.replicas} x "
            f"{serving.gpus_per_replica} GPUs, counting what other pods hold)")
    holders = ", ".join(f"graph {g} holds {n:g} of them (`pulumi destroy -s "
                        f"{g.removeprefix(graph_name(''))}` frees them)" for g, n in held.items())
    return _found((short and held, None, f"{free}: this project's {holders}; the profiles take "
                   "turns on the GPUs"),
                  (short and not held, "gpuNodeSelector", f"{free}; free GPUs, fix "
                   "gpuNodeSelector/gpuTolerations, or lower workerReplicas"),
                  moment=True) + _found(
        (products - {serving.gpu_product}, "gpuProduct",
         f"matching GPU nodes are {', '.join(sorted(products))}, not {serving.gpu_product}: "
         f"narrow gpuNodeSelector to {GPU_PRODUCT_LABEL}={serving.gpu_product}, or set "
         "gpuProduct to theirs"))


def _moment(settings: Settings, live: LiveObjects) -> list[str]:
    """A sweep of another run running (a new run's Job comes before the old one's delete: two
    sweeps, one frontend); another stack on what destroy would delete; a stand-in class."""
    kubectl, b, ns = settings.kubectl, settings.benchmark, settings.namespace
    running = [(j.metadata.name, (j.metadata.labels or {}).get(RUN_ID_LABEL))
               for j in live.sweeps if job_status_of(j).state is JobState.RUNNING]
    others = {g["metadata"]["name"].removeprefix(graph_name("")) for g in live.graphs} | {
        (p.metadata.labels or {}).get(PROFILE_LABEL) for p in live.pods
        if p.metadata.namespace == ns}
    users = ", ".join(sorted(others - {None, settings.profile}))
    return _found(*((
        b.sweep and run != b.run_id, "benchmarkRunId", f"sweep Job {job} of run {run} still "
        "runs: a new run id would start a second sweep before that Job is deleted, both "
        f"loading the frontend. Wait for it (`{kubectl} logs -f job/{job}`) or stop it "
        f"(`{kubectl} delete job {job}`), then `pulumi up`") for job, run in running), (
        not settings.cache_keep_on_destroy and users
        and (settings.create_namespace or not settings.cache_existing_claim),
        "cacheKeepOnDestroy", f"is false, so `pulumi destroy` deletes namespace {ns} and "
        f"claim {settings.cache_claim_name}, which stack(s) {users} use: the claim would "
        "stay Terminating until they stop, then the cache is lost. `pulumi config set "
        "cacheKeepOnDestroy true`, or destroy them first (`pulumi destroy -s <stack>`)"), (
        live.claim is None and settings.cache_storage_class == STAND_IN, "cacheStorageClass",
        f"'{STAND_IN}' is a stand-in (a pull request's preview without the CACHE_STORAGE_CLASS "
        "variable), no class of this cluster: `pulumi config set cacheStorageClass "
        "<rwx-class>` (`kubectl get storageclass`)"), moment=True)


def _stack_owns(settings: Settings, pod: client.V1Pod) -> bool:
    """A pod of this stack: its graph's (the operator's label), or one of ours (the download,
    the benchmark) by our labels."""
    labels = pod.metadata.labels or {}
    return pod.metadata.namespace == settings.namespace and (
        labels.get(GRAPH_LABEL) == settings.graph_name
        or labels.get(manifests.PROFILE_LABEL) == settings.profile
        or labels == {**labels, **manifests.download_pod_labels(settings)})


def _pull_secrets(settings: Settings, live: LiveObjects) -> list[str]:
    missing = [n for n in settings.image_pull_secrets if n not in live.pull_secrets]
    ns = settings.namespace
    first = (f"create the namespace first (`kubectl create namespace {ns}`, then `pulumi "
             "config set createNamespace false`), then " if live.namespace is None else "")
    return _found((missing, "imagePullSecrets", f"{', '.join(missing)} not in namespace {ns}: "
                   f"{first}create it (`kubectl -n {ns} create secret docker-registry ...`)"))
