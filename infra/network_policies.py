"""The stack's NetworkPolicies: every pod it makes accepts only the traffic it needs.

Ingress only. Each policy selects pods of this stack alone (the graph's by the operator's
labels, ours by the profile label), so two stacks in one namespace stay apart. The paths:

- the frontend (HTTP port): from this stack's smoke test and sweep, and from
  `networkPolicySources` (your clients, your Prometheus);
- the workers, any port, from this graph's pods (the frontend's requests and KV-event
  subscriptions; the NIM's per-worker frontend may fetch from a peer);
  the frontend, any port, from this graph's pods (the workers stream responses back over
  connections of their own: Dynamo's TCP request plane). Workers are "the graph's pods but
  the frontend", so whatever type label the operator gives them, this traffic is never cut;
- the workers' system port (health, /metrics) also from `networkPolicySources`. The Dynamo
  platform needs nothing inbound here: with Kubernetes discovery the pods find each other
  through the API server (EndpointSlices, DynamoWorkerMetadata), not through a peer;
- the video server: from this graph's pods (the media fetch happens where the request is
  processed; `DYN_MM_ALLOW_INTERNAL` is set on both components);
- nothing to the download Job's pods, the smoke test, the sweep or the results reader.

Egress stays open: the download reaches NGC or Hugging Face, the pods reach the API server,
DNS and the platform's NATS, and those addresses are the cluster's, not ours to list.
The graph's pods carry the operator's labels (ai-dynamo/dynamo
deploy/operator/internal/consts/consts.go at 0367e404): `nvidia.com/dynamo-graph-deployment-
name` = the graph, `nvidia.com/dynamo-component-type` = the component's `type`.
"""

from __future__ import annotations

from typing import Any

from infra import names
from infra.benchmark_manifests import VIDEO_SERVER_PORT
from infra.manifests import COMPONENT_LABEL, PROFILE_LABEL, download_pod_labels, labels, metadata
from infra.names import cidr
from infra.settings import Settings

GRAPH_LABEL = "nvidia.com/dynamo-graph-deployment-name"
COMPONENT_TYPE_LABEL = "nvidia.com/dynamo-component-type"
# Our pods that take no inbound traffic, and the two that call the frontend.
CLOSED_COMPONENTS = ("benchmark-smoke", "benchmark-sweep", "benchmark-results-reader")
CLIENT_COMPONENTS = ("benchmark-smoke", "benchmark-sweep")


def graph_pods(settings: Settings, frontend: bool | None = None) -> dict[str, Any]:
    """The graph's pods: all, its frontend, or all but its frontend (the workers, whatever
    type label the operator gives them)."""
    selector: dict[str, Any] = {"matchLabels": {GRAPH_LABEL: settings.graph_name}}
    if frontend is not None:
        selector["matchExpressions"] = [{"key": COMPONENT_TYPE_LABEL,
                                         "operator": "In" if frontend else "NotIn",
                                         "values": ["frontend"]}]
    return {"podSelector": selector}


def _our_pods(settings: Settings, components: tuple[str, ...]) -> dict[str, Any]:
    return {"podSelector": {
        "matchLabels": {PROFILE_LABEL: settings.profile},
        "matchExpressions": [{"key": COMPONENT_LABEL, "operator": "In",
                              "values": list(components)}],
    }}


def source_peer(source: str) -> dict[str, Any]:
    """A CIDR becomes an ipBlock, anything else a namespace by name."""
    block = cidr(source)
    if block is not None:
        return {"ipBlock": {"cidr": block}}
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": source}}}


def _tcp(port: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port}]


def _policy(settings: Settings, name: str, selector: dict[str, Any],
            ingress: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(settings.namespace.name,
                             names.stack_object_name(settings.graph_name, name),
                             labels(settings.profile)),
        "spec": {"podSelector": selector["podSelector"], "policyTypes": ["Ingress"],
                 "ingress": ingress},
    }


def network_policies(settings: Settings) -> dict[str, dict[str, Any]]:
    """Every policy of the stack by its short name (none when `networkPolicies` is off)."""
    if not settings.network.policies:
        return {}
    sources = [source_peer(s) for s in settings.network.sources]
    graph = graph_pods(settings)

    def from_sources(port: int) -> list[dict[str, Any]]:
        return [{"from": sources, "ports": _tcp(port)}] if sources else []

    videos = {"podSelector": {"matchLabels": labels(settings.profile, "benchmark-videos")}}
    ingress = {
        "frontend": (graph_pods(settings, frontend=True), [
            {"from": [_our_pods(settings, CLIENT_COMPONENTS)],
             "ports": _tcp(names.FRONTEND_PORT)},
            {"from": [graph]},
            *from_sources(names.FRONTEND_PORT),
        ]),
        "workers": (graph_pods(settings, frontend=False), [
            {"from": [graph]},
            *from_sources(names.WORKER_SYSTEM_PORT),
        ]),
        "videos": (videos, [
            {"from": [graph],
             "ports": _tcp(VIDEO_SERVER_PORT)},
        ]),
        "no-ingress": (_our_pods(settings, CLOSED_COMPONENTS), []),
        "download": ({"podSelector": {"matchLabels": download_pod_labels(settings)}}, []),
    }
    return {name: _policy(settings, name, selector, rules)
            for name, (selector, rules) in ingress.items()}
