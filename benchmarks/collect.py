"""`collect`: bring a cluster run's results home and print its report, for the results hook or by
hand (why not `kubectl cp`: docs/benchmark-toolkit.md, "One run, one description")."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from urllib3.exceptions import HTTPError

from benchmarks.report import binding_changes, build_report, read_run
from benchmarks.sweep import MANIFEST_NAME
from infra.benchmark_manifests import CACHE_DIR, results_reader_pod, run_of
from infra.cluster import JobState, JobStatus, api_client, job_status_of
from infra.names import KUBECONFIG_ENV, SWEEP_RUNNING_EXIT_CODE
from infra.run import Run
from infra.settings import REPO_ROOT, SettingsError, stack_settings

REPORT_FOLDER = "report"
# How the client raises a refused exec (kubernetes/stream/ws_client.py: status 0, the
# websocket library's "Handshake status <code> <reason> -+-+- <headers> -+-+- <body>").
_HANDSHAKE = re.compile(r"Handshake status (\d+) (.*?) -\+-\+- .* -\+-\+- (.*)", re.DOTALL)
Say = Callable[[str], None]


class CollectError(RuntimeError):
    """Results could not be brought home; the message says why and what to do next."""


class ClusterIO(Protocol):
    """The only cluster access `collect` needs (tests put a folder behind it); `wait_job` returns
    at the Job's end or after `timeout_secs` (0: now); the copy is `<claim>/<results_path>/`."""

    def wait_job(self, namespace: str, job: str, timeout_secs: float, say: Say) -> JobStatus: ...
    def read_logs(self, namespace: str, job: str, tail_lines: int) -> list[str]: ...
    def copy_dir_from_pvc(self, location: Run, dest: Path) -> None: ...


def finished_levels(run_dir: Path) -> list[int]:
    """The levels a run's sweep finished for any profile, as their manifests record them."""
    return sorted({level for manifest in run_dir.glob(f"*/{MANIFEST_NAME}")
                   for level in read_run(manifest).levels})


def other_runs(run_dir: Path) -> list[Path]:
    """Each other stack's newest run beside `run_dir` that compares with it (same workload and
    deployment, routing aside: report.binding_changes); a run holds a folder per profile."""
    mine = read_run(min(run_dir.glob(f"*/{MANIFEST_NAME}"))).manifest
    newest: dict[str, Path] = {}
    for path in sorted(run_dir.parents[1].glob(f"*/*/*/{MANIFEST_NAME}"),
                       key=lambda m: m.parent.stat().st_mtime):
        run, stack = read_run(path), path.parents[2].name
        if stack != run_dir.parent.name and run.levels and not binding_changes(mine, run.manifest):
            newest[stack] = path.parents[1]
    return [newest[stack] for stack in sorted(newest)]


def bring_results_home(cluster: ClusterIO, location: Run, results_root: Path, say: Say,
                       wait_secs: float = 0) -> Path | None:
    """The local run folder with its report, or None while the sweep runs (said with how to
    collect later); a failed sweep still brings home the levels it finished."""
    job, namespace = location.sweep_job, location.namespace
    source = f"{location.cache_claim}:{location.results_path}/"
    status = cluster.wait_job(namespace, job, wait_secs, say)
    if status.state is JobState.RUNNING:
        tail = cluster.read_logs(namespace, job, 5)
        say(f"The sweep (Job {job} in namespace {namespace}) is still running"
            + ("; latest log lines:\n  " + "\n  ".join(tail) if tail else "")
            + f"\nFollow it: {location.follow_command}"
            + f"\nWhen it has finished, bring the results home: {location.collect_command}")
        return None
    if status.state is JobState.FAILED:
        say(f"The sweep Job {job} failed: {status.reason or 'no reason recorded'}. "
            "Bringing home the levels it finished.")
    elif status.state is JobState.MISSING:
        say(f"No Job {job} in {namespace} (removed, or never run); looking for its results "
            f"on claim {location.cache_claim}.")

    # Copied beside the final folder, then swapped in: a failed copy never leaves half a run.
    final = results_root / location.stack / location.run_id
    staged = final.with_name(f".{final.name}.partial-{uuid.uuid4().hex[:8]}")
    started = time.monotonic()
    say(f"copying {source} to {final}/")
    try:
        cluster.copy_dir_from_pvc(location, staged)
        levels = finished_levels(staged)
        if not levels:
            raise CollectError(f"the sweep finished no level in {source}. Check its log: "
                               f"{location.kubectl} logs job/{job}")
        if final.exists():
            shutil.rmtree(final)
        staged.replace(final)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    say(f"copied {len(levels)} level(s) in {time.monotonic() - started:.0f} s")
    say(build_report([final], final / REPORT_FOLDER).read_text())
    if others := other_runs(final):
        say(f"Compare with the other profile(s): ./run.sh report "
            f"{' '.join(str(p) for p in [*others, final])} --out {results_root / 'comparison'}")
    return final


