"""The benchmark's Kubernetes objects: valid, non-root, carrying the settings, and runnable.

The manifests are checked against the Kubernetes API schemas; the shipped code is laid
out exactly as a pod would see it and each container's own command (the shell runner)
runs for real (real FFmpeg, the real `benchmarks` CLI, the real pip), including the
failure path whose last line `pulumi up` shows.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as normalize

from benchmarks import smoke, videos
from benchmarks.__main__ import COMMANDS, build_parser
from benchmarks.sweep import SweepConfig, Target, config_from_args
from infra import benchmark_manifests as bj
from infra import manifests as mf
from infra.names import FRONTEND_COMPONENT, benchmark_name, component_name, graph_name
from infra.run import SEED_WORKLOAD, Run, VideoShape, Workload, run_seed
from infra.settings import BenchmarkSettings, parse_settings, stack_settings
from tests.conftest import REPO_ROOT, UNMUTATED_ROOT
from tests.support_pulumi import stack_config

# Pulumi.yaml's benchmark settings (the stack sets none of them), changed per test.
DEFAULTS = stack_settings("session-affinity").benchmark


def bench(**changes: Any) -> BenchmarkSettings:
    return replace(DEFAULTS, **changes)


def work(**changes: Any) -> Workload:
    """The stack's workload (its `benchmark*` keys) with `changes`."""
    return replace(DEFAULTS.workload, **changes)


K8S_VERSION = "1.33"
# Commands a benchmark pod runs (the others only run on the user's machine).
IN_CLUSTER_COMMANDS = ("videos", "smoke", "sweep")

SERVICE = component_name(graph_name("session-affinity"), FRONTEND_COMPONENT)
TARGET = Run(stack="session-affinity", run_id=bench().run_id,
             namespace="cosmos3-reasoner", cache_claim="shared-model-cache",
             image=bench().image, image_pull_secrets=("registry-pull-secret",),
             frontends=(("session-affinity", SERVICE, True),))


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return bj.shipped_sources(UNMUTATED_ROOT)


def manifests(settings: BenchmarkSettings, sources: dict[str, str],
              target: Run = TARGET) -> dict[str, dict[str, Any]]:
    """The objects, with the run as `run_of` makes it from these settings."""
    run = replace(target, run_id=settings.run_id, image=settings.image, workload=settings.workload)
    return bj.benchmark_objects(run, settings, sources)


def args_of(container: dict[str, Any]) -> list[str]:
    """The `python -m benchmarks` arguments of a runner container (`sh -c RUNNER runner
    ARGS`)."""
    command = container["command"]
    assert command[:4] == ["sh", "-c", bj.RUNNER, "runner"], command[:2]
    return command[4:]


def container_of(objects: dict[str, dict[str, Any]], role: str) -> dict[str, Any]:
    """A Job's container, or the video server's maker (its init container)."""
    spec = objects[role]["spec"]["template"]["spec"]
    return spec["initContainers"][0] if role == "video-server" else spec["containers"][0]


def pod_args(container: dict[str, Any]) -> argparse.Namespace:
    """A runner container's arguments as its pod's own parser reads them."""
    args = args_of(container)
    return build_parser(args[0]).parse_args(args)


def sweep_config(job: dict[str, Any]) -> SweepConfig:
    """The sweep pod's config, as its own parser makes it from the Job's arguments."""
    return config_from_args(pod_args(job["spec"]["template"]["spec"]["containers"][0]))


def pod_run(objects: dict[str, dict[str, Any]], role: str, monkeypatch: pytest.MonkeyPatch
            ) -> Any:
    """What the video maker makes (its VideoShape) or what the smoke test asks (its
    SmokeConfig): the pod's own command run on its arguments, the work itself left out."""
    module, name, at = (videos, "make_videos", 1) if role == "video-server" else (
        smoke, "run_smoke", 0)
    seen: list[Any] = []
    monkeypatch.setattr(module, name, lambda *given, **_: seen.append(given[at]) or [])
    args = pod_args(container_of(objects, role))
    assert args.func(args) == 0
    return seen[0]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def pod_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A pod's containers, its init containers too."""
    return spec["containers"] + spec.get("initContainers", [])


