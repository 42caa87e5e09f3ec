"""Every name, the operator's derived ones too (sources: docs/deploy-reference.md, 'Derived
names'), and the input rules; standard library only, as the pods and the rehearsal import it."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

# --- The recipe --------------------------------------------------------------------------

RECIPE = "cosmos3-super-reasoner"


def served_model_name(variant: str = "super") -> str:
    """The model id `/v1/models` lists for a variant (the NIM's naming; vLLM is told it)."""
    return f"nvidia/cosmos3-{variant}-reasoner"


SERVED_MODEL_NAME = served_model_name()
MODEL_CACHE_PVC_NAME = "shared-model-cache"
# Short on purpose: the operator derives longer names from it.
GRAPH_NAME_PREFIX = "cosmos3"
FRONTEND_COMPONENT = "Frontend"
WORKER_COMPONENT = "Worker"
# The graph's components by name, and whether each is a worker (its objects get a hash).
GRAPH_COMPONENTS = {FRONTEND_COMPONENT: False, WORKER_COMPONENT: True}
FRONTEND_PORT = 8000
# The benchmark's video server Service.
VIDEO_SERVICE_PORT = 80
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
    """A stack's own object (NGC secret, token secret, download Job): named after its graph,
    one stack's `pulumi destroy` never deletes what another still uses."""
    return f"{graph}-{what}"


# --- Names the operator derives ----------------------------------------------------------

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
    """The longest graph name whose components' names fit every limit above."""
    return min(
        min(GROVE_COMBINED_MAX - len(c), DNS_LABEL_MAX - len(component_name("", c, worker)))
        for c, worker in components.items()
    )


def max_namespace_len(graph: str) -> int:
    """The longest Kubernetes namespace whose Dynamo namespace label fits with `graph`."""
    return DNS_LABEL_MAX - len(dynamo_namespace("", graph))


# --- The benchmark's objects: every name carries the profile (stacks share a namespace and
# the cache); the Jobs' also the run id, so a new run id replaces the Jobs alone. ---------

# `collect`'s exit code while the sweep runs: not a failure for the results hook.
SWEEP_RUNNING_EXIT_CODE = 3
# The results hook hands `collect` the stack's kubeconfig (path or content) in the
# environment, never argv or a log line.
KUBECONFIG_ENV = "COSMOS3_ROUTING_KUBECONFIG"


def video_name(index: int) -> str:
    """A video's file name: the video maker, the dataset and the smoke Job agree on it."""
    return f"video_{index:04d}.mp4"


def benchmark_name(what: str, profile: str, run_id: str = "") -> str:
    """A benchmark object's name: `bench-code` and `videos` per profile, the `smoke` and
    `sweep` Jobs per run too."""
    return f"{GRAPH_NAME_PREFIX}-{what}-{profile}" + (f"-{run_id}" if run_id else "")


def max_run_id_len(profile: str) -> int:
    """The longest run id that keeps both Job names (their pods' label values) within 63."""
    return DNS_LABEL_MAX - 1 - max(len(benchmark_name(job, profile)) for job in ("smoke", "sweep"))


def camel(name: str) -> str:
    """A snake_case name as camelCase: a field's config key or output key."""
    return re.sub(r"_(\w)", lambda m: m[1].upper(), name)


# --- Rules input follows, and the one error type -----------------------------------------

# The seed's placeholder (`<your-rwx-storage-class>`), Pulumi.yaml's default: a stack that
# forgot its storage class fails here, not in the cluster.
PLACEHOLDER = re.compile(r"[<>]|^your-|^changeme$|^todo$", re.IGNORECASE)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
# Pinned: an explicit tag, a digest, or both (`repo:tag@sha256:...`).
IMAGE = re.compile(r"^[a-z0-9]([-a-z0-9._/:]*[a-z0-9])?"
                   r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})$")
SEMVER = re.compile(r"^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# A run id names Jobs, labels and folders: a DNS label (the stack may shorten it further).
RUN_ID = DNS_LABEL
RUN_ID_MAX_LEN = 30
# Every wait a stack sets (download, graph, smoke test, sweep...): a minute to a week.
MIN_TIMEOUT_SECS = 60
MAX_TIMEOUT_SECS = 7 * 24 * 3600
MAX_CONCURRENCY = 1024


def levels_problems(levels: Sequence[int]) -> list[str]:
    """What is wrong with concurrency levels (stack, sweep, rehearsal): at least one, each
    1..MAX_CONCURRENCY, none twice."""
    problems = [] if levels else ["needs at least one level"]
    if any(not 1 <= c <= MAX_CONCURRENCY for c in levels):
        problems.append(f"levels must be >= 1 and at most {MAX_CONCURRENCY} (got {list(levels)})")
    if len(set(levels)) != len(levels):
        problems.append(f"levels repeat (got {list(levels)})")
    return problems


class InputError(ValueError):
    """Bad input, found before anything started: every problem on its line, naming the
    setting and the fix (every check's one error type)."""

    def __init__(self, heading: str, problems: list[str]) -> None:
        self.heading, self.problems = heading, problems
        super().__init__(f"{heading}:\n" + "\n".join(f"  - {p}" for p in problems))


def cidr(text: str) -> str | None:
    """`text` as a CIDR (a bare address is its /32 or /128), or None when it is not one."""
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        return None
