"""The names and labels the Dynamo operator derives from a graph, and their limits.

The operator builds its child objects' names and labels from ours, after `pulumi up` has
applied the graph; a name over a Kubernetes limit is refused then, the graph never becomes
Ready, and `up` fails only after the download and `graphTimeoutSecs`. So the settings
validation checks the derived names here, before anything is created. Read in
ai-dynamo/dynamo `deploy/operator`:

- `ComputeDynamoNamespace` (api/v1beta1/dynamocomponentdeployment_types.go at 50820f5b):
  `<k8s-namespace>-<graph>` (dots in the graph name become '-'), stamped on every object of
  the graph as the label `nvidia.com/dynamo-namespace` (internal/consts/consts.go at
  0367e404): a label value, at most 63 characters.
- `GetDCDResourceName` (internal/dynamo/graph.go at d4872d7e): `<graph>-<component>` in
  lowercase, workers with `-<worker hash>` (8 characters, `ComputeWorkerSpecHash`); these
  name the component's Deployment and Service, so at most 63 characters (a DNS label).
- Grove (`MaxCombinedGroveResourceNameLength`, consts.go at 0367e404; Grove's PodCliqueSet
  webhook): where the platform runs graphs through Grove, every component, single-node
  ones like ours included, needs len(graph) + len(component) <= 45, since pods are named
  `<graph>-<index>-<component>-<random>`. We check it always: a stack then deploys
  whichever way the platform is installed.
"""

from __future__ import annotations

DNS_LABEL_MAX = 63
WORKER_HASH_LEN = 8
GROVE_COMBINED_MAX = 45
DYNAMO_NAMESPACE_LABEL = "nvidia.com/dynamo-namespace"


def dynamo_namespace(k8s_namespace: str, graph: str) -> str:
    """The operator's Dynamo namespace of a graph (also a label value on its objects)."""
    return f"{k8s_namespace}-{graph.replace('.', '-')}"


def component_name(graph: str, component: str, worker: bool = False) -> str:
    """Name of a component's objects; a worker's carries its 8-character spec hash."""
    base = f"{graph}-{component.lower()}"
    return f"{base}-{'0' * WORKER_HASH_LEN}" if worker else base


def max_graph_len(components: dict[str, bool]) -> int:
    """The longest graph name whose components' names fit every limit above;
    `components` maps each component's name to whether it is a worker."""
    return min(
        min(GROVE_COMBINED_MAX - len(c), DNS_LABEL_MAX - len(component_name("", c, worker)))
        for c, worker in components.items()
    )


def max_namespace_len(graph: str) -> int:
    """The longest Kubernetes namespace whose Dynamo namespace label fits with `graph`."""
    return min(DNS_LABEL_MAX, DNS_LABEL_MAX - len(dynamo_namespace("", graph)))
