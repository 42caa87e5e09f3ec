"""Names and fixed facts of the Cosmos3 Super Reasoner recipe: the one place they live.

Everything that must match between the cluster resources, the benchmark toolkit and the
local rehearsal (resource names, the served model, the session header) is defined here.
"""

from __future__ import annotations

RECIPE = "cosmos3-super-reasoner"


def served_model_name(variant: str = "super") -> str:
    """The model id `/v1/models` lists for a variant (the NIM's naming; vLLM is told it)."""
    return f"nvidia/cosmos3-{variant}-reasoner"


SERVED_MODEL_NAME = served_model_name()

NGC_SECRET_KEY = "NGC_API_KEY"
MODEL_CACHE_PVC_NAME = "shared-model-cache"
# Short on purpose: the operator derives longer names from it (infra/operator_names.py).
GRAPH_NAME_PREFIX = "cosmos3"

FRONTEND_COMPONENT = "Frontend"
WORKER_COMPONENT = "Worker"
# The graph's components by name, and whether each is a worker (its objects get a hash).
GRAPH_COMPONENTS = {FRONTEND_COMPONENT: False, WORKER_COMPONENT: True}
FRONTEND_PORT = 8000
WORKER_SYSTEM_PORT = 9090

# Header that binds a request to a session; the frontend routes on it when affinity is on.
SESSION_HEADER = "X-Dynamo-Session-ID"

# The NIM image runs as this user and group; the cache must be writable by them.
NIM_UID = 1000
NIM_GID = 1000
NIM_CACHE_PATH = "/opt/nim/.cache"


def graph_name(profile: str) -> str:
    """DynamoGraphDeployment name of a routing profile, e.g. `cosmos3-round-robin`."""
    return f"{GRAPH_NAME_PREFIX}-{profile}"


def stack_object_name(graph: str, what: str) -> str:
    """A stack's own object, named after its graph: the NGC secret, the token secret and
    the download Job. Per stack, so neither the recipe's kubectl steps (`ngc-api-secret`,
    `cosmos3-super-reasoner-model-download`) nor the other stack own an object of that
    name, and `pulumi destroy` of one stack never deletes what another still uses."""
    return f"{graph}-{what}"


def frontend_service_name(graph: str) -> str:
    """The Dynamo operator names the frontend Service after the graph."""
    return f"{graph}-frontend"