def pack_command(root: str) -> list[str]:
    return ["tar", "czf", "-", "-C", root, "."]


def check_pack(code: int, err: str, root: str) -> None:
    """What the exit code of `pack_command(root)` says."""
    if code and root in err and "No such file or directory" in err:
        raise CollectError(f"no results folder {root} on the claim: the sweep has not "
                           "started writing this run yet")
    if code:
        raise CollectError(f"reading the results failed ({code}): {err[-500:]}")


def extract_archive(archive: Path, dest: Path) -> None:
    """Unpack a fetched archive once every member is a plain file or folder inside `dest`
    (checked here, as `extractall(filter=...)` needs Python 3.11.4 and set-up takes 3.11)."""
    root = dest.resolve()
    with tarfile.open(archive, mode="r:gz") as tar:
        for member in tar.getmembers():
            if not (member.isfile() or member.isdir()) \
                    or not (root / member.name).resolve().is_relative_to(root):
                raise CollectError(f"refusing {member.name!r} in the results archive: not a "
                                   "plain file or folder inside the run")
        tar.extractall(root)


def refusal(error: ApiException, action: str, permission: str) -> str:
    """One line for an API refusal: what was refused, why, and the fix (never the raw
    HTTP headers a refused exec carries)."""
    status, reason, body = error.status, str(error.reason or ""), str(error.body or "")
    handshake = _HANDSHAKE.match(reason) if status == 0 else None
    if handshake:
        status, reason, body = int(handshake[1]), handshake[2], handshake[3]
    body = " ".join(body.split())
    if status not in (401, 403):
        return f"could not {action} ({status} {reason}): {body[:200]}"
    if "violates PodSecurity" in body:
        return (f"the namespace's Pod Security admission refused to {action} ({body[:200]}); "
                "the reader already meets the restricted profile: check the namespace's "
                "pod-security labels")
    if "quota" in body.lower():
        return f"a resource quota refused to {action} ({body[:200]}); raise the quota"
    return (f"the cluster refused to {action} ({status} {reason}): your account needs "
            f"{permission} in that namespace (`kubectl auth can-i ...`)")


