"""Serving paths in the manifests: NIM (unchanged), upstream vLLM, Nano, replica topologies.

Pure manifests here (`infra.manifests` from `parse_settings` of real stack config); the
program under mocks, with every stack file, is in tests/test_infra_serving_program.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from infra import manifests
from infra.settings import Settings, parse_settings
from tests.support_pulumi import stack_config

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
        "ngcSecret": manifests.ngc_secret(settings, "placeholder-not-a-key"),
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
