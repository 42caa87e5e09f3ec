"""Stack config in, validated `Settings` out, or every problem at once with its key and fix,
before anything is declared (docs/deploy-reference.md, 'Settings')."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from infra import names
from infra import routing as rt
from infra import serving as sv
from infra.run import Workload, run_seed

PROJECT = "cosmos3-routing"
REPO_ROOT = Path(__file__).resolve().parent.parent
NGC_API_KEY = "ngcApiKey"
HF_TOKEN = "hfToken"
# Each secret key: its Kubernetes Secret (name suffix, data key), and its fix when missing.
SECRETS = {
    NGC_API_KEY: ("ngc-api-key", "NGC_API_KEY", "run `pulumi config set --secret "
                  "ngcApiKey` (an NGC API key with access to the Cosmos3 NIM)"),
    HF_TOKEN: ("hf-token", sv.HF_SECRET_KEY, "runtime vllm downloads the gated model from "
               "Hugging Face: run `pulumi config set --secret hfToken` (a token of an account "
               "granted access to nvidia/Cosmos3-Super or -Nano)"),
}
# The stack name is in the graph name, from which the operator derives longer ones.
MAX_PROFILE_LEN = names.max_graph_len(names.GRAPH_COMPONENTS) - len(names.graph_name(""))
# A stock, pinned Python image; the Jobs install the pinned client into it at start.
DEFAULT_BENCHMARK_IMAGE = "docker.io/library/python:3.11.14-slim-bookworm"


def _form(check: Callable[[str], Any], what: str, optional: bool = False) -> tuple:
    """A "str" row whose value must pass `check` (or be empty, when `optional`); `what`
    follows the value in the problem: what it is not, and the fix."""
    return ("str", (lambda value: not value or check(value)) if optional else check, what)


def _label(text: str) -> tuple[str, str] | None:
    """A node selector's `label=value` as (label, value); None when it isn't one."""
    key, sep, value = text.partition("=")
    ok = sep and names.LABEL_KEY.match(key) and names.LABEL_VALUE.match(value)
    return (key, value) if ok else None


def _toleration(text: str) -> dict[str, str] | None:
    """A toleration's `key[=value][:Effect]` as a pod spec's; None when it isn't one."""
    effects = "|".join(names.TAINT_EFFECTS)
    match = re.fullmatch(rf"([^=:]+)(?:=([^:]*))?(?::({effects}))?", text)
    if not (match and names.LABEL_KEY.match(match[1]) and names.LABEL_VALUE.match(match[2] or "")):
        return None
    key, value, effect = match.groups()
    operator = {"operator": "Exists"} if value is None else {"operator": "Equal", "value": value}
    return {"key": key, **operator, **({"effect": effect} if effect else {})}


SECS = ("int", names.MIN_TIMEOUT_SECS, names.MAX_TIMEOUT_SECS, " seconds")
S, B, Q = ("str",), ("bool",), ("quantity", 0, "")
SELECTOR = ("list", _label, "is not label=value; e.g. nvidia.com/gpu.product=NVIDIA-H200 "
            "(`kubectl get nodes --show-labels` shows your node labels)")
TOLERATIONS = ("list", _toleration, "is not key[=value][:Effect]; e.g. "
               f"nvidia.com/gpu:NoSchedule (effects: {', '.join(names.TAINT_EFFECTS)})")
# A worker image is pinned by tag or digest: no placeholder, no latest.
PINNED = ("str", lambda v: names.IMAGE.match(v) and not names.PLACEHOLDER.search(v),
          "is not a pinned image; write registry/repository:tag with an explicit tag (e.g. "
          "nvcr.io/nim/nvidia/cosmos3:2.1.0) or @sha256:<digest>",
          lambda v: not v.endswith(":latest"), "is not pinned; use an explicit version tag, "
          "not latest")