class KubernetesClusterIO:
    """ClusterIO over the kubernetes client; `kubeconfig` is what the stack's
    `kubernetes:kubeconfig` holds (a path or the content): the cluster the provider deploys to."""

    POLL_SECS = 10.0
    POD_START_TIMEOUT_SECS = 300.0
    COPY_TIMEOUT_SECS = 900.0

    def __init__(self, context: str | None = None, kubeconfig: str | None = None) -> None:
        try:
            self._api = api_client(kubeconfig, context)
        except Exception as error:  # noqa: BLE001 - config raises several unrelated types
            raise CollectError(
                f"cannot load the kubeconfig{f' context {context}' if context else ''} "
                f"({type(error).__name__}); point KUBECONFIG at the cluster's kubeconfig"
            ) from None
        self._core, self._batch = client.CoreV1Api(self._api), client.BatchV1Api(self._api)

    def wait_job(self, namespace: str, job: str, timeout_secs: float, say: Say) -> JobStatus:
        deadline, last = time.monotonic() + timeout_secs, None
        while True:
            try:
                status = job_status_of(self._batch.read_namespaced_job_status(job, namespace))
            except ApiException as error:
                if error.status != 404:
                    raise CollectError(f"cannot read Job {job} in {namespace}: "
                                       f"{error.reason}") from None
                status = job_status_of(None)
            if status.state is not JobState.RUNNING or time.monotonic() >= deadline:
                return status
            if last is None:
                say(f"waiting up to {timeout_secs:.0f} s for Job {job} in {namespace}")
                last = ""
            lines = self.read_logs(namespace, job, 1)
            if lines and lines[-1] != last:
                last = lines[-1]
                say(f"{job}: {last}")
            time.sleep(min(self.POLL_SECS, max(0.0, deadline - time.monotonic())))

    def read_logs(self, namespace: str, job: str, tail_lines: int) -> list[str]:
        try:
            pods = self._core.list_namespaced_pod(namespace, label_selector=f"job-name={job}")
            if not pods.items:
                return []
            newest = max(pods.items, key=lambda p: p.metadata.creation_timestamp)
            text = self._core.read_namespaced_pod_log(
                newest.metadata.name, namespace, container="main", tail_lines=tail_lines)
        except ApiException:
            return []
        return [line for line in (text or "").splitlines() if line.strip()]

    def copy_dir_from_pvc(self, location: Run, dest: Path) -> None:
        namespace, name = location.namespace, f"benchmark-results-reader-{uuid.uuid4().hex[:8]}"
        try:  # The sweep Job, while it exists, owns the reader: `destroy` takes a leftover.
            owner = (location.sweep_job, self._batch.read_namespaced_job(
                location.sweep_job, namespace).metadata.uid)
        except ApiException:
            owner = None
        try:  # each step names what it needs, should the API refuse it
            step = (f"create pod {name} in {namespace}", "`create` on pods")
            self._core.create_namespaced_pod(namespace, results_reader_pod(location, name, owner))
            step = (f"read pod {name} in {namespace}", "`get` on pods")
            self._wait_running(location, name)
            step = (f"exec in pod {name} in {namespace}", "`create` on pods/exec")
            with tempfile.TemporaryDirectory() as tmp:
                archive = Path(tmp) / "run.tgz"
                self._pack(namespace, name, f"{CACHE_DIR}/{location.results_path}", archive)
                extract_archive(archive, dest)
        except ApiException as error:
            raise CollectError(refusal(error, *step)) from None
        finally:
            with suppress(ApiException):
                self._core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def _wait_running(self, location: Run, name: str) -> None:
        deadline = time.monotonic() + self.POD_START_TIMEOUT_SECS
        while time.monotonic() < deadline:
            phase = self._core.read_namespaced_pod(name, location.namespace).status.phase
            if phase == "Running":
                return
            if phase in ("Failed", "Succeeded"):
                break
            time.sleep(2)
        raise CollectError(
            f"the results reader pod {name} in {location.namespace} did not start within "
            f"{self.POD_START_TIMEOUT_SECS:.0f} s; `{location.kubectl} describe pod {name}` "
            "says why (image pull, claim mount)")

    def _pack(self, namespace: str, name: str, root: str, archive: Path) -> None:
        """Stream `pack_command`'s tar from the pod's exec into `archive` as it comes, within
        COPY_TIMEOUT_SECS; the client reads the exit code from the exec's closing Status."""
        ws = stream(self._core.connect_get_namespaced_pod_exec, name, namespace,
                    container="main", command=pack_command(root), stdout=True, stderr=True,
                    stdin=False, tty=False, _preload_content=False, binary=True)
        deadline = time.monotonic() + self.COPY_TIMEOUT_SECS
        try:
            with open(archive, "wb") as out:
                while ws.is_open() and time.monotonic() < deadline:
                    out.write(ws.read_stdout(max(0.0, deadline - time.monotonic())) or b"")
            if ws.is_open():
                raise CollectError(f"copying results took over {self.COPY_TIMEOUT_SECS:.0f} s")
            err = ws.read_stderr() or b""
        finally:
            ws.close()
        try:
            code = ws.returncode
        except (TypeError, KeyError, IndexError, ValueError):  # no Status, or no code in it
            raise CollectError("the copy ended without the reader's exit status (the connection "
                               "dropped?); the results may be cut short: run collect "
                               "again") from None
        check_pack(code, err.decode(errors="replace"), root)


