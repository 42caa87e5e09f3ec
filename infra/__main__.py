"""The Pulumi program: read config, check, declare each manifest as it is, export; only what
Pulumi alone expresses lives here (docs/deploy-reference.md, 'The program')."""

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi.runtime import config as runtime_config

# The language host puts infra/ on sys.path, not the root `import infra` needs.
if (_ROOT := str(Path(__file__).resolve().parent.parent)) not in sys.path:
    sys.path.insert(0, _ROOT)

from infra import benchmark_manifests as bm  # noqa: E402
from infra import cluster, manifests, names  # noqa: E402
from infra.planning import stack_plan  # noqa: E402
from infra.settings import REPO_ROOT, Settings, SettingsError, parse_settings  # noqa: E402

DOWNLOAD_PLACEMENT_FIELDS = [*(f"spec.template.spec.{key}" for key in manifests.PLACEMENT_KEYS),
                             "spec.activeDeadlineSeconds", "spec.backoffLimit"]
# Where the hook puts results: results/<stack>/<run-id>/ in the project.
RESULTS_ROOT = REPO_ROOT / "results"
Say = Callable[[str], None]


def declare(name: str, manifest: Mapping[str, Any], parent: pulumi.Resource,
            timeout_secs: int | None = None, **opts: Any) -> pulumi.CustomResource:
    """One object as its manifest is, under the type its apiVersion and kind name; awaited as
    long as `timeout_secs` or its `pulumi.com/timeoutSeconds` says, on create and update alike."""
    group, _, version = manifest["apiVersion"].rpartition("/")
    seconds = timeout_secs or manifest["metadata"].get("annotations", {}).get(
        manifests.TIMEOUT_SECONDS)
    if seconds:
        opts["custom_timeouts"] = pulumi.CustomTimeouts(create=f"{seconds}s", update=f"{seconds}s")
    if manifest["kind"] == "Secret":  # its data stays secret, as the SDK's Secret type keeps it
        manifest = {**manifest, "stringData": pulumi.Output.secret(manifest["stringData"])}
        opts["additional_secret_outputs"] = ["data", "stringData"]
    kind = f"kubernetes:{group or 'core'}/{version}:{manifest['kind']}"
    return pulumi.CustomResource(kind, name, dict(manifest),
                                 pulumi.ResourceOptions(parent=parent, **opts))


def group(kind: str, name: str, **opts: Any) -> pulumi.ComponentResource:
    """A group a user sees in `pulumi stack` (its type and name pin its children's URNs)."""
    return pulumi.ComponentResource(f"cosmos3-routing:infra:{kind}", name, None,
                                    pulumi.ResourceOptions(**opts))


