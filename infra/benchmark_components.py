"""Pulumi resources of the post-deploy benchmark, and the hook that brings results home.

Thin on purpose: every manifest comes from `infra.benchmark_manifests`; the hook runs the
toolkit's own `collect` command; this module adds what only Pulumi can express.

Order and waits: the video server comes up beside the model download (it needs only the
namespace); the smoke Job waits for the graph to be Ready and the videos to be served;
the sweep Job waits for the smoke Job to succeed. The provider awaits each Job to
completion, so a failed smoke test fails `pulumi up` with its own last log line and the
sweep never starts. The resource hook after the sweep Job's create or replace (never on
preview) copies the results to `results/<stack>/<run-id>/` and prints the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra import benchmark_manifests, cluster, manifests
from infra.calibration import stack_plan
from infra.components import TYPE_PREFIX, Deployment, _declare, _timeouts
from infra.names import KUBECONFIG_ENV, SWEEP_RUNNING_EXIT_CODE, Run
from infra.settings import REPO_ROOT, Settings

# Where the hook puts results: results/<stack>/<run-id>/ in the project.
RESULTS_ROOT = REPO_ROOT / "results"
# Bounds the hook's `collect`: its reader pod start (300 s) and copy (900 s), with room.
COLLECT_TIMEOUT_SECS = 1500.0
Say = Callable[[str], None]


def bring_results_home(run: Run, kubeconfig: str | None, say: Say, warn: Say,
                       timeout_secs: float = COLLECT_TIMEOUT_SECS) -> bool:
    """Run `python -m benchmarks collect` for `run`, its lines shown as they come. The sweep
    itself succeeded, so a failure here is a warning with the command that retries it,
    never a failed deployment; a sweep left running (not awaited) is neither: collect says
    how to fetch it later. The Pulumi program runs the toolkit only as a program (here and
    in the pods), never imports it. The stack's kubeconfig (a path or content that may hold
    credentials) goes in the child's environment, never its argv."""
    command = [sys.executable, "-m", "benchmarks", "collect", "--stack", run.stack,
               "--run", json.dumps(run.output()), "--results", str(RESULTS_ROOT)]
    env = {**os.environ, **({KUBECONFIG_ENV: kubeconfig} if kubeconfig else {})}
    code: int | str
    try:
        with subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) as child:
            assert child.stdout is not None
            timer = threading.Timer(timeout_secs, child.kill)
            timer.start()
            for line in child.stdout:
                say(line.rstrip())
            timer.cancel()
            code = child.wait()
    except OSError as error:
        code = f"{type(error).__name__}: {error}"
    if code in (0, SWEEP_RUNNING_EXIT_CODE):
        return code == 0
    warn(f"could not bring the results home (collect ended with {code}, see above); they "
         f"stay on claim {run.cache_claim} under {run.results_path}/. Retry: "
         f"{run.collect_command}")
    return False


def results_home_hook(settings: Settings) -> pulumi.ResourceHook:
    """After the sweep Job is created (or replaced): bring its results home, print the
    report. Never on preview; a sweep left running gets the command to collect it later."""
    run = benchmark_manifests.run_of(settings)
    # The same cluster the provider deploys to (its default: the current context); the
    # value may be a path or the kubeconfig's content.
    kubeconfig = pulumi.runtime.get_config("kubernetes:kubeconfig")

    def bring_home(args: pulumi.ResourceHookArgs) -> None:
        bring_results_home(run, kubeconfig, pulumi.log.info, pulumi.log.warn)

    return pulumi.ResourceHook(
        f"bring-results-home-{settings.profile}", bring_home,
        pulumi.ResourceHookOptions(on_dry_run=False),
    )


def _awaited(manifest: dict[str, Any]) -> pulumi.CustomTimeouts | None:
    """The provider's wait bound: the same as the manifest's annotation."""
    seconds = manifest["metadata"].get("annotations", {}).get(manifests.TIMEOUT_SECONDS)
    return _timeouts(int(seconds)) if seconds else None