# Every key of Pulumi.yaml's `config:` but the secrets: its type and bounds.
KEYS: dict[str, tuple] = {
    "routerMode": ("choice", rt.ROUTER_MODES, " (the modes `dynamo.frontend` accepts)"),
    "sessionAffinity": B,
    "sessionAffinityTtlSecs": ("int", rt.AFFINITY_TTL_MIN_SECS, rt.AFFINITY_TTL_MAX_SECS,
                                   " seconds (an idle timeout per session)"),
    "sessionAffinityMode": ("choice", rt.AFFINITY_MODES, ""),
    "routerKvEvents": B,
    "frontendProfiles": ("list", rt.PROFILES.__contains__, "is not a routing profile; list "
                         f"some of {', '.join(rt.PROFILES)} (one frontend each, on the same "
                         "workers)"),
    "namespace": _form(names.DNS_LABEL.match, "is not a valid namespace name; use lowercase "
                       "letters, digits and '-'"),
    "createNamespace": B,
    "imagePullSecrets": ("list", names.DNS_SUBDOMAIN.match, "is not a Secret name; list names "
                         "of existing docker-registry Secrets in the namespace (kubectl create "
                         "secret docker-registry ...)"),
    "cacheStorageClass": S, "cacheSize": Q, "cacheKeepOnDestroy": B,
    "cacheExistingClaim": _form(
        lambda v: names.DNS_SUBDOMAIN.match(v) and not names.PLACEHOLDER.search(v),
        "is not a claim name; give the name of an existing ReadWriteMany "
        "PersistentVolumeClaim in the namespace, or leave it empty", optional=True),
    "nimImage": PINNED, "frontendImage": PINNED, "vllmImage": S,
    "workerRuntimeVersion": _form(names.SEMVER.match, "is not MAJOR.MINOR.PATCH; give the "
                                  "Dynamo version inside the worker image (the operator cannot "
                                  "read it from a NIM or custom tag)"),
    "runtime": ("choice", sv.RUNTIMES, ""), "modelVariant": ("choice", tuple(sv.VARIANTS), ""),
    "precision": ("choice", sv.PRECISIONS, ""),
    "workerReplicas": ("int", 1, sv.MAX_REPLICAS, " workers"),
    # Wide ranges: `serving_problems` names the sizes it accepts.
    "gpusPerWorker": ("int", 1, 64, " GPUs"), "gpusPerNode": ("int", 1, 64, " GPUs"),
    "gpuBudget": ("int", 1, 100_000, " GPUs"), "gpuProduct": S,
    "nimTagsSelector": S,
    "nimModelProfile": _form(re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]*$").match,
                             "is not a NIM profile id; run `list-model-profiles` in the NIM "
                             "image or leave it empty to let the download Job detect the GPU",
                             optional=True),
    # Empty: the variant's own name, which is valid.
    "servedModelName": _form(re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_./:]*$").match,
                             "is not a model id; use the id `/v1/models` lists (e.g. "
                             "nvidia/cosmos3-super-reasoner), or leave it empty", optional=True),
    "gpuNodeSelector": SELECTOR, "gpuTolerations": TOLERATIONS, "workerCpu": Q,
    "workerMemory": ("quantity", 2**30, "; give a memory size such as 96Gi"),
    "workerSharedMemory": ("quantity", 2**30, "; give a size such as 64Gi"),
    "downloadTimeoutSecs": SECS, "downloadRetries": ("int", 0, 10, " retries"),
    "graphTimeoutSecs": SECS,
    "benchmarkSmoke": B, "benchmarkSweep": B, "benchmarkWaitForSweep": B, "benchmarkRunId": S,
    # The workload's own bounds follow (`Workload.problems`), as the pods and the CLI judge.
    "benchmarkConcurrencies": ("levels",), "benchmarkVideos": ("int", 1, 10_000, " videos"),
    "benchmarkQuestionsPerVideo": ("int", 1, 1000, " questions"),
    "benchmarkImage": _form(lambda v: names.IMAGE.match(v) and not v.endswith(":latest"),
                            "is not a pinned image; write registry/repository:tag or "
                            f"@sha256:<digest>, e.g. {DEFAULT_BENCHMARK_IMAGE} (or your "
                            "prebuilt image with the client installed)"),
    # Above 0 (0 would never stop) and at most 50 (wider says nothing).
    "benchmarkStopWithinPct": ("float", 0, 50, " percent (the stop rule's interval)"),
    "benchmarkFull": B,
    "benchmarkSmokeTimeoutSecs": SECS, "benchmarkSweepTimeoutSecs": SECS,
    "benchmarkVideoServerTimeoutSecs": SECS,
    "benchmarkPipIndexUrl": _form(re.compile(r"^https?://[^\s/]+").match, "is not an http(s) "
                                  "URL; give your package mirror's simple index, e.g. "
                                  "https://pypi.example.com/simple", optional=True),
    "benchmarkNodeSelector": SELECTOR, "benchmarkTolerations": TOLERATIONS,
    "skipPreflight": B, "networkPolicies": B,
    "dynamoOperatorNamespace": _form(names.DNS_LABEL.match, "is not a namespace name; give the "
                                     "namespace of the Dynamo operator, or leave it empty",
                                     optional=True),
    "networkPolicySources": ("list", lambda v: names.cidr(v) or names.DNS_LABEL.match(v),
                             "is neither a CIDR (10.0.0.0/8) nor a namespace name; list the "
                             "clients allowed to call the frontend"),
}
# Rows of keys judged only when they count (`_stack_rows`).
VLLM_IMAGE = ("str", lambda v: not names.PLACEHOLDER.search(v), "is a placeholder; runtime "
              "vllm needs a Dynamo vLLM worker image that also has the vllm-cosmos3 plugin "
              "(docs/serving-paths.md): build and push one, then `pulumi config set vllmImage "
              "<registry/repo:tag>`", *PINNED[1:])
