"""The compare stack (Pulumi.compare.yaml): one graph, one frontend component per profile, all
on the same workers (frontends find workers by the graph's Dynamo namespace), run through the
real program under the SDK's mocks; and each refusal of `frontendProfiles`."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.sweep import Target
from infra import names
from infra import routing as rt
from infra.settings import SettingsError, parse_settings
from tests.support_operator import component_deployments
from tests.support_pulumi import ProgramRun, run_program, stack_config
from tests.test_benchmark_manifests import sweep_config

STACK, PROFILES = "compare", ("round-robin", "session-affinity")
GRAPH = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"
SERVICES = {"round-robin": "cosmos3-compare-round-robin",
            "session-affinity": "cosmos3-compare-session-affinity"}


@pytest.fixture(scope="module")
def run() -> ProgramRun:
    found = run_program(STACK, stack_config(STACK))
    assert found.error is None, found.error
    return found


def components(run: ProgramRun) -> list[dict[str, Any]]:
    return run.one(GRAPH).inputs["spec"]["components"]


def test_one_graph_holds_a_frontend_per_profile_and_one_worker(run) -> None:
    """(Valid against the CRD: test_infra_serving_program, every stack file.)"""
    assert [(c["name"], c["type"]) for c in components(run)] == [
        ("round-robin", "frontend"), ("session-affinity", "frontend"), ("Worker", "worker")]


def test_each_frontend_routes_as_its_profile(run) -> None:
    for component in components(run)[:2]:
        (main,) = component["podTemplate"]["spec"]["containers"]
        assert main["command"] == list(rt.FRONTEND_COMMAND)
        assert main["args"] == rt.frontend_args(rt.PROFILES[component["name"]])


def test_each_frontend_has_its_own_service(run) -> None:
    """The operator names each component's Deployment and Service `<graph>-<component>`
    (GetDCDResourceName): the names the stack exports and the sweep calls."""
    graph = names.graph_name(STACK)
    assert {p: names.component_name(graph, p) for p in PROFILES} == SERVICES
    assert run.outputs["frontends"] == SERVICES
    made = {d["metadata"]["name"] for d in component_deployments(run.one(GRAPH).inputs)}
    assert set(SERVICES.values()) <= made


def test_the_sweep_sends_to_both_frontends_and_the_session_header_to_affinity_alone(run) -> None:
    (sweep,) = (j for j in run.of_type("kubernetes:batch/v1:Job") if j.name == "sweep")
    config = sweep_config(sweep.inputs)
    url = "http://{}.cosmos3-reasoner.svc:8000"
    assert config.targets == (Target("round-robin", url.format(SERVICES["round-robin"]), False),
                              Target("session-affinity",
                                     url.format(SERVICES["session-affinity"]), True))


def problems(stack: str, **overrides: Any) -> list[str]:
    with pytest.raises(SettingsError) as err:
        parse_settings(stack_config(stack, overrides), stack)
    return err.value.problems


def test_a_recipe_stack_lists_no_profiles() -> None:
    [problem] = problems("round-robin", frontendProfiles=list(PROFILES))
    assert problem.startswith("cosmos3-routing:frontendProfiles: stack 'round-robin' is one of "
                              "the recipe's profiles")


def test_a_profile_listed_twice_is_refused() -> None:
    [problem] = problems(STACK, frontendProfiles=["round-robin", "round-robin"])
    assert problem.startswith("cosmos3-routing:frontendProfiles: lists a profile twice")


def test_two_affinity_frontends_on_one_graph_are_refused(monkeypatch) -> None:
    """Dynamo shares affinity bindings between a graph's routers ("Bindings synchronize across
    router replicas", dynamo.frontend's router_args.py, 1.6.1)."""
    monkeypatch.setitem(rt.PROFILES, "soft-affinity", rt.Routing(
        affinity_ttl_secs=300, affinity_mode="soft"))
    [problem] = problems(STACK, frontendProfiles=["session-affinity", "soft-affinity"])
    assert problem.startswith("cosmos3-routing:frontendProfiles: lists more than one profile "
                              "with session affinity")


def test_frontend_names_beyond_the_operators_limits_are_refused() -> None:
    """A profile's name joins the graph's in Grove's 45 characters: a stack name the recipe's
    `Frontend` allows is too long beside `session-affinity`."""
    stack = "compare-" + "x" * 15
    parse_settings(stack_config(stack, {"frontendProfiles": []}), stack)
    [problem] = problems(stack, frontendProfiles=list(PROFILES))
    assert problem.startswith(f"cosmos3-routing:frontendProfiles: graph cosmos3-{stack} with "
                              "frontends named round-robin, session-affinity is longer than")
