"""Every stack file in the repository, run through the real program under the SDK's mocks.

New example stacks (e.g. Pulumi.vllm-super-tp4-rr.yaml) are picked up by file name, given
only what their comments tell a user to add (secrets, image, storage class), and must
declare a schema-valid graph with the secret their runtime needs and no other.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra import manifests, names
from infra.serving import HF_SECRET_KEY
from infra.settings import parse_settings, stack_names
from tests.conftest import REPO_ROOT
from tests.support_pulumi import SECRET_SIG, TEST_NGC_KEY, ProgramRun, run_program, stack_config
from tests.support_schemas import graph_errors, validate_k8s
from tests.test_infra_serving import TEST_HF_TOKEN, TEST_VLLM_IMAGE

STACK_FILES = stack_names(REPO_ROOT)
SECRET, JOB, GRAPH = (
    "kubernetes:core/v1:Secret",
    "kubernetes:batch/v1:Job",
    "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment",
)
RECIPE_ONLY = {"benchmarkSmoke": False, "benchmarkSweep": False}
SECRET_MARK = "1b47061264138c4ac30d75fd1eb44270"


def runtime_of(stack: str) -> str:
    return parse_settings(user_config(stack), stack).serving.runtime


def user_config(stack: str, **overrides: Any) -> dict[str, str]:
    """The stack file plus what a user adds: both secrets, a storage class, a vLLM image
    (harmless where unused: the NIM path ignores the token, the vLLM path the NGC key)."""
    raw = stack_config(stack, {**RECIPE_ONLY, "vllmImage": TEST_VLLM_IMAGE, **overrides})
    raw["cosmos3-routing:hfToken"] = TEST_HF_TOKEN
    return raw


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    out = {}
    for stack in STACK_FILES:
        config = user_config(stack)
        secrets = [k for k in config if k.endswith((":ngcApiKey", ":hfToken"))]
        out[stack] = run_program(stack, config, secret_keys=secrets)
        assert out[stack].error is None, f"{stack}: {out[stack].error}"
    return out


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_MARK:
            return _unwrap(value["value"])
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


def test_the_repository_has_vllm_example_stacks() -> None:
    assert {"round-robin", "session-affinity"} <= set(STACK_FILES)
    assert [s for s in STACK_FILES if runtime_of(s) == "vllm"], STACK_FILES


@pytest.mark.parametrize("stack", STACK_FILES)
def test_every_stack_file_declares_a_valid_graph(runs: dict[str, ProgramRun], stack: str) -> None:
    run = runs[stack]
    graph = _unwrap(run.one(GRAPH).inputs)
    assert graph_errors(graph) == []
    assert graph["metadata"]["name"] == names.graph_name(stack)
    validate_k8s(_unwrap(run.one(JOB).inputs))
    settings = parse_settings(user_config(stack), stack)
    (worker,) = (c for c in graph["spec"]["components"] if c["type"] == "worker")
    main = worker["podTemplate"]["spec"]["containers"][0]
    assert worker["replicas"] == settings.serving.replicas
    assert main["resources"]["limits"]["nvidia.com/gpu"] == (
        settings.serving.gpus_per_replica)


@pytest.mark.parametrize("stack, runtime", [(s, None) for s in STACK_FILES] + [
    ("compare", "vllm")])
def test_no_worker_advertises_a_router_mode(stack: str, runtime: str | None) -> None:
    """A worker that advertises a router mode (`--router-mode`, `DYN_ROUTER_*`, also through
    the graph's spec.env) overrides every frontend's routing (Dynamo 1.6.1: with the mocker
    given `--router-mode kv --no-router-kv-events`, two round-robin frontends sent 8 of 8
    prompts to one worker)."""
    overrides = {"runtime": runtime} if runtime else {}
    spec = manifests.graph(parse_settings(user_config(stack, **overrides), stack))["spec"]
    workers = [c["podTemplate"]["spec"] for c in spec["components"] if c["type"] != "frontend"]
    env = [e["name"] for e in [*spec["env"], *(e for w in workers for c in w["containers"]
                                                for e in c.get("env", []))]]
    args = [a for w in workers for c in w["containers"] for a in c.get("command", []) + c.get(
        "args", [])]
    assert workers and not [n for n in env if n.startswith("DYN_ROUTER")], env
    assert not [a for a in args if "--router" in a], args


@pytest.mark.parametrize("stack", STACK_FILES)
def test_each_runtime_gets_its_secret_and_no_other(runs: dict[str, ProgramRun], stack: str
                                                   ) -> None:
    run = runs[stack]
    secrets = [_unwrap(s.inputs) for s in run.of_type(SECRET)]
    assert len(secrets) == 1
    if runtime_of(stack) == "vllm":
        assert secrets[0]["metadata"]["name"] == f"{names.graph_name(stack)}-hf-token"
        assert secrets[0]["stringData"] == {HF_SECRET_KEY: TEST_HF_TOKEN}
    else:
        assert secrets[0]["metadata"]["name"] == f"{names.graph_name(stack)}-ngc-api-key"
    secret = run.one(SECRET)
    assert secret.urn in run.one(JOB).dependencies, "the download Job waits for its secret"
    # The value travels only as a Pulumi secret: nowhere in plain form.
    assert secret.inputs["stringData"].get(SECRET_SIG) == SECRET_MARK
    for needle in (TEST_HF_TOKEN, TEST_NGC_KEY):
        for res in run.resources:
            plain = res.inputs if res is not secret else {**res.inputs, "stringData": None}
            assert needle not in json.dumps(plain), res.type
        assert needle not in json.dumps(run.outputs)


def test_a_vllm_stack_without_a_token_declares_nothing() -> None:
    stack = next(s for s in STACK_FILES if runtime_of(s) == "vllm")
    config = user_config(stack)
    del config["cosmos3-routing:hfToken"]
    run = run_program(stack, config)
    assert run.resources == []
    assert "cosmos3-routing:hfToken" in str(run.error)
