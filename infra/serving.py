"""How a worker serves the model: runtime, variant, precision, topology, GPU class.

The facts each combination needs (GPU memory per replica, compute capability) and what
follows from them (the NIM environment, the vLLM arguments, the weight download) live
here as pure data and functions, so the settings validation, the graph manifest and the
tests all read one table.

Figures marked "estimate" are derived from parameter counts (weights only, plus a fixed
allowance for the vision encoder), not measured; the only measured figure is Super FP8
(about 67 GiB on one GPU, from the Cosmos3 NIM documentation). A user with better numbers
can still run a combination the table rejects by choosing a GPU class with more memory.
"""

from __future__ import annotations

from dataclasses import dataclass

RUNTIMES = ("nim", "vllm")
PRECISIONS = ("fp8", "bf16")


@dataclass(frozen=True)
class Variant:
    """A Cosmos3 Reasoner size."""

    name: str
    hf_repo: str
    # GiB of weights (plus vision encoder) for the whole model, by precision.
    weights_gib: dict[str, float]
    measured: frozenset[str] = frozenset()


VARIANTS: dict[str, Variant] = {
    "super": Variant(
        name="super",
        hf_repo="nvidia/Cosmos3-Super",
        weights_gib={"fp8": 67.0, "bf16": 128.0},  # fp8 measured; bf16 estimate (64B params)
        measured=frozenset({"fp8"}),
    ),
    "nano": Variant(
        name="nano",
        hf_repo="nvidia/Cosmos3-Nano",
        weights_gib={"fp8": 18.0, "bf16": 33.0},  # estimates (16B params)
    ),
}


@dataclass(frozen=True)
class GpuClass:
    """A GPU product as Kubernetes labels it (`nvidia.com/gpu.product`)."""

    label: str
    memory_gib: float
    compute_capability: float


GPU_CLASSES: dict[str, GpuClass] = {
    gpu.label: gpu
    for gpu in (
        GpuClass("NVIDIA-H200", 141.0, 9.0),
        GpuClass("NVIDIA-H100-80GB-HBM3", 80.0, 9.0),
        GpuClass("NVIDIA-B200", 180.0, 10.0),
        GpuClass("NVIDIA-A100-SXM4-80GB", 80.0, 8.0),
        GpuClass("NVIDIA-L40S", 48.0, 8.9),
    )
}

# FP8 checkpoints of Cosmos3 need Hopper or newer (compute capability 9.0+).
FP8_MIN_COMPUTE_CAPABILITY = 9.0
# vLLM's default share of GPU memory it may use (`--gpu-memory-utilization`).
GPU_MEMORY_UTILIZATION = 0.9
# What a replica needs beyond its weights for KV cache and one video's activations.
KV_HEADROOM_GIB = 4.0
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Serving:
    """What each worker replica runs, and on which GPUs."""

    runtime: str = "nim"
    variant: str = "super"
    precision: str = "fp8"
    replicas: int = 8
    gpus_per_replica: int = 1
    gpus_per_node: int = 8
    gpu_product: str = "NVIDIA-H200"

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica


