"""The names the Dynamo operator derives from each shipped stack fit Kubernetes' limits."""

from __future__ import annotations

import pytest

from infra import names
from infra.routing import PROFILES
from infra.settings import SettingsError, parse_settings
from tests.support_pulumi import project_name, stack_config


@pytest.mark.parametrize("stack", sorted(PROFILES))
def test_every_shipped_stack_gets_names_the_operator_can_create(stack: str) -> None:
    settings = parse_settings(stack_config(stack), stack)
    graph = settings.graph_name
    label = names.dynamo_namespace(settings.namespace, graph)
    assert len(label) <= 63 - 10, label  # with room for a longer namespace
    for component, worker in names.GRAPH_COMPONENTS.items():
        assert len(names.component_name(graph, component, worker)) <= 63
        assert len(graph) + len(component) <= names.GROVE_COMBINED_MAX


def test_derived_names_follow_the_operator() -> None:
    assert names.dynamo_namespace("ns", "a.b") == "ns-a-b"
    assert names.component_name("g", "Worker", worker=True) == "g-worker-00000000"
    assert names.component_name("g", "Frontend") == "g-frontend"
    # Grove: 45 minus "frontend"; the frontend Service, 63 minus "-frontend".
    assert names.max_graph_len(names.GRAPH_COMPONENTS) == 37


def test_a_namespace_that_overflows_the_operators_label_is_refused_by_name() -> None:
    stack = "session-affinity"
    graph = names.graph_name(stack)
    limit = 62 - len(graph)
    for name, ok in (("n" * limit, True), ("n" * (limit + 1), False)):
        raw = stack_config(stack, {"namespace": name})
        if ok:
            assert parse_settings(raw, stack).namespace == name
            continue
        with pytest.raises(SettingsError) as err:
            parse_settings(raw, stack)
        [problem] = err.value.problems
        assert problem.startswith(f"{project_name()}:namespace:")
        assert "63" in problem and f"at most {limit} characters" in problem


def test_a_stack_name_too_long_for_grove_is_refused() -> None:
    stack = "p" * 30
    with pytest.raises(SettingsError, match="at most 29 characters"):
        parse_settings(stack_config("round-robin"), stack)


@pytest.mark.parametrize("profile", ["session-affinity", "compare", "p" * 29])
def test_the_longest_run_id_fills_the_longer_job_name_exactly(profile: str) -> None:
    """A Job's name is `<...>-<profile>-<run id>`: the separator counts, so the longest run
    id brings the longer of the two names to 63 exactly, and one more would not fit."""
    longest = names.max_run_id_len(profile)
    lengths = [len(names.benchmark_name(job, profile, "r" * longest)) for job in ("smoke", "sweep")]
    assert max(lengths) == names.DNS_LABEL_MAX


def test_the_served_model_is_the_one_the_nim_lists() -> None:
    """The seed's model id, which `/v1/models` lists and every request names."""
    assert names.served_model_name() == names.SERVED_MODEL_NAME == "nvidia/cosmos3-super-reasoner"
