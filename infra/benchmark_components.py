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

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra import benchmark_manifests, cluster, manifests
from infra.benchmark_names import (
    SWEEP_RUNNING_EXIT_CODE,
    collect_command,
    follow_command,
    results_subpath,
    smoke_job_name,
    sweep_job_name,
)
from infra.calibration import stack_plan
from infra.components import TYPE_PREFIX, Deployment, _timeouts
from infra.routing import routing_args
from infra.settings import Settings
from infra.stack_files import REPO_ROOT

# Where the hook puts results: results/<stack>/<run-id>/ in the project.
RESULTS_ROOT = REPO_ROOT / "results"
# Bounds the hook's `collect`: its reader pod start (300 s) and copy (900 s), with room.
COLLECT_TIMEOUT_SECS = 1500.0
Say = Callable[[str], None]


def deployment_facts(settings: Settings) -> tuple[tuple[str, str], ...]:
    """What a run measures, in words (a refused resume and the report show them); what
    binds it is the graph's hash beside them, the benchmark image, the graph's uid and the
    code (`benchmark_manifests`), so no setting that changes the graph can be missed."""
    serving, routing = settings.workers.serving, settings.routing
    facts = {
        "worker_image": settings.worker_image,
        "frontend_image": settings.images.frontend,
        "runtime": serving.runtime, "variant": serving.variant, "precision": serving.precision,
        "replicas": serving.replicas, "gpus_per_worker": serving.gpus_per_replica,
        "gpu": serving.gpu_product, "model": settings.workers.served_model,
        "routing": " ".join(routing_args(routing)),
        # The graph as the program declares it (components.ReasonerGraph does the same).
        "graph": benchmark_manifests.graph_hash(manifests.graph(settings), settings.profile),
        "benchmark_image": settings.benchmark.image,
    }
    return tuple((k, str(v)) for k, v in facts.items())


def benchmark_target(settings: Settings) -> benchmark_manifests.BenchmarkTarget:
    """What the benchmark Jobs point at, and what the run records about the deployment
    (so a report can tell runtimes, variants and topologies apart)."""
    serving = settings.workers.serving
    placement = settings.benchmark_placement
    return benchmark_manifests.BenchmarkTarget(
        profile=settings.profile,
        namespace=settings.namespace.name,
        frontend_service=settings.frontend_service,
        cache_claim=settings.cache.claim_name,
        session_affinity=settings.routing.affinity,
        image_pull_secrets=settings.secrets.image_pull_secrets,
        model=settings.workers.served_model,
        notes=(
            f"cluster run: stack {settings.stack}, run id {settings.benchmark.run_id}",
            f"{serving.runtime} workers: {serving.variant} {serving.precision}, "
            f"{serving.replicas} x {serving.gpus_per_replica} GPU ({serving.gpu_product}), "
            f"image {settings.worker_image}; frontend image {settings.images.frontend}",
        ),
        deployment=deployment_facts(settings),
        node_selector=placement.node_selector,
        tolerations=tuple(t.manifest() for t in placement.tolerations),
        kubectl=settings.kubectl,
    )


def bring_results_home(output: dict[str, Any], kubeconfig: str | None, say: Say,
                       warn: Say, timeout_secs: float = COLLECT_TIMEOUT_SECS) -> bool:
    """Run `python -m benchmarks collect` for the run in `output` (the stack's `benchmark`
    output), its lines shown as they come. The sweep itself succeeded, so a failure here
    is a warning with the command that retries it, never a failed deployment; a sweep left
    running (not awaited) is neither: collect says how to fetch it later. infra runs the
    toolkit as a program (here and in the pods), never imports it."""
    command = [sys.executable, "-m", "benchmarks", "collect", "--stack", output["stack"],
               "--results", str(RESULTS_ROOT), "--stdin"]
    given = json.dumps({"benchmark": output, "kubeconfig": kubeconfig})
    code: int | str
    try:
        # stdin, not argv: a kubeconfig given as content may hold credentials.
        with subprocess.Popen(command, cwd=REPO_ROOT, stdin=subprocess.PIPE, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as child:
            assert child.stdin is not None and child.stdout is not None
            # A collect that ends before reading its input still says why, below.
            with contextlib.suppress(BrokenPipeError):
                child.stdin.write(given)
            with contextlib.suppress(BrokenPipeError):
                child.stdin.close()
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
         f"stay on claim {output['cacheClaim']} under {output['resultsPath']}/. Retry: "
         f"{output['collectCommand']}")
    return False


