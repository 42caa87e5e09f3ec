"""The Pulumi program with the post-deploy benchmark, run under the SDK's mocks per stack.

What is checked is what the program hands the engine: the resources, their inputs (against
the Kubernetes schemas and the DynamoGraphDeployment CRD), their dependencies and waits,
and the resource hook bound to the sweep Job (registered never to run on preview).
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks.sweep import MANIFEST_NAME, SweepConfig, open_run
from infra import benchmark_manifests as bj
from infra.manifests import ALLOW_INTERNAL_MEDIA, TIMEOUT_SECONDS
from infra.names import benchmark_name
from infra.routing import PROFILES
from tests import support_pulumi
from tests.support_pulumi import ProgramRun, Registration, run_program, stack_config
from tests.support_schemas import graph_errors, validate_k8s
from tests.test_benchmark_manifests import pod_args, sweep_config

STACKS = sorted(PROFILES)
JOB = "kubernetes:batch/v1:Job"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
GRAPH = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"
BENCHMARK_KINDS = (CONFIG_MAP, DEPLOYMENT, SERVICE)
OFF = {"benchmarkSmoke": False, "benchmarkSweep": False}


class HookRecords:
    """Hooks as the engine would receive them: registrations and per-resource bindings."""

    def __init__(self) -> None:
        self.registered: dict[str, bool] = {}  # name -> on_dry_run
        self.bindings: dict[str, dict[str, list[str]]] = {}


def run_with_hooks(stack: str, overrides: dict[str, Any] | None = None
                   ) -> tuple[ProgramRun, HookRecords]:
    """Run the program, also recording the hook messages the mock monitor drops."""
    records = HookRecords()
    monitor = support_pulumi._RecordingMonitor
    register_resource = monitor.RegisterResource

    def register(self, request):  # noqa: N802 (gRPC method name)
        hooks = request.hooks
        records.bindings[request.name] = {
            "after_create": list(hooks.after_create), "after_update": list(hooks.after_update),
            "before_create": list(hooks.before_create),
        }
        return register_resource(self, request)

    def register_hook(self, request):  # noqa: N802 (gRPC method name)
        records.registered[request.name] = request.on_dry_run
        return support_pulumi.pulumi_mocks.MockMonitor.RegisterResourceHook(self, request)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(monitor, "RegisterResource", register)
        patch.setattr(monitor, "RegisterResourceHook", register_hook)
        run = run_program(stack, stack_config(stack, overrides))
    assert run.error is None, f"{stack}: {run.error}"
    return run, records


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[ProgramRun, HookRecords]]:
    return {stack: run_with_hooks(stack) for stack in STACKS}


def jobs(run: ProgramRun) -> dict[str, Registration]:
    return {r.name: r for r in run.of_type(JOB)}


def sweep_of(run: ProgramRun) -> SweepConfig:
    return sweep_config(jobs(run)["sweep"].inputs)


def graph_env(run: ProgramRun) -> list[dict[str, str]]:
    return run.one(GRAPH).inputs["spec"].get("env", [])


@pytest.mark.parametrize("stack", STACKS)
def test_benchmark_resources_are_declared_and_valid(runs, stack: str) -> None:
    run, _ = runs[stack]
    assert set(jobs(run)) == {"download", "smoke", "sweep"}
    for kind in BENCHMARK_KINDS:
        assert len(run.of_type(kind)) == 1, kind
    component = next(r for r in run.resources if r.type.endswith(":BenchmarkRun"))
    for res in [*run.of_type(CONFIG_MAP), *run.of_type(DEPLOYMENT), *run.of_type(SERVICE),
                jobs(run)["smoke"], jobs(run)["sweep"]]:
        assert res.parent == component.urn
        validate_k8s(res.inputs)
    assert graph_errors(run.one(GRAPH).inputs) == []
    assert ALLOW_INTERNAL_MEDIA in graph_env(run)
    assert jobs(run)["smoke"].inputs["metadata"]["name"] == benchmark_name("smoke", stack, "run-1")
    assert jobs(run)["sweep"].inputs["metadata"]["name"] == benchmark_name("sweep", stack, "run-1")


@pytest.mark.parametrize("stack", STACKS)
def test_smoke_waits_for_the_graph_and_the_sweep_for_the_smoke_test(runs, stack: str) -> None:
    run, _ = runs[stack]
    graph = run.one(GRAPH)
    server, service = run.one(DEPLOYMENT), run.one(SERVICE)
    smoke, sweep = jobs(run)["smoke"], jobs(run)["sweep"]
    assert {graph.urn, server.urn, service.urn} <= set(smoke.dependencies)
    assert smoke.urn in sweep.dependencies
    # The videos are made while the model downloads: the server waits for nothing GPU.
    assert graph.urn not in server.dependencies
    # The Service has endpoints only once the server is Ready: awaited after it, as long.
    assert server.urn in service.dependencies
    for res in (smoke, sweep, server, service):
        seconds = res.inputs["metadata"]["annotations"][TIMEOUT_SECONDS]
        assert res.timeouts == {"create": f"{seconds}s", "update": f"{seconds}s"}
    assert service.timeouts == server.timeouts
    assert int(sweep.inputs["metadata"]["annotations"][TIMEOUT_SECONDS]) >= 12 * 3600


@pytest.mark.parametrize("stack", STACKS)
def test_the_hook_is_bound_to_the_sweep_and_never_runs_on_preview(runs, stack: str) -> None:
    _, hooks = runs[stack]
    name = f"bring-results-home-{stack}"
    assert hooks.registered == {name: False}
    assert hooks.bindings["sweep"]["after_create"] == [name]
    assert hooks.bindings["sweep"]["after_update"] == [name]
    others = {k: v for k, v in hooks.bindings.items() if k != "sweep"}
    assert not any(any(v.values()) for v in others.values())


@pytest.mark.parametrize("stack", STACKS)
def test_stack_output_tells_collect_where_the_run_is(runs, stack: str) -> None:
    run, _ = runs[stack]
    out = run.outputs["benchmark"]
    assert out["runId"] == "run-1" and out["stack"] == stack
    assert out["resultsPath"] == f"benchmarks/{stack}/run-1"
    assert out["sweepJob"] == jobs(run)["sweep"].inputs["metadata"]["name"]
    assert out["collectCommand"] == f"./run.sh collect --stack {stack} --run-id run-1"


def test_the_affinity_header_follows_the_stacks_routing(runs) -> None:
    def affinity(stack: str) -> bool | None:
        (target,) = sweep_of(runs[stack][0]).targets
        return target.affinity

    # Explicit either way: the header follows the stack's routing, not its name.
    assert affinity("session-affinity") is True and affinity("round-robin") is False
    # Every stack's sweep records which worker served each request (server-side evidence).
    assert all(sweep_of(runs[stack][0]).attribute_workers for stack in runs)


def test_only_enabled_parts_are_declared() -> None:
    off, hooks = run_with_hooks("round-robin", OFF)
    assert set(jobs(off)) == {"download"}
    assert not any(off.of_type(kind) for kind in BENCHMARK_KINDS)
    assert "benchmark" not in off.outputs and not hooks.registered
    # Set either way: the benchmark's on/off must not restart the workers (docs/security.md).
    assert ALLOW_INTERNAL_MEDIA in graph_env(off)

    smoke_only, hooks = run_with_hooks("round-robin", {"benchmarkSweep": False})
    assert set(jobs(smoke_only)) == {"download", "smoke"} and not hooks.registered

    sweep_only, _ = run_with_hooks("round-robin", {"benchmarkSmoke": False})
    sweep = jobs(sweep_only)["sweep"]
    assert set(jobs(sweep_only)) == {"download", "sweep"}
    assert sweep_only.one(GRAPH).urn in sweep.dependencies


@pytest.mark.parametrize("image", [
    "docker.io/library/python@sha256:" + "a" * 64,
    "docker.io/library/python:3.11.14-slim-bookworm@sha256:" + "b" * 64,
])
def test_a_benchmark_image_pinned_by_digest_is_accepted(image: str) -> None:
    run = run_program("round-robin", stack_config("round-robin", {"benchmarkImage": image}))
    assert run.error is None, run.error
    assert jobs(run)["sweep"].inputs["spec"]["template"]["spec"]["containers"][0][
        "image"] == image


def test_the_sweep_is_bound_to_the_deployment_it_measures() -> None:
    run = run_program("session-affinity", stack_config("session-affinity"))
    facts = sweep_of(run).deployment
    assert facts["worker_image"] == stack_config("session-affinity")[
        "cosmos3-routing:nimImage"]
    assert facts["routing"] == ("session-affinity: --router-mode round-robin "
                                "--router-session-affinity-ttl-secs 300")
    assert {"graph_uid", "code", "replicas", "gpus_per_worker", "model"} <= set(facts)


def test_settings_reach_the_sweep() -> None:
    run, _ = run_with_hooks("session-affinity", {
        "benchmarkConcurrencies": [4, 16], "benchmarkVideos": 50,
        "benchmarkQuestionsPerVideo": 10, "benchmarkWaitForSweep": False,
        "benchmarkImage": "registry.example/bench:2.0", "benchmarkSweepTimeoutSecs": 20000,
    })
    sweep = jobs(run)["sweep"].inputs
    container = sweep["spec"]["template"]["spec"]["containers"][0]
    workload = sweep_of(run).workload
    assert (workload.concurrencies, workload.videos, workload.questions_per_video) == (
        (4, 16), 50, 10)
    assert container["image"] == "registry.example/bench:2.0"
    assert sweep["spec"]["activeDeadlineSeconds"] == 20000
    assert sweep["metadata"]["annotations"][bj.WAIT_FOR] == bj.STARTED
    # The video maker makes that workload's videos (and one for the smoke test).
    server_init = run.one(DEPLOYMENT).inputs["spec"]["template"]["spec"]["initContainers"][0]
    assert pod_args(server_init).run.workload == workload


def test_a_new_run_id_reruns_the_jobs_and_leaves_the_graph_alone(runs) -> None:
    first, _ = runs["session-affinity"]
    second, _ = run_with_hooks("session-affinity", {"benchmarkRunId": "run-2"})
    for kind in (GRAPH, CONFIG_MAP, SERVICE):
        assert first.one(kind).inputs == second.one(kind).inputs, kind
    # The video server differs in its maker's run alone: the new run's videos (its seed).
    servers = [copy.deepcopy(run.one(DEPLOYMENT).inputs) for run in (first, second)]
    makers = [s["spec"]["template"]["spec"]["initContainers"][0] for s in servers]
    old, new = (pod_args(maker).run for maker in makers)
    assert new == replace(old, run_id="run-2", notes=new.notes, workload=new.workload)
    assert new.workload == replace(old.workload, seed=new.workload.seed) != old.workload
    for maker in makers:
        maker.pop("command")
    assert servers[0] == servers[1]
    assert jobs(first)["download"].inputs == jobs(second)["download"].inputs
    for name in ("smoke", "sweep"):
        old, new = jobs(first)[name].inputs, jobs(second)[name].inputs
        assert old["metadata"]["name"] != new["metadata"]["name"]
        assert new["metadata"]["name"].endswith("-run-2")
    assert sweep_of(second).run_dir == Path(bj.CACHE_DIR) / "benchmarks/session-affinity/run-2"
    assert second.outputs["benchmark"]["runId"] == "run-2"


@pytest.mark.parametrize("overrides, key", [
    ({"benchmarkRunId": "Run_2"}, "benchmarkRunId"),
    ({"benchmarkRunId": "r" * 40}, "benchmarkRunId"),
    ({"benchmarkConcurrencies": "[1, 1]"}, "benchmarkConcurrencies"),
    ({"benchmarkConcurrencies": "[]"}, "benchmarkConcurrencies"),
    ({"benchmarkConcurrencies": "one"}, "benchmarkConcurrencies"),
    ({"benchmarkVideos": 0}, "benchmarkVideos"),
    ({"benchmarkImage": "python"}, "benchmarkImage"),
    ({"benchmarkImage": "python:latest"}, "benchmarkImage"),
    ({"benchmarkSweepTimeoutSecs": 5}, "benchmarkSweepTimeoutSecs"),
    ({"benchmarkWaitForSweep": "maybe"}, "benchmarkWaitForSweep"),
    ({"benchmarkPipIndexUrl": "mirror.example"}, "benchmarkPipIndexUrl"),
    ({"benchmarkNodeSelector": ["pool"]}, "benchmarkNodeSelector"),
    ({"benchmarkTolerations": ["a:Sometimes"]}, "benchmarkTolerations"),
])
def test_bad_benchmark_settings_name_their_key_and_declare_nothing(overrides, key) -> None:
    run = run_program("round-robin", stack_config("round-robin", overrides))
    assert run.error is not None
    assert f"cosmos3-routing:{key}" in str(run.error)
    assert not [r for r in run.resources if r.custom]


# ---------------------------------------------------------------------------------------
# What a run is bound to, and which Jobs a later `up` may replace


def binding(run: ProgramRun) -> tuple[str, dict[str, str]]:
    """The smoke Job's binding (its pod template's hash: a change replaces the Job, so the
    smoke test reruns) and the facts the sweep records and checks on resume."""
    return bj.digest(jobs(run)["smoke"].inputs["spec"]["template"]), dict(sweep_of(run).deployment)


@pytest.fixture(scope="module")
def base_binding() -> tuple[str, dict[str, str]]:
    run = run_program("session-affinity", stack_config("session-affinity"))
    assert run.error is None, run.error
    return binding(run)


@pytest.mark.parametrize("key, value", [
    ("nimTagsSelector", "n_gpus=1,nim_tp=1,nim_dp=1"),
    ("workerCpu", "12"),
    ("workerMemory", "80Gi"),
    ("workerSharedMemory", "32Gi"),
    ("workerRuntimeVersion", "1.6.2"),
    ("gpuNodeSelector", ["nvidia.com/gpu.product=NVIDIA-H200"]),
    ("gpuTolerations", ["nvidia.com/gpu", "dedicated=gpu:NoSchedule"]),
    ("benchmarkImage", "registry.example/bench:2.0"),
])
def test_every_setting_that_changes_what_is_measured_changes_the_binding(
        base_binding, key: str, value: Any) -> None:
    """The binding is the rendered graph (whatever the program declares), the benchmark
    image and the measurement code: no hand list of settings to forget one from."""
    run = run_program("session-affinity", stack_config("session-affinity", {key: value}))
    assert run.error is None, run.error
    smoke, facts = binding(run)
    assert smoke != base_binding[0], f"{key}: the smoke test would not rerun"
    assert facts != base_binding[1], f"{key}: the sweep would resume the earlier run's levels"


def test_the_two_profiles_runs_share_every_fact_but_routing(base_binding) -> None:
    """The report compares only runs that differ in routing (`report.ROUTING_FACTS`): the
    graph's fact must not carry the profile's name or the frontend's routing flags."""
    run = run_program("round-robin", stack_config("round-robin"))
    assert run.error is None, run.error
    _, facts = binding(run)
    differ = {k for k in facts.keys() | base_binding[1].keys()
              if facts.get(k) != base_binding[1].get(k)}
    assert differ == {"routing"}