def serving_problems(serving: Serving, keys: dict[str, str]) -> list[tuple[str, str]]:
    """(config key, problem and fix) for every impossible combination; empty when fine.

    `keys` maps field names (`runtime`, `variant`, ...) to the config keys the user set,
    so each message names what to change.
    """
    problems: list[tuple[str, str]] = []

    def bad(field: str, message: str) -> None:
        problems.append((keys[field], message))

    if serving.runtime not in RUNTIMES:
        bad("runtime", f"must be one of {', '.join(RUNTIMES)}, not {serving.runtime!r}")
    if serving.variant not in VARIANTS:
        bad("variant", f"must be one of {', '.join(VARIANTS)}, not {serving.variant!r}")
    if serving.precision not in PRECISIONS:
        bad("precision", f"must be one of {', '.join(PRECISIONS)}, not {serving.precision!r}")
    if serving.replicas < 1:
        bad("replicas", f"must be at least 1, not {serving.replicas}")
    if serving.gpus_per_replica not in TENSOR_PARALLEL_SIZES:
        bad(
            "gpus_per_replica",
            f"must be one of {', '.join(map(str, TENSOR_PARALLEL_SIZES))} "
            f"(the tensor-parallel size), not {serving.gpus_per_replica}",
        )
    elif serving.gpus_per_replica > serving.gpus_per_node:
        bad(
            "gpus_per_replica",
            f"{serving.gpus_per_replica} GPUs per replica is more than the "
            f"{serving.gpus_per_node} a node offers ({keys['gpus_per_node']}); a replica "
            "cannot span nodes here: lower it, or raise the node size if yours is bigger",
        )
    gpu = GPU_CLASSES.get(serving.gpu_product)
    if gpu is None:
        bad(
            "gpu_product",
            f"unknown GPU class {serving.gpu_product!r}; known: {', '.join(GPU_CLASSES)} "
            "(the value is also the node label the workers select)",
        )
    if problems or gpu is None:
        return problems

    variant = VARIANTS[serving.variant]
    if serving.precision == "fp8" and gpu.compute_capability < FP8_MIN_COMPUTE_CAPABILITY:
        bad(
            "precision",
            f"fp8 needs compute capability {FP8_MIN_COMPUTE_CAPABILITY}+ but "
            f"{gpu.label} has {gpu.compute_capability}: use precision bf16, or a Hopper/"
            f"Blackwell GPU class ({keys['gpu_product']})",
        )
    need = variant.weights_gib[serving.precision] / serving.gpus_per_replica + KV_HEADROOM_GIB
    usable = gpu.memory_gib * GPU_MEMORY_UTILIZATION
    if need > usable:
        bad(
            "gpus_per_replica",
            f"{variant.name} {serving.precision} needs about {need:.0f} GiB per GPU at "
            f"{serving.gpus_per_replica} GPU(s) per replica, more than the {usable:.0f} GiB "
            f"vLLM may use on {gpu.label}: raise {keys['gpus_per_replica']} or use fp8",
        )
    return problems


def served_by_nim_environment(serving: Serving) -> dict[str, str]:
    """NIM profile selection: the entrypoint picks the profile matching these values."""
    return {
        "NIM_MODEL_TYPE": "reasoner",
        "NIM_MODEL_VARIANT": serving.variant,
        "NIM_PRECISION": serving.precision,
        "NIM_TAGS_SELECTOR": f"tp={serving.gpus_per_replica}",
    }


# The Reasoner's architecture inside the omnimodal checkpoint (vllm-cosmos3 plugin).
REASONER_ARCHITECTURE = "Cosmos3ReasonerForConditionalGeneration"
# Let the processor see every frame before its own sampling (seed 003).
MEDIA_IO_KWARGS = '{"video": {"num_frames": -1}}'


def vllm_worker_args(serving: Serving, model_dir: str, served_model_name: str) -> list[str]:
    """Arguments after `python3 -m dynamo.vllm` for the upstream vLLM path (seed 003)."""
    return [
        "--model", model_dir,
        "--served-model-name", served_model_name,
        "--enable-multimodal",
        "--hf-overrides", f'{{"architectures": ["{REASONER_ARCHITECTURE}"]}}',
        "--tensor-parallel-size", str(serving.gpus_per_replica),
        "--mm-encoder-tp-mode", "data",
        "--async-scheduling",
        "--media-io-kwargs", MEDIA_IO_KWARGS,
    ]


def hf_download_command(serving: Serving, model_dir: str) -> list[str]:
    """Fills the cache from Hugging Face (the model is gated: HF_TOKEN must be set)."""
    repo = VARIANTS[serving.variant].hf_repo
    return ["hf", "download", repo, "--local-dir", model_dir]
