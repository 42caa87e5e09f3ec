"""The cluster as the API returns it, for tests of the preflight and the program.

Objects are the kubernetes client's own models, deserialized from the JSON the API sends.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from infra.cluster import LiveObjects


class _Response:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body)


def as_api_returns(body: dict[str, Any], kind: str) -> Any:
    return client.ApiClient().deserialize(_Response(body), kind)


def node(name: str, gpus: int = 8, product: str = "NVIDIA-H200",
         taints: list[dict[str, str]] | None = None) -> client.V1Node:
    return as_api_returns({
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96"}},
    }, "V1Node")


def gpu_pod(node_name: str, gpus: int, namespace: str = "other",
            labels: dict[str, str] | None = None) -> client.V1Pod:
    return as_api_returns({
        "metadata": {"name": "p", "namespace": namespace, "labels": labels or {}},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {
            "requests": {"nvidia.com/gpu": str(gpus)}}}]},
    }, "V1Pod")


def healthy() -> LiveObjects:
    """A cluster on which the stack's first `up` works: what every test then varies."""
    crd = as_api_returns({"metadata": {"name": "dynamographdeployments.nvidia.com"}, "spec": {
        "group": "nvidia.com", "names": {"kind": "DynamoGraphDeployment", "plural": "x"},
        "scope": "Namespaced", "versions": [{"name": "v1beta1", "served": True,
                                            "storage": True}]}},
        "V1CustomResourceDefinition")
    operator = as_api_returns({"metadata": {"name": "dynamo-platform-dynamo-operator-"
                                                    "controller-manager",
                                            "namespace": "dynamo-system"},
                               "spec": {"selector": {}, "template": {}},
                               "status": {"readyReplicas": 1}}, "V1Deployment")
    storage = as_api_returns({"metadata": {"name": "rwx-test"},
                              "provisioner": "nfs.csi.k8s.io"}, "V1StorageClass")
    return LiveObjects(crd=crd, operators=(operator,), storage_class=storage,
                       nodes=(node("gpu-1"),))


# A kubeconfig whose API server is a closed port on 127.0.0.1.
UNREACHABLE = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""
