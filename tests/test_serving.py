"""Serving combinations: what each runtime, variant, precision and topology needs."""

from __future__ import annotations

import pytest

from infra.serving import (
    GPU_CLASSES,
    GPU_PRODUCT_LABEL,
    MAX_REPLICAS,
    Serving,
    vllm_worker_args,
)
from infra.settings import FIELD_KEYS, SettingsError, parse_settings, serving_problems
from tests.support_pulumi import stack_config


def full(key: str) -> str:
    return f"cosmos3-routing:{key}"


def problems_of(serving: Serving) -> list[tuple[str, str]]:
    """The problems a stack with `serving`'s keys gets: a choice outside the table is a
    `KEYS` row's problem, the rest `serving_problems`'."""
    overrides = {key: getattr(serving, field) for field, key in FIELD_KEYS.items()}
    try:
        parse_settings(stack_config("serving", overrides), "serving")
    except SettingsError as err:
        return [tuple(p.split(": ", 1)) for p in err.problems]
    return []


@pytest.mark.parametrize(
    "serving",
    [
        Serving(),  # the seed: 8 x 1 Super FP8 on H200
        Serving(replicas=2, gpus_per_replica=4),
        Serving(replicas=1, gpus_per_replica=8),
        Serving(replicas=4, gpus_per_replica=2),
        Serving(runtime="vllm", variant="super", precision="bf16", replicas=4, gpus_per_replica=2),
        Serving(replicas=16, gpu_budget=16),  # two nodes' worth, when the budget says so
        Serving(
            runtime="vllm", variant="nano", precision="bf16", gpu_product="NVIDIA-A100-SXM4-80GB"
        ),
        Serving(variant="super", precision="fp8", gpu_product="NVIDIA-H100-80GB-HBM3"),
    ],
)
def test_possible_combinations_have_no_problems(serving: Serving) -> None:
    assert serving_problems(serving, full) == []


@pytest.mark.parametrize(
    ("serving", "key", "words"),
    [
        (Serving(gpus_per_replica=16), "gpusPerWorker", "tensor-parallel"),
        (Serving(replicas=1, gpus_per_replica=8, gpus_per_node=4), "gpusPerWorker",
         "node offers"),
        (Serving(replicas=8, gpus_per_replica=4), "workerReplicas", "need 32 GPUs"),
        (Serving(gpu_product="NVIDIA-A100-SXM4-80GB"), "precision", "compute capability"),
        (Serving(gpu_product="NVIDIA-L40S", variant="nano"), "precision", "compute capability"),
        (Serving(precision="bf16"), "gpusPerWorker", "GiB per GPU"),
        (Serving(precision="bf16", replicas=2, gpus_per_replica=2,
                 gpu_product="NVIDIA-L40S"), "gpusPerWorker", "GiB per GPU"),
        (Serving(gpu_product="NVIDIA-T4"), "gpuProduct", "known:"),
    ],
)
def test_impossible_combinations_name_the_key(serving: Serving, key: str, words: str) -> None:
    problems = serving_problems(serving, full)
    assert problems, f"{serving} was accepted"
    assert any(k.endswith(key) and words in msg for k, msg in problems), problems


@pytest.mark.parametrize(
    ("serving", "key", "words"),
    [
        (Serving(runtime="triton"), "runtime", "nim, vllm"),
        (Serving(variant="edge"), "modelVariant", "super, nano"),
        (Serving(precision="int4"), "precision", "fp8, bf16"),
        (Serving(replicas=0), "workerReplicas", "1..64"),
    ],
)
def test_a_value_outside_the_table_names_the_key(serving: Serving, key: str, words: str) -> None:
    problems = problems_of(serving)
    assert problems, f"{serving} was accepted"
    assert any(k.endswith(key) and words in msg for k, msg in problems), problems


def test_memory_check_uses_the_tensor_parallel_split() -> None:
    """Super BF16 does not fit one H200 but does fit two: the check divides by TP."""
    assert serving_problems(Serving(precision="bf16", replicas=4, gpus_per_replica=1), full)
    assert not serving_problems(Serving(precision="bf16", replicas=4, gpus_per_replica=2), full)


def test_vllm_arguments_follow_the_topology() -> None:
    args = vllm_worker_args(Serving(runtime="vllm", gpus_per_replica=4), "/m", "served")
    assert args[args.index("--tensor-parallel-size") + 1] == "4"
    assert args[args.index("--mm-encoder-tp-mode") + 1] == "data"
    assert "--async-scheduling" in args
    assert "Cosmos3ReasonerForConditionalGeneration" in args[args.index("--hf-overrides") + 1]


def test_every_gpu_class_is_labelled_as_kubernetes_labels_it() -> None:
    assert all(label.startswith("NVIDIA-") for label in GPU_CLASSES)


def test_each_fix_names_the_keys_it_involves() -> None:
    """A topology or GPU problem names, besides its own key, the keys its fix may change."""
    cases = [
        (Serving(replicas=1, gpus_per_replica=8, gpus_per_node=4), {"gpusPerNode": 1}),
        (Serving(replicas=8, gpus_per_replica=4), {"gpusPerWorker": 1, "gpuBudget": 2}),
        (Serving(gpu_product="NVIDIA-A100-SXM4-80GB"), {"gpuProduct": 1}),
        (Serving(precision="bf16"), {"gpuProduct": 1, "gpusPerWorker": 1}),
    ]
    fixes = []
    for serving, keys in cases:
        ((_, fix),) = serving_problems(serving, full)
        for key, times in keys.items():
            assert fix.count(full(key)) == times, (key, fix)
        fixes.append(fix)
    node, _, fp8, _ = fixes
    assert node.endswith("lower it, or raise the node size if yours is bigger")
    assert "+ (documented for Super, kept for Nano as the cautious rule) but " in fp8
    ((_, unknown),) = serving_problems(Serving(gpu_product="NVIDIA-T4"), full)
    assert unknown.endswith(f"known: {', '.join(GPU_CLASSES)} (as the "
                            f"{GPU_PRODUCT_LABEL} node label spells them)")


def test_the_gpu_checks_run_at_every_replica_count_and_not_after_a_topology_problem() -> None:
    """fp8 on a GPU without it is refused at one replica and at the most, and a topology
    problem is the only one reported (its fix may change the rest)."""
    a100 = "NVIDIA-A100-SXM4-80GB"
    for replicas in (1, MAX_REPLICAS):
        found = serving_problems(
            Serving(replicas=replicas, gpu_product=a100, gpu_budget=MAX_REPLICAS), full)
        assert [key for key, _ in found] == ["precision"], replicas
    found = serving_problems(Serving(gpus_per_replica=16, gpu_product=a100), full)
    assert [key for key, _ in found] == ["gpusPerWorker"]
