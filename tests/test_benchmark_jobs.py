"""The benchmark's Kubernetes objects: valid, non-root, carrying the settings, and runnable.

The manifests are checked against the Kubernetes API schemas; the shipped code is laid
out exactly as a pod would see it and run for real through the job runner (real FFmpeg,
the real `benchmarks` CLI), including the failure path whose last line `pulumi up` shows.
"""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from benchmarks.__main__ import COMMANDS
from benchmarks.shape import SEED_SHAPE
from infra import benchmark_jobs as bj
from infra.benchmark_settings import BenchmarkSettings
from infra.job_runner import IN_CLUSTER_PACKAGES, config_map_key, normalize, unpack_sources
from tests.conftest import REPO_ROOT

K8S_VERSION = "1.33"
# Commands a benchmark pod runs (the others only run on the user's machine).
IN_CLUSTER_COMMANDS = ("videos", "smoke", "sweep")

TARGET = bj.BenchmarkTarget(
    profile="session-affinity",
    namespace="cosmos3-reasoner",
    frontend_service="cosmos3-super-reasoner-agg-h200-session-affinity-frontend",
    cache_claim="shared-model-cache",
    session_affinity=True,
    image_pull_secrets=("registry-pull-secret",),
)


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return bj.shipped_sources(REPO_ROOT)


def manifests(settings: BenchmarkSettings, sources: dict[str, str],
              target: bj.BenchmarkTarget = TARGET) -> dict[str, dict[str, Any]]:
    return bj.benchmark_manifests(target, settings, sources)


