"""Bringing a run home, on real files: the results layout, the transfer format, the report.

The cluster sits behind `ClusterIO`; `FolderCluster` below stands in for it with a local
folder as the cache claim, and moves files with the very pack command and checks the real
one runs in the reader pod (over the client's exec stream). The results are what the real
sweep writes:
`sweep_run` runs `python -m benchmarks sweep` (real AIPerf) against the recording server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from kubernetes.client import V1Job, V1JobCondition, V1JobStatus, V1ObjectMeta

from benchmarks.aiperf_run import SUMMARY_EXPORT
from benchmarks.collect import (
    REPORT_FOLDER,
    CollectError,
    bring_results_home,
    check_pack,
    extract_archive,
    finished_levels,
    pack_command,
)
from benchmarks.sweep import chunk_dir_name, level_dir_name
from infra.cluster import JobState, JobStatus, job_status_of
from infra.run import Run
from tests.conftest import REPO_ROOT
from tests.support_cluster import UNREACHABLE

LOCATION = Run(stack="session-affinity", run_id="run-3", namespace="bench",
                       cache_claim="shared-model-cache", image="python:3.11.14-slim")


def transfer(source: Path, dest: Path, scratch: Path) -> None:
    """The copy `KubernetesClusterIO` makes, with this machine playing the pod: the same
    pack command (a real `sh` and `tar`), its stdout as the archive, the same checks."""
    archive = scratch / "local.tgz"
    with open(archive, "wb") as out:
        packed = subprocess.run(pack_command(str(source)), stdout=out, stderr=subprocess.PIPE,
                                timeout=60)
    check_pack(packed.returncode, packed.stderr.decode(), str(source))
    extract_archive(archive, dest)


class FolderCluster:
    """ClusterIO over a local folder that plays the cache claim."""

    def __init__(self, claim: Path, states: list[JobStatus],
                 location: Run = LOCATION, logs: list[str] | None = None):
        self.claim = claim
        self.location = location
        self.states = list(states)
        self.logs = logs or []
        self.copies = 0
        self.waited: list[float] = []

    def job_status(self, namespace: str, job: str) -> JobStatus:
        assert (namespace, job) == (self.location.namespace, self.location.sweep_job)
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def wait_job(self, namespace: str, job: str, timeout_secs: float, say) -> JobStatus:
        self.waited.append(timeout_secs)
        return self.job_status(namespace, job)

    def read_logs(self, namespace: str, job: str, tail_lines: int) -> list[str]:
        return self.logs[-tail_lines:]

    def copy_dir_from_pvc(self, location: Run, dest: Path) -> None:
        self.copies += 1
        with tempfile.TemporaryDirectory() as scratch:
            transfer(self.claim / location.results_path, dest, Path(scratch))


def test_transfer_round_trip_keeps_every_file(tmp_path) -> None:
    source = tmp_path / "run"
    (source / "c1").mkdir(parents=True)
    (source / "c1" / SUMMARY_EXPORT).write_text('{"x": 1}')
    (source / "manifest.json").write_bytes(bytes(range(256)))
    (source / "big.bin").write_bytes(os.urandom(50_000))  # binary, does not compress
    (tmp_path / "scratch").mkdir()
    transfer(source, tmp_path / "copy", tmp_path / "scratch")
    assert (tmp_path / "copy" / "c1" / SUMMARY_EXPORT).read_text() == '{"x": 1}'
    assert (tmp_path / "copy" / "manifest.json").read_bytes() == bytes(range(256))
    assert (tmp_path / "copy" / "big.bin").read_bytes() == (source / "big.bin").read_bytes()


def test_transfer_says_when_the_folder_is_missing(tmp_path) -> None:
    with pytest.raises(CollectError, match="no results folder"):
        transfer(tmp_path / "absent", tmp_path / "copy", tmp_path)


def test_transfer_refuses_paths_outside_the_destination(tmp_path) -> None:
    import io
    import tarfile

    # Checked by hand, not `extractall(filter=...)`, which Python 3.11.0-3.11.3 lacks.
    for name, kind in (("../escape.txt", tarfile.REGTYPE), ("link", tarfile.SYMTYPE)):
        archive = tmp_path / "bad.tgz"
        with tarfile.open(archive, mode="w:gz") as tar:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            info.size = 1 if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(b"x") if info.size else None)
        with pytest.raises(CollectError, match="refusing"):
            extract_archive(archive, tmp_path / "dest")
        assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "dest/link").exists()


def job(conditions: list[V1JobCondition] | None) -> V1Job:
    """A Job as the client reads it from the API server (its own models)."""
    return V1Job(metadata=V1ObjectMeta(name="j"), status=V1JobStatus(conditions=conditions))


def test_job_status_reads_the_conditions_kubernetes_sets() -> None:
    assert job_status_of(None).state is JobState.MISSING
    assert job_status_of(job(None)).state is JobState.RUNNING
    assert job_status_of(job([V1JobCondition(type="Complete", status="True")])).state \
        is JobState.SUCCEEDED
    failed = job_status_of(job([V1JobCondition(
        type="Failed", status="True", reason="DeadlineExceeded",
        message="Job was active longer than specified deadline")]))
    assert failed == JobStatus(JobState.FAILED,
                               "DeadlineExceeded: Job was active longer than specified deadline")
    suspended = job([V1JobCondition(type="Suspended", status="True"),
                     V1JobCondition(type="Failed", status="False")])
    assert job_status_of(suspended).state is JobState.RUNNING


def test_a_running_sweep_is_left_alone_with_the_command_to_collect_later(tmp_path) -> None:
    cluster = FolderCluster(tmp_path / "claim", [JobStatus(JobState.RUNNING)],
                            logs=["c=1: 1.0 req/s", "c=2: 2.0 req/s"])
    said: list[str] = []
    assert bring_results_home(cluster, LOCATION, tmp_path / "results", said.append) is None
    text = "\n".join(said)
    assert "./run.sh collect --stack session-affinity --run-id run-3" in text
    assert "c=2: 2.0 req/s" in text
    assert cluster.copies == 0 and not (tmp_path / "results").exists()


def test_waiting_is_bounded_and_used_only_when_asked(tmp_path) -> None:
    cluster = FolderCluster(tmp_path / "claim", [JobStatus(JobState.RUNNING)])
    bring_results_home(cluster, LOCATION, tmp_path / "results", lambda _: None, wait_secs=30)
    assert cluster.waited == [30]


def test_no_job_and_no_results_is_a_clear_error(tmp_path) -> None:
    cluster = FolderCluster(tmp_path / "claim", [JobStatus(JobState.MISSING)])
    with pytest.raises(CollectError, match="benchmarks/session-affinity/run-3"):
        bring_results_home(cluster, LOCATION, tmp_path / "results", lambda _: None)
    assert not list((tmp_path / "results").rglob("*")) if (tmp_path / "results").exists() \
        else True


def test_a_collect_that_fails_is_a_warning_in_the_hook_never_an_exception() -> None:
    """The hook runs the real `collect` command against a cluster that is not there."""
    from infra.__main__ import collect_after_sweep as hook
    from infra.benchmark_manifests import run_of
    from infra.settings import parse_settings
    from tests.support_pulumi import project_name, stack_config

    config = stack_config("session-affinity", {"benchmarkRunId": "run-3"})
    settings = parse_settings(config, "session-affinity", project_name())
    said: list[str] = []
    warnings: list[str] = []
    assert hook(run_of(settings), UNREACHABLE, said.append, warnings.append,
                timeout_secs=120) is False
    assert any("cannot reach the cluster" in line for line in said), said
    assert "./run.sh collect --stack session-affinity --run-id run-3" in warnings[0]
    assert "benchmarks/session-affinity/run-3" in warnings[0]
    # The kubeconfig went in collect's environment, and its credentials nowhere else.
    assert "not-a-real-token" not in " ".join(said + warnings)


def _hook_with_fake_collect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str,
                            code: int, kubeconfig: str | None = None
                            ) -> tuple[bool, list[str], list[str]]:
    """The results hook run against a `collect` that prints `line` and exits with `code`,
    leaving its argv and its kubeconfig variable in `tmp_path`: (what the hook returned,
    its lines, its warnings)."""
    from infra.__main__ import collect_after_sweep as hook
    from infra.names import KUBECONFIG_ENV

    collect = tmp_path / "collect"
    collect.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {tmp_path}/argv\n"
                       f"printf '%s' \"${KUBECONFIG_ENV}\" > {tmp_path}/kubeconfig\n"
                       f"echo '{line}'\nexit {code}\n")
    collect.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(collect))
    said: list[str] = []
    warnings: list[str] = []
    done = hook(LOCATION, kubeconfig, said.append, warnings.append, timeout_secs=30)
    return done, said, warnings


def test_a_sweep_left_running_is_no_warning_in_the_hook(tmp_path, monkeypatch) -> None:
    """With `benchmarkWaitForSweep: false` the hook finds the sweep running: collect says
    how to fetch it later and exits with SWEEP_RUNNING_EXIT_CODE, which is not a failure."""
    from infra.names import SWEEP_RUNNING_EXIT_CODE

    done, said, warnings = _hook_with_fake_collect(tmp_path, monkeypatch, "still running",
                                                   SWEEP_RUNNING_EXIT_CODE)
    assert done is False
    assert said == ["still running"] and warnings == []


def test_the_hook_hands_collect_the_run_and_keeps_the_kubeconfig_out_of_argv(
        tmp_path, monkeypatch) -> None:
    """collect gets the run as the stack exports it, and the kubeconfig (content that may
    hold credentials) in its environment only; a failing collect is a warning naming its
    exit code, its lines shown."""
    done, said, warnings = _hook_with_fake_collect(tmp_path, monkeypatch, "cannot start", 7,
                                                   kubeconfig=UNREACHABLE)
    assert done is False
    assert said == ["cannot start"]
    assert len(warnings) == 1 and "collect ended with 7" in warnings[0]
    argv = (tmp_path / "argv").read_text().splitlines()
    assert Run.from_output(json.loads(argv[argv.index("--run") + 1])) == LOCATION
    assert "not-a-real-token" not in " ".join(argv + said + warnings)
    assert (tmp_path / "kubeconfig").read_text() == UNREACHABLE


def test_an_empty_run_folder_is_reported_and_leaves_nothing_behind(tmp_path) -> None:
    claim = tmp_path / "claim"
    (claim / LOCATION.results_path / LOCATION.stack).mkdir(parents=True)
    (claim / LOCATION.results_path / LOCATION.stack / "manifest.json").write_text("{}")
    cluster = FolderCluster(claim, [JobStatus(JobState.FAILED, "BackoffLimitExceeded")])
    with pytest.raises(CollectError, match="finished no level"):
        bring_results_home(cluster, LOCATION, tmp_path / "results", lambda _: None)
    leftovers = list((tmp_path / "results").rglob("*")) if (tmp_path / "results").exists() \
        else []
    assert [p for p in leftovers if p.is_file()] == []


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory) -> Path:
    """A real sweep's results folder: `python -m benchmarks sweep` (real AIPerf, tiny
    shape) against the recording OpenAI server on 127.0.0.1."""
    from infra.names import SERVED_MODEL_NAME
    from tests.support_openai_server import RecordingOpenAIServer

    root = tmp_path_factory.mktemp("claim")
    out = root / LOCATION.results_path
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    with RecordingOpenAIServer(models=[SERVED_MODEL_NAME]) as server:
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks", "sweep", "--url", server.url,
             "--profile", LOCATION.stack, "--session-affinity",
             "--run-id", LOCATION.run_id, "--out", str(out),
             "--video-base-url", "http://127.0.0.1:9/", "--videos-per-level", "2",
             "--questions-per-video", "2", "--concurrency", "2",
             "--request-timeout", "30"],
            cwd=root, env=env, capture_output=True, text=True, timeout=300,
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert finished_levels(out) == [2]
    return root


def test_results_come_home_to_stack_and_run_with_their_report(tmp_path, sweep_run) -> None:
    cluster = FolderCluster(sweep_run, [JobStatus(JobState.SUCCEEDED)])
    said: list[str] = []
    results = tmp_path / "results"
    run_dir = bring_results_home(cluster, LOCATION, results, said.append)
    assert run_dir == results / "session-affinity" / "run-3"
    source = sweep_run / LOCATION.results_path
    copied = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")
                    if p.is_file() and REPORT_FOLDER not in p.relative_to(run_dir).parts)
    assert copied == sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file())
    # The report is built from the copied exports (its own tests check every number).
    (level,) = finished_levels(run_dir)
    export = run_dir / LOCATION.stack / level_dir_name(level) / chunk_dir_name(0) / SUMMARY_EXPORT
    throughput = json.loads(export.read_text())["request_throughput"]["avg"]
    (row,) = json.loads((run_dir / REPORT_FOLDER / "report.json").read_text())["rows"]
    assert f"{throughput:.2f}" in (run_dir / REPORT_FOLDER / "report.md").read_text()
    assert row["request_throughput"] == pytest.approx(throughput)
    markdown = (run_dir / REPORT_FOLDER / "report.md").read_text()
    assert markdown.strip() in "\n".join(said)
    # A second collect replaces the folder instead of mixing two copies.
    (run_dir / "stale.txt").write_text("old")
    bring_results_home(cluster, LOCATION, results, lambda _: None)
    assert not (run_dir / "stale.txt").exists()
    assert not [p for p in (results / "session-affinity").iterdir() if p.name.startswith(".")]


def test_a_failed_sweep_still_brings_home_the_levels_it_finished(tmp_path, sweep_run) -> None:
    cluster = FolderCluster(sweep_run, [JobStatus(JobState.FAILED, "BackoffLimitExceeded")])
    said: list[str] = []
    run_dir = bring_results_home(cluster, LOCATION, tmp_path / "results", said.append)
    assert run_dir is not None and finished_levels(run_dir) == [2]
    assert "BackoffLimitExceeded" in said[0]


def test_other_profiles_at_home_are_offered_for_comparison(tmp_path, sweep_run) -> None:
    results = tmp_path / "results"
    other = Run(stack="round-robin", run_id="run-1", namespace="bench",
                        cache_claim="c", image="i:1")
    # The same real files stand in for the other stack's run.
    if not (sweep_run / other.results_path).exists():
        shutil.copytree(sweep_run / LOCATION.results_path, sweep_run / other.results_path)
    bring_results_home(FolderCluster(sweep_run, [JobStatus(JobState.SUCCEEDED)], other),
                       other, results, lambda _: None)
    said: list[str] = []
    bring_results_home(FolderCluster(sweep_run, [JobStatus(JobState.SUCCEEDED)]), LOCATION,
                       results, said.append)
    hint = next(line for line in said if "Compare" in line)
    assert str(results / "round-robin" / "run-1") in hint
    assert str(results / "session-affinity" / "run-3") in hint


def test_a_compare_run_comes_home_with_a_folder_per_profile_and_one_report(
        tmp_path, sweep_run) -> None:
    """A compare stack's run holds one folder per profile: all come home, one report."""
    compare = Run(stack="compare", run_id="run-1", namespace="bench", cache_claim="c",
                  image="i:1")
    for profile in ("round-robin", "session-affinity"):
        if not (sweep_run / compare.results_path / profile).exists():
            shutil.copytree(sweep_run / LOCATION.results_path / LOCATION.stack,
                            sweep_run / compare.results_path / profile)
    run_dir = bring_results_home(FolderCluster(sweep_run, [JobStatus(JobState.SUCCEEDED)],
                                               compare), compare, tmp_path, lambda _: None)
    assert run_dir is not None and finished_levels(run_dir) == [2]
    rows = json.loads((run_dir / REPORT_FOLDER / "report.json").read_text())["rows"]
    assert [row["concurrency"] for row in rows] == [2, 2]