def location_from_config(root: Path, stack: str) -> Run:
    """The run (and kube context) the stack's config describes."""
    try:
        return run_of(stack_settings(stack, root))
    except SettingsError as error:
        raise CollectError("; ".join(error.problems)) from None


def pulumi_benchmark_output(root: Path, stack: str) -> dict[str, Any] | None:
    """The stack's `benchmark` output (the run the program exported), or None where the CLI,
    the stack's state or that output is absent."""
    try:
        result = subprocess.run(
            ["pulumi", "stack", "output", "benchmark", "--json", "--stack", stack], cwd=root,
            capture_output=True, text=True, check=True, timeout=120)
        output = json.loads(result.stdout or "null")
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError):
        return None
    return output if isinstance(output, dict) else None


def resolve_location(root: Path, stack: str, run_id: str | None,
                     output: dict[str, Any] | None = None) -> Run:
    """Where the run is: the stack's `benchmark` output (given, as the hook does, or what was
    really deployed), else its config files; `run_id`, when given, overrides the stack's."""
    info = output or pulumi_benchmark_output(root, stack)
    location = Run.from_output(info) if info else location_from_config(root, stack)
    return replace(location, run_id=run_id) if run_id else location


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "collect",
        help="bring a cluster run's results home and print its report",
        description="Copy a stack's sweep results from the cache claim to results/<stack>/"
        "<run-id>/ and print the report; the run from `pulumi stack output`, else the stack's "
        "config files.",
    )
    p.add_argument("--stack", required=True, help="the stack that ran the sweep")
    p.add_argument("--run", type=json.loads, default=None, metavar="JSON",
                   help="the stack's `benchmark` output: the run itself (what `pulumi up`'s "
                   "results hook passes; the stack's kubernetes:kubeconfig, if any, comes in "
                   f"the environment as {KUBECONFIG_ENV})")
    p.add_argument("--run-id", default=None,
                   help="which run (default: the stack's benchmarkRunId)")
    p.add_argument("--results", type=Path, default=Path("results"),
                   help="local results folder (default: results)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECS",
                   help="wait up to SECS for a sweep still running (default: don't wait)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    code = 2  # bad input until the run and the cluster's kubeconfig are found, then 1
    try:
        location = resolve_location(REPO_ROOT, args.stack, args.run_id, args.run)
        cluster = KubernetesClusterIO(location.kube_context or None,
                                      os.environ.get(KUBECONFIG_ENV))
        code = 1
        run_dir = bring_results_home(cluster, location, args.results,
                                     lambda line: print(line, flush=True), args.wait)
    except (CollectError, OSError, HTTPError) as error:
        why = error if isinstance(error, CollectError) else (
            f"cannot reach the cluster ({type(error).__name__}: {error}); check the stack's "
            "kubeconfig and context (kubernetes:kubeconfig, kubernetes:context) and network")
        print(f"collect: error: {why}", file=sys.stderr)
        return code
    return 0 if run_dir is not None else SWEEP_RUNNING_EXIT_CODE