# pulumi-kubernetes replaces a Job when one of these differs (provider/pkg/provider/diff.go
# at 00302beb, `job`: .spec.completions, .spec.parallelism, .spec.selector,
# .spec.template), deleting it first since its name is fixed (provider.go, Diff:
# deleteBeforeReplace whenever something is replaced). `ignoreChanges` keeps the old inputs
# of the paths it names (the engine diffs old against old there).
JOB_FORCE_NEW = ("completions", "parallelism", "selector", "template")


def provider_replaces(old: Registration, new: Registration) -> bool:
    spec = dict(new.inputs["spec"])
    if "spec" in new.ignore_changes:
        spec = old.inputs["spec"]
    return any(old.inputs["spec"].get(k) != spec.get(k) for k in JOB_FORCE_NEW)


def sweep_job_in_cluster(condition: str | None) -> Any:
    """The stack's sweep Job as the API returns it: Complete, Failed or running (None)."""
    from kubernetes.client import V1Job, V1JobCondition, V1JobStatus, V1ObjectMeta

    conditions = [V1JobCondition(type=condition, status="True")] if condition else None
    return V1Job(metadata=V1ObjectMeta(name=benchmark_name("sweep", "session-affinity", "run-1")),
                 status=V1JobStatus(conditions=conditions))