STORAGE_CLASS = ("str", lambda v: v and not names.PLACEHOLDER.search(v), "is a placeholder; "
                 "set a ReadWriteMany-capable storage class of your cluster (`kubectl get "
                 "storageclass`), e.g. `pulumi config set cacheStorageClass <name>`, or set "
                 "cacheExistingClaim to adopt an existing claim",
                 names.DNS_SUBDOMAIN.match, "is not a storage class name (lowercase DNS name)")
# `Serving` field -> config key (the names users see in messages).
FIELD_KEYS = {
    "runtime": "runtime", "variant": "modelVariant", "precision": "precision",
    "replicas": "workerReplicas", "gpus_per_replica": "gpusPerWorker",
    "gpus_per_node": "gpusPerNode", "gpu_product": "gpuProduct", "gpu_budget": "gpuBudget",
}
WORKLOAD_KEYS = ("concurrencies", "videos", "questions_per_video", "stop_within_pct", "full")
LEVELS_FIX = ("; set the levels one by one, in order: `pulumi config set --path '<key>[0]' 1`, "
              "then `--path '<key>[1]' 4`, ... (or list them under <key> in Pulumi.<stack>.yaml)")


def quantity_amount(value: str) -> float | None:
    """A resource quantity as a number (bytes for memory), None when it isn't one
    (negative amounts included: no resource takes them)."""
    from kubernetes.utils import parse_quantity  # here: benchmark pods ship this module

    try:
        amount = float(parse_quantity(value))
    except ValueError:
        return None
    return amount if amount >= 0 else None


def cli_value(value: Any) -> str:
    """A config value as the CLI hands it to the program."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def _typed(kind: tuple, value: Any, bad: Callable[[str], None]) -> Any:
    """`value` (the CLI's string or native YAML) as `kind` says; a problem goes to `bad`.
    A "str" or "list" row's (check, what) pairs judge the value, or each item: the first
    check it fails is reported, `what` saying what it is not and the fix."""
    text = cli_value(value).strip()
    if kind[0] == "bool":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        return bad(f"'{value}' is not a boolean; use true or false") or False
    if kind[0] in ("int", "float"):
        low, high, unit = kind[1:]
        whole = kind[0] == "int"
        try:
            number = None if isinstance(value, bool) else (int if whole else float)(text)
        except ValueError:
            number = None
        if number is None or number != number:  # NaN is no number either
            what = "a whole number; use an integer" if whole else "a number; use one in"
            return bad(f"'{value}' is not {what} {low}..{high}") or low
        if not (low <= number if whole else low < number) or number > high:
            bad(f"{number} is out of range; use {low}..{high}{unit}"
                + ("" if whole else f", above {low}"))
        return number
    items: Any = (text,)
    if kind[0] in ("list", "levels"):
        item = int if kind[0] == "levels" else str
        try:
            items = json.loads(value or "[]") if isinstance(value, str) else value
        except json.JSONDecodeError:
            items = None
        if not isinstance(items, list) or not all(
                isinstance(v, item) and not isinstance(v, bool) for v in items):
            return bad(f"'{text}' is not a list of whole numbers{LEVELS_FIX}" if item is int else
                       "must be a list of strings; in Pulumi.<stack>.yaml write a YAML list, or "
                       "run `pulumi config set --path '<key>[0]' <value>`") or ()
        items = tuple(v.strip() if item is str else v for v in items)
        for problem in names.levels_problems(items) if item is int else ():
            bad(problem + LEVELS_FIX)
    elif kind[0] == "choice" and text not in kind[1]:
        bad(f"'{text}' is not one of {', '.join(kind[1])}{kind[2]}")
    elif kind[0] == "quantity":
        amount = quantity_amount(text)
        if amount is None:
            bad(f"'{text}' is not a Kubernetes quantity; write e.g. 16, 96Gi or 300Gi")
        elif amount <= 0 or amount < kind[1]:
            bad(f"'{text}' is too small{kind[2]}")
    rules = list(zip(kind[1::2], kind[2::2], strict=True)) if kind[0] in ("str", "list") else []
    for one in items if rules else ():
        what = next((what for check, what in rules if not check(one)), "")
        if what:
            bad(f"'{one}' {what}")
    return items if kind[0] in ("list", "levels") else text


class ConfigReader:
    """Every key of `KEYS` read and typed at once (`v`); problems are remembered, not
    raised, so all of them are reported together."""

    def __init__(self, raw: Mapping[str, Any], project: str) -> None:
        self.raw, self.project = raw, project
        self.problems: list[str] = []
        self.rejected: set[str] = set()
        self.v: dict[str, Any] = {}
        for key, kind in KEYS.items():
            value = raw.get(self.full(key))
            if value is None:
                self.problem(key, "missing; it is declared with a default in Pulumi.yaml, so "
                                  f"restore that entry or run `pulumi config set {key} <value>`")
            self.v[key] = self.read(key, kind, value)

    def read(self, key: str, kind: tuple, value: Any) -> Any:
        """`value` (None: "") typed as `kind`; judged on `key` unless `key` has a problem
        already (say it is missing): one problem a key."""
        bad = (lambda message: None) if key in self.rejected else (
            lambda message: self.problem(key, message.replace("<key>", key)))
        return _typed(kind, "" if value is None else value, bad)

    def full(self, key: str) -> str:
        """`key` namespaced by project; a rule across keys names them all (`a/b`)."""
        return "/".join(f"{self.project}:{one}" for one in key.split("/"))

    def problem(self, key: str, message: str) -> None:
        self.rejected.add(key)
        self.problems.append(f"{self.full(key)}: {message}")


class SettingsError(names.InputError):
    """Every problem with a stack's config, one line each: key, what is wrong, the fix."""

    def __init__(self, stack: str, problems: list[str]) -> None:
        super().__init__(f"stack '{stack}': {len(problems)} setting(s) need fixing before "
                         "anything is deployed (nothing was created)", problems)


@dataclass(frozen=True)
class BenchmarkSettings:
    """What runs after the graph is Ready; each field is a `benchmark*` key, so a new key is
    one row and one field. No defaults: Pulumi.yaml holds them."""

    smoke: bool
    sweep: bool
    wait_for_sweep: bool
    run_id: str
    image: str
    smoke_timeout_secs: int
    sweep_timeout_secs: int
    video_server_timeout_secs: int
    pip_index_url: str  # the pods' PIP_INDEX_URL, for clusters behind a mirror
    # What the sweep sends: the benchmarkConcurrencies/Videos/QuestionsPerVideo/StopWithinPct/
    # Full keys, the videos' seed from the run id.
    workload: Workload

    # Made once (a field, not a property): what reads a stack never calls back in here.
    any_enabled: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "any_enabled", self.smoke or self.sweep)


