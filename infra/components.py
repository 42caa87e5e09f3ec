"""Pulumi resources of the recipe: one component per concern, in deployment order.

Thin on purpose: every manifest comes from `infra.manifests`; this module adds what only
Pulumi can express (parents, ordering, waits, what survives `pulumi destroy`).

Order: RecipeNamespace (namespace + NGC secret) -> NetworkPolicies (before any pod) ->
ModelCache (claim + download Job, awaited until Complete) -> ReasonerGraph
(DynamoGraphDeployment, awaited until Ready). The
post-deploy benchmark that follows lives in infra/benchmark_components.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pulumi
import pulumi_kubernetes as k8s

from infra import cluster, manifests, names
from infra.network_policies import network_policies
from infra.settings import HF_TOKEN, NGC_API_KEY, Settings

R = TypeVar("R", bound=pulumi.CustomResource)
TYPE_PREFIX = "cosmos3-routing:infra"
# Each token's Secret resource by its config key (the names pin their URNs).
SECRET_RESOURCES = {NGC_API_KEY: "ngc-secret", HF_TOKEN: "hf-token-secret"}
DOWNLOAD_PLACEMENT_FIELDS = [
    *(f"spec.template.spec.{key}" for key in manifests.PLACEMENT_KEYS),
    "spec.activeDeadlineSeconds", "spec.backoffLimit",
]


@dataclass(frozen=True)
class Providers:
    """The stack's two providers, one cluster and one config but `upsertExistingObjects`.

    Since pulumi-kubernetes 4.29 a create of an existing object fails with AlreadyExists
    unless the provider upserts; upserting also turns a URN change without an alias into
    "adopt, then delete" (its docs on the option). So `adopting` (named `cluster`, as the
    one provider always was, so what existing stacks hold keeps its provider) serves only
    what is meant to outlive a run: what `destroy` keeps (namespace, claim) and the download
    an interrupted `up` leaves running. `creating` makes everything else, failing loudly on
    a leftover. Moving an object between the two is no replacement: the engine asks the new
    provider's DiffConfig (pulumi/pulumi step_generator.go `providerChanged`), which
    replaces only when the cluster changes. Explicit providers don't read `kubernetes:*`
    stack config, so context and kubeconfig are passed through (the kubeconfig a secret).
    """

    adopting: k8s.Provider
    creating: k8s.Provider


def cluster_providers(settings: Settings) -> Providers:
    config = pulumi.Config("kubernetes")

    def provider(name: str, upsert: bool) -> k8s.Provider:
        return k8s.Provider(name, context=settings.kube_context,
                            kubeconfig=config.get_secret("kubeconfig"),
                            upsert_existing_objects=upsert)

    return Providers(provider("cluster", True), provider("cluster-create", False))


def _kept(settings: Settings, child: pulumi.ResourceOptions, adopting: k8s.Provider,
          **more: Any) -> pulumi.ResourceOptions:
    """Options of an object `cacheKeepOnDestroy` keeps: left in the cluster on destroy, and
    adopted by the next `up`."""
    return pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
        retain_on_delete=settings.cache.keep_on_destroy, provider=adopting, **more))


def _declare(cls: type[R], name: str, manifest: Mapping[str, Any],
             opts: pulumi.ResourceOptions, **override: Any) -> R:
    """One object straight from its manifest: the provider takes the manifest's own fields
    (camelCase as snake_case arguments), so nothing is taken apart by hand."""
    args = {re.sub(r"([A-Z])", r"_\1", key).lower(): value for key, value in manifest.items()}
    return cls(name, **{**args, **override}, opts=opts)


def _timeouts(seconds: int) -> pulumi.CustomTimeouts:
    """Same bound as the manifest's `pulumi.com/timeoutSeconds`, for create and update."""
    return pulumi.CustomTimeouts(create=f"{seconds}s", update=f"{seconds}s")