class BenchmarkRun(pulumi.ComponentResource):
    """The video server, the smoke Job and the sweep Job (each only when enabled)."""

    smoke_job: k8s.batch.v1.Job | None
    sweep_job: k8s.batch.v1.Job | None

    def __init__(
        self,
        resource_name: str,
        settings: Settings,
        deployment: Deployment,
        sweep: cluster.JobStatus,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TYPE_PREFIX}:BenchmarkRun", resource_name, None, opts)
        b = settings.benchmark
        target = benchmark_manifests.benchmark_target(settings)
        sources = benchmark_manifests.shipped_sources(REPO_ROOT)
        failed, done = (sweep.state is s for s in (cluster.JobState.FAILED,
                                                   cluster.JobState.SUCCEEDED))
        objects = benchmark_manifests.benchmark_objects(target, b, sources, failed, done)
        # The Jobs are bound to this graph: a recreated graph (destroy, then up) is a new
        # deployment even with the same settings.
        jobs = deployment.graph.graph.metadata.apply(
            lambda m: benchmark_manifests.benchmark_objects(
                replace(target, deployment=(*target.deployment,
                                            ("graph_uid", (m or {}).get("uid") or ""))),
                b, sources, failed, done))
        # A sweep that started is never replaced: the provider replaces a Job on any pod
        # template change, deleting it first (its name is fixed), which would kill a
        # running sweep or throw a finished one away for a new Job that refuses to resume.
        # Only a failed one is rerun (it resumes its run). A later binding needs a new run id.
        kept = sweep.state in (cluster.JobState.RUNNING, cluster.JobState.SUCCEEDED)
        if kept and b.sweep:
            pulumi.log.info(
                f"sweep Job {objects['sweep']['metadata']['name']} is {sweep.state.value} in "
                "the cluster: kept as it is (a started sweep is never replaced); to measure "
                "this deployment or code again, set a new benchmarkRunId", resource=self)

        def child(*depends: pulumi.Resource, awaited: dict[str, Any] | None = None,
                  **extra: Any) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(
                parent=self, depends_on=list(depends),
                custom_timeouts=_awaited(awaited) if awaited else None, **extra,
            )

        namespace = deployment.namespace
        code = _declare(k8s.core.v1.ConfigMap, "code", objects["code"], child(namespace))
        server_manifest = objects["video-server"]
        server = _declare(k8s.apps.v1.Deployment, "video-server", server_manifest,
                          child(namespace, code, awaited=server_manifest))
        service_manifest = objects["video-service"]
        # After the server: its endpoints exist only once a server pod is Ready.
        service = _declare(k8s.core.v1.Service, "video-service", service_manifest,
                           child(namespace, server, awaited=service_manifest))
        if "video-budget" in objects:
            _declare(k8s.policy.v1.PodDisruptionBudget, "video-budget", objects["video-budget"],
                     child(namespace))
        ready: list[pulumi.Resource] = [deployment.graph.graph, server, service]
        self.smoke_job = None
        if b.smoke:
            smoke = objects["smoke"]
            self.smoke_job = _declare(
                k8s.batch.v1.Job, "smoke", smoke,
                child(*ready, awaited=smoke, provider=deployment.adopting),
                spec=jobs.apply(lambda o: o["smoke"]["spec"]))
            ready = [self.smoke_job]
        self.sweep_job = None
        if b.sweep:
            sweep = objects["sweep"]
            hook = results_home_hook(settings)
            self.sweep_job = _declare(
                k8s.batch.v1.Job, "sweep", sweep,
                child(*ready, awaited=sweep, hooks=pulumi.ResourceHookBinding(
                    after_create=[hook], after_update=[hook]),
                    ignore_changes=["spec"] if kept else None, provider=deployment.adopting),
                spec=jobs.apply(lambda o: o["sweep"]["spec"]))
        self.register_outputs({})


def deploy_benchmark(settings: Settings, deployment: Deployment,
                     live: cluster.LiveObjects | None = None) -> BenchmarkRun | None:
    """Declare the benchmark after the recipe; nothing when the smoke test and sweep are off.
    The sweep Job's state in the cluster (`live`) decides what a change may do to it: one
    that failed is run again (resuming its run), one running or finished is kept."""
    if not settings.benchmark.any_enabled:
        return None
    return BenchmarkRun("benchmark", settings, deployment,
                        cluster.job_status_of(live.sweep_job if live else None),
                        opts=pulumi.ResourceOptions(providers=[deployment.provider]))


def stack_outputs(settings: Settings) -> dict[str, Any]:
    """The `benchmark` stack output (none when the benchmark is off) and the sweep's plan,
    which `pulumi preview` also prints: the hours and GPU-hours before they are spent."""
    if not settings.benchmark.any_enabled:
        return {}
    out: dict[str, Any] = {"benchmark": benchmark_manifests.run_of(settings).output()}
    if settings.benchmark.sweep:
        plan = stack_plan(settings)
        pulumi.log.info("benchmark plan (infra/calibration.py; `./run.sh plan --stack "
                        f"{settings.profile}`):\n" + "\n".join(plan.lines()))
        out["benchmarkPlan"] = {
            "levelMinutes": {str(p.concurrency): round(p.secs / 60, 1) for p in plan.levels},
            "sweepHours": round(plan.sweep_secs / 3600, 2),
            "gpuHours": round(plan.gpu_hours, 1),
            "basis": plan.hardware.source,
        }
    return out