def results_home_hook(settings: Settings) -> pulumi.ResourceHook:
    """After the sweep Job is created (or replaced): bring its results home, print the
    report. Never on preview; a sweep left running gets the command to collect it later."""
    output = benchmark_output(settings)
    # The same cluster the provider deploys to (its default: the current context); the
    # value may be a path or the kubeconfig's content.
    kubeconfig = pulumi.runtime.get_config("kubernetes:kubeconfig")

    def bring_home(args: pulumi.ResourceHookArgs) -> None:
        bring_results_home(output, kubeconfig, pulumi.log.info, pulumi.log.warn)

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
        target = benchmark_target(settings)
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
        code_manifest = objects["code"]
        code = k8s.core.v1.ConfigMap(
            "code", metadata=code_manifest["metadata"], data=code_manifest["data"],
            opts=child(namespace),
        )
        server_manifest = objects["video-server"]
        server = k8s.apps.v1.Deployment(
            "video-server", metadata=server_manifest["metadata"], spec=server_manifest["spec"],
            opts=child(namespace, code, awaited=server_manifest),
        )
        service_manifest = objects["video-service"]
        # After the server: its endpoints exist only once a server pod is Ready.
        service = k8s.core.v1.Service(
            "video-service", metadata=service_manifest["metadata"],
            spec=service_manifest["spec"], opts=child(namespace, server, awaited=service_manifest),
        )
        if "video-budget" in objects:
            budget = objects["video-budget"]
            k8s.policy.v1.PodDisruptionBudget(
                "video-budget", metadata=budget["metadata"], spec=budget["spec"],
                opts=child(namespace))
        ready: list[pulumi.Resource] = [deployment.graph.graph, server, service]
        self.smoke_job = None
        if b.smoke:
            smoke = objects["smoke"]
            self.smoke_job = k8s.batch.v1.Job(
                "smoke", metadata=smoke["metadata"], spec=jobs.apply(lambda o: o["smoke"]["spec"]),
                opts=child(*ready, awaited=smoke, provider=deployment.adopting),
            )
            ready = [self.smoke_job]
        self.sweep_job = None
        if b.sweep:
            sweep = objects["sweep"]
            hook = results_home_hook(settings)
            self.sweep_job = k8s.batch.v1.Job(
                "sweep", metadata=sweep["metadata"], spec=jobs.apply(lambda o: o["sweep"]["spec"]),
                opts=child(*ready, awaited=sweep, hooks=pulumi.ResourceHookBinding(
                    after_create=[hook], after_update=[hook]),
                    ignore_changes=["spec"] if kept else None, provider=deployment.adopting),
            )
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
    out: dict[str, Any] = {"benchmark": benchmark_output(settings)}
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


def benchmark_output(settings: Settings) -> dict[str, Any]:
    """Where a run lives, and the commands to follow and fetch it: what `collect` reads
    (from `pulumi stack output`, the stack's config, or the results hook)."""
    b, profile = settings.benchmark, settings.profile
    smoke = smoke_job_name(profile, b.run_id) if b.smoke else ""
    return {
        "stack": profile,
        "runId": b.run_id,
        "namespace": settings.namespace.name,
        "cacheClaim": settings.cache.claim_name,
        "image": b.image,
        "imagePullSecrets": list(settings.secrets.image_pull_secrets),
        "resultsPath": results_subpath(profile, b.run_id),
        "smokeJob": smoke,
        "sweepJob": sweep_job_name(profile, b.run_id) if b.sweep else "",
        "kubeContext": settings.kube_context or "",
        "podPlacement": benchmark_manifests.user_placement(
            settings.benchmark_placement.node_selector,
            tuple(t.manifest() for t in settings.benchmark_placement.tolerations)),
        "followCommand": follow_command(settings.kubectl, profile, b.run_id) if b.sweep else "",
        "collectCommand": collect_command(profile, b.run_id) if b.sweep else "",
    }
