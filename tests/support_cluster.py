"""The cluster as the API returns it, for tests of the preflight and the program.

Objects are the kubernetes client's own models, deserialized from the JSON the API sends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client

from infra.cluster import GRAPH_CRD, OPERATOR_SELECTOR, LiveObjects


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
                                            "namespace": "dynamo-system",
                                            "labels": dict(term.split("=") for term in
                                                           OPERATOR_SELECTOR.split(","))},
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


def served(obj: Any) -> Any:
    """An API model as the API server sends it (JSON-ready)."""
    return client.ApiClient().sanitize_for_serialization(obj)


def healthy_routes() -> dict[str, Any]:
    """`healthy()` at the paths the preflight reads (`api_server`)."""
    live = healthy()
    crd = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{GRAPH_CRD}"
    return {crd: served(live.crd),
            "/apis/apps/v1/deployments": {"items": served(list(live.operators))},
            "/apis/storage.k8s.io/v1/storageclasses/rwx-test": served(live.storage_class),
            "/api/v1/nodes": {"items": served(list(live.nodes))}}


@contextmanager
def api_server(routes: dict[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """A Kubernetes API on 127.0.0.1 answering GETs from `routes` (path -> body; a list body's
    items filtered by an equality `labelSelector`, as the API server does; 404 otherwise):
    the kubeconfig that reaches it, and the paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            asked.append(url.path)
            body = routes.get(url.path)
            wanted = dict(term.split("=", 1) for term in ",".join(
                parse_qs(url.query).get("labelSelector", [])).split(",") if term)
            if isinstance(body, dict) and "items" in body:
                body = {"items": [o for o in body["items"] if wanted.items()
                                  <= (o.get("metadata", {}).get("labels") or {}).items()]}
            data = json.dumps(body if body is not None else {
                "kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound"})
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data.encode())

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield UNREACHABLE.replace("https://127.0.0.1:9",
                                  f"http://127.0.0.1:{server.server_port}"), asked
    finally:
        server.shutdown()
        server.server_close()
