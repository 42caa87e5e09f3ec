"""Serving paths in the manifests: NIM (unchanged), upstream vLLM, Nano, replica topologies.

Pure manifests here (`infra.manifests` from `parse_settings` of real stack config); the
program under mocks, with every stack file, is in tests/test_infra_serving_program.py.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest
from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup
from dynamo.vllm.backend_args import DynamoVllmArgGroup

from benchmarks.__main__ import build_parser
from benchmarks.sweep import config_from_args
from infra import manifests, names
from infra.benchmark_manifests import command, run_of
from infra.run import Run
from infra.serving import (
    HF_SECRET_KEY,
    REASONER_ARCHITECTURE,
    VARIANTS,
    Serving,
)
from infra.settings import Settings, SettingsError, parse_settings
from tests.support_pulumi import TEST_NGC_KEY, stack_config
from tests.support_schemas import graph_errors, validate_k8s, validate_pod_template

GOLDEN = Path(__file__).parent / "golden" / "nim_default_manifests.json"
# Rewrite the golden file (only when the NIM path is meant to change): UPDATE_GOLDEN=1.
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
# The NIM output as it was before the serving paths existed, by case.
GOLDEN_CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "cluster-specific": {
        "gpuNodeSelector": ["nvidia.com/gpu.product=NVIDIA-H200"],
        "gpuTolerations": ["nvidia.com/gpu:NoSchedule"],
        "imagePullSecrets": ["registry-pull-secret"],
        "nimModelProfile": "abc123-h200-fp8-tp1",
    },
}
TEST_HF_TOKEN = "hf_TEST_ONLY_9d1c0b7a2e4f"
TEST_VLLM_IMAGE = "registry.example.com/team/dynamo-vllm-cosmos3:1.6.1-0.21.0"


def settings_of(stack: str, overrides: dict[str, Any], hf_token: str | None = None) -> Settings:
    raw = stack_config(stack, overrides)
    if hf_token is not None:
        raw["cosmos3-routing:hfToken"] = hf_token
    return parse_settings(raw, stack)


def vllm_settings(stack: str = "vllm-trial", **overrides: Any) -> Settings:
    base = {"runtime": "vllm", "vllmImage": TEST_VLLM_IMAGE, "precision": "bf16",
            "workerReplicas": 2, "gpusPerWorker": 4}
    return settings_of(stack, {**base, **overrides}, hf_token=TEST_HF_TOKEN)


def nim_manifests(settings: Settings) -> dict[str, Any]:
    return {
        "namespace": manifests.namespace(settings),
        "ngcSecret": manifests.token_secret(settings, "ngcApiKey", "placeholder-not-a-key"),
        "cacheClaim": manifests.model_cache_claim(settings),
        "downloadJob": manifests.model_download_job(settings),
        "graph": manifests.graph(settings),
    }


def rendered_default_nim() -> dict[str, Any]:
    return {
        f"{stack}/{case}": nim_manifests(settings_of(stack, overrides))
        for stack in ("round-robin", "session-affinity")
        for case, overrides in GOLDEN_CASES.items()
    }


def test_nim_default_stacks_are_unchanged_by_the_serving_paths() -> None:
    """Byte-for-byte what the recipe stacks rendered before runtime/variant/topology."""
    rendered = json.loads(json.dumps(rendered_default_nim()))
    if UPDATE:
        GOLDEN.write_text(json.dumps(rendered, indent=1, sort_keys=True) + "\n")
    assert rendered == json.loads(GOLDEN.read_text()), (
        "the NIM stacks' manifests changed; if that is intended, rerun with UPDATE_GOLDEN=1 "
        "and review the diff of tests/golden/nim_default_manifests.json"
    )


def worker_of(settings: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Worker component, its main container) of the rendered graph."""
    worker = manifests.graph(settings)["spec"]["components"][1]
    return worker, worker["podTemplate"]["spec"]["containers"][0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# (runtime, variant, precision, replicas, GPUs per replica, GPU class): all must render.
CONFIGS = [
    ("nim", "super", "fp8", 8, 1, "NVIDIA-H200"),
    ("nim", "super", "fp8", 2, 4, "NVIDIA-H200"),
    ("nim", "super", "bf16", 1, 8, "NVIDIA-H200"),
    ("nim", "nano", "bf16", 8, 1, "NVIDIA-A100-SXM4-80GB"),
    ("vllm", "super", "bf16", 2, 4, "NVIDIA-H200"),
    ("vllm", "super", "fp8", 8, 1, "NVIDIA-H200"),
    ("vllm", "super", "bf16", 1, 8, "NVIDIA-H100-80GB-HBM3"),
    ("vllm", "nano", "fp8", 8, 1, "NVIDIA-H100-80GB-HBM3"),
    ("vllm", "nano", "bf16", 4, 2, "NVIDIA-L40S"),
]


def config_settings(runtime: str, variant: str, precision: str, replicas: int, gpus: int,
                    product: str) -> Settings:
    overrides = {"runtime": runtime, "modelVariant": variant, "precision": precision,
                 "workerReplicas": replicas, "gpusPerWorker": gpus, "gpuProduct": product,
                 "gpuNodeSelector": [f"nvidia.com/gpu.product={product}"]}
    if runtime == "vllm":
        overrides["vllmImage"] = TEST_VLLM_IMAGE
        return settings_of("serving-trial", overrides, hf_token=TEST_HF_TOKEN)
    return settings_of("serving-trial", overrides)


@pytest.mark.parametrize("config", CONFIGS, ids=["-".join(map(str, c)) for c in CONFIGS])
def test_every_serving_path_renders_valid_manifests(config: tuple) -> None:
    settings = config_settings(*config)
    graph = manifests.graph(settings)
    assert graph_errors(graph) == []
    for component in graph["spec"]["components"]:
        validate_pod_template(component["podTemplate"])
    validate_k8s(manifests.model_download_job(settings))
    secret = manifests.token_secret(settings, settings.required_secrets[0], "placeholder")
    validate_k8s(secret)


@pytest.mark.parametrize("config", CONFIGS, ids=["-".join(map(str, c)) for c in CONFIGS])
def test_gpu_requests_and_replicas_follow_the_topology(config: tuple) -> None:
    runtime, _, _, replicas, gpus, product = config
    worker, main = worker_of(config_settings(*config))
    assert worker["replicas"] == replicas
    assert main["resources"]["requests"]["nvidia.com/gpu"] == gpus
    assert main["resources"]["limits"]["nvidia.com/gpu"] == gpus
    assert worker["podTemplate"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": product}
    if runtime == "vllm":
        assert flag(main["args"], "--tensor-parallel-size") == str(gpus)
    else:
        # The NIM picks the profile for the GPUs it sees: no tags selector by default.
        assert "NIM_TAGS_SELECTOR" not in env_of(main)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("precision", ["fp8", "bf16"])
def test_nim_environment_follows_variant_and_precision(variant: str, precision: str) -> None:
    settings = settings_of("nim-trial", {"modelVariant": variant, "precision": precision,
                                         "workerReplicas": 4, "gpusPerWorker": 2})
    _, main = worker_of(settings)
    env = env_of(main)
    assert (env["NIM_MODEL_VARIANT"], env["NIM_PRECISION"]) == (variant, precision)
    job = manifests.model_download_job(settings)["spec"]["template"]["spec"]
    assert env_of(job["containers"][0])["NIM_MODEL_VARIANT"] == variant
    # No pinned profile: the download Job sees one replica's GPUs, as a worker does.
    assert job["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2


def test_vllm_worker_runs_dynamo_vllm_as_the_seed_serves_the_reasoner() -> None:
    settings = vllm_settings()
    worker, main = worker_of(settings)
    assert main["image"] == TEST_VLLM_IMAGE
    assert main["command"] == ["python3", "-m", "dynamo.vllm"]
    assert "workingDir" not in main
    args = main["args"]
    weights = "/model-cache/models/nvidia/Cosmos3-Super"
    assert flag(args, "--model") == weights
    assert flag(args, "--served-model-name") == names.SERVED_MODEL_NAME
    assert json.loads(flag(args, "--hf-overrides")) == {"architectures": [REASONER_ARCHITECTURE]}
    assert flag(args, "--tensor-parallel-size") == "4"
    assert flag(args, "--mm-encoder-tp-mode") == "data"
    assert json.loads(flag(args, "--media-io-kwargs")) == {"video": {"num_frames": -1}}
    assert {"--async-scheduling", "--enable-multimodal"} <= set(args)
    assert flag(args, "--dtype") == "bfloat16" and "--quantization" not in args
    env = env_of(main)
    assert env[HF_SECRET_KEY] == {"secretKeyRef": {"name": settings.secret_refs["hfToken"][0],
                                                    "key": HF_SECRET_KEY}}
    assert env["DYN_SYSTEM_PORT"] == "9090"
    assert not any(name.startswith("NIM_") or name == "NGC_API_KEY" for name in env)
    assert main["startupProbe"]["httpGet"] == {"path": "/health", "port": 9090}
    assert main["livenessProbe"]["httpGet"] == {"path": "/live", "port": 9090}
    assert main["volumeMounts"] == [{"name": "model-cache", "mountPath": "/model-cache"}]
    spec = worker["podTemplate"]["spec"]
    assert spec["volumes"][0]["persistentVolumeClaim"] == {"claimName": "shared-model-cache"}
    assert worker["runtimeVersionOverride"] == settings.worker_runtime_version

    fp8 = worker_of(vllm_settings(precision="fp8", workerReplicas=8, gpusPerWorker=1))[1]
    assert flag(fp8["args"], "--quantization") == "fp8" and "--dtype" not in fp8["args"]


def test_dynamo_vllm_takes_its_flag_and_passes_the_rest_to_the_engine() -> None:
    """The real `dynamo.vllm` parser (Dynamo 1.6.1): --enable-multimodal is Dynamo's; every
    other argument the worker gets reaches vLLM's engine parser unchanged, in order."""
    _, main = worker_of(vllm_settings())
    parser = argparse.ArgumentParser(allow_abbrev=False)
    DynamoRuntimeArgGroup().add_arguments(parser)
    DynamoVllmArgGroup().add_arguments(parser)
    parsed, engine_args = parser.parse_known_args(main["args"])
    assert parsed.enable_multimodal is True
    assert engine_args == [a for a in main["args"] if a != "--enable-multimodal"]


def test_vllm_download_job_uses_the_hf_cli_with_the_token_secret() -> None:
    settings = vllm_settings(modelVariant="nano", precision="bf16", workerReplicas=8,
                             gpusPerWorker=1)
    job = manifests.model_download_job(settings)
    assert job["metadata"]["name"] == settings.download_job_name
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    weights = "/model-cache/models/nvidia/Cosmos3-Nano"
    assert container["command"] == ["hf", "download", "nvidia/Cosmos3-Nano", "--local-dir",
                                    weights]
    assert container["image"] == TEST_VLLM_IMAGE
    secret = env_of(container)[HF_SECRET_KEY]["secretKeyRef"]["name"]
    assert secret == settings.secret_refs["hfToken"][0]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]  # no GPU needed
    assert "nodeSelector" not in pod
    _, main = worker_of(settings)
    assert flag(main["args"], "--model") == weights  # the workers read what the Job wrote
    assert pod["volumes"] == worker_of(settings)[0]["podTemplate"]["spec"]["volumes"]


def test_hf_token_lives_only_in_its_secret() -> None:
    settings = vllm_settings()
    rendered = json.dumps([manifests.graph(settings), manifests.model_download_job(settings)])
    assert TEST_HF_TOKEN not in rendered and TEST_HF_TOKEN not in repr(settings)
    secret = manifests.token_secret(settings, "hfToken", TEST_HF_TOKEN)
    assert secret["stringData"] == {HF_SECRET_KEY: TEST_HF_TOKEN}
    assert settings.required_secrets == ("hfToken",)


def test_readme_topologies_on_one_eight_gpu_node() -> None:
    for replicas, gpus in ((8, 1), (2, 4), (1, 8)):
        serving = settings_of("topology", {"workerReplicas": replicas,
                                           "gpusPerWorker": gpus}).serving
        assert serving == Serving(replicas=replicas, gpus_per_replica=gpus)
        assert serving.total_gpus == 8


# (overrides, whether to give an HF token, keys the message must name, words in it)
IMPOSSIBLE = [
    ({"gpusPerWorker": 8, "workerReplicas": 1, "gpusPerNode": 4}, False,
     ["gpusPerWorker", "gpusPerNode"], "node offers"),
    ({"gpusPerWorker": 4}, False, ["workerReplicas", "gpusPerWorker", "gpuBudget"],
     "need 32 GPUs"),
    ({"gpuProduct": "NVIDIA-A100-SXM4-80GB"}, False, ["precision", "gpuProduct"],
     "compute capability"),
    ({"precision": "bf16"}, False, ["gpusPerWorker", "gpuProduct"], "GiB per GPU"),
    ({"runtime": "vllm", "vllmImage": TEST_VLLM_IMAGE}, False, ["hfToken"],
     "pulumi config set --secret hfToken"),
    ({"runtime": "vllm"}, True, ["vllmImage"], "vllm-cosmos3"),
    ({"runtime": "triton"}, False, ["runtime"], "nim, vllm"),
    ({"modelVariant": "edge"}, False, ["modelVariant"], "super, nano"),
    ({"servedModelName": "my model"}, False, ["servedModelName"], "not a model id"),
    ({"gpuProduct": "NVIDIA-T4"}, False, ["gpuProduct"], "known:"),
    ({"gpuNodeSelector": ["nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"]}, False,
     ["gpuNodeSelector", "gpuProduct"], "agree"),
    ({"runtime": "vllm", "vllmImage": TEST_VLLM_IMAGE, "nimModelProfile": "p1"}, True,
     ["nimModelProfile"], "only applies to runtime nim"),
    # vLLM downloads the BF16 checkpoint (~128 GiB for Super), whatever the precision.
    ({"runtime": "vllm", "vllmImage": TEST_VLLM_IMAGE, "cacheSize": "120Gi"}, True,
     ["cacheSize"], "at least 160Gi"),
]


@pytest.mark.parametrize(("overrides", "hf", "keys", "words"), IMPOSSIBLE,
                         ids=[f"{i}-{c[2][0]}" for i, c in enumerate(IMPOSSIBLE)])
def test_impossible_combinations_are_rejected_naming_the_keys(
    overrides: dict[str, Any], hf: bool, keys: list[str], words: str
) -> None:
    with pytest.raises(SettingsError) as err:
        settings_of("serving-trial", overrides, hf_token=TEST_HF_TOKEN if hf else None)
    message = str(err.value)
    matching = [p for p in err.value.problems if words in p]
    assert matching, message
    for key in keys:
        assert f"cosmos3-routing:{key}" in matching[0], matching[0]
    assert "nothing was created" in message
    assert TEST_HF_TOKEN not in message and TEST_NGC_KEY not in message


def test_vllm_needs_no_ngc_key_and_refuses_a_plaintext_token() -> None:
    raw = stack_config("vllm-trial", {"runtime": "vllm", "vllmImage": TEST_VLLM_IMAGE},
                       ngc_key=None)
    raw["cosmos3-routing:hfToken"] = TEST_HF_TOKEN
    settings = parse_settings(raw, "vllm-trial", secret_keys=frozenset(
        {"cosmos3-routing:hfToken"}))
    assert settings.worker_image == TEST_VLLM_IMAGE
    with pytest.raises(SettingsError, match="pulumi config set --secret hfToken") as err:
        parse_settings(raw, "vllm-trial", secret_keys=frozenset())
    assert TEST_HF_TOKEN not in str(err.value)


def pod_model(role: str, run: Run) -> str:
    """The model a benchmark pod asks for, read by the pod's own parser from its `--run`."""
    args = build_parser(role).parse_args(command(role, run))
    return config_from_args(args).model if role == "sweep" else args.run.model


@pytest.mark.parametrize("runtime", ["nim", "vllm"])
def test_the_served_model_follows_the_variant_everywhere(runtime: str) -> None:
    """vLLM is told the name, the NIM picks it; the smoke test, the sweep and the stack
    outputs ask for the variant's name, so a Nano stack is never benchmarked as Super."""
    overrides = {"runtime": runtime, "modelVariant": "nano", "precision": "bf16",
                 "vllmImage": TEST_VLLM_IMAGE}
    settings = settings_of("nano-trial", overrides, hf_token=TEST_HF_TOKEN)
    served = "nvidia/cosmos3-nano-reasoner"
    assert names.served_model_name(settings.serving.variant) == served
    if runtime == "vllm":
        _, main = worker_of(settings)
        assert flag(main["args"], "--served-model-name") == served
    target = run_of(settings)
    for role in ("smoke", "sweep"):
        assert pod_model(role, target) == served
    notes = " ".join(target.notes)
    assert f"{runtime} workers: nano bf16, 8 x 1 GPU" in notes
    # Where the frontend lists another id, one setting points everything at it.
    renamed = settings_of("nano-trial", {**overrides, "servedModelName": "nvidia/other-id"},
                          hf_token=TEST_HF_TOKEN)
    target = run_of(renamed)
    assert pod_model("smoke", target) == pod_model("sweep", target) == "nvidia/other-id"
    if runtime == "vllm":
        assert flag(worker_of(renamed)[1]["args"], "--served-model-name") == "nvidia/other-id"