def test_the_hook_reaches_a_cluster_whose_kubeconfig_is_given_as_content(tmp_path) -> None:
    """`kubernetes:kubeconfig` may hold the file's content: no path lookup on it (a long
    string made `Path.is_file()` raise, and the results never came home)."""
    from benchmarks.collect import KubernetesClusterIO

    padded = UNREACHABLE + "# " + "x" * 5000 + "\n"
    io_ = KubernetesClusterIO(kubeconfig=padded)
    assert io_._api.configuration.host == "https://127.0.0.1:9"
    path = tmp_path / "config"
    path.write_text(UNREACHABLE)
    assert KubernetesClusterIO(kubeconfig=str(path))._api.configuration.host.endswith(":9")


@pytest.mark.parametrize("status, body, expected", [
    (403, 'pods is forbidden: User "u" cannot create resource "pods"',
     "your account needs `create` on pods in that namespace"),
    (403, 'pods "r" is forbidden: violates PodSecurity "restricted:latest"',
     "Pod Security admission refused"),
    (403, 'pods "r" is forbidden: exceeded quota: q, requested: limits.cpu=1',
     "a resource quota refused"),
])
def test_cluster_refusals_are_one_line_with_the_fix(status: int, body: str,
                                                     expected: str) -> None:
    from kubernetes.client.exceptions import ApiException

    from benchmarks.collect import refusal

    error = ApiException(status=status, reason="Forbidden")
    error.body = body
    line = refusal(error, "create pod r in ns", "`create` on pods")
    assert expected in line and "\n" not in line