class RecipeNamespace(pulumi.ComponentResource):
    """The namespace (created or existing) and the secret the worker pods read: the NGC
    key (runtime nim) or the Hugging Face token (runtime vllm)."""

    name: pulumi.Output[str]
    secrets: list[k8s.core.v1.Secret]

    def __init__(
        self,
        resource_name: str,
        settings: Settings,
        tokens: Mapping[str, pulumi.Input[str]],
        adopting: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE_PREFIX}:RecipeNamespace", resource_name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        depends: list[pulumi.Resource] = []
        if settings.namespace.create:
            # Deleting a namespace deletes the cache claim inside it.
            namespace = _declare(k8s.core.v1.Namespace, "namespace",
                                 manifests.namespace(settings), _kept(settings, child, adopting))
            self.name = namespace.metadata.apply(lambda m: m["name"])
            depends.append(namespace)
        else:
            self.name = pulumi.Output.from_input(settings.namespace.name)
        self.secrets = []
        for key in settings.secrets.required:
            self.secrets.append(_declare(
                k8s.core.v1.Secret, SECRET_RESOURCES[key],
                manifests.token_secret(settings, key, pulumi.Output.secret(tokens[key])),
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=depends))))
        self.register_outputs({"name": self.name})


class NetworkPolicies(pulumi.ComponentResource):
    """Each pod of the stack takes only the traffic it needs (infra/network_policies.py);
    declared before any pod, so none runs open."""

    def __init__(self, resource_name: str, settings: Settings, namespace: RecipeNamespace,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TYPE_PREFIX}:NetworkPolicies", resource_name, None, opts)
        for name, policy in network_policies(settings).items():
            _declare(k8s.networking.v1.NetworkPolicy, name, policy,
                     pulumi.ResourceOptions(parent=self, depends_on=[namespace]))
        self.register_outputs({})


class ModelCache(pulumi.ComponentResource):
    """The shared model cache claim and the Job that fills it, awaited until Complete.

    The claim is retained by default (`cacheKeepOnDestroy`): `pulumi destroy` leaves it
    and the next `pulumi up` of either stack adopts it. Its spec is written once: a later
    change to cacheSize or cacheStorageClass never replaces (and so empties) the cache,
    whatever `cacheKeepOnDestroy` says; the program warns with the step to take by hand.
    """

    claim_name: pulumi.Output[str]
    download_job: k8s.batch.v1.Job

    def __init__(
        self,
        resource_name: str,
        settings: Settings,
        namespace: RecipeNamespace,
        live: cluster.LiveObjects | None,
        adopting: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE_PREFIX}:ModelCache", resource_name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        depends: list[pulumi.Resource] = [*namespace.secrets]
        spec = cluster.claim_spec(settings, live) if settings.cache.create_claim else None
        drift = cluster.claim_drift(settings, live)
        if drift:
            pulumi.log.warn(drift, resource=self)
        if spec is not None:
            # The provider replaces a claim on any spec change, and a replacement
            # empties the cache: the spec is set once, a later change only warns.
            claim = _declare(
                k8s.core.v1.PersistentVolumeClaim, "claim", manifests.model_cache_claim(settings),
                _kept(settings, child, adopting, depends_on=[namespace], ignore_changes=["spec"]),
                spec=spec)
            self.claim_name = claim.metadata.apply(lambda m: m["name"])
            depends.append(claim)
        else:
            if settings.cache.create_claim:
                pulumi.log.info(
                    f"model cache claim {settings.cache.claim_name} exists and was not made "
                    "by this project: used as it is (as cacheExistingClaim), never deleted "
                    "by this stack", resource=self)
            self.claim_name = pulumi.Output.from_input(settings.cache.claim_name)
        job = manifests.model_download_job(settings)
        live_job = live.download_job if live else None
        done = cluster.completed(live_job)
        if done and cluster.download_differs(settings, live_job):
            kubectl, name = settings.kubectl, settings.download_job_name
            pulumi.log.info(
                f"download Job {name} completed for an earlier template and is kept as it is "
                "(a completed Job is never replaced). If the model's settings changed (image, "
                f"nimModelProfile...), download again: `{kubectl} delete job {name}`, then "
                "`pulumi up --refresh`", resource=self)
        self.download_job = _declare(
            k8s.batch.v1.Job, "download", job, pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=depends,
                    provider=adopting,
                    custom_timeouts=_timeouts(settings.timeouts.download_secs),
                    # The provider replaces a Job on any `.spec.template` change (deleting
                    # it first: the name is fixed), and a download on a GPU would wait for
                    # the GPUs the graph holds. A completed Job is kept as it is; placement
                    # never changes the cache's content.
                    ignore_changes=["spec"] if done else DOWNLOAD_PLACEMENT_FIELDS,
                ),
            ),
        )
        self.register_outputs(
            {"claimName": self.claim_name, "downloadJob": job["metadata"]["name"]}
        )