def run_after_change(monkeypatch, path: str, condition: str | None,
                     overrides: dict[str, Any] | None = None) -> tuple[ProgramRun, ProgramRun]:
    """The `up` that made the Jobs, then the next one after an edit of `path` (a `git
    pull`), with the sweep Job found in the cluster in the given state."""
    from infra import benchmark_manifests
    from tests.support_cluster import healthy

    config = stack_config("session-affinity", overrides)
    before = run_program("session-affinity", config)
    sources = benchmark_manifests.shipped_sources(support_pulumi.REPO_ROOT)
    changed = {**sources, path: sources[path] + "\n# edited\n"}
    monkeypatch.setattr(benchmark_manifests, "shipped_sources", lambda _root: changed)
    live = replace(healthy(), sweep_job=sweep_job_in_cluster(condition))
    after = run_program("session-affinity", config, cluster_objects=live)
    assert before.error is None and after.error is None, (before.error, after.error)
    return before, after


@pytest.mark.parametrize("path", ["benchmarks/sweep.py", "infra/cluster.py"])
@pytest.mark.parametrize("condition, wait", [("Complete", True), (None, False)])
def test_a_code_change_never_replaces_a_sweep_that_completed_or_still_runs(
        monkeypatch, path: str, condition: str | None, wait: bool) -> None:
    """After a two-hour sweep, `git pull` then `pulumi up` keeps the finished Job (and its
    results) as they are; with `benchmarkWaitForSweep: false` a running sweep goes on."""
    before, after = run_after_change(monkeypatch, path, condition,
                                     {"benchmarkWaitForSweep": wait})
    assert not provider_replaces(jobs(before)["sweep"], jobs(after)["sweep"])