class _RefusingAPI:
    """A Kubernetes API on 127.0.0.1 that lets the reader pod be made and then refuses
    (403) `refused`: "exec" (the websocket upgrade of pods/exec) or "get" (reading a pod)."""

    def __init__(self, refused: str) -> None:
        import http.server
        import threading

        def send(handler, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Audit-Id", "0f4c2a9e-audit")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)

        def forbidden(verb: str, resource: str) -> dict:
            return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
                    "reason": "Forbidden", "message": f'{resource} is forbidden: User "u" '
                    f'cannot {verb} resource "{resource}" in the namespace "bench"'}

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if "/jobs/" in self.path:
                    send(self, 404, {"kind": "Status", "code": 404, "reason": "NotFound"})
                elif "/exec" in self.path:
                    send(self, 403, forbidden("create", "pods/exec"))
                elif refused == "get":
                    send(self, 403, forbidden("get", "pods"))
                else:
                    send(self, 200, {"apiVersion": "v1", "kind": "Pod",
                                     "metadata": {"name": "r"}, "status": {"phase": "Running"}})

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                send(self, 201, json.loads(body))

            def do_DELETE(self) -> None:  # noqa: N802
                send(self, 200, {"kind": "Status", "status": "Success"})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.kubeconfig = UNREACHABLE.replace(
            "https://127.0.0.1:9", f"http://127.0.0.1:{self.server.server_port}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("refused, permission", [
    ("exec", "`create` on pods/exec"), ("get", "`get` on pods")])
