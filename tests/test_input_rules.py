"""The small rules every check reads, stated at their boundaries: concurrency levels,
the error type's text, CIDRs, the frontend's routing flags and the operator's name
limits (infra/names.py cites the operator's source)."""

from __future__ import annotations

import pytest

from infra import names, routing
from infra.names import MAX_CONCURRENCY, InputError, cidr, levels_problems
from infra.routing import Routing

LEVELS = [
    ([1], []),
    ([MAX_CONCURRENCY], []),
    ([1, 2, 4], []),
    ([], ["needs at least one level"]),
    ([0], ["levels must be >= 1 and at most 1024 (got [0])"]),
    ([1, MAX_CONCURRENCY + 1], ["levels must be >= 1 and at most 1024 (got [1, 1025])"]),
    ([2, 2], ["levels repeat (got [2, 2])"]),
    ([0, 0], ["levels must be >= 1 and at most 1024 (got [0, 0])", "levels repeat (got [0, 0])"]),
]


@pytest.mark.parametrize(("levels", "problems"), LEVELS)
def test_levels_are_one_to_the_maximum_and_never_repeat(levels: list[int],
                                                        problems: list[str]) -> None:
    assert levels_problems(levels) == problems


def test_an_input_error_lists_every_problem_under_its_heading() -> None:
    err = InputError("bad settings", ["a: fix it", "b: fix that"])
    assert (err.heading, err.problems) == ("bad settings", ["a: fix it", "b: fix that"])
    assert str(err) == "bad settings:\n  - a: fix it\n  - b: fix that"
    assert isinstance(err, ValueError)


def test_a_cidr_is_normalised_and_anything_else_is_none() -> None:
    assert cidr("10.0.0.0/8") == "10.0.0.0/8"
    assert cidr("10.1.2.3/8") == "10.0.0.0/8"  # host bits: not strict
    assert cidr("10.1.2.3") == "10.1.2.3/32"
    assert cidr("fd00::1") == "fd00::1/128"
    assert cidr("frontend") is None
    assert cidr("10.0.0.0/33") is None


ROUTING = [
    (Routing(), ["--router-mode", "round-robin"]),
    (Routing(router_mode="kv"), ["--router-mode", "kv"]),
    (Routing(router_mode="kv", kv_events=False), ["--router-mode", "kv", "--no-router-kv-events"]),
    # The KV-events flag belongs to KV mode alone.
    (Routing(router_mode="random", kv_events=False), ["--router-mode", "random"]),
    (Routing(affinity_ttl_secs=300),
     ["--router-mode", "round-robin", "--router-session-affinity-ttl-secs", "300"]),
    (Routing(affinity_ttl_secs=1, affinity_mode="soft"),
     ["--router-mode", "round-robin", "--router-session-affinity-ttl-secs", "1",
      "--router-session-affinity-mode", "soft"]),
    # A mode without a TTL: affinity is off, so neither flag.
    (Routing(affinity_mode="soft"), ["--router-mode", "round-robin"]),
]


@pytest.mark.parametrize(("config", "args"), ROUTING)
def test_the_frontend_gets_exactly_the_flags_of_its_routing(config: Routing,
                                                           args: list[str]) -> None:
    assert routing.routing_args(config) == args
    assert config.affinity is (config.affinity_ttl_secs is not None)
    assert routing.frontend_args(config) == ["--http-host", "0.0.0.0", "--http-port", "8000",
                                             *args]
    assert routing.frontend_args(config, "127.0.0.1", 9) == [
        "--http-host", "127.0.0.1", "--http-port", "9", *args]


def test_the_frontend_runs_dynamos_own_module_and_the_profiles_are_the_recipes() -> None:
    assert routing.FRONTEND_COMMAND == ("python3", "-m", "dynamo.frontend")
    assert routing.PROFILES == {
        "round-robin": Routing(),
        "session-affinity": Routing(affinity_ttl_secs=300),
        "kv-routing": Routing(router_mode="kv", kv_events=False),
    }


def test_the_operators_names_and_their_limits() -> None:
    assert names.dynamo_namespace("ns", "a.b.c") == "ns-a-b-c"
    assert names.component_name("g", "VllmWorker") == "g-vllmworker"
    assert names.component_name("g", "VllmWorker", True) == "g-vllmworker-00000000"
    # Grove's 45 - len(component) binds before the Service's 63 - len("-<component>[-<hash>]").
    assert names.max_graph_len({"Frontend": False}) == 45 - 8
    assert names.max_graph_len({"W": True}) == 45 - 1
    assert names.max_graph_len({"Frontend": False, "w" * 40: True}) == 5
    # The label `<namespace>-<graph>` is at most 63 characters.
    assert names.max_namespace_len("g.x") == 63 - 4
    assert names.max_namespace_len("") == 62