def pod_specs(objects: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for obj in objects.values():
        if obj["kind"] == "Pod":
            out.append(obj["spec"])
        elif obj["kind"] in ("Job", "Deployment"):
            out.append(obj["spec"]["template"]["spec"])
    return out


def test_every_object_validates_against_the_kubernetes_schemas(sources) -> None:
    objects = manifests(bench(), sources)
    objects["reader"] = bj.results_reader_pod(
        TARGET, "reader-x", ("sweep-job", "0f4c2a9e-1d3b-4c5d-8e7f-9a0b1c2d3e4f"))
    no_secrets = replace(TARGET, image_pull_secrets=(),
                         frontends=(("round-robin", SERVICE, False),))
    objects.update({f"plain-{k}": v for k, v in manifests(
        bench(wait_for_sweep=False), sources, no_secrets).items()})
    for role, obj in objects.items():
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{role} ({obj['kind']}): {error.message}")
    assert {o["kind"] for o in objects.values()} == {
        "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "Job", "Pod"}
    # Beyond the schema: each mount names one of its pod's volumes (the API server checks),
    # and each volume is mounted (a pod holds no claim it doesn't read).
    for spec in pod_specs(objects):
        volumes = {v["name"] for v in spec["volumes"]}
        assert {m["name"] for c in pod_containers(spec) for m in c["volumeMounts"]} == volumes
        for container in pod_containers(spec):
            assert container["imagePullPolicy"] in ("Always", "IfNotPresent", "Never")


def test_the_results_reader_belongs_to_the_sweep_job_so_destroy_removes_it() -> None:
    reader = bj.results_reader_pod(TARGET, "reader-x", owner_job=("sweep-job", "uid-1"))
    assert reader["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "sweep-job", "uid": "uid-1"}]
    assert "ownerReferences" not in bj.results_reader_pod(TARGET, "reader-x")["metadata"]


def test_every_pod_runs_as_the_nim_user_without_privileges(sources) -> None:
    objects = manifests(bench(), sources)
    objects["reader"] = bj.results_reader_pod(TARGET, "reader-x")
    specs = pod_specs(objects)
    assert len(specs) == 4
    for spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 1000
        assert spec["securityContext"]["runAsGroup"] == 1000
        assert spec["automountServiceAccountToken"] is False
        for container in pod_containers(spec):
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["readOnlyRootFilesystem"] is True


def test_pull_secrets_reach_every_pod(sources) -> None:
    for spec in pod_specs(manifests(bench(), sources)):
        assert spec["imagePullSecrets"] == [{"name": "registry-pull-secret"}]


def test_only_enabled_parts_exist(sources) -> None:
    assert manifests(bench(smoke=False, sweep=False), sources) == {}
    smoke_only = manifests(bench(sweep=False), sources)
    video = {"code", "video-server", "video-service", "video-budget"}
    assert set(smoke_only) == {*video, "smoke"}
    sweep_only = manifests(bench(smoke=False), sources)
    assert set(sweep_only) == {*video, "sweep"}


def test_sweep_carries_the_settings(sources) -> None:
    settings = bench(run_id="run-7", workload=work(concurrencies=(2, 8), videos=12,
                                                   questions_per_video=3),
                     sweep_timeout_secs=7200, image="registry.example/bench:1.0")
    objects = manifests(settings, sources)
    job, container = objects["sweep"], container_of(objects, "sweep")
    config = sweep_config(job)
    assert args_of(container)[:2] == ["sweep", "--run"]
    assert config.workload == settings.workload
    assert config.run_dir == Path(bj.CACHE_DIR) / "benchmarks/session-affinity/run-7"
    assert config.targets == (Target("session-affinity", TARGET.frontend_url(SERVICE), True),)
    assert config.source.base_url == TARGET.video_base_url
    assert container["image"] == "registry.example/bench:1.0"
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    # The provider waits a little longer than the Job's own deadline, which has a reason.
    assert int(job["metadata"]["annotations"][bj.TIMEOUT_SECONDS]) > 7200
    assert bj.WAIT_FOR not in job["metadata"]["annotations"]
    # The stop rule as the stack sets it; every chunk only when asked (`benchmarkFull`).
    assert config.workload.stop_within_pct == 3.0 and not config.workload.full
    full = sweep_config(manifests(replace(settings, workload=work(stop_within_pct=7.5,
                                                                  full=True)), sources)["sweep"])
    assert full.workload.stop_within_pct == 7.5 and full.workload.full
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[bj.CACHE_DIR] == "cache"
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["cache"]["persistentVolumeClaim"]["claimName"] == "shared-model-cache"


def test_not_waiting_for_the_sweep_awaits_only_its_start(sources) -> None:
    """skipAwait would also skip awaiting the Job's deletion, so a replacement could land
    on a Job still terminating (422): a sweep not waited for is awaited until it started."""
    objects = manifests(bench(wait_for_sweep=False), sources)
    annotations = objects["sweep"]["metadata"]["annotations"]
    assert annotations[bj.WAIT_FOR] == "jsonpath={.status.startTime}"
    assert "pulumi.com/skipAwait" not in annotations
    for role in ("smoke", "video-server"):
        assert bj.WAIT_FOR not in objects[role]["metadata"]["annotations"]


@pytest.mark.parametrize("wait", [True, False])
def test_a_running_sweep_is_never_replaced_a_failed_one_is(sources, wait: bool) -> None:
    """The provider replaces an unready Job marked replaceUnready: a sweep still running
    (also when benchmarkWaitForSweep flips) keeps running; one that failed is rerun."""
    settings = bench(wait_for_sweep=wait)
    running = bj.benchmark_objects(TARGET, settings, sources)["sweep"]
    assert bj.REPLACE_UNREADY not in running["metadata"]["annotations"]
    failed = bj.benchmark_objects(TARGET, settings, sources, rerun_sweep=True)["sweep"]
    assert failed["metadata"]["annotations"][bj.REPLACE_UNREADY] == "true"


def test_the_smoke_test_fails_fast_and_the_sweep_survives_disruptions(sources) -> None:
    objects = manifests(bench(smoke_timeout_secs=900), sources)
    smoke = objects["smoke"]["spec"]
    assert smoke["backoffLimit"] == 0 and smoke["activeDeadlineSeconds"] == 900
    # A failed pod is not restarted in place: the Job counts it (podFailurePolicy needs Never).
    for role in ("smoke", "sweep"):
        assert objects[role]["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    rules = objects["sweep"]["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "Ignore"
    assert rules[1]["action"] == "FailJob"
    for role in ("smoke", "sweep"):
        container = objects[role]["spec"]["template"]["spec"]["containers"][0]
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_a_new_run_id_renames_the_jobs_and_remakes_the_videos_only(sources) -> None:
    first = manifests(bench(run_id="run-1"), sources)
    second = manifests(bench(run_id="run-2"), sources)
    for role in ("code", "video-service"):
        assert first[role] == second[role], role
    # The video maker is handed the new run (its videos' seed comes from the run id).
    assert json.dumps(first["video-server"]).replace("run-1", "run-2") == json.dumps(
        second["video-server"])
    for role in ("smoke", "sweep"):
        assert first[role]["metadata"]["name"] != second[role]["metadata"]["name"]
        assert second[role]["metadata"]["name"].endswith("-run-2")
        assert len(second[role]["metadata"]["name"]) <= 63


def test_longest_run_id_keeps_job_names_valid(sources) -> None:
    from infra.names import max_run_id_len
    from infra.settings import MAX_PROFILE_LEN

    for profile in ("session-affinity", "p" * MAX_PROFILE_LEN):
        longest = max_run_id_len(profile)
        assert longest >= 10, "a longest profile must still allow a readable run id"
        target = replace(TARGET, stack=profile)
        objects = manifests(bench(run_id="r" * longest), sources, target)
        for role, obj in objects.items():
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            assert len(obj["metadata"]["name"]) <= 63, role


def test_defaults_are_the_seed_shape() -> None:
    """The seed's workload; its videos' seed from the run id (no run resends another's)."""
    workload = bench().workload
    assert replace(workload, seed=SEED_WORKLOAD.seed) == SEED_WORKLOAD
    assert workload.seed == run_seed(bench().run_id)


def test_video_server_waits_as_long_as_the_videos_take(sources) -> None:
    objects = manifests(bench(video_server_timeout_secs=2400), sources)
    deployment = objects["video-server"]
    assert deployment["spec"]["progressDeadlineSeconds"] == 2400
    assert deployment["metadata"]["annotations"][bj.TIMEOUT_SECONDS] == "2400"
    maker = args_of(container_of(objects, "video-server"))
    assert maker[:2] == ["videos", "--run"] and maker[-2:] == ["--out", bj.VIDEOS_DIR]


def test_the_smoke_test_asks_about_a_video_the_sweep_never_measures(sources,
                                                                     monkeypatch) -> None:
    """The sweep takes fresh videos up to `videos_needed`: the smoke test's is the next."""
    objects = manifests(bench(workload=work(videos=12)), sources)
    asked = pod_run(objects, "smoke", monkeypatch)
    config = sweep_config(objects["sweep"])
    taken = config.workload.videos_needed(len(config.targets))
    assert asked.video_url == TARGET.video_base_url + f"video_{taken:04d}.mp4"
    assert asked.url == TARGET.frontend_url(SERVICE) and asked.model == config.model


def test_the_video_maker_makes_the_measured_videos_and_the_smoke_test_s(sources,
                                                                         monkeypatch) -> None:
    """Every video the sweep may take, one for the smoke test, with the sweep's seed."""
    objects = manifests(bench(workload=work(videos=12)), sources)
    config = sweep_config(objects["sweep"])
    assert pod_run(objects, "video-server", monkeypatch) == VideoShape(
        count=config.workload.videos_needed(len(config.targets)) + 1, seed=config.workload.seed)

# ---------------------------------------------------------------------------------------
# The shipped code, laid out as a pod sees it


def test_shipped_code_is_both_packages_and_the_pins() -> None:
    # Read here, not by the fixture: mutmut credits a fixture to the first test using it.
    sources = bj.shipped_sources(UNMUTATED_ROOT)
    for module in COMMANDS:
        assert f"benchmarks/{module}.py" in sources
    assert "constraints.txt" in sources
    config_map = bj.code_config_map({"name": "p", "namespace": "ns"}, sources)
    assert config_map["data"][bj.config_map_key("infra/names.py")] == (
        REPO_ROOT / "infra/names.py").read_text()
    assert sum(len(v) for v in config_map["data"].values()) < bj.CONFIG_MAP_LIMIT_BYTES
    # The API server's rule for a ConfigMap key (no '/': the volume's items put it back).
    assert all(re.fullmatch(r"[-._a-zA-Z0-9]+", key) for key in config_map["data"])
    assert config_map["metadata"]["annotations"][bj.CODE_ANNOTATION] == bj.code_hash(sources)


def test_code_over_a_config_maps_mib_is_refused_before_anything_is_made() -> None:
    """The API server refuses a ConfigMap over 1 MiB (keys and values): refused here, with
    the fix; one exactly at the limit passes."""
    limit = bj.CONFIG_MAP_LIMIT_BYTES
    assert bj.code_config_map({}, {"a": "x" * (limit - 1)})["data"] == {"a": "x" * (limit - 1)}
    with pytest.raises(ValueError) as refused:
        bj.code_config_map({}, {"a": "é" * (limit // 2)})
    assert str(refused.value) == (
        f"the benchmark code is {limit + 1} bytes, over a ConfigMap's 1 MiB; keep generated "
        "or large files out of benchmarks/ and infra/")


def mounted_volume(tmp_path: Path, sources: dict[str, str]) -> Path:
    """The code ConfigMap as the kubelet mounts it with `items`: each key at its path."""
    volume = tmp_path / "code"
    code = bj.code_config_map({"name": "p", "namespace": "ns"}, sources)
    volume_spec = manifests(bench(), sources)["sweep"]["spec"]["template"]["spec"][
        "volumes"]
    (items,) = [v["configMap"]["items"] for v in volume_spec if v["name"] == "code"]
    for item in items:
        target = volume / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code["data"][item["key"]])
    return volume


def test_the_cli_runs_from_the_mounted_config_map(tmp_path, sources) -> None:
    volume = mounted_volume(tmp_path, sources)
    assert (volume / "benchmarks" / "__init__.py").exists()
    assert (volume / "constraints.txt").exists()
    # A pod's tree holds what the pods run: each in-cluster command loads from it alone.
    for command in IN_CLUSTER_COMMANDS:
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks", command, "--help"], cwd=tmp_path,
            env={"PYTHONPATH": str(volume), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert command in result.stdout
    assert not (volume / "infra" / "cluster.py").exists()  # the Pulumi program stays out


def run_container(tmp_path: Path, sources: dict[str, str], container: dict[str, Any],
                  args: list[str] | None = None, **env: str) -> subprocess.Popen[str]:
    """Start a runner container's own command here, its env as the pod has it but for the
    paths (the code volume, a home) and pip: no index (as on an offline cluster, so pip can
    only pass where every pin is installed already) and no user site (this interpreter is a
    venv, where pip refuses one)."""
    volume = mounted_volume(tmp_path, sources)
    pod_env = {**env_of(container), "PYTHONPATH": str(volume), "HOME": str(tmp_path),
               "TMPDIR": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / ".cache"),
               "PIP_NO_INDEX": "1", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
               **env}
    del pod_env["PIP_USER"]
    command = container["command"] if args is None else [*container["command"][:4], *args]
    return subprocess.Popen(command, cwd=tmp_path, env=pod_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def run_runner(tmp_path: Path, sources: dict[str, str], args: list[str], role: str = "sweep",
               **env: str) -> tuple[int, list[str]]:
    """Run `args` in the `role` Job's container: (exit code, its log's lines)."""
    container = manifests(bench(), sources)[role]["spec"]["template"]["spec"][
        "containers"][0]
    with run_container(tmp_path, sources, container, args, **env) as pod:
        out, _ = pod.communicate(timeout=300)
    return pod.returncode, out.strip().splitlines()


def test_runner_runs_a_benchmark_command_from_the_config_map(tmp_path, sources) -> None:
    """The video maker's own container, as the video server's pod runs it. This interpreter
    has every pin, so pip installed nothing (no index: the offline-image path)."""
    out = tmp_path / "videos"
    small = work(concurrencies=(1,), videos=1)  # 4 the sweep may take, 1 for the smoke test
    container = container_of(manifests(bench(workload=small), sources), "video-server")
    args = [*args_of(container), "--duration", "2", "--width", "64", "--height", "64"]
    args[args.index("--out") + 1] = str(out)
    with run_container(tmp_path, sources, container, args) as pod:
        log, _ = pod.communicate(timeout=300)
    assert pod.returncode == 0, log
    assert sorted(p.name for p in out.glob("*.mp4")) == [f"video_{i:04d}.mp4" for i in range(5)]
    assert not (tmp_path / ".local").exists()


def test_a_failing_command_leaves_its_own_last_line_as_the_reason(tmp_path, sources) -> None:
    """A failed pod's termination message is its log's tail (FallbackToLogsOnError)."""
    code, lines = run_runner(tmp_path, sources, ["videos", "--count", "0"])
    assert code != 0
    assert "--count must be at least 1" in lines[-1]


# ---------------------------------------------------------------------------------------
# What the stock image must install: everything the shipped code imports in a pod


def _imports(tree: ast.AST, module_level_only: bool) -> set[str]:
    names: set[str] = set()
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # `from benchmarks import videos` loads the module benchmarks.videos.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def needed_top_level_imports(sources: dict[str, str], command: str) -> set[str]:
    """Third-party imports a pod running `command` executes: module level where
    `python -m benchmarks <command>` loads (it imports that command only), and every
    import of the command's own modules."""
    trees = {path[:-3].replace("/", "."): ast.parse(text)
             for path, text in sources.items() if path.endswith(".py")}
    local = {name.split(".")[0] for name in trees}

    def closure(start: list[str], module_level_only: bool) -> dict[str, set[str]]:
        seen: dict[str, set[str]] = {}
        todo = list(start)
        while todo:
            module = todo.pop()
            if module in seen or module not in trees:
                continue
            seen[module] = _imports(trees[module], module_level_only)
            todo += [n for n in seen[module] if n in trees]
        return seen

    loaded = closure(["benchmarks.__main__", f"benchmarks.{command}"], True)
    running = closure([f"benchmarks.{command}"], False)
    names = set().union(*loaded.values(), *running.values())
    return {n.split(".")[0] for n in names} - local - set(sys.stdlib_module_names)


def installable_closure(roots: tuple[str, ...]) -> set[str]:
    """Distributions pip installs for `roots` (their requirements, recursively)."""
    found: set[str] = set()
    todo = list(roots)
    env = {"extra": ""}
    while todo:
        name = normalize(todo.pop())
        if name in found:
            continue
        found.add(name)
        for spec in importlib.metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or Marker(str(req.marker)).evaluate(env):
                todo.append(req.name)
    return found


@pytest.mark.parametrize("command", IN_CLUSTER_COMMANDS)
def test_the_runner_installs_what_each_command_imports(sources, command: str) -> None:
    providers = importlib.metadata.packages_distributions()
    installed = installable_closure(bj.COMMAND_PACKAGES[command])
    missing = {}
    for name in sorted(needed_top_level_imports(sources, command)):
        dists = {normalize(d) for d in providers.get(name, [name])}
        if not dists & installed:
            missing[name] = sorted(dists)
    assert not missing, (
        f"`{command}` pods import {missing} but benchmark_manifests.COMMAND_PACKAGES "
        f"[{command!r}] ({', '.join(bj.COMMAND_PACKAGES[command])}) does not bring them: add "
        "the package, or import it inside the function that needs it if that function "
        "never runs in a pod"
    )


def test_the_video_maker_installs_no_aiperf() -> None:
    """AIPerf's tree is about 146 packages and 1.3 GB: only the sweep installs it."""
    closure = installable_closure(bj.COMMAND_PACKAGES["videos"] + bj.COMMAND_PACKAGES["smoke"])
    assert "aiperf" not in closure and "transformers" not in closure


def test_a_failing_smoke_test_leaves_its_own_reason(tmp_path, sources) -> None:
    """The line `pulumi up` shows when the smoke Job fails: the smoke test's own verdict."""
    from infra.names import SERVED_MODEL_NAME
    from tests.support_openai_server import RecordingOpenAIServer

    with RecordingOpenAIServer(models=[SERVED_MODEL_NAME]) as server:
        server.empty_answer = True
        # The pod's frontend is a cluster Service: its flags point the smoke test here.
        args = ["smoke", "--url", server.url, "--video-url",
                "http://127.0.0.1:9/video_0000.mp4", "--wait", "5"]
        code, lines = run_runner(tmp_path, sources, args, "smoke")
    assert code != 0
    assert lines[-1].startswith("Smoke test failed: empty answer")


# ---------------------------------------------------------------------------------------
# A run bound to its deployment; pods that survive the cluster's housekeeping


def test_a_new_deployment_reruns_the_smoke_test_and_is_recorded_by_the_sweep(sources) -> None:
    """The smoke Job's pod template (immutable: a change replaces the Job) carries the run
    with every deployment fact, code hash included, in its command, as the sweep's does."""
    first = replace(TARGET, deployment=(("worker_image", "nim:2.1.0"), ("graph_uid", "u1")))
    objects = manifests(bench(), sources, first)

    def smoke_template(target: Run, code: dict[str, str]) -> dict:
        return manifests(bench(), code, target)["smoke"]["spec"]["template"]

    same = smoke_template(first, sources)
    assert same == objects["smoke"]["spec"]["template"]
    for other in (replace(first, deployment=(("worker_image", "nim:2.2.0"), ("graph_uid", "u1"))),
                  replace(first, deployment=(("worker_image", "nim:2.1.0"), ("graph_uid", "u2")))):
        assert smoke_template(other, sources) != same
    changed_code = {**sources, "benchmarks/smoke.py": sources["benchmarks/smoke.py"] + "\n"}
    assert smoke_template(first, changed_code) != same
    assert sweep_config(objects["sweep"]).deployment == {
        "worker_image": "nim:2.1.0", "graph_uid": "u1", "code": bj.code_hash(sources)}


def test_a_new_image_or_graph_leaves_the_video_server_as_it_is(sources) -> None:
    """What the run records of the deployment changes the Jobs, never the videos: the workers'
    restart need not remake a thousand videos."""
    other = replace(TARGET, deployment=(("worker_image", "nim:2.2.0"), ("graph", "b")),
                    notes=("another deployment",))
    first, second = manifests(bench(), sources), manifests(bench(), sources, other)
    assert first["video-server"] == second["video-server"]
    assert first["sweep"]["spec"] != second["sweep"]["spec"]
    # The video maker's run is the run without them, a Run as the pod's parser reads it.
    (maker,) = first["video-server"]["spec"]["template"]["spec"]["initContainers"]
    given = args_of(maker)
    run = Run.from_output(json.loads(given[given.index("--run") + 1]))
    assert (run.deployment, run.notes) == ((), ())


def test_a_code_change_rolls_the_video_server(sources) -> None:
    changed = {**sources, "benchmarks/videos.py": sources["benchmarks/videos.py"] + "\n"}
    before, after = (manifests(bench(), s)["video-server"]["spec"]["template"]
                     for s in (sources, changed))
    assert before["metadata"]["annotations"] != after["metadata"]["annotations"]


def test_pods_are_kept_through_consolidation_and_drains(sources) -> None:
    objects = manifests(bench(), sources)
    for role in ("video-server", "smoke", "sweep"):
        annotations = objects[role]["spec"]["template"]["metadata"]["annotations"]
        assert annotations["karpenter.sh/do-not-disrupt"] == "true"
        assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    budget = objects["video-budget"]
    assert budget["spec"] == {"maxUnavailable": 0, "selector": objects["video-server"]["spec"][
        "selector"]}


def test_placement_and_the_package_mirror_reach_every_benchmark_pod(sources) -> None:
    target = replace(TARGET, pod_placement={
        "nodeSelector": {"pool": "cpu"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}]})
    objects = manifests(bench(pip_index_url="https://mirror.example/simple"),
                        sources, target)
    for spec in pod_specs(objects):
        assert spec["nodeSelector"] == {"pool": "cpu"}
        assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
        preferred = spec["affinity"]["nodeAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"]
        assert preferred[0]["preference"]["matchExpressions"][0]["key"] == "nvidia.com/gpu.present"
        for container in pod_containers(spec):
            if container["command"][:2] == ["sh", "-c"]:
                assert env_of(container)["PIP_INDEX_URL"] == "https://mirror.example/simple"
    assert not any("nodeSelector" in spec for spec in pod_specs(manifests(
        bench(), sources)))


def test_the_video_server_listens_on_ipv4_and_ipv6(sources) -> None:
    objects = manifests(bench(), sources)
    command = objects["video-server"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--bind") + 1] == "::"
    assert objects["video-service"]["spec"]["ipFamilyPolicy"] == "PreferDualStack"


def test_the_video_server_stops_holding_off_drains_once_the_sweep_finished(sources) -> None:
    """Its budget (maxUnavailable 0) and do-not-disrupt annotations protect a sweep, not
    the stack's lifetime: the `up` that finds the run's sweep finished drops both."""
    objects = bj.benchmark_objects(TARGET, bench(), sources, sweep_done=True)
    assert "video-budget" not in objects
    annotations = objects["video-server"]["spec"]["template"]["metadata"]["annotations"]
    assert not set(bj.DO_NOT_DISRUPT) & set(annotations)
    assert "video-budget" in manifests(bench(), sources)


# ---------------------------------------------------------------------------------------
# The pod's last line (its termination message, what `pulumi up` shows) is the cause


def test_a_failed_install_ends_with_pips_own_error(tmp_path, sources) -> None:
    """An index the pod can't use: the log's tail (what `pulumi up` shows; Kubernetes keeps
    its last 2048 bytes) holds pip's own error, not its command line, then the two fixes."""
    pinned = re.sub(r"(?m)^imageio-ffmpeg==.*$", "imageio-ffmpeg==0.0.1",
                    sources["constraints.txt"])
    code, lines = run_runner(tmp_path, {**sources, "constraints.txt": pinned},
                             ["videos", "--out", str(tmp_path / "v"), "--count", "1"])
    tail = "\n".join(lines)[-2048:]
    assert code != 0
    assert "-m pip" not in tail and "--quiet" not in tail
    assert "ERROR:" in tail and "imageio-ffmpeg==0.0.1" in tail  # pip's own words
    assert "benchmarkImage" in lines[-1] and "benchmarkPipIndexUrl" in lines[-1]


def test_a_stopped_command_says_it_was_stopped_and_what_to_do(tmp_path, sources) -> None:
    """SIGTERM (the Job's deadline, `pulumi destroy`, a replacement): the last line says
    so and what to do, whatever the command printed as it stopped."""
    container = container_of(manifests(bench(), sources), "smoke")
    # A frontend that never answers: it waits.
    smoke = ["smoke", "--url", "http://127.0.0.1:9", "--video-url",
             "http://127.0.0.1:9/video_0000.mp4"]
    with run_container(tmp_path, sources, container, [*smoke, "--wait", "120"],
                       ON_STOP="raise it, then `pulumi up`") as pod:
        assert pod.stdout is not None
        while not pod.stdout.readline().startswith("smoke: "):  # pip's lines, then smoke's
            pass
        time.sleep(1)
        pod.send_signal(signal.SIGTERM)
        out, _ = pod.communicate(timeout=60)
    assert pod.returncode == 128 + signal.SIGTERM
    last = out.strip().splitlines()[-1]
    assert last.startswith("runner: stopped by SIGTERM after ")
    assert last.endswith("raise it, then `pulumi up`")


def test_the_sweep_says_what_a_stop_means_in_the_stacks_terms(sources) -> None:
    objects = manifests(bench(sweep_timeout_secs=7200, smoke_timeout_secs=900), sources)
    stopped = ("the Job's deadline (benchmark{} ({} s)) passed, or the Job was deleted (`pulumi "
               "destroy`, a replaced Job) or the pod evicted; ")
    assert env_of(container_of(objects, "sweep"))["ON_STOP"] == stopped.format(
        "SweepTimeoutSecs", 7200) + ("finished levels stay on the claim; if the deadline "
                                     "passed, raise it, then `pulumi up` with the same "
                                     "benchmarkRunId resumes the run")
    assert env_of(container_of(objects, "smoke"))["ON_STOP"] == stopped.format(
        "SmokeTimeoutSecs", 900) + "if the deadline passed, raise it, then `pulumi up`"


def test_an_http_mirror_is_trusted_by_pip() -> None:
    """pip ignores a plain-http index unless its host is trusted: the user named it."""
    def env(url: str) -> dict[str, str]:
        return bj.runner_env(bench(pip_index_url=url), "videos", "")

    assert env("http://mirror.internal:8080/simple")["PIP_TRUSTED_HOST"] == \
        "mirror.internal:8080"
    assert "PIP_TRUSTED_HOST" not in env("https://mirror.example/simple")


def test_every_pod_command_is_one_the_toolkit_parses(sources) -> None:
    """The Jobs' arguments are written here and read by `python -m benchmarks`: a flag the
    command does not know would fail the pod hours into `up`. The sweep also prints how to
    follow it, with the stack's own kubectl prefix."""
    target = replace(TARGET, kubectl="kubectl --context h200 -n cosmos3-reasoner")
    objects = manifests(bench(), sources, target)
    parsed = {}
    for name in ("smoke", "sweep", "video-server"):
        spec = objects[name]["spec"]["template"]["spec"]
        for container in (*spec.get("initContainers", ()), *spec["containers"]):
            if container["command"][:2] == ["sh", "-c"]:
                args = args_of(container)
                parsed[args[0]] = build_parser(args[0]).parse_args(args)
    assert set(parsed) == {"videos", "smoke", "sweep"}
    assert parsed["sweep"].run.follow_command == (
        "kubectl --context h200 -n cosmos3-reasoner logs -f job/"
        + benchmark_name("sweep", TARGET.stack, bench().run_id))


def test_a_stack_s_run_is_its_settings_as_the_pods_read_them() -> None:
    """The compare stack's run: both frontends with their affinity, the workload, and every
    deployment fact the report compares (the graph's hash, the routing of each profile)."""
    settings = stack_settings("compare")
    run = bj.run_of(settings)
    worker, frontend = settings.worker_image, settings.frontend_image
    assert (run.stack, run.run_id, run.namespace, run.cache_claim, run.model) == (
        "compare", "run-1", "cosmos3-reasoner", "shared-model-cache",
        "nvidia/cosmos3-super-reasoner")
    assert (run.image, run.workload) == (settings.benchmark.image, settings.benchmark.workload)
    assert run.frontends == (("round-robin", "cosmos3-compare-round-robin", False),
                             ("session-affinity", "cosmos3-compare-session-affinity", True))
    assert run.notes == ("cluster run: stack compare, run id run-1",
                         f"nim workers: super fp8, 8 x 1 GPU (NVIDIA-H200), image {worker}; "
                         f"frontend image {frontend}")
    assert dict(run.deployment) == {
        "worker_image": worker, "frontend_image": frontend, "runtime": "nim",
        "variant": "super", "precision": "fp8", "replicas": "8", "gpus_per_worker": "1",
        "gpu": "NVIDIA-H200", "model": "nvidia/cosmos3-super-reasoner",
        "routing": "round-robin: --router-mode round-robin; session-affinity: --router-mode "
                   "round-robin --router-session-affinity-ttl-secs 300",
        "graph": bj.graph_hash(mf.graph(settings), "compare"),
        "benchmark_image": settings.benchmark.image}
    assert (run.image_pull_secrets, run.kube_context, run.kubectl, run.pod_placement,
            run.smoke, run.sweep) == ((), "", "kubectl -n cosmos3-reasoner", {}, True, True)
    raw = stack_config("compare", {"benchmarkNodeSelector": ["pool=cpu"],
                                   "imagePullSecrets": ["regcred"], "benchmarkSmoke": False,
                                   "servedModelName": "nvidia/other-id"})
    placed = parse_settings({**raw, "kubernetes:context": "lab"}, "compare")
    placed_run = bj.run_of(placed)
    assert (placed_run.pod_placement, placed_run.image_pull_secrets, placed_run.kube_context) == (
        dict(placed.benchmark_placement), ("regcred",), "lab")
    assert (placed_run.model, placed_run.smoke, placed_run.sweep) == ("nvidia/other-id", False,
                                                                      True)
    no_sweep = parse_settings(stack_config("compare", {"benchmarkSweep": False}), "compare")
    assert (bj.run_of(no_sweep).smoke, bj.run_of(no_sweep).sweep) == (True, False)


def test_the_graph_s_hash_is_the_graph_routing_and_profile_name_aside() -> None:
    """A frontend's arguments or the profile's name never change it; anything else does."""
    graph = mf.graph(stack_settings("round-robin"))
    same = json.loads(json.dumps(graph).replace("round-robin", "session-affinity"))
    for component in same["spec"]["components"]:
        if component["type"] == "frontend":
            component["podTemplate"]["spec"]["containers"][0]["args"] = ["--other"]
    assert bj.graph_hash(same, "session-affinity") == bj.graph_hash(graph, "round-robin")
    # Nor does the order of its keys (one read back from elsewhere is the same graph).
    reordered = {"spec": dict(reversed(list(graph["spec"].items())))}
    assert bj.graph_hash(reordered, "round-robin") == bj.graph_hash(graph, "round-robin")
    worker = next(c for c in same["spec"]["components"] if c["type"] != "frontend")
    worker["replicas"] = 7
    assert bj.graph_hash(same, "session-affinity") != bj.graph_hash(graph, "round-robin")


def test_the_results_reader_only_reads_the_claim_while_it_is_alive() -> None:
    """Read-only on the cache, ready while the results are mounted, gone within an hour,
    never restarted, off the GPU nodes when it can."""
    placed = replace(TARGET, pod_placement={"nodeSelector": {"pool": "cpu"}})
    reader = bj.results_reader_pod(placed, "reader-x")
    spec, (container,) = reader["spec"], reader["spec"]["containers"]
    assert (reader["metadata"]["name"], reader["metadata"]["namespace"]) == (
        "reader-x", "cosmos3-reasoner")
    assert reader["metadata"]["labels"]["cosmos3-routing/profile"] == "session-affinity"
    assert spec["imagePullSecrets"] == [{"name": "registry-pull-secret"}]
    assert spec["nodeSelector"] == {"pool": "cpu"}
    assert reader["metadata"]["labels"]["app.kubernetes.io/component"] == \
        "benchmark-results-reader"
    assert spec["volumes"] == [{"name": "cache", "persistentVolumeClaim": {
        "claimName": "shared-model-cache", "readOnly": True}}]
    assert container["volumeMounts"] == [{"name": "cache", "mountPath": "/cache",
                                          "readOnly": True}]
    probe = {"exec": {"command": ["test", "-d", "/cache"]}, "periodSeconds": 10}
    assert container["readinessProbe"] == container["livenessProbe"] == probe
    assert container["command"] == ["python", "-c", "import time; time.sleep(3600)"]
    assert (container["name"], container["image"]) == ("main", TARGET.image)  # collect's exec
    assert (spec["restartPolicy"], spec["activeDeadlineSeconds"]) == ("Never", 3600)
    assert spec["affinity"] == bj.PREFER_NO_GPU
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"},
                                      "limits": {"cpu": "1", "memory": "1Gi"}}


def test_the_video_maker_writes_the_videos_the_server_reads(sources) -> None:
    """The init container `videos` makes them into the shared volume (2-4 CPUs: FFmpeg), then
    the server reads that volume, read-only."""
    spec = manifests(bench(), sources)["video-server"]["spec"]["template"]["spec"]
    (maker,), (server,) = spec["initContainers"], spec["containers"]
    assert maker["name"] == "videos"
    assert maker["resources"] == {"requests": {"cpu": "2", "memory": "2Gi"},
                                  "limits": {"cpu": "4", "memory": "4Gi"}}
    assert {"name": "videos", "mountPath": "/videos"} in maker["volumeMounts"]
    assert {"name": "videos", "mountPath": "/videos", "readOnly": True} in server["volumeMounts"]
    assert args_of(maker)[-2:] == ["--out", "/videos"]


def test_the_video_server_serves_its_videos_where_the_run_says(sources) -> None:
    """The run's video URL names the Service and its port; the Service sends it to the
    server's named port, where `http.server` serves the videos folder; ready while it
    answers there, restarted only after five slow answers in a row (FFmpeg may load it)."""
    objects = manifests(bench(), sources)
    deployment, service = objects["video-server"], objects["video-service"]
    spec = deployment["spec"]["template"]["spec"]
    (server,) = spec["containers"]
    url = re.fullmatch(r"http://([^.]+)\.([^.]+)\.svc:(\d+)/", TARGET.video_base_url)
    assert url is not None
    assert (service["metadata"]["name"], service["metadata"]["namespace"]) == url.group(1, 2)
    (port,) = service["spec"]["ports"]
    assert str(port["port"]) == url.group(3) and port["targetPort"] == "http"
    assert port["name"] == "http"  # a mesh (Istio) reads the protocol from it
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"] == \
        deployment["spec"]["template"]["metadata"]["labels"]
    (named,) = server["ports"]
    assert named["name"] == "http"
    # The benchmark image (it has Python), in the container every benchmark pod calls main.
    assert (server["name"], server["image"]) == ("main", bench().image)
    assert server["command"] == ["python", "-m", "http.server", str(named["containerPort"]),
                                 "--directory", bj.VIDEOS_DIR, "--bind", "::"]
    http = {"httpGet": {"path": "/", "port": "http"}}
    assert server["readinessProbe"] == {**http, "periodSeconds": 10, "timeoutSeconds": 5}
    assert server["livenessProbe"] == {**http, "periodSeconds": 30, "timeoutSeconds": 10,
                                       "failureThreshold": 5}
    assert server["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"},
                                   "limits": {"cpu": "1", "memory": "512Mi"}}
    assert (deployment["spec"]["replicas"], spec["restartPolicy"]) == (1, "Always")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["videos"] == {"name": "videos", "emptyDir": {"sizeLimit": "20Gi"}}
    assert set(volumes) == {"work", "code", "videos"}


def test_every_runner_writes_only_to_its_work_volume_and_installs_its_commands_packages(
        sources) -> None:
    """The root is read-only: home, temp files, caches and pip's user site live on the work
    volume; the code is the read-only ConfigMap; logs are unbuffered (the pod's termination
    message is their tail); pip installs what the pod's command needs, no more."""
    objects = manifests(bench(), sources)
    for role in ("video-server", "smoke", "sweep"):
        container = container_of(objects, role)
        env, command = env_of(container), args_of(container)[0]
        mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
        writable = [path for path, read_only in mounts.items() if not read_only]
        for name in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "MPLCONFIGDIR"):
            assert any(env[name] == p or env[name].startswith(f"{p}/") for p in writable), name
        assert container["workingDir"] == env["HOME"] == bj.WORK_DIR
        assert mounts[env["PYTHONPATH"]] is True
        assert (env["PIP_USER"], env["PYTHONUNBUFFERED"], env["PYTHONDONTWRITEBYTECODE"]) == (
            "1", "1", "1")
        assert env["PACKAGES"].split(" ") == list(bj.COMMAND_PACKAGES[command])
        assert "PIP_INDEX_URL" not in env and "PIP_TRUSTED_HOST" not in env


def test_every_benchmark_object_is_labelled_with_the_project_its_stack_and_its_part(
        sources) -> None:
    """The preflight knows the project's objects by their labels (`cluster._ours`), a stack's
    by its profile label; the policies and the preflight select the parts by component. The
    pods mount the code ConfigMap by the name docs/deploy-reference.md gives."""
    objects = manifests(bench(), sources)
    for role, obj in objects.items():
        labels = obj["metadata"]["labels"]
        assert labels.items() >= mf.common_labels().items(), role
        assert labels[mf.PROFILE_LABEL] == TARGET.stack, role
        assert obj["metadata"]["namespace"] == TARGET.namespace, role
        # The Jobs are the run's (the preflight finds a running sweep's run by it).
        assert labels.get(mf.RUN_ID_LABEL) == (
            TARGET.run_id if role in ("smoke", "sweep") else None), role
    assert {role: obj["metadata"]["labels"][mf.COMPONENT_LABEL]
            for role, obj in objects.items()} == {
        "code": "benchmark-code", "video-server": "benchmark-videos",
        "video-service": "benchmark-videos", "video-budget": "benchmark-videos",
        "smoke": "benchmark-smoke", "sweep": "benchmark-sweep"}
    code = objects["code"]["metadata"]
    assert (code["name"], code["namespace"]) == ("cosmos3-bench-code-session-affinity",
                                                 TARGET.namespace)
    for spec in pod_specs(objects):
        (volume,) = [v for v in spec["volumes"] if v["name"] == "code"]
        assert volume["configMap"]["name"] == code["name"]


def test_every_benchmark_container_is_sized_and_the_jobs_is_the_one_collect_reads(
        sources) -> None:
    """Requests and limits on every container (a namespace quota that requires limits admits
    it); a Job's container is `main`, the one `collect` reads the log of and the sweep's
    failure policy names."""
    objects = manifests(bench(), sources)
    for spec in pod_specs(objects):
        for container in pod_containers(spec):
            for kind in ("requests", "limits"):
                assert set(container["resources"][kind]) == {"cpu", "memory"}, container["name"]
    for role in ("smoke", "sweep"):
        assert container_of(objects, role)["name"] == "main"
    rule = objects["sweep"]["spec"]["podFailurePolicy"]["rules"][1]
    assert rule["onExitCodes"]["containerName"] == container_of(objects, "sweep")["name"]