def deploy(settings: Settings, tokens: Mapping[str, pulumi.Input[str]],
           live: cluster.LiveObjects | None) -> dict[str, Any]:
    """Declare the stack in order and return its outputs; provider `cluster` adopts what
    outlives a run, `cluster-create` makes the rest (docs/deploy-reference.md, 'Re-runs')."""
    # What the cluster holds decides how the stack declares (`live`: read once, with the checks).
    done = cluster.completed(live.download_job if live else None)
    stale = done and cluster.download_differs(settings, live.download_job)
    gone = cluster.download_gone(settings, live)
    sweep = cluster.job_status_of(live.sweep_job if live else None).state
    # Explicit providers don't read `kubernetes:*` config: context and kubeconfig passed on.
    kubeconfig = pulumi.Config("kubernetes").get_secret("kubeconfig")
    adopting, creating = (
        k8s.Provider(name, context=settings.kube_context, kubeconfig=kubeconfig,
                     upsert_existing_objects=upsert)
        for name, upsert in (("cluster", True), ("cluster-create", False)))
    keep, b, claim = settings.cache_keep_on_destroy, settings.benchmark, settings.cache_claim_name
    objects, network_policies = manifests.recipe(settings, tokens)
    run = bm.run_of(settings, objects["graph"])
    if b.any_enabled:
        # The sweep Job's state in the cluster decides what a change may do to it: one that
        # failed is run again (resuming its run), one running or finished is kept.
        given = (bm.shipped_sources(REPO_ROOT), sweep is cluster.JobState.FAILED,
                 sweep is cluster.JobState.SUCCEEDED)
        parts = bm.benchmark_objects(run, b, *given)

    # The namespace (created or existing) and the Secret of the token the workers read.
    # `destroy` keeps a namespace it created when the cache is kept: deleting it deletes the claim.
    namespace = group("RecipeNamespace", "namespace", providers=[creating])
    made = [declare("namespace", objects["namespace"], namespace, provider=adopting,
                    retain_on_delete=keep)] if settings.create_namespace else []
    secrets = [declare(name, objects[name], namespace, depends_on=made)
               for name in objects if objects[name]["kind"] == "Secret"]

    # Each pod takes only the traffic it needs, before any runs.
    policies = group("NetworkPolicies", "network-policies", providers=[creating])
    for name, policy in network_policies.items():
        declare(name, policy, policies, depends_on=[namespace])

    # The claim is kept by default (`cacheKeepOnDestroy`) and adopted by either stack's next
    # `up`. Its spec is written once (a replacement empties the cache): a change only warns.
    model_cache = group("ModelCache", "model-cache", providers=[creating], depends_on=[policies])
    # Said once: a claim that differs from the settings, workers restarted.
    for warning in filter(None, (cluster.claim_drift(settings, live),
                                 cluster.worker_restarts(settings, live))):
        pulumi.log.warn(warning)
    spec = cluster.claim_spec(settings, live) if not settings.cache_existing_claim else None
    claims = [declare("claim", {**objects["claim"], "spec": spec}, model_cache,
                      provider=adopting, retain_on_delete=keep, depends_on=[namespace],
                      ignore_changes=["spec"])] if spec is not None else []
    if not (settings.cache_existing_claim or claims):
        pulumi.log.info(
            f"model cache claim {claim} exists and was not made by this project: "
            "used as it is (as cacheExistingClaim), never deleted by this stack",
            resource=model_cache)
    kubectl, name = settings.kubectl, settings.download_job_name
    if stale or gone:
        pulumi.log.info((
            f"download Job {name} completed for an earlier template and is kept as it is (a "
            "completed Job is never replaced). If the model's settings changed (image, "
            f"nimModelProfile...), download again: `{kubectl} delete job {name}`, then"
            if stale else f"download Job {name} is gone while graph "
            f"{settings.graph_name} runs: the cache is taken as filled and no download declared "
            "(it would wait for the graph's GPUs). To download again,") + " pin nimModelProfile "
            f"(the download then needs no GPU) or free the GPUs (`{kubectl} delete "
            f"dynamographdeployment {settings.graph_name}`: eight cold starts), and "
            "`pulumi up --refresh`", resource=model_cache)
    # The provider replaces a Job on any template change, and a download on a GPU would
    # wait for the graph's GPUs: a completed Job is kept; placement never changes the cache.
    download = [declare("download", objects["download"], model_cache,
                        depends_on=[*secrets, *claims], provider=adopting,
                        ignore_changes=["spec"] if done
                        else DOWNLOAD_PLACEMENT_FIELDS)] if not gone else []

    # The DynamoGraphDeployment, declared once the cache is filled, awaited until Ready.
    graph = declare("graph", objects["graph"],
                    group("ReasonerGraph", "graph", providers=[creating]),
                    depends_on=download, timeout_secs=settings.graph_timeout_secs)
    if b.any_enabled:
        # The video server, the smoke Job and the sweep Job (each only when enabled).
        benchmark = group("BenchmarkRun", "benchmark", providers=[creating])
        code = declare("code", parts["code"], benchmark, depends_on=[namespace])
        # A running sweep fetches its videos from the server: a code change never rolls it.
        server = declare("video-server", parts["video-server"], benchmark,
                         depends_on=[namespace, code], ignore_changes=["spec"]
                         if sweep is cluster.JobState.RUNNING else None)
        # After the server: its endpoints exist only once a server pod is Ready.
        ready: list[pulumi.Resource] = [graph, server, declare(
            "video-service", parts["video-service"], benchmark, depends_on=[namespace, server])]
        if "video-budget" in parts:
            declare("video-budget", parts["video-budget"], benchmark, depends_on=[namespace])
        # After the sweep Job is created (or replaced), never on preview: its results come
        # home, from the cluster the provider deploys to (a path or the content).
        config = pulumi.runtime.get_config("kubernetes:kubeconfig")
        hooks = [pulumi.ResourceHook(
            f"bring-results-home-{run.stack}",
            lambda _: collect_after_sweep(run, config, pulumi.log.info, pulumi.log.warn),
            pulumi.ResourceHookOptions(on_dry_run=False))] if b.sweep else []
        # The Jobs' specs are bound to this graph: a recreated graph (destroy, then up) is
        # a new deployment even with the same settings.
        jobs = graph.metadata.apply(lambda m: bm.benchmark_objects(replace(run, deployment=(
            *run.deployment, ("graph_uid", (m or {}).get("uid") or ""))), b, *given))
        # A started sweep is never replaced: the provider replaces a Job (deleting it first)
        # on any template change, killing a running sweep or throwing a finished one away.
        kept = sweep in (cluster.JobState.RUNNING, cluster.JobState.SUCCEEDED)
        if kept and b.sweep:
            pulumi.log.info(
                f"sweep Job {run.sweep_job} is {sweep.value} in the "
                "cluster: kept as it is (a started sweep is never replaced); to measure this "
                "deployment or code again, set a new benchmarkRunId", resource=benchmark)

        def job(role: str) -> dict[str, Any]:
            return {**parts[role], "spec": jobs.apply(lambda o: o[role]["spec"])}

        if b.smoke:
            ready = [declare("smoke", job("smoke"), benchmark, depends_on=ready,
                             provider=adopting)]
        if b.sweep:
            declare("sweep", job("sweep"), benchmark, depends_on=ready, provider=adopting,
                    hooks=pulumi.ResourceHookBinding(after_create=hooks, after_update=hooks),
                    ignore_changes=["spec"] if kept else None)
    # Where the frontend is and how to check it; the `benchmark` output (`collect` reads it)
    # and the sweep's plan, printed by `pulumi preview` too: hours before they're spent.
    graph_name, port, ttl = _name(graph), names.FRONTEND_PORT, settings.routing.affinity_ttl_secs
    first = settings.frontends[0].service
    forward = f"{settings.kubectl} port-forward service/{first} {port}:{port}"
    out: dict[str, Any] = {
        "namespace": _name(made[0]) if made else settings.namespace,
        "graphName": graph_name,
        "frontendService": graph_name.apply(lambda _: first),
        "frontends": {f.profile: f.service for f in settings.frontends},
        "modelCacheClaim": _name(claims[0]) if claims else claim,
        "frontendPort": port, "servedModel": settings.served_model,
        "profile": settings.profile, "routerMode": settings.routing.router_mode,
        "sessionAffinityTtlSecs": ttl if ttl is not None else 0,
        "portForwardCommand": graph_name.apply(lambda _: forward),
        "listModelsCommand": f"curl -fsS http://localhost:{port}/v1/models",
    }
    if b.any_enabled:
        out["benchmark"] = run.output()
    if b.sweep:
        plan = stack_plan(settings)
        pulumi.log.info("benchmark plan (infra/planning.py; `./run.sh plan --stack "
                        f"{settings.profile}`):\n" + "\n".join(plan.lines()))
        out["benchmarkPlan"] = {
            "levelMinutes": {str(p.concurrency): round(p.secs / 60, 1) for p in plan.levels},
            "sweepHours": round(plan.sweep_secs / 3600, 2), "gpuHours": round(plan.gpu_hours, 1),
            # What the stop rule is expected to run (the above: every video, benchmarkFull).
            "adaptiveSweepHours": round(plan.adaptive_secs / 3600, 2),
            "adaptiveGpuHours": round(plan.gpu_hours_of(plan.adaptive_secs), 1),
            "basis": plan.hardware.source}
    return out


