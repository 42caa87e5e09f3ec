"""How a worker serves the model, as one table the settings' checks and the manifests both
read; the figures' sources: docs/serving-paths.md."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

RUNTIMES = ("nim", "vllm")
PRECISIONS = ("fp8", "bf16")


@dataclass(frozen=True)
class Variant:
    """A Cosmos3 Reasoner size (`VARIANTS` names it): its checkpoint, and the GiB of its
    Reasoner weights (plus vision encoder) for the whole model, by precision."""

    hf_repo: str
    weights_gib: dict[str, float]


VARIANTS: dict[str, Variant] = {
    # fp8 measured; bf16 estimate (64B params)
    "super": Variant("nvidia/Cosmos3-Super", {"fp8": 67.0, "bf16": 128.0}),
    # bf16 documented; fp8 estimate
    "nano": Variant("nvidia/Cosmos3-Nano", {"fp8": 10.0, "bf16": 17.0}),
}


# A cache holds the weights plus what the downloader keeps beside them (the floor is the
# seed's: 100 GiB for FP8 Super).
CACHE_HEADROOM = 1.25
MIN_CACHE_GIB = 100


def cache_gib_needed(serving: Serving) -> int:
    """GiB the model cache must hold for this serving path: the NIM downloads the profile
    of its precision; vLLM downloads the BF16 checkpoint (FP8 is quantized at load time)."""
    precision = "bf16" if serving.runtime == "vllm" else serving.precision
    weights = VARIANTS[serving.variant].weights_gib[precision]
    return max(MIN_CACHE_GIB, math.ceil(weights * CACHE_HEADROOM))


@dataclass(frozen=True)
class GpuClass:
    """A GPU product as Kubernetes labels it (`nvidia.com/gpu.product`)."""

    label: str
    memory_gib: float
    compute_capability: float


GPU_CLASSES: dict[str, GpuClass] = {gpu.label: gpu for gpu in (
    GpuClass("NVIDIA-H200", 141.0, 9.0),
    GpuClass("NVIDIA-H100-80GB-HBM3", 80.0, 9.0),
    GpuClass("NVIDIA-B200", 180.0, 10.0),
    GpuClass("NVIDIA-A100-SXM4-80GB", 80.0, 8.0),
    GpuClass("NVIDIA-L40S", 48.0, 8.9),
)}
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

# FP8 checkpoints of Cosmos3 need Hopper or newer (compute capability 9.0+): documented
# for Super, applied to Nano too as the cautious rule (Ada's 8.9 runs FP8 in general, but
# no Cosmos3 FP8 profile for it is documented).
FP8_MIN_COMPUTE_CAPABILITY = 9.0
# The share of GPU memory vLLM may use (`--gpu-memory-utilization`, vLLM's default).
GPU_MEMORY_UTILIZATION = 0.9
# What a replica needs beyond its weights for KV cache and one video's activations.
KV_HEADROOM_GIB = 4.0
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
MAX_REPLICAS = 64


@dataclass(frozen=True)
class Serving:
    """What each replica runs, on which GPUs; `gpu_budget` (all the workers' GPUs) catches a
    topology that would leave pods Pending before anything is created."""

    runtime: str = "nim"
    variant: str = "super"
    precision: str = "fp8"
    replicas: int = 8
    gpus_per_replica: int = 1
    gpus_per_node: int = 8
    gpu_product: str = "NVIDIA-H200"
    gpu_budget: int = 8

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def topology(self) -> str:
        """E.g. `8x1`: replicas x GPUs per replica."""
        return f"{self.replicas}x{self.gpus_per_replica}"


# --- The NIM path ------------------------------------------------------------------------


# Tags of NVIDIA's Cosmos3 NIM manifests that fix the topology; a set NIM_TAGS_SELECTOR
# that names them must agree with gpusPerWorker.
NIM_GPU_TAGS = ("n_gpus", "nim_tp")


def served_by_nim_environment(serving: Serving, tags_selector: str) -> dict[str, str]:
    """What the NIM picks its profile by; NIM_TAGS_SELECTOR filters by exact manifest tags, so
    only a set one is passed (docs/serving-paths.md, `nimTagsSelector`)."""
    return {
        "NIM_MODEL_TYPE": "reasoner",
        "NIM_MODEL_VARIANT": serving.variant,
        "NIM_PRECISION": serving.precision,
        **({"NIM_TAGS_SELECTOR": tags_selector} if tags_selector else {}),
    }


# --- The upstream vLLM path (seed 003) ---------------------------------------------------

# The gated Hugging Face token lives only in the stack's Secret (from `hfToken`), here.
HF_SECRET_KEY = "HF_TOKEN"
# Where vLLM pods mount the shared model cache claim.
VLLM_CACHE_PATH = "/model-cache"
# HF_HOME on the cache: the CLI's own cache and any extra hub fetch survive pods.
HF_HOME = f"{VLLM_CACHE_PATH}/huggingface"
VLLM_WORKER_COMMAND = ("python3", "-m", "dynamo.vllm")
# Dynamo's system server on the worker: /live once the process runs, /health once ready.
VLLM_LIVE_PATH = "/live"
VLLM_READY_PATH = "/health"
# The Reasoner's architecture inside the omnimodal checkpoint (vllm-cosmos3 plugin).
REASONER_ARCHITECTURE = "Cosmos3ReasonerForConditionalGeneration"
# Let the processor see every frame before its own sampling (seed 003).
MEDIA_IO_KWARGS = {"video": {"num_frames": -1}}
# FP8 on vLLM is online quantization of the BF16 checkpoint (no separate FP8 repo).
VLLM_PRECISION_ARGS = {"fp8": ("--quantization", "fp8"), "bf16": ("--dtype", "bfloat16")}


def model_dir(serving: Serving) -> str:
    """Where the download Job puts the checkpoint and the workers load it from."""
    return f"{VLLM_CACHE_PATH}/models/{VARIANTS[serving.variant].hf_repo}"


def vllm_worker_args(serving: Serving, weights_dir: str, served_model_name: str) -> list[str]:
    """Arguments after `python3 -m dynamo.vllm` (seed 003); all but `--enable-multimodal` pass
    through to vLLM's engine (docs/serving-paths.md)."""
    return [
        "--model", weights_dir,
        "--served-model-name", served_model_name,
        "--enable-multimodal",
        "--hf-overrides", json.dumps({"architectures": [REASONER_ARCHITECTURE]}),
        "--tensor-parallel-size", str(serving.gpus_per_replica),
        "--mm-encoder-tp-mode", "data",
        "--async-scheduling",
        "--media-io-kwargs", json.dumps(MEDIA_IO_KWARGS),
        *VLLM_PRECISION_ARGS[serving.precision],
        "--gpu-memory-utilization", str(GPU_MEMORY_UTILIZATION),
    ]


def hf_download_command(serving: Serving, weights_dir: str) -> list[str]:
    """Fills the cache from Hugging Face (gated: HF_TOKEN must be set); a rerun resumes."""
    return ["hf", "download", VARIANTS[serving.variant].hf_repo, "--local-dir", weights_dir]