@dataclass(frozen=True)
class Settings:
    """Everything one stack deploys (`profile` is the stack name); the names derived from it
    are fields too, so what reads a stack never calls back into this module."""

    stack: str
    profile: str
    # One frontend per profile, all on the same workers (a stack of one profile: its own).
    frontends: tuple[rt.Frontend, ...]
    namespace: str
    create_namespace: bool
    image_pull_secrets: tuple[str, ...]
    # Names only: the secrets travel as Pulumi secrets, never through here. The secret keys
    # this stack's runtime needs (only those become Kubernetes Secrets), each one's
    # (Secret, data key).
    required_secrets: tuple[str, ...]
    secret_refs: Mapping[str, tuple[str, str]]
    # The model cache claim: a set `cache_existing_claim` is adopted (its own storage class,
    # None here) instead of creating one; `cache_claim_name` is the claim either way.
    cache_storage_class: str | None
    cache_size: str
    cache_existing_claim: str
    cache_keep_on_destroy: bool
    cache_claim_name: str
    nim_image: str
    frontend_image: str
    worker_runtime_version: str
    # The workers: what they serve and on which GPUs, the NIM's profile (None: the NIM picks
    # it for the GPUs it sees), the model id they answer to, and their resources.
    serving: sv.Serving
    nim_tags_selector: str
    nim_model_profile: str | None
    served_model: str
    worker_cpu: str
    worker_memory: str
    worker_shared_memory: str
    # Where the GPU pods (workers, a GPU download Job) and the benchmark's may run: a pod
    # spec's `nodeSelector` and `tolerations` (those set).
    placement: Mapping[str, Any]
    benchmark_placement: Mapping[str, Any]
    download_timeout_secs: int
    download_retries: int
    graph_timeout_secs: int
    benchmark: BenchmarkSettings
    # The cluster checks before anything is declared (infra/cluster.py); an empty operator
    # namespace looks for the operator everywhere.
    skip_preflight: bool
    dynamo_operator_namespace: str
    # The stack's NetworkPolicies, and the CIDRs or namespaces that may also call in.
    network_policies: bool
    network_policy_sources: tuple[str, ...]
    # `kubernetes:context` (the provider's setting), and the kubectl prefix with it and the
    # namespace that every command we print starts with.
    kube_context: str | None
    kubectl: str
    graph_name: str
    # The image the workers and the download run: the NIM's, or (runtime vllm) the Dynamo
    # vLLM worker image with the vllm-cosmos3 plugin.
    worker_image: str
    download_job_name: str

    @property
    def routing(self) -> rt.Routing:
        """The first frontend's: the stack's own, or a comparison's baseline."""
        return self.frontends[0].routing


