"""Pulumi resources of the recipe: one component per concern, in deployment order.

Thin on purpose: every manifest comes from `infra.manifests`; this module adds what only
Pulumi can express (parents, ordering, waits, what survives `pulumi destroy`).

Order: RecipeNamespace (namespace + NGC secret) -> NetworkPolicies (before any pod) ->
ModelCache (claim + download Job, awaited until Complete) -> ReasonerGraph
(DynamoGraphDeployment, awaited until Ready). The
post-deploy benchmark that follows lives in infra/benchmark_components.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra import benchmark_manifests, cluster, manifests, recipe
from infra.network_policies import network_policies
from infra.settings import HF_TOKEN, NGC_API_KEY, Settings

TYPE_PREFIX = "cosmos3-routing:infra"
DOWNLOAD_PLACEMENT_FIELDS = [
    f"spec.{field}" for field in (
        "template.spec.imagePullSecrets", "template.spec.nodeSelector",
        "template.spec.tolerations", "activeDeadlineSeconds", "backoffLimit",
    )
]


def cluster_provider(settings: Settings) -> k8s.Provider:
    """The one provider of every object the stack declares.

    It adopts an object that already exists under the stack's name
    (`upsertExistingObjects`) instead of failing with AlreadyExists, as pulumi-kubernetes
    does since 4.29 by default: what `destroy` kept (namespace, cache claim) and what an
    interrupted `up` or `destroy` left. What exists but was made outside the project is
    not adopted: `infra.cluster` uses it as it is or refuses it with the fix before this
    point. Explicit providers don't read `kubernetes:*` stack config, so the context and
    kubeconfig the user set are passed through (the kubeconfig as a secret).
    """
    cluster = pulumi.Config("kubernetes")
    return k8s.Provider(
        "cluster",
        context=settings.kube_context,
        kubeconfig=cluster.get_secret("kubeconfig"),
        upsert_existing_objects=True,
    )


def _kept(settings: Settings, child: pulumi.ResourceOptions, **more: Any
          ) -> pulumi.ResourceOptions:
    """Options of an object `cacheKeepOnDestroy` keeps: left in the cluster on destroy."""
    return pulumi.ResourceOptions.merge(
        child, pulumi.ResourceOptions(retain_on_delete=settings.cache.keep_on_destroy, **more)
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
                opts=_kept(settings, child),
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


class NetworkPolicies(pulumi.ComponentResource):
    """Each pod of the stack takes only the traffic it needs (infra/network_policies.py);
    declared before any pod, so none runs open."""

    def __init__(self, resource_name: str, settings: Settings, namespace: RecipeNamespace,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TYPE_PREFIX}:NetworkPolicies", resource_name, None, opts)
        for name, policy in network_policies(settings).items():
            k8s.networking.v1.NetworkPolicy(
                name, metadata=policy["metadata"], spec=policy["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace]))
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
            pvc = manifests.model_cache_claim(settings)
            claim = k8s.core.v1.PersistentVolumeClaim(
                "claim",
                metadata=pvc["metadata"],
                spec=spec,
                # The provider replaces a claim on any spec change, and a replacement
                # empties the cache: the spec is set once, a later change only warns.
                opts=_kept(settings, child, depends_on=[namespace], ignore_changes=["spec"]),
            )
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
        self.download_job = k8s.batch.v1.Job(
            "download",
            metadata=job["metadata"],
            spec=job["spec"],
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=depends,
                    custom_timeouts=_timeouts(settings.timeouts.download_secs),
                    # A Job's pod template is immutable: a change there replaces the Job,
                    # and a download on a GPU would wait for the GPUs the graph holds.
                    # Where the pods run and pull from does not change the cache's content.
                    ignore_changes=DOWNLOAD_PLACEMENT_FIELDS,
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
            manifest = benchmark_manifests.with_internal_media(manifest)
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
    provider: k8s.Provider


def deploy(settings: Settings, tokens: Mapping[str, pulumi.Input[str]],
           live: cluster.LiveObjects | None) -> Deployment:
    """Declare the whole recipe for one stack, in order. `tokens` maps each secret config
    key the runtime needs (`settings.secrets.required`) to its Pulumi secret value; `live`
    is what `infra.cluster.observe` found (None: not reachable)."""
    provider = cluster_provider(settings)
    opts = pulumi.ResourceOptions(providers=[provider])
    namespace = RecipeNamespace("namespace", settings, tokens, opts)
    policies = NetworkPolicies("network-policies", settings, namespace, opts)
    cache = ModelCache("model-cache", settings, namespace, live, pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(depends_on=[policies])))
    graph = ReasonerGraph("graph", settings, cache, opts)
    return Deployment(namespace, cache, graph, provider)


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