def test_a_refusal_names_the_permission_it_needs_without_http_headers(
        tmp_path, refused: str, permission: str) -> None:
    """The client raises a refused exec as a websocket handshake error carrying the
    response's headers and body: the line says which permission is missing, once."""
    from benchmarks.collect import KubernetesClusterIO

    api = _RefusingAPI(refused)
    try:
        io_ = KubernetesClusterIO(kubeconfig=api.kubeconfig)
        assert io_._api.configuration.host.startswith("http://127.0.0.1:")
        with pytest.raises(CollectError) as caught:
            io_.copy_dir_from_pvc(LOCATION, tmp_path / "copy")
    finally:
        api.close()
    line = str(caught.value)
    assert permission in line and "\n" not in line
    assert "-+-+-" not in line and "audit" not in line.lower()
    if refused == "get":
        assert "pods/exec" not in line


def test_an_exec_that_ends_without_its_exit_status_is_an_error(tmp_path, monkeypatch) -> None:
    """A stream cut short closes without the Status that carries tar's exit code (the
    client's own `returncode` then fails on it): the copy is refused, never taken as whole."""
    from kubernetes.stream.ws_client import WSClient

    import benchmarks.collect as collect

    dropped = WSClient.__new__(WSClient)  # the client's own class, its connection gone
    dropped.__dict__.update(_connected=False, _channels={}, _returncode=None, sock=None,
                            binary=True)
    monkeypatch.setattr(collect, "stream", lambda *_, **__: dropped)
    io_ = collect.KubernetesClusterIO(kubeconfig=UNREACHABLE)
    with pytest.raises(CollectError, match="without the reader's exit status"):
        io_._pack("bench", "reader-x", "/cache/benchmarks/x", tmp_path / "run.tgz")
    # A Status that does carry one is read as the client reads it.
    dropped.__dict__.update(_channels={3: b'{"status": "Success"}'})
    io_._pack("bench", "reader-x", "/cache/benchmarks/x", tmp_path / "run.tgz")