def pod_specs(objects: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for obj in objects.values():
        if obj["kind"] == "Pod":
            out.append(obj["spec"])
        elif obj["kind"] in ("Job", "Deployment"):
            out.append(obj["spec"]["template"]["spec"])
    return out


def test_every_object_validates_against_the_kubernetes_schemas(sources) -> None:
    objects = manifests(BenchmarkSettings(), sources)
    objects["reader"] = bj.results_reader_pod(
        TARGET.namespace, TARGET.profile, TARGET.cache_claim, BenchmarkSettings().image, "reader-x",
        TARGET.image_pull_secrets, ("sweep-job", "0f4c2a9e-1d3b-4c5d-8e7f-9a0b1c2d3e4f"))
    no_secrets = replace(TARGET, image_pull_secrets=(), session_affinity=False)
    objects.update({f"plain-{k}": v for k, v in manifests(
        BenchmarkSettings(wait_for_sweep=False), sources, no_secrets).items()})
    for role, obj in objects.items():
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{role} ({obj['kind']}): {error.message}")
    assert {o["kind"] for o in objects.values()} == {
        "ConfigMap", "Deployment", "Service", "Job", "Pod"}


def test_the_results_reader_belongs_to_the_sweep_job_so_destroy_removes_it() -> None:
    reader = bj.results_reader_pod("ns", "p", "claim", "img:1", "reader-x",
                                   owner_job=("sweep-job", "uid-1"))
    assert reader["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "sweep-job", "uid": "uid-1"}]
    assert "ownerReferences" not in bj.results_reader_pod(
        "ns", "p", "claim", "img:1", "reader-x")["metadata"]


def test_every_pod_runs_as_the_nim_user_without_privileges(sources) -> None:
    objects = manifests(BenchmarkSettings(), sources)
    objects["reader"] = bj.results_reader_pod("ns", "p", "claim", "img:1", "reader-x")
    specs = pod_specs(objects)
    assert len(specs) == 4
    for spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 1000
        assert spec["securityContext"]["runAsGroup"] == 1000
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"] + spec.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["readOnlyRootFilesystem"] is True


def test_pull_secrets_reach_every_pod(sources) -> None:
    for spec in pod_specs(manifests(BenchmarkSettings(), sources)):
        assert spec["imagePullSecrets"] == [{"name": "registry-pull-secret"}]


def test_only_enabled_parts_exist(sources) -> None:
    assert manifests(BenchmarkSettings(smoke=False, sweep=False), sources) == {}
    smoke_only = manifests(BenchmarkSettings(sweep=False), sources)
    assert set(smoke_only) == {"code", "video-server", "video-service", "smoke"}
    sweep_only = manifests(BenchmarkSettings(smoke=False), sources)
    assert set(sweep_only) == {"code", "video-server", "video-service", "sweep"}


def test_sweep_carries_the_settings(sources) -> None:
    settings = BenchmarkSettings(run_id="run-7", concurrencies=(2, 8), videos=12,
                                 questions_per_video=3, sweep_timeout_secs=7200,
                                 image="registry.example/bench:1.0")
    job = manifests(settings, sources)["sweep"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    args = command[command.index("--") + 1:]
    assert args[0] == "sweep"
    assert args[args.index("--concurrency") + 1:][:3] == ["2", "8", "--run-id"]
    assert "12" in args and "3" in args
    assert f"{bj.CACHE_DIR}/benchmarks/session-affinity/run-7" in args
    assert TARGET.frontend_url in args and TARGET.video_base_url in args
    assert container["image"] == "registry.example/bench:1.0"
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    # The provider waits a little longer than the Job's own deadline, which has a reason.
    assert int(job["metadata"]["annotations"][bj.TIMEOUT_SECONDS]) > 7200
    assert bj.SKIP_AWAIT not in job["metadata"]["annotations"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[bj.CACHE_DIR] == "cache"
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["cache"]["persistentVolumeClaim"]["claimName"] == "shared-model-cache"


def test_not_waiting_for_the_sweep_skips_only_its_await(sources) -> None:
    objects = manifests(BenchmarkSettings(wait_for_sweep=False), sources)
    assert objects["sweep"]["metadata"]["annotations"][bj.SKIP_AWAIT] == "true"
    # The provider replaces an unready Job marked replaceUnready on every `up`: a sweep
    # left running would be killed by the next one.
    assert bj.REPLACE_UNREADY not in objects["sweep"]["metadata"]["annotations"]
    awaited = manifests(BenchmarkSettings(), sources)["sweep"]["metadata"]["annotations"]
    assert awaited[bj.REPLACE_UNREADY] == "true"
    for role in ("smoke", "video-server"):
        assert bj.SKIP_AWAIT not in objects[role]["metadata"]["annotations"]


def test_the_smoke_test_fails_fast_and_the_sweep_survives_disruptions(sources) -> None:
    objects = manifests(BenchmarkSettings(smoke_timeout_secs=900), sources)
    smoke = objects["smoke"]["spec"]
    assert smoke["backoffLimit"] == 0 and smoke["activeDeadlineSeconds"] == 900
    rules = objects["sweep"]["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "Ignore"
    assert rules[1]["action"] == "FailJob"
    for role in ("smoke", "sweep"):
        container = objects[role]["spec"]["template"]["spec"]["containers"][0]
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_a_new_run_id_renames_the_jobs_and_nothing_else(sources) -> None:
    first = manifests(BenchmarkSettings(run_id="run-1"), sources)
    second = manifests(BenchmarkSettings(run_id="run-2"), sources)
    for role in ("code", "video-server", "video-service"):
        assert first[role] == second[role], role
    for role in ("smoke", "sweep"):
        assert first[role]["metadata"]["name"] != second[role]["metadata"]["name"]
        assert second[role]["metadata"]["name"].endswith("-run-2")
        assert len(second[role]["metadata"]["name"]) <= 63


def test_longest_run_id_keeps_job_names_valid(sources) -> None:
    from infra.benchmark_names import max_run_id_len
    from infra.settings import MAX_PROFILE_LEN

    for profile in ("session-affinity", "p" * MAX_PROFILE_LEN):
        longest = max_run_id_len(profile)
        assert longest >= 10, "a longest profile must still allow a readable run id"
        target = replace(TARGET, profile=profile)
        objects = manifests(BenchmarkSettings(run_id="r" * longest), sources, target)
        for role, obj in objects.items():
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            assert len(obj["metadata"]["name"]) <= 63, role


def test_defaults_are_the_seed_shape() -> None:
    settings = BenchmarkSettings()
    assert settings.concurrencies == SEED_SHAPE.concurrencies
    assert settings.videos == SEED_SHAPE.videos.count
    assert settings.requests_per_level == SEED_SHAPE.requests_per_level


def test_video_server_waits_as_long_as_the_videos_take(sources) -> None:
    deployment = manifests(BenchmarkSettings(video_server_timeout_secs=2400), sources)[
        "video-server"]
    assert deployment["spec"]["progressDeadlineSeconds"] == 2400
    assert deployment["metadata"]["annotations"][bj.TIMEOUT_SECONDS] == "2400"
    maker = deployment["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert maker[maker.index("--") + 1:][:5] == ["videos", "--out", bj.VIDEOS_DIR, "--count",
                                                 str(SEED_SHAPE.videos.count)]


# ---------------------------------------------------------------------------------------
# The shipped code, laid out as a pod sees it


def test_shipped_code_is_the_toolkit_without_the_pulumi_layer(sources) -> None:
    for module in COMMANDS:
        assert f"benchmarks/{module}.py" in sources
    assert "infra/job_runner.py" in sources and "constraints.txt" in sources
    assert "infra/__main__.py" not in sources
    assert not any("import pulumi" in text for text in sources.values())
    config_map = bj.code_config_map("ns", "p", sources)
    assert config_map["data"][config_map_key("benchmarks/shape.py")] == (
        REPO_ROOT / "benchmarks/shape.py").read_text()
    assert sum(len(v) for v in config_map["data"].values()) < bj.CONFIG_MAP_LIMIT_BYTES


def flat_volume(tmp_path: Path, sources: dict[str, str]) -> Path:
    """The ConfigMap as Kubernetes mounts it: one file per key, plus its `..data` links."""
    volume = tmp_path / "code"
    (volume / "..2026_12_02").mkdir(parents=True)
    for key, text in bj.code_config_map("ns", "p", sources)["data"].items():
        (volume / key).write_text(text)
    (volume / "..data").symlink_to("..2026_12_02")
    return volume


def test_the_cli_runs_from_the_unpacked_config_map(tmp_path, sources) -> None:
    src = tmp_path / "src"
    unpack_sources(flat_volume(tmp_path, sources), src)
    assert (src / "benchmarks" / "__init__.py").exists()
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--help"], cwd=tmp_path,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for command in IN_CLUSTER_COMMANDS:
        assert command in result.stdout


def run_runner(tmp_path: Path, sources: dict[str, str], args: list[str]):
    volume = flat_volume(tmp_path, sources)
    term = tmp_path / "termination-log"
    result = subprocess.run(
        [sys.executable, str(volume / bj.RUNNER_KEY), "--code", str(volume),
         "--src", str(tmp_path / "src"), "--venv", str(tmp_path / "venv"),
         "--termination-log", str(term), "--", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    return result, term.read_text() if term.exists() else None


def test_runner_runs_a_benchmark_command_from_the_config_map(tmp_path, sources) -> None:
    out = tmp_path / "videos"
    result, message = run_runner(tmp_path, sources, [
        "videos", "--out", str(out), "--count", "2", "--duration", "2", "--width", "64",
        "--height", "64"])
    assert result.returncode == 0, result.stdout + result.stderr
    # This interpreter has every pin, so nothing was installed (the offline-image path).
    assert "already has" in result.stdout
    assert not (tmp_path / "venv").exists()
    assert sorted(p.name for p in out.glob("*.mp4")) == ["video_0000.mp4", "video_0001.mp4"]
    assert message == result.stdout.strip().splitlines()[-1]


def test_a_failing_command_leaves_its_own_last_line_as_the_reason(tmp_path, sources) -> None:
    result, message = run_runner(tmp_path, sources, ["videos", "--count", "0"])
    assert result.returncode != 0
    assert message is not None and "--count must be at least 1" in message
    assert result.stdout.strip().splitlines()[-1] == message


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


def needed_top_level_imports(sources: dict[str, str]) -> set[str]:
    """Third-party imports a pod executes: module level everywhere `python -m benchmarks`
    loads (it imports every command), and every import of the in-cluster commands."""
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

    loaded = closure(["benchmarks.__main__", *(f"benchmarks.{c}" for c in COMMANDS)], True)
    running = closure([f"benchmarks.{c}" for c in IN_CLUSTER_COMMANDS], False)
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


def test_the_runner_installs_everything_the_shipped_code_imports(sources) -> None:
    providers = importlib.metadata.packages_distributions()
    installed = installable_closure(IN_CLUSTER_PACKAGES)
    missing = {}
    for name in sorted(needed_top_level_imports(sources)):
        dists = {normalize(d) for d in providers.get(name, [name])}
        if not dists & installed:
            missing[name] = sorted(dists)
    assert not missing, (
        f"benchmark pods import {missing} but infra/job_runner.py IN_CLUSTER_PACKAGES "
        f"({', '.join(IN_CLUSTER_PACKAGES)}) does not bring them: add the package, or import "
        "it inside the function that needs it if that function never runs in a pod"
    )


def test_a_failing_smoke_test_leaves_its_own_reason(tmp_path, sources) -> None:
    """The line `pulumi up` shows when the smoke Job fails: the smoke test's own verdict."""
    from infra.recipe import SERVED_MODEL_NAME
    from tests.support_openai_server import RecordingOpenAIServer

    with RecordingOpenAIServer(models=[SERVED_MODEL_NAME]) as server:
        server.empty_answer = True
        args = bj.smoke_args(replace(TARGET), BenchmarkSettings())
        args[args.index("--url") + 1] = server.url
        args[args.index("--video-url") + 1] = "http://127.0.0.1:9/video_0000.mp4"
        result, message = run_runner(tmp_path, sources, [*args, "--wait", "5"])
    assert result.returncode != 0
    assert message is not None and message.startswith("Smoke test failed: empty answer")
