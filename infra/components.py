"""Pulumi resources of the recipe: one component per concern a user sees in `pulumi stack`.

Every manifest comes from `infra.manifests`, declared as it is; this module adds what only
Pulumi expresses (parents, order, waits, what outlives `pulumi destroy`). Order: namespace
and token Secret -> NetworkPolicies (before any pod) -> model cache (claim + download Job,
awaited until Complete) -> graph (awaited until Ready); the benchmark follows
(infra/benchmark_components.py).
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


def _declare(cls: type[R], name: str, manifest: Mapping[str, Any],
             opts: pulumi.ResourceOptions, **override: Any) -> R:
    """One object straight from its manifest: the provider takes the manifest's own fields
    (camelCase as snake_case arguments), so nothing is taken apart by hand."""
    args = {re.sub(r"([A-Z])", r"_\1", key).lower(): value for key, value in manifest.items()}
    return cls(name, **{**args, **override}, opts=opts)


def _opts(parent: pulumi.Resource, **more: Any) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, **more)


def _timeouts(seconds: int) -> pulumi.CustomTimeouts:
    """Same bound as the manifest's `pulumi.com/timeoutSeconds`, for create and update."""
    return pulumi.CustomTimeouts(create=f"{seconds}s", update=f"{seconds}s")


class RecipeNamespace(pulumi.ComponentResource):
    """The namespace (created or existing) and the Secret of the token the workers read:
    the NGC key (runtime nim) or the Hugging Face token (runtime vllm)."""

    def __init__(self, settings: Settings, tokens: Mapping[str, pulumi.Input[str]],
                 adopting: k8s.Provider, opts: pulumi.ResourceOptions) -> None:
        super().__init__(f"{TYPE_PREFIX}:RecipeNamespace", "namespace", None, opts)
        depends: list[pulumi.Resource] = []
        self.name: pulumi.Output[str] = pulumi.Output.from_input(settings.namespace.name)
        if settings.namespace.create:
            # `destroy` keeps it when the cache is kept: deleting it deletes the claim.
            namespace = _declare(k8s.core.v1.Namespace, "namespace",
                                 manifests.namespace(settings),
                                 _opts(self, provider=adopting,
                                       retain_on_delete=settings.cache.keep_on_destroy))
            self.name = namespace.metadata.apply(lambda m: m["name"])
            depends.append(namespace)
        self.secrets = [
            _declare(k8s.core.v1.Secret, SECRET_RESOURCES[key],
                     manifests.token_secret(settings, key, pulumi.Output.secret(tokens[key])),
                     _opts(self, depends_on=depends))
            for key in settings.secrets.required]
        self.register_outputs({"name": self.name})


class ModelCache(pulumi.ComponentResource):
    """The shared model cache claim and the Job that fills it, awaited until Complete.

    The claim is retained by default (`cacheKeepOnDestroy`) and adopted by the next `up` of
    either stack. Its spec is written once: the provider replaces a claim on any spec
    change, and a replacement empties the cache, so a later change only warns.
    """

    def __init__(self, settings: Settings, namespace: RecipeNamespace,
                 live: cluster.LiveObjects | None, adopting: k8s.Provider,
                 opts: pulumi.ResourceOptions) -> None:
        super().__init__(f"{TYPE_PREFIX}:ModelCache", "model-cache", None, opts)
        depends: list[pulumi.Resource] = [*namespace.secrets]
        spec = cluster.claim_spec(settings, live) if settings.cache.create_claim else None
        drift = cluster.claim_drift(settings, live)
        if drift:
            pulumi.log.warn(drift, resource=self)
        self.claim_name: pulumi.Output[str] = pulumi.Output.from_input(
            settings.cache.claim_name)
        if spec is not None:
            claim = _declare(
                k8s.core.v1.PersistentVolumeClaim, "claim", manifests.model_cache_claim(settings),
                _opts(self, provider=adopting, retain_on_delete=settings.cache.keep_on_destroy,
                      depends_on=[namespace], ignore_changes=["spec"]), spec=spec)
            self.claim_name = claim.metadata.apply(lambda m: m["name"])
            depends.append(claim)
        elif settings.cache.create_claim:
            pulumi.log.info(
                f"model cache claim {settings.cache.claim_name} exists and was not made "
                "by this project: used as it is (as cacheExistingClaim), never deleted "
                "by this stack", resource=self)
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
        # The provider replaces a Job on any `.spec.template` change (deleting it first: the
        # name is fixed), and a download on a GPU would wait for the GPUs the graph holds. A
        # completed Job is kept as it is; placement never changes the cache's content.
        self.download_job = _declare(k8s.batch.v1.Job, "download", job, _opts(
            self, depends_on=depends, provider=adopting,
            custom_timeouts=_timeouts(settings.timeouts.download_secs),
            ignore_changes=["spec"] if done else DOWNLOAD_PLACEMENT_FIELDS))
        self.register_outputs(
            {"claimName": self.claim_name, "downloadJob": job["metadata"]["name"]})


