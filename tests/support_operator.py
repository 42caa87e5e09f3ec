"""The pods the Dynamo operator makes of a graph's components, for the scans and policy tests.

A model, read in ai-dynamo/dynamo `deploy/operator/internal` (not run: no cluster here):
- `dynamo/graph.go` (GenerateBasePodSpec, at d4872d7e): the component's `podTemplate.spec`
  is merged over the operator's base pod spec (terminationGracePeriodSeconds 60, restart
  Always); a pod security context of ours is kept whole (the operator's default, fsGroup
  1000, only when there is none); with Kubernetes discovery the pod runs as the graph's
  discovery service account `<graph>-k8s-service-discovery` (discovery/resource.go at
  0428a740, whose Role reads EndpointSlices and pods and writes DynamoWorkerMetadata);
  `sharedMemorySize` becomes a memory-backed emptyDir at /dev/shm.
- `dynamo/component_frontend.go` (at 132ccbe3) and `component_worker.go` (at 015d780b): the
  main container's base (ports, probes, env), over which our container's fields win.
- `consts/consts.go` (at 0367e404): the labels on every pod (graph name, component type,
  component, Dynamo namespace), and `nvidia.com/selector`, the component's own objects' name
  (`<graph>-<component>`, a worker's with its hash: GetDCDResourceName), which its Deployment
  selects: two frontends of one graph never select each other's pods.
"""

from __future__ import annotations

import copy
from typing import Any

from infra.manifests import COMPONENT_TYPE_LABEL, GRAPH_LABEL
from infra.names import DYNAMO_NAMESPACE_LABEL, component_name

_BASE_CONTAINERS: dict[str, dict[str, Any]] = {
    "frontend": {
        "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/live", "port": "http"},
                          "initialDelaySeconds": 15, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"},
                           "initialDelaySeconds": 10, "periodSeconds": 10},
    },
    "worker": {
        "ports": [{"name": "system", "containerPort": 9090, "protocol": "TCP"},
                  {"name": "nixl", "containerPort": 19090, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/live", "port": "system"}, "periodSeconds": 5},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "system"},
                           "periodSeconds": 10},
        "startupProbe": {"httpGet": {"path": "/live", "port": "system"},
                         "periodSeconds": 10, "failureThreshold": 720},
    },
}


SELECTOR_LABEL = "nvidia.com/selector"


def pod_labels(graph: dict[str, Any], component: dict[str, Any]) -> dict[str, str]:
    name, namespace = graph["metadata"]["name"], graph["metadata"]["namespace"]
    return {
        **component["podTemplate"].get("metadata", {}).get("labels", {}),
        GRAPH_LABEL: name,
        COMPONENT_TYPE_LABEL: component["type"],
        "nvidia.com/dynamo-component": component["name"],
        DYNAMO_NAMESPACE_LABEL: f"{namespace}-{name}",
        SELECTOR_LABEL: component_name(name, component["name"], component["type"] == "worker"),
    }


def component_deployments(graph: dict[str, Any]) -> list[dict[str, Any]]:
    """One Deployment per component, as the operator renders it (see the module doc)."""
    name, namespace = graph["metadata"]["name"], graph["metadata"]["namespace"]
    out = []
    for component in graph["spec"]["components"]:
        spec = copy.deepcopy(component["podTemplate"]["spec"])
        spec.setdefault("securityContext", {"fsGroup": 1000})
        spec.setdefault("serviceAccountName", f"{name}-k8s-service-discovery")
        spec.setdefault("terminationGracePeriodSeconds", 60)
        main = {**copy.deepcopy(_BASE_CONTAINERS[component["type"]]), **spec["containers"][0]}
        if component.get("sharedMemorySize"):
            spec.setdefault("volumes", []).append(
                {"name": "shared-memory",
                 "emptyDir": {"medium": "Memory", "sizeLimit": component["sharedMemorySize"]}})
            main.setdefault("volumeMounts", []).append(
                {"name": "shared-memory", "mountPath": "/dev/shm"})
        spec["containers"] = [main, *spec["containers"][1:]]
        labels = pod_labels(graph, component)
        out.append({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": labels[SELECTOR_LABEL], "namespace": namespace,
                         "labels": labels},
            "spec": {"replicas": component.get("replicas", 1),
                     "selector": {"matchLabels": {SELECTOR_LABEL: labels[SELECTOR_LABEL]}},
                     "template": {"metadata": {"labels": labels}, "spec": spec}},
        })
    return out