# --- The rules across keys ------------------------------------------------------------------


def _routing(r: ConfigReader, profile: str) -> rt.Routing:
    v = r.v
    mode = v["routerMode"]
    if not v["routerKvEvents"] and mode != "kv":
        r.problem("routerKvEvents", f"only applies to routerMode kv (it is {mode}); remove it "
                                    "with `pulumi config rm routerKvEvents`")
    elif mode == "kv" and v["routerKvEvents"] and v["runtime"] == "nim":
        r.problem("routerKvEvents", "the Cosmos3 NIM workers publish no KV events (its Dynamo "
                                    "settings document none), so a router waiting for them "
                                    "routes without prefix awareness: use the router's own "
                                    "prediction, `pulumi config set routerKvEvents false`")
    # Without affinity the mode routes nothing (no flag): it is left at its default.
    affinity = {"affinity_mode": v["sessionAffinityMode"],
                "affinity_ttl_secs": v["sessionAffinityTtlSecs"]} if v["sessionAffinity"] else {}
    routing = rt.Routing(router_mode=mode, kv_events=v["routerKvEvents"], **affinity)
    expected = rt.PROFILES.get(profile)
    keys = ("routerMode", "sessionAffinity", "sessionAffinityTtlSecs", "sessionAffinityMode")
    if expected is not None and not r.rejected.intersection(keys) and routing != expected:
        r.problem("routerMode/sessionAffinity/sessionAffinityTtlSecs", f"stack '{profile}' is "
                  f"one of the recipe's profiles and must route as it does "
                  f"({_describe(expected)}), but this config routes {_describe(routing)}; "
                  f"restore Pulumi.{profile}.yaml, or use a stack with another name for a "
                  "custom routing profile")
    return routing


def _frontends(r: ConfigReader, profile: str, graph: str) -> tuple[rt.Frontend, ...]:
    """The stack's own routing on the recipe's `Frontend`, or one frontend per entry of
    `frontendProfiles`, named after it: at most one with session affinity, as Dynamo shares
    affinity bindings between the routers of a graph (docs/deploy-reference.md, 'compare')."""
    listed = r.v["frontendProfiles"]
    if not listed:
        return (rt.Frontend(profile, _routing(r, profile), names.FRONTEND_COMPONENT,
                            names.component_name(graph, names.FRONTEND_COMPONENT)),)
    known = [p for p in listed if p in rt.PROFILES]
    components = {**dict.fromkeys(known, False), names.WORKER_COMPONENT: True}
    limit = names.max_graph_len(components)
    for bad, text in (
        (profile in rt.PROFILES, f"stack '{profile}' is one of the recipe's profiles, whose "
         "graph runs that profile alone; compare on a stack of another name (e.g. compare)"),
        (len(set(listed)) != len(listed), f"lists a profile twice ({', '.join(listed)})"),
        (sum(rt.PROFILES[p].affinity for p in known) > 1, "lists more than one profile with "
         "session affinity; Dynamo shares affinity bindings between a graph's routers, so at "
         "most one frontend may run it"),
        (len(graph) > limit, f"graph {graph} with frontends named {', '.join(known)} is "
         f"longer than the {limit} characters the Dynamo operator's derived names allow; use a "
         "shorter stack name"),
    ):
        if bad and "frontendProfiles" not in r.rejected:
            r.problem("frontendProfiles", text)
    return tuple(rt.Frontend(p, rt.PROFILES[p], p, names.component_name(graph, p))
                 for p in known)


def _workload(r: ConfigReader, profiles: int) -> Workload:
    """What the sweep sends, judged as the pods judge it (`Workload.problems`), here before
    anything is created; the videos' seed from the run id, so no run resends another's."""
    v = r.v
    workload = Workload(**{f: v[names.camel(f"benchmark_{f}")] for f in WORKLOAD_KEYS},
                        seed=run_seed(v["benchmarkRunId"]))
    for key, problem in workload.problems(profiles) if v["benchmarkSweep"] else ():
        if (name := names.camel(f"benchmark_{key}")) not in r.rejected:
            r.problem(name, problem)
    return workload


def _describe(routing: rt.Routing) -> str:
    mode = routing.router_mode + ("" if routing.kv_events else " without KV events")
    if not routing.affinity:
        return f"{mode}, no session affinity"
    return f"{mode}, session affinity {routing.affinity_ttl_secs} s {routing.affinity_mode}"