def test_a_sweep_that_failed_is_rerun_with_the_new_code(monkeypatch) -> None:
    before, after = run_after_change(monkeypatch, "benchmarks/sweep.py", "Failed")
    assert provider_replaces(jobs(before)["sweep"], jobs(after)["sweep"])
    assert jobs(after)["sweep"].inputs["metadata"]["annotations"][bj.REPLACE_UNREADY] == "true"


def test_only_the_measurement_code_binds_a_run(monkeypatch) -> None:
    """An edit of the Pulumi program (infra/ beyond what the pods run) reruns nothing; an
    edit of what the pods run reruns the smoke test (the sweep resumes only a run of that
    code, and a started one is kept)."""
    before, after = run_after_change(monkeypatch, "infra/cluster.py", None)
    for name in ("smoke", "sweep"):
        assert not provider_replaces(jobs(before)[name], jobs(after)[name]), name
    assert binding(before) == binding(after)
    before, after = run_after_change(monkeypatch, "benchmarks/smoke.py", None)
    assert provider_replaces(jobs(before)["smoke"], jobs(after)["smoke"])
    assert binding(before) != binding(after)


def test_a_finished_sweep_releases_node_drains(monkeypatch) -> None:
    _, after = run_after_change(monkeypatch, "infra/cluster.py", "Complete")
    assert not after.of_type("kubernetes:policy/v1:PodDisruptionBudget")
    assert any("kept as it is" in line for line in after.logs)


