"""The serving settings of a stack (runtime, variant, precision, topology, GPU class).

Why a module of its own: the keys and their checks are read once, here, into the
`infra.serving.Serving` model that manifests and tests share; `infra.settings` calls
`read_serving` with its reader, so every problem names its config key and the fix and is
reported with all the others before anything is created.
"""

from __future__ import annotations

from typing import Protocol

from infra.serving import GPU_CLASSES, GPU_PRODUCT_LABEL, MAX_REPLICAS, Serving, serving_problems

KEY_RUNTIME = "runtime"
KEY_VARIANT = "modelVariant"
KEY_PRECISION = "precision"
KEY_REPLICAS = "workerReplicas"
KEY_GPUS_PER_REPLICA = "gpusPerWorker"
KEY_GPUS_PER_NODE = "gpusPerNode"
KEY_GPU_PRODUCT = "gpuProduct"
KEY_GPU_BUDGET = "gpuBudget"
KEY_NODE_SELECTOR = "gpuNodeSelector"

# `Serving` field -> config key (the names users see in messages).
FIELD_KEYS = {
    "runtime": KEY_RUNTIME,
    "variant": KEY_VARIANT,
    "precision": KEY_PRECISION,
    "replicas": KEY_REPLICAS,
    "gpus_per_replica": KEY_GPUS_PER_REPLICA,
    "gpus_per_node": KEY_GPUS_PER_NODE,
    "gpu_product": KEY_GPU_PRODUCT,
    "gpu_budget": KEY_GPU_BUDGET,
}


class ServingReader(Protocol):
    """What `infra.settings`' reader offers: typed getters that record problems."""

    problems: list[str]

    def full(self, key: str) -> str: ...

    def string(self, key: str) -> str: ...

    def integer(self, key: str, low: int, high: int, what: str = "") -> int: ...


def read_serving(r: ServingReader, node_selector: tuple[tuple[str, str], ...]) -> Serving:
    """Read and check the serving keys; `node_selector` is the parsed gpuNodeSelector."""
    serving = Serving(
        runtime=r.string(KEY_RUNTIME),
        variant=r.string(KEY_VARIANT),
        precision=r.string(KEY_PRECISION),
        replicas=r.integer(KEY_REPLICAS, 1, MAX_REPLICAS, " workers"),
        # A wide range: `serving_problems` names the tensor-parallel sizes it accepts.
        gpus_per_replica=r.integer(KEY_GPUS_PER_REPLICA, 1, 64, " GPUs"),
        gpus_per_node=r.integer(KEY_GPUS_PER_NODE, 1, 64, " GPUs"),
        gpu_product=r.string(KEY_GPU_PRODUCT),
        gpu_budget=r.integer(KEY_GPU_BUDGET, 1, 100_000, " GPUs"),
    )
    keys = {field: r.full(key) for field, key in FIELD_KEYS.items()}
    # A key the reader already rejected (not a number, say) is reported once.
    reported = {p.split(": ", 1)[0] for p in r.problems}
    for key, message in serving_problems(serving, keys):
        if key not in reported:
            r.problems.append(f"{key}: {message}")
    selected = dict(node_selector).get(GPU_PRODUCT_LABEL)
    if selected in GPU_CLASSES and selected != serving.gpu_product:
        r.problems.append(
            f"{r.full(KEY_NODE_SELECTOR)}/{r.full(KEY_GPU_PRODUCT)}: the workers select "
            f"{GPU_PRODUCT_LABEL}={selected} but the serving checks assume "
            f"{serving.gpu_product}; make them agree (`pulumi config set gpuProduct "
            f"{selected}`)"
        )
    return serving