def _stack_rows(r: ConfigReader, profile: str, serving: sv.Serving) -> None:
    """The rows whose bounds depend on the stack, judged like `KEYS`; a key that doesn't count
    here (vllmImage off runtime vllm, the storage class beside an existing claim) has none."""
    v, graph = r.v, names.graph_name(profile)
    limit, label = names.max_namespace_len(graph), names.dynamo_namespace(v["namespace"], graph)
    known = serving.variant in sv.VARIANTS and serving.precision in sv.PRECISIONS
    need = sv.cache_gib_needed(serving) if known else sv.MIN_CACHE_GIB
    longest = max(1, min(names.RUN_ID_MAX_LEN, names.max_run_id_len(profile)))
    rows = {
        "namespace": ("str", lambda n: len(n) <= limit, f"is too long for graph {graph}: the "
                      "Dynamo operator labels the graph's objects "
                      f"{names.DYNAMO_NAMESPACE_LABEL}={label}, {len(label)} characters (a "
                      f"label value holds {names.DNS_LABEL_MAX}); use a namespace of at most "
                      f"{limit} characters, or a shorter stack name"),
        "cacheSize": ("quantity", need * 2**30, " for the model cache of "
                      f"{serving.runtime} {serving.variant} {serving.precision}: use at least "
                      f"{need}Gi"),
        **({} if v["cacheExistingClaim"] else {"cacheStorageClass": STORAGE_CLASS}),
        **({"vllmImage": VLLM_IMAGE} if serving.runtime == "vllm" else {}),
        "benchmarkRunId": ("str", lambda i: names.RUN_ID.match(i) and len(i) <= longest,
                           f"is not a run id for stack '{profile}'; use lowercase letters, "
                           f"digits and '-', at most {longest} characters (it names the Jobs "
                           "and the results folder), e.g. `pulumi config set benchmarkRunId "
                           "run-2`"),
    }
    for key, row in rows.items():
        r.read(key, row, v[key])


def _secrets(r: ConfigReader, runtime: str, secret_keys: frozenset[str] | None
             ) -> tuple[str, ...]:
    """The secret keys `runtime` needs: each must be set, and any stored one be secret."""
    required = (HF_TOKEN,) if runtime == "vllm" else (NGC_API_KEY,)
    # Set once it holds something (Pulumi.yaml defaults it to "").
    stored = [key for key in SECRETS if str(r.raw.get(r.full(key)) or "").strip()]
    for key in (key for key in required if key not in stored):
        r.problem(key, f"missing; {SECRETS[key][2]}")
    for key in stored if secret_keys is not None else ():
        if r.full(key) not in secret_keys:
            r.problem(key, "is stored in plain text; set it again with `pulumi config set "
                           f"--secret {key}`")
    return required