def test_the_same_run_id_after_destroy_and_up_measures_again(tmp_path: Path) -> None:
    """The repeat path (issue 46): `destroy` then `up` makes a new graph, and Kubernetes gives
    every object it creates a new `metadata.uid`; the results of the first graph's run stay on
    the kept claim. The second sweep Job, parsed as its pod parses it, sets them aside under
    a name of their own and measures anew: never a failure after the cold start."""
    configs = []
    for uid in ("graph-before-destroy", "graph-after-up"):
        run = run_program("session-affinity", stack_config("session-affinity"),
                          live={GRAPH: {"metadata": {"name": "g", "uid": uid}}})
        assert run.error is None, run.error
        configs.append(replace(sweep_of(run), run_dir=tmp_path / "run-1"))
    before, after = configs
    assert before.deployment["graph_uid"] != after.deployment["graph_uid"]
    assert before.set_aside and before.workload == after.workload
    open_run(before, say=lambda _: None).save()  # the first graph's run, on the claim
    said: list[str] = []
    open_run(after, say=said.append).save()
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("run-1-")]
    kept = json.loads((aside / "session-affinity" / MANIFEST_NAME).read_text())
    assert kept["deployment"]["graph_uid"] == "graph-before-destroy"
    assert "graph_uid: 'graph-before-destroy' -> 'graph-after-up'" in said[0]
    assert json.loads((tmp_path / "run-1" / "session-affinity" / MANIFEST_NAME).read_text())[
        "deployment"]["graph_uid"] == "graph-after-up"
