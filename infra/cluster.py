"""What the program reads from the cluster before it declares anything, and what follows.

Mocks and schemas can't see what is already in the cluster, and the provider only finds
out when it applies, hours into `up`. So the program reads the few objects this stack
would create or adopt (read-only, short timeouts) and decides from them, before anything
is declared: what to adopt as it is, and what to refuse with the fix. Where the cluster
can't be reached (an offline `pulumi preview` in a pull request) it says so in one line
and declares the defaults.

`observe` is the thin I/O layer; the decisions below it are pure (API objects in) and
tested with the client's own model objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from infra import manifests
from infra.settings import PROJECT, Settings

# Connect and read timeouts of each request, seconds: no read may hang a preview.
REQUEST_TIMEOUT = (3, 5)
PART_OF = "app.kubernetes.io/part-of"


@dataclass(frozen=True)
class LiveObjects:
    """The objects under the names this stack uses, as the API returns them (None: absent)."""

    namespace: client.V1Namespace | None = None
    claim: client.V1PersistentVolumeClaim | None = None
    download_job: client.V1Job | None = None
    graph: dict[str, Any] | None = None


def api_client(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """A client for the stack's cluster: `kubernetes:kubeconfig` may hold a path or the
    file's content (as the provider accepts); unset means KUBECONFIG or ~/.kube/config."""
    if kubeconfig and ("\n" in kubeconfig or kubeconfig.lstrip().startswith("{")):
        return config.new_client_from_config_dict(yaml.safe_load(kubeconfig), context=context)
    return config.new_client_from_config(config_file=kubeconfig or None, context=context)


def observe(settings: Settings, kubeconfig: str | None) -> LiveObjects | None:
    """Read this stack's objects; None (with one line printed why) when the cluster can't
    be reached or read, so an offline preview goes on."""
    try:
        api = api_client(kubeconfig, settings.kube_context)
    except (ConfigException, OSError, yaml.YAMLError, TypeError, ValueError) as err:
        _skipped(f"no usable kubeconfig ({type(err).__name__})")
        return None
    api.configuration.retries = 1
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    ns = settings.namespace.name

    def read(call: Any, *args: Any) -> Any:
        try:
            return call(*args, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    try:
        return LiveObjects(
            namespace=read(core.read_namespace, ns),
            claim=read(core.read_namespaced_persistent_volume_claim,
                       settings.cache.claim_name, ns),
            download_job=read(batch.read_namespaced_job, settings.download_job_name, ns),
            graph=read(custom.get_namespaced_custom_object, "nvidia.com", "v1beta1", ns,
                       "dynamographdeployments", settings.graph_name),
        )
    except ApiException as err:
        _skipped(f"the API refused a read ({err.status} {err.reason})")
    except (HTTPError, OSError) as err:
        _skipped(f"the cluster is not reachable ({type(err).__name__})")
    return None


def _skipped(why: str) -> None:
    pulumi.log.info(f"cluster checks skipped: {why}; objects that already exist are "
                    "neither adopted nor checked until `pulumi up` can read the cluster")


def _ours(metadata: client.V1ObjectMeta | None) -> bool:
    labels = (metadata.labels if metadata else None) or {}
    return labels.get(PART_OF) == manifests.common_labels()[PART_OF]


def claim_spec(settings: Settings, live: LiveObjects | None) -> dict[str, Any] | None:
    """The spec to declare for the cache claim; None means use the claim by name only.

    An existing claim is never rewritten: one this project made (another stack's, or one
    kept by `destroy`) is declared with its own live spec, so server-side apply finds no
    conflicting value; one made outside the project (the recipe's kubectl steps) is used
    as `cacheExistingClaim` would, and never deleted by this stack.
    """
    claim = live.claim if live else None
    if claim is None:
        return manifests.model_cache_claim(settings)["spec"]
    if not _ours(claim.metadata):
        return None
    spec = claim.spec
    return {
        "accessModes": list(spec.access_modes or []),
        "storageClassName": spec.storage_class_name,
        "resources": {"requests": dict(spec.resources.requests or {})},
    }


def claim_drift(settings: Settings, live: LiveObjects | None) -> str | None:
    """The warning for cache settings that no longer match the claim in the cluster."""
    claim = live.claim if live else None
    if claim is None:
        return None
    requests = (claim.spec.resources.requests if claim.spec.resources else None) or {}
    return manifests.cache_claim_drift(settings, claim.spec.storage_class_name,
                                       requests.get("storage"))


def _download_content(container: dict[str, Any]) -> tuple[Any, ...]:
    """What decides the cache's content: image, command, model environment, GPUs."""
    env = sorted((e["name"], str(e.get("value"))) for e in container.get("env") or ())
    limits = (container.get("resources") or {}).get("limits") or {}
    return (container["image"], container.get("command"), env,
            str(limits.get(manifests.GPU_RESOURCE, 0)))


def _job_failed(job: client.V1Job) -> bool:
    conditions = (job.status.conditions if job.status else None) or []
    return any(c.type == "Failed" and c.status == "True" for c in conditions)


def problems(settings: Settings, live: LiveObjects | None) -> list[str]:
    """What would fail hours into `up`, found now: one line each, with the fix."""
    if live is None:
        return []
    out = []
    kubectl = settings.kubectl
    ns = settings.namespace.name
    if settings.namespace.create and live.namespace and not _ours(live.namespace.metadata):
        out.append(
            f"{PROJECT}:createNamespace: namespace {ns} exists and was not made by this "
            "project (by hand, for a pull secret?); a stack that creates its namespace "
            "deletes it on destroy, with everything in it. Deploy into it instead: "
            "`pulumi config set createNamespace false`"
        )
    job = live.download_job
    name = settings.download_job_name
    if job is not None and _job_failed(job):
        out.append(
            f"download Job {name} failed in an earlier `up` (`{kubectl} logs job/{name}` "
            f"says why); fix the cause, then `{kubectl} delete job {name}` and "
            "`pulumi up --refresh` to run it again"
        )
        return out
    wanted = manifests.model_download_job(settings)["spec"]["template"]["spec"]
    container = wanted["containers"][0]
    needs_gpu = manifests.GPU_RESOURCE in (container.get("resources") or {}).get("limits", {})
    live_container = (
        client.ApiClient().sanitize_for_serialization(job.spec.template.spec.containers[0])
        if job is not None else None
    )
    rerun = live_container is None or _download_content(live_container) != _download_content(
        container)
    if needs_gpu and rerun and live.graph is not None:
        out.append(
            f"{PROJECT}:nimModelProfile: the model download must run (again) for these "
            f"settings and, without a pinned profile, needs a worker's GPUs, which this "
            f"stack's graph {settings.graph_name} holds: it would wait for "
            "downloadTimeoutSecs. Set nimModelProfile to the profile id (the download "
            "then needs no GPU), or free the GPUs first: "
            f"`{kubectl} delete dynamographdeployment {settings.graph_name}`, then "
            "`pulumi up --refresh`"
        )
    return out