def _name(resource: pulumi.CustomResource) -> pulumi.Output[str]:
    return resource.metadata.apply(lambda m: m["name"])


# `timeout_secs` bounds `collect`: its reader pod start (300 s) and copy (900 s), with room.
def collect_after_sweep(run: bm.Run, kubeconfig: str | None, say: Say, warn: Say,
                        timeout_secs: float = 1500.0) -> bool:
    """`collect` for `run`, its lines shown as they come; a failure only warns, with the retry:
    the sweep succeeded. The kubeconfig may hold credentials: environment, never argv."""
    command = [sys.executable, "-m", "benchmarks", "collect", "--stack", run.stack,
               "--run", json.dumps(run.output()), "--results", str(RESULTS_ROOT)]
    env = {**os.environ, **({names.KUBECONFIG_ENV: kubeconfig} if kubeconfig else {})}
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
    if code in (0, names.SWEEP_RUNNING_EXIT_CODE):
        return code == 0
    warn(f"could not bring the results home (collect ended with {code}, see above); they "
         f"stay on claim {run.cache_claim} under {run.results_path}/. Retry: "
         f"{run.collect_command}")
    return False


def main() -> None:
    # Read raw, so unknown keys are reported and no secret is read through `Config.get`
    # (which warns about it); the secret keys are the ones the CLI marked.
    raw = dict(runtime_config.CONFIG.get()) or runtime_config.get_config_env()
    secret_keys = frozenset(k for k in raw if runtime_config.is_config_secret(k))
    try:
        stack = parse_settings(raw, pulumi.get_stack(), pulumi.get_project(), secret_keys)
        dry_run = pulumi.runtime.is_dry_run()
        live = cluster.observe(stack, raw.get("kubernetes:kubeconfig"), dry_run=dry_run,
                               say=pulumi.log.info)
        # A preview answers what the change does: the moment's facts only warn there.
        if problems := cluster.problems(stack, live, pulumi.log.warn if dry_run else None):
            raise SettingsError(stack.stack, problems)
    except SettingsError as err:
        # RunError: the CLI prints the message alone, without a traceback.
        raise pulumi.RunError(str(err)) from None
    config = pulumi.Config()
    tokens = {key: config.require_secret(key) for key in stack.required_secrets}
    for name, value in deploy(stack, tokens, live).items():
        pulumi.export(name, value)


if __name__ == "__main__":
    main()