class ReasonerGraph(pulumi.ComponentResource):
    """The DynamoGraphDeployment, declared once the cache is filled, awaited until Ready."""

    def __init__(self, settings: Settings, cache: ModelCache,
                 opts: pulumi.ResourceOptions) -> None:
        super().__init__(f"{TYPE_PREFIX}:ReasonerGraph", "graph", None, opts)
        self.graph = _declare(
            k8s.apiextensions.CustomResource, "graph", manifests.graph(settings),
            _opts(self, depends_on=[cache.download_job],
                  custom_timeouts=_timeouts(settings.timeouts.graph_secs)))
        self.name: pulumi.Output[str] = self.graph.metadata.apply(lambda m: m["name"])
        self.frontend_service = self.name.apply(names.frontend_service_name)
        self.register_outputs({"name": self.name, "frontendService": self.frontend_service})


@dataclass(frozen=True)
class Deployment:
    """What `deploy` declared. `provider` creates (and fails loudly on a leftover);
    `adopting` serves what outlives a run, e.g. a Job an interrupted `up` left running."""

    namespace: RecipeNamespace
    cache: ModelCache
    graph: ReasonerGraph
    provider: k8s.Provider
    adopting: k8s.Provider


def deploy(settings: Settings, tokens: Mapping[str, pulumi.Input[str]],
           live: cluster.LiveObjects | None) -> Deployment:
    """Declare the recipe for one stack, in order. `tokens`: the Pulumi secret of each key
    in `settings.secrets.required`; `live`: what `cluster.observe` found (None: not read).

    Two providers, one cluster: since pulumi-kubernetes 4.29 creating an existing object
    fails with AlreadyExists unless the provider upserts (its docs on
    `upsertExistingObjects`), so `cluster` (the one provider's old name, so existing stacks
    keep theirs) upserts, only for what outlives a run: what `destroy` keeps and the
    download an interrupted `up` leaves running. `cluster-create` makes the rest. Moving an
    object between them replaces it only if the cluster changes (pulumi/pulumi
    step_generator.go `providerChanged`). Explicit providers don't read `kubernetes:*`
    config, so context and kubeconfig (a secret) are passed through.
    """
    kubeconfig = pulumi.Config("kubernetes").get_secret("kubeconfig")
    adopting, creating = (
        k8s.Provider(name, context=settings.kube_context, kubeconfig=kubeconfig,
                     upsert_existing_objects=upsert)
        for name, upsert in (("cluster", True), ("cluster-create", False)))
    opts = pulumi.ResourceOptions(providers=[creating])
    namespace = RecipeNamespace(settings, tokens, adopting, opts)
    policies = pulumi.ComponentResource(f"{TYPE_PREFIX}:NetworkPolicies", "network-policies",
                                        None, opts)
    # Each pod takes only the traffic it needs (infra/network_policies.py), before any runs.
    for name, policy in network_policies(settings).items():
        _declare(k8s.networking.v1.NetworkPolicy, name, policy,
                 _opts(policies, depends_on=[namespace]))
    policies.register_outputs({})
    cache = ModelCache(settings, namespace, live, adopting,
                       pulumi.ResourceOptions.merge(opts, _opts(None, depends_on=[policies])))
    return Deployment(namespace, cache, ReasonerGraph(settings, cache, opts), creating, adopting)


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
