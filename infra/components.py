"""Pulumi resources of the recipe: one component per concern, in deployment order.

Thin on purpose: every manifest comes from `infra.manifests`; this module adds what only
Pulumi can express (parents, ordering, waits, what survives `pulumi destroy`).

Order: RecipeNamespace (namespace + NGC secret) -> ModelCache (claim + download Job, awaited
until Complete) -> ReasonerGraph (DynamoGraphDeployment, awaited until Ready). The
post-deploy benchmark that follows lives in infra/benchmark_components.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra import benchmark_jobs, manifests, recipe
from infra.settings import HF_TOKEN, NGC_API_KEY, Settings

TYPE_PREFIX = "cosmos3-routing:infra"


def kept_objects_provider(settings: Settings) -> k8s.Provider | None:
    """Provider for the objects `pulumi destroy` keeps (namespace, cache claim).

    Kept objects outlive the stack that made it, so the next `pulumi up` of either stack
    finds them in the cluster. This provider adopts them (`upsertExistingObjects`)
    instead of failing with AlreadyExists; a kept object is never deleted by Pulumi, so
    adoption can't turn a replacement into a deletion. A claim whose storage class or
    access modes differ is still refused by the API server (immutable fields), with the
    cache intact. Explicit providers don't read `kubernetes:*` stack config, so the
    context and kubeconfig the user set are passed through (the kubeconfig as a secret:
    it may hold credentials).
    """
    if not settings.cache.keep_on_destroy:
        return None
    cluster = pulumi.Config("kubernetes")
    return k8s.Provider(
        "kept-objects",
        context=settings.kube_context,
        kubeconfig=cluster.get_secret("kubeconfig"),
        upsert_existing_objects=True,
    )


def _kept(
    child: pulumi.ResourceOptions, provider: k8s.Provider | None, **more: Any
) -> pulumi.ResourceOptions:
    """Options of an object kept on destroy: retained, and adopted when it exists."""
    return pulumi.ResourceOptions.merge(
        child,
        pulumi.ResourceOptions(retain_on_delete=provider is not None, provider=provider, **more),
    )


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
        kept: k8s.Provider | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE_PREFIX}:RecipeNamespace", resource_name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        depends: list[pulumi.Resource] = []
        if settings.namespace.create:
            ns = manifests.namespace(settings)
            namespace = k8s.core.v1.Namespace(
                "namespace",
                metadata=ns["metadata"],
                # Deleting a namespace deletes the cache claim inside it.
                opts=_kept(child, kept),
            )
            self.name = namespace.metadata.apply(lambda m: m["name"])
            depends.append(namespace)
        else:
            self.name = pulumi.Output.from_input(settings.namespace.name)
        self.secrets = []
        for key, name, build in (
            (NGC_API_KEY, "ngc-secret", manifests.ngc_secret),
            (HF_TOKEN, "hf-token-secret", manifests.hf_token_secret),
        ):
            if key not in settings.secrets.required:
                continue
            secret = build(settings, pulumi.Output.secret(tokens[key]))
            self.secrets.append(k8s.core.v1.Secret(
                name,
                metadata=secret["metadata"],
                type=secret["type"],
                string_data=secret["stringData"],
                opts=pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions(depends_on=depends)
                ),
            ))
        self.register_outputs({"name": self.name})


def _warn_on_drift(settings: Settings, live: Any, claim: pulumi.Resource) -> None:
    """Say what to do when the cache settings no longer match the claim (its spec is
    ignored after creation, so the claim itself is never replaced)."""
    requests = (live.resources.requests if live.resources else None) or {}
    message = manifests.cache_claim_drift(settings, live.storage_class_name,
                                          requests.get("storage"))
    if message:
        pulumi.log.warn(message, resource=claim)


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
        kept: k8s.Provider | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE_PREFIX}:ModelCache", resource_name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        depends: list[pulumi.Resource] = [*namespace.secrets]
        if settings.cache.create_claim:
            pvc = manifests.model_cache_claim(settings)
            claim = k8s.core.v1.PersistentVolumeClaim(
                "claim",
                metadata=pvc["metadata"],
                spec=pvc["spec"],
                # The provider replaces a claim on any spec change, and a replacement
                # empties the cache: the spec is set once, a later change only warns.
                opts=_kept(child, kept, depends_on=[namespace], ignore_changes=["spec"]),
            )
            claim.spec.apply(lambda live: _warn_on_drift(settings, live, claim))
            self.claim_name = claim.metadata.apply(lambda m: m["name"])
            depends.append(claim)
        else:
            self.claim_name = pulumi.Output.from_input(settings.cache.claim_name)
        job = manifests.model_download_job(settings)
        self.download_job = k8s.batch.v1.Job(
            "download",
            metadata=job["metadata"],
            spec=job["spec"],
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=depends,
                    custom_timeouts=_timeouts(settings.timeouts.download_secs),
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
        manifest = manifests.graph(settings)
        if settings.benchmark.any_enabled:
            # The benchmark's videos come from an in-cluster http:// Service.
            manifest = benchmark_jobs.with_internal_media(manifest)
        self.graph = k8s.apiextensions.CustomResource(
            "graph",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[cache.download_job],
                custom_timeouts=_timeouts(settings.timeouts.graph_secs),
            ),
        )
        self.name = self.graph.metadata.apply(lambda m: m["name"])
        self.frontend_service = self.name.apply(recipe.frontend_service_name)
        self.register_outputs({"name": self.name, "frontendService": self.frontend_service})


@dataclass(frozen=True)
class Deployment:
    """What `deploy` declared; later steps (e.g. a post-deploy hook) depend on `graph`."""

    namespace: RecipeNamespace
    cache: ModelCache
    graph: ReasonerGraph


def deploy(settings: Settings, tokens: Mapping[str, pulumi.Input[str]]) -> Deployment:
    """Declare the whole recipe for one stack, in order. `tokens` maps each secret config
    key the runtime needs (`settings.secrets.required`) to its Pulumi secret value."""
    kept = kept_objects_provider(settings)
    namespace = RecipeNamespace("namespace", settings, tokens, kept)
    cache = ModelCache("model-cache", settings, namespace, kept)
    graph = ReasonerGraph("graph", settings, cache)
    return Deployment(namespace, cache, graph)


def stack_outputs(settings: Settings, deployment: Deployment) -> dict[str, Any]:
    """Stack outputs: where the frontend is and the exact commands to check it."""
    commands = manifests.verify_commands(settings)
    ttl = settings.routing.affinity_ttl_secs
    return {
        "namespace": deployment.namespace.name,
        "graphName": deployment.graph.name,
        "frontendService": deployment.graph.frontend_service,
        "frontendPort": recipe.FRONTEND_PORT,
        "servedModel": settings.workers.served_model,
        "profile": settings.profile,
        "routerMode": settings.routing.router_mode,
        "sessionAffinityTtlSecs": ttl if ttl is not None else 0,
        "modelCacheClaim": deployment.cache.claim_name,
        "portForwardCommand": deployment.graph.name.apply(lambda _: commands["portForward"]),
        "listModelsCommand": commands["listModels"],
    }
