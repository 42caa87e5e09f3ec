"""One contract from stack config to the sweep pod (issue 47): for every shipped stack and the
edge values of the `benchmark*` keys, `pulumi preview` (parse_settings) accepts exactly what the
sweep pod accepts, judged by the pod's own parser and checks on the sweep Job's arguments, and a
preview refusal names the stack setting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from benchmarks.sweep import config_problems
from infra import benchmark_manifests as bm
from infra import names
from infra.run import Workload
from infra.settings import WORKLOAD_KEYS, SettingsError, parse_settings, stack_names
from tests.conftest import REPO_ROOT
from tests.test_benchmark_manifests import sweep_config
from tests.test_infra_serving_program import user_config

FIELDS = {names.camel(f"benchmark_{f}"): f for f in WORKLOAD_KEYS}
TOP = 16  # the highest of Pulumi.yaml's levels, which every shipped stack keeps
# Each edge: the stack keys it sets (to the workload's values, given the stack's workload).
EDGES: dict[str, Callable[[Workload], dict[str, Any]]] = {
    "questions 1": lambda w: {"benchmarkQuestionsPerVideo": 1},
    "questions 20": lambda w: {"benchmarkQuestionsPerVideo": 20},
    "questions 21": lambda w: {"benchmarkQuestionsPerVideo": 21},
    "questions 50": lambda w: {"benchmarkQuestionsPerVideo": 50},
    "videos = top level": lambda w: {"benchmarkVideos": max(w.concurrencies)},
    "videos < top level": lambda w: {"benchmarkVideos": max(w.concurrencies) - 1},
    "level 400": lambda w: {"benchmarkConcurrencies": [*w.concurrencies, 400]},
    "level 400, 400 videos": lambda w: {"benchmarkConcurrencies": [*w.concurrencies, 400],
                                        "benchmarkVideos": 400},
    "stop 0.5": lambda w: {"benchmarkStopWithinPct": 0.5},
    "stop 50": lambda w: {"benchmarkStopWithinPct": 50},
    "stop 51": lambda w: {"benchmarkStopWithinPct": 51},
    "full": lambda w: {"benchmarkFull": True},
}


def config(stack: str, **keys: Any) -> dict[str, str]:
    """The stack file, what a user adds, its benchmark on, and `keys`."""
    return user_config(stack, benchmarkSmoke=True, benchmarkSweep=True, **keys)


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return bm.shipped_sources(REPO_ROOT)


def pod_problems(settings: Any, workload: Workload, sources: dict[str, str]) -> list[str]:
    """The sweep pod's own verdict on the Job these settings render with `workload`: its
    parser on the Job's arguments (`sh -c RUNNER runner ARGS`), then its checks."""
    run = replace(bm.run_of(settings), workload=workload)
    jobs = bm.benchmark_objects(run, replace(settings.benchmark, workload=workload), sources)
    return config_problems(sweep_config(jobs["sweep"]))


# Every edge on a per-profile stack and the compare stack (one profile, two: the videos a run
# takes differ), and on every shipped stack the two edges the pods refused hours into `up`.
CASES = sorted({*((stack, edge) for stack in ("session-affinity", "compare") for edge in EDGES),
                *((stack, edge) for stack in stack_names(REPO_ROOT)
                  for edge in ("questions 50", "videos < top level"))})


@pytest.mark.parametrize("stack,edge", CASES)
def test_preview_accepts_exactly_what_the_sweep_pod_accepts(stack: str, edge: str,
                                                            sources) -> None:
    base = parse_settings(config(stack), stack)
    assert max(base.benchmark.workload.concurrencies) == TOP
    keys = EDGES[edge](base.benchmark.workload)
    workload = replace(base.benchmark.workload, **{
        FIELDS[k]: tuple(v) if isinstance(v, list) else v for k, v in keys.items()})
    try:
        settings, preview = parse_settings(config(stack, **keys), stack), []
    except SettingsError as err:
        settings, preview = base, err.problems
    # What preview accepts is what the Job sends: the rendered run is the one judged below.
    assert preview or bm.run_of(settings) == replace(bm.run_of(base), workload=workload)
    pod = pod_problems(settings, workload, sources)
    assert bool(preview) == bool(pod), (preview, pod)
    for problem in preview:
        assert problem.split(": ")[0] in {f"cosmos3-routing:{key}" for key in FIELDS}, problem