class ReasonerGraph(pulumi.ComponentResource):
    """The DynamoGraphDeployment, declared once the cache is filled, awaited until Ready."""

    graph: k8s.apiextensions.CustomResource
    name: pulumi.Output[str]
    frontend_service: pulumi.Output[str]

    def __init__(
        self,
        resource_name: str,
        settings: Settings,
        cache: ModelCache,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE_PREFIX}:ReasonerGraph", resource_name, None, opts)
        self.graph = _declare(
            k8s.apiextensions.CustomResource, "graph", manifests.graph(settings),
            pulumi.ResourceOptions(parent=self, depends_on=[cache.download_job],
                                   custom_timeouts=_timeouts(settings.timeouts.graph_secs)))
        self.name = self.graph.metadata.apply(lambda m: m["name"])
        self.frontend_service = self.name.apply(names.frontend_service_name)
        self.register_outputs({"name": self.name, "frontendService": self.frontend_service})


@dataclass(frozen=True)
class Deployment:
    """What `deploy` declared; later steps (e.g. a post-deploy hook) depend on `graph`."""

    namespace: RecipeNamespace
    cache: ModelCache
    graph: ReasonerGraph
    # What the later steps create with (never adopting); `adopting` for a Job an
    # interrupted `up` may leave running under its fixed name.
    provider: k8s.Provider
    adopting: k8s.Provider


def deploy(settings: Settings, tokens: Mapping[str, pulumi.Input[str]],
           live: cluster.LiveObjects | None) -> Deployment:
    """Declare the whole recipe for one stack, in order. `tokens` maps each secret config
    key the runtime needs (`settings.secrets.required`) to its Pulumi secret value; `live`
    is what `infra.cluster.observe` found (None: not reachable)."""
    providers = cluster_providers(settings)
    opts = pulumi.ResourceOptions(providers=[providers.creating])
    namespace = RecipeNamespace("namespace", settings, tokens, providers.adopting, opts)
    policies = NetworkPolicies("network-policies", settings, namespace, opts)
    cache = ModelCache("model-cache", settings, namespace, live, providers.adopting,
                       pulumi.ResourceOptions.merge(
                           opts, pulumi.ResourceOptions(depends_on=[policies])))
    graph = ReasonerGraph("graph", settings, cache, opts)
    return Deployment(namespace, cache, graph, providers.creating, providers.adopting)


def stack_outputs(settings: Settings, deployment: Deployment) -> dict[str, Any]:
    """Stack outputs: where the frontend is and the exact commands to check it."""
    port = names.FRONTEND_PORT
    ttl = settings.routing.affinity_ttl_secs
    forward = f"{settings.kubectl} port-forward service/{settings.frontend_service} {port}:{port}"
    return {
        "namespace": deployment.namespace.name,
        "graphName": deployment.graph.name,
        "frontendService": deployment.graph.frontend_service,
        "frontendPort": port,
        "servedModel": settings.workers.served_model,
        "profile": settings.profile,
        "routerMode": settings.routing.router_mode,
        "sessionAffinityTtlSecs": ttl if ttl is not None else 0,
        "modelCacheClaim": deployment.cache.claim_name,
        "portForwardCommand": deployment.graph.name.apply(lambda _: forward),
        "listModelsCommand": f"curl -fsS http://localhost:{port}/v1/models",
    }