def _placement(v: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """`<prefix>NodeSelector` and `<prefix>Tolerations` (the GPU pods', or the benchmark's)
    as a pod spec's `nodeSelector` and `tolerations`, those set."""
    selector = dict(filter(None, map(_label, v[f"{prefix}NodeSelector"])))
    tolerations = list(filter(None, map(_toleration, v[f"{prefix}Tolerations"])))
    return {key: value for key, value in (("nodeSelector", selector),
                                          ("tolerations", tolerations)) if value}


def serving_problems(serving: sv.Serving, full: Callable[[str], str]) -> list[tuple[str, str]]:
    """(config key, problem and fix) for each topology or GPU the combination cannot run on
    (serving.py's facts; the choices themselves are `KEYS` rows). `full` names a key."""
    problems: list[tuple[str, str]] = []
    gpus, node, budget = serving.gpus_per_replica, serving.gpus_per_node, serving.gpu_budget
    if gpus not in sv.TENSOR_PARALLEL_SIZES:
        sizes = ", ".join(map(str, sv.TENSOR_PARALLEL_SIZES))
        problems.append(("gpusPerWorker", f"must be one of {sizes} (the tensor-parallel size), "
                         f"not {gpus}"))
    elif gpus > node:
        problems.append(("gpusPerWorker", f"{gpus} GPUs per replica is more than the {node} a node "
                         f"offers ({full('gpusPerNode')}); a replica cannot span nodes here: "
                         "lower it, or raise the node size if yours is bigger"))
    elif serving.total_gpus > budget:
        problems.append((
            "workerReplicas", f"{serving.replicas} replicas x {gpus} GPUs "
            f"({full('gpusPerWorker')}) need {serving.total_gpus} GPUs but {full('gpuBudget')} "
            f"allows {budget}: lower the replicas (on one 8-GPU node: 8x1, 4x2, 2x4 or 1x8), "
            f"or raise {full('gpuBudget')} if the cluster has the GPUs"))
    gpu = sv.GPU_CLASSES.get(serving.gpu_product)
    if gpu is None:
        problems.append(("gpuProduct", f"unknown GPU class {serving.gpu_product!r}; known: "
                         f"{', '.join(sv.GPU_CLASSES)} (as the {sv.GPU_PRODUCT_LABEL} node label "
                         "spells them)"))
    known = (serving.runtime in sv.RUNTIMES and serving.variant in sv.VARIANTS
             and serving.precision in sv.PRECISIONS and 1 <= serving.replicas <= sv.MAX_REPLICAS)
    if problems or gpu is None or not known:
        return problems
    if serving.precision == "fp8" and gpu.compute_capability < sv.FP8_MIN_COMPUTE_CAPABILITY:
        problems.append((
            "precision", f"fp8 needs compute capability {sv.FP8_MIN_COMPUTE_CAPABILITY}+ "
            "(documented for Super, kept for Nano as the cautious rule) but "
            f"{gpu.label} has {gpu.compute_capability}: use precision bf16, or a "
            f"Hopper/Blackwell GPU class ({full('gpuProduct')})"))
    need = sv.VARIANTS[serving.variant].weights_gib[serving.precision] / gpus + sv.KV_HEADROOM_GIB
    usable = gpu.memory_gib * sv.GPU_MEMORY_UTILIZATION
    if need > usable:
        problems.append((
            "gpusPerWorker", f"{serving.variant} {serving.precision} needs about {need:.0f} GiB "
            f"per GPU at {gpus} GPU(s) per replica, more than the {usable:.0f} GiB usable on "
            f"{gpu.label} ({full('gpuProduct')}): raise {full('gpusPerWorker')} or use fp8"))
    return problems


def _serving(r: ConfigReader, placement: Mapping[str, Any]) -> sv.Serving:
    """The serving keys, whether the combination can run, and the NIM's own keys: tags that
    agree with the GPUs per worker, none on runtime vllm."""
    v = r.v
    serving = sv.Serving(**{field: v[key] for field, key in FIELD_KEYS.items()})
    gpus = serving.gpus_per_replica
    for key, message in serving_problems(serving, r.full):
        if key not in r.rejected:  # a key rejected already is reported once
            r.problem(key, message)
    selected = placement.get("nodeSelector", {}).get(sv.GPU_PRODUCT_LABEL)
    if selected in sv.GPU_CLASSES and selected != serving.gpu_product:
        r.problem("gpuNodeSelector/gpuProduct", f"the workers select {sv.GPU_PRODUCT_LABEL}="
                  f"{selected} but the serving checks assume {serving.gpu_product}; make them "
                  f"agree (`pulumi config set gpuProduct {selected}`)")
    # Empty: the NIM picks the profile for the GPUs it sees; set: exact manifest tags.
    tags = v["nimTagsSelector"]
    for tag, value in (t.partition("=")[::2] for t in tags.split(",") if tags):
        if tag.strip() in sv.NIM_GPU_TAGS and value.strip() != str(gpus):
            r.problem("nimTagsSelector", f"'{tags}' selects {tag.strip()}={value.strip()} but "
                      f"gpusPerWorker is {gpus}; make them agree, or leave nimTagsSelector "
                      "empty (the NIM then picks the profile for the GPUs each worker gets)")
    for key in ("nimTagsSelector", "nimModelProfile"):
        if serving.runtime == "vllm" and v[key]:
            r.problem(key, "only applies to runtime nim; remove it with `pulumi config rm "
                           f"{key}` (runtime is vllm)")
    return serving


def parse_settings(raw: Mapping[str, Any], stack: str, project: str = PROJECT,
                   secret_keys: frozenset[str] | None = None) -> Settings:
    """Validate a stack's config; raise one `SettingsError` listing every problem.
    `secret_keys`, when known, are the full keys the CLI marked secret: the NGC key and the
    HF token must be among them."""
    r = ConfigReader(raw, project)
    v, profile = r.v, stack.rsplit("/", 1)[-1]
    if not names.DNS_LABEL.match(profile) or len(profile) > MAX_PROFILE_LEN:
        r.problems.append(f"stack name '{stack}': it names the routing profile and the graph "
                          f"({names.graph_name('<stack>')}, from which the Dynamo operator "
                          "derives names that must fit Kubernetes' and Grove's limits); use "
                          f"lowercase letters, digits and '-', at most {MAX_PROFILE_LEN} "
                          "characters (e.g. session-affinity)")
    graph, context = names.graph_name(profile), raw.get("kubernetes:context") or None
    frontends = _frontends(r, profile, graph)
    placement = _placement(v, "gpu")
    serving = _serving(r, placement)
    _stack_rows(r, profile, serving)
    required = _secrets(r, serving.runtime, secret_keys)
    vllm, existing = serving.runtime == "vllm", v["cacheExistingClaim"]
    given = {f.name: v[key] for f in fields(Settings) if (key := names.camel(f.name)) in KEYS}
    settings = Settings(**{
        **given, "cache_storage_class": None if existing else v["cacheStorageClass"],
        "nim_model_profile": v["nimModelProfile"] or None,
    }, stack=stack, profile=profile, frontends=frontends, serving=serving,
        required_secrets=required,
        secret_refs={key: (names.stack_object_name(graph, suffix), data)
                     for key, (suffix, data, _) in SECRETS.items()},
        cache_claim_name=existing or names.MODEL_CACHE_PVC_NAME,
        served_model=v["servedModelName"] or names.served_model_name(serving.variant),
        placement=placement, benchmark_placement=_placement(v, "benchmark"),
        benchmark=BenchmarkSettings(**{f.name: v[names.camel(f"benchmark_{f.name}")]
                                       for f in fields(BenchmarkSettings)
                                       if f.init and f.name != "workload"},
                                    workload=_workload(r, len(frontends))),
        kube_context=context, kubectl=shlex.join(
            ["kubectl", *(["--context", context] if context else []), "-n", v["namespace"]]),
        graph_name=graph, worker_image=v["vllmImage"] if vllm else v["nimImage"],
        download_job_name=names.stack_object_name(graph, "model-download"),
    )
    known = {r.full(key) for key in (*KEYS, *SECRETS)}
    r.problems += [f"{key}: unknown setting; check the spelling against the `config:` block "
                   "of Pulumi.yaml, or remove it with `pulumi config rm`"
                   for key in sorted(raw) if key.startswith(f"{project}:") and key not in known]
    if r.problems:
        raise SettingsError(stack, r.problems)
    return settings


# --- A stack's files, for the tools and tests that read a stack without the Pulumi CLI ---
# The exact mapping the program receives: Pulumi.yaml's `config:` defaults overlaid by
# Pulumi.<stack>.yaml, keys namespaced by project, each value as the CLI hands it (a string;
# lists and maps as JSON); secure values stay ciphertext only the CLI can open.

# Stand-ins for cluster-only settings; never sent anywhere. Secrets are always replaced
# (`SECRETS`), the others only where the stack leaves the placeholder (or nothing).
STAND_INS = {NGC_API_KEY: "stand-in-no-ngc-key", HF_TOKEN: "stand-in-no-hf-token",
             "cacheStorageClass": "stand-in-no-cluster",
             "vllmImage": "stand-in.invalid/no-vllm-image:none"}


def stack_names(root: Path) -> list[str]:
    """The stacks that have a Pulumi.<stack>.yaml under `root`, sorted."""
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def config_from_files(root: Path, stack: str, require_stack_file: bool = True
                      ) -> tuple[str, dict[str, Any]]:
    """(project name, raw config) for `stack` from the files under `root`."""
    project_file, stack_file = root / "Pulumi.yaml", root / f"Pulumi.{stack}.yaml"
    if not project_file.is_file():
        raise SettingsError(stack, [f"no Pulumi.yaml in {root}; run this from the "
                                    "repository root"])
    if require_stack_file and not stack_file.is_file():
        raise SettingsError(stack, [f"no stack '{stack}': {stack_file.name} is missing in "
                                    f"{root} (stacks: {', '.join(stack_names(root)) or 'none'})"])
    project = yaml.safe_load(project_file.read_text())
    name = project["name"]
    raw: dict[str, Any] = {f"{name}:{key}": cli_value(spec["default"])
                           for key, spec in (project.get("config") or {}).items()
                           if isinstance(spec, dict) and "default" in spec}
    values = yaml.safe_load(stack_file.read_text()).get("config") or {} \
        if stack_file.is_file() else {}
    for key, value in values.items():
        secure = isinstance(value, dict) and set(value) == {"secure"}
        raw[key] = value if secure else cli_value(value)
    return name, raw


def stack_settings(stack: str, root: Path = REPO_ROOT) -> Settings:
    """A stack's settings from its files, for the tools that don't deploy: cluster-only
    settings stood in, so only what they use is checked, and no secret is ever read."""
    project, raw = config_from_files(root, stack)
    for key, stand_in in STAND_INS.items():
        value = str(raw.get(f"{project}:{key}") or "")
        if key in SECRETS or not value or names.PLACEHOLDER.search(value):
            raw[f"{project}:{key}"] = stand_in
    return parse_settings(raw, stack, project)
