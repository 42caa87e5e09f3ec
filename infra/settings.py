"""Stack settings: raw Pulumi config in, typed and validated `Settings` out.

Pure on purpose: `parse_settings` takes exactly what the Pulumi CLI hands the program (the
defaults of `Pulumi.yaml` overlaid by `Pulumi.<stack>.yaml`, keys namespaced by project,
every value a string, lists as JSON) so tests and tools can check a stack without Pulumi.
It reports every problem at once, each naming its config key and the fix, and the program
declares nothing when it fails.

The NGC API key is checked for presence only and never stored here: `__main__` passes it
on as a Pulumi secret Output, so it cannot leak through `Settings` or an error message.

Extending: add a frozen sub-dataclass, a `_read_<section>(r)` function that reads its keys
through `ConfigReader`, a field on `Settings`, and the keys in Pulumi.yaml.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra import names
from infra.benchmark_settings import BenchmarkSettings, read_benchmark_settings
from infra.names import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    IMAGE,
    LABEL_KEY,
    LABEL_VALUE,
    MAX_TIMEOUT_SECS,
    MIN_TIMEOUT_SECS,
    PLACEHOLDER,
    SEMVER,
    TAINT_EFFECTS,
    InputError,
    cidr,
)
from infra.routing import (
    AFFINITY_MODES,
    AFFINITY_TTL_MAX_SECS,
    AFFINITY_TTL_MIN_SECS,
    PROFILES,
    ROUTER_MODES,
    Routing,
)
from infra.serving import (
    GPU_CLASSES,
    GPU_PRODUCT_LABEL,
    HF_SECRET_KEY,
    MAX_REPLICAS,
    MIN_CACHE_GIB,
    NIM_GPU_TAGS,
    PRECISIONS,
    VARIANTS,
    Serving,
    cache_gib_needed,
    serving_problems,
)

PROJECT = "cosmos3-routing"
NGC_API_KEY = "ngcApiKey"
HF_TOKEN = "hfToken"
SECRET_KEYS = (NGC_API_KEY, HF_TOKEN)


# The stack name is in the graph name, from which the operator derives longer ones.
MAX_PROFILE_LEN = (names.max_graph_len(names.GRAPH_COMPONENTS)
                   - len(names.graph_name("")))


def quantity_amount(value: str) -> float | None:
    """A resource quantity as a number (bytes for memory), None when it isn't one
    (negative amounts included: no resource takes them)."""
    from kubernetes.utils import parse_quantity  # here: benchmark pods ship this module

    try:
        amount = float(parse_quantity(value))
    except ValueError:
        return None
    return amount if amount >= 0 else None


class ConfigReader:
    """Reads typed values by short key, remembering problems instead of raising: the one
    reader of a stack's config (serving.py and benchmark_settings.py read through it too)."""

    def __init__(self, raw: Mapping[str, Any], project: str) -> None:
        self.raw = raw
        self.project = project
        self.problems: list[str] = []
        self.read: set[str] = set()

    def full(self, key: str) -> str:
        return f"{self.project}:{key}"

    def problem(self, key: str, message: str) -> None:
        self.problems.append(f"{self.full(key)}: {message}")

    def _value(self, key: str) -> Any:
        self.read.add(key)
        value = self.raw.get(self.full(key))
        if value is None:
            self.problem(
                key,
                "missing; it is declared with a default in Pulumi.yaml, so restore that "
                f"entry or run `pulumi config set {key} <value>`",
            )
        return value

    def string(self, key: str) -> str:
        value = self._value(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            value = json.dumps(value) if isinstance(value, list | dict) else str(value)
        return value.strip()

    def boolean(self, key: str) -> bool:
        value = self._value(key)
        if isinstance(value, bool) or value is None:
            return bool(value)
        text = str(value).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        self.problem(key, f"'{value}' is not a boolean; use true or false")
        return False

    def integer(self, key: str, low: int, high: int, what: str = "") -> int:
        value = self._value(key)
        if value is None:
            return low
        try:
            number = int(str(value).strip()) if not isinstance(value, bool) else None
        except ValueError:
            number = None
        if number is None:
            self.problem(key, f"'{value}' is not a whole number; use an integer {low}..{high}")
            return low
        if not low <= number <= high:
            self.problem(key, f"{number} is out of range; use {low}..{high}{what}")
        return number

    def seconds(self, key: str) -> int:
        """A timeout: every long wait of the stack is bounded the same way."""
        return self.integer(key, MIN_TIMEOUT_SECS, MAX_TIMEOUT_SECS, " seconds")

    def string_list(self, key: str) -> tuple[str, ...]:
        value = self._value(key)
        if value is None:
            return ()
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else []
            except json.JSONDecodeError:
                value = None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem(
                key,
                "must be a list of strings; in Pulumi.<stack>.yaml write a YAML list, or run "
                f"`pulumi config set --path '{key}[0]' <value>`",
            )
            return ()
        return tuple(v.strip() for v in value)

    def choice(self, key: str, allowed: tuple[str, ...], why: str = "") -> str:
        value = self.string(key)
        if value and value not in allowed:
            self.problem(key, f"'{value}' is not one of {', '.join(allowed)}{why}")
        return value

    def quantity(self, key: str, minimum: float = 0.0, what: str = "") -> str:
        value = self.string(key)
        amount = quantity_amount(value)
        if amount is None:
            self.problem(
                key, f"'{value}' is not a Kubernetes quantity; write e.g. 16, 96Gi or 300Gi"
            )
            return value
        if amount <= 0 or amount < minimum:
            self.problem(key, f"'{value}' is too small{what}")
        return value


def kubectl_prefix(namespace: str, context: str | None) -> str:
    """The start of every kubectl command we print: the stack's cluster and namespace."""
    target = ["--context", shlex.quote(context)] if context else []
    return " ".join(["kubectl", *target, "-n", namespace])


class SettingsError(InputError):
    """Every problem with a stack's config, one line each: key, what is wrong, the fix."""

    def __init__(self, stack: str, problems: list[str]) -> None:
        super().__init__(f"stack '{stack}': {len(problems)} setting(s) need fixing before "
                         "anything is deployed (nothing was created)", problems)


@dataclass(frozen=True)
class NamespaceSettings:
    name: str
    create: bool


@dataclass(frozen=True)
class SecretSettings:
    """Names only: the NGC key and HF token travel as Pulumi secrets, never through here.

    `required` are the secret config keys this stack's runtime needs (the NIM: the NGC
    key; upstream vLLM: the Hugging Face token); only those become Kubernetes Secrets.
    """

    ngc_secret_name: str
    ngc_secret_key: str
    image_pull_secrets: tuple[str, ...]
    required: tuple[str, ...] = (NGC_API_KEY,)
    hf_secret_name: str = ""
    hf_secret_key: str = HF_SECRET_KEY


@dataclass(frozen=True)
class CacheSettings:
    """The model cache claim. `existing_claim` set means adopt it instead of creating one."""

    storage_class: str | None
    size: str
    existing_claim: str | None
    keep_on_destroy: bool

    @property
    def claim_name(self) -> str:
        return self.existing_claim or names.MODEL_CACHE_PVC_NAME

    @property
    def create_claim(self) -> bool:
        return self.existing_claim is None


@dataclass(frozen=True)
class ImageSettings:
    nim: str
    frontend: str
    worker_runtime_version: str
    # The Dynamo vLLM worker image with the vllm-cosmos3 plugin (runtime vllm only).
    vllm: str | None = None


@dataclass(frozen=True)
class Toleration:
    key: str
    value: str | None
    effect: str | None

    def manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key}
        if self.value is None:
            out["operator"] = "Exists"
        else:
            out["operator"] = "Equal"
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        return out


@dataclass(frozen=True)
class PlacementSettings:
    """Where pods may run: the GPU pods (workers, a GPU download Job), or the benchmark's."""

    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[Toleration, ...]


@dataclass(frozen=True)
class WorkerSettings:
    """The workers: what they serve and on which GPUs (`serving`), and their resources."""

    serving: Serving
    nim_tags_selector: str
    nim_model_profile: str | None
    served_model: str
    cpu: str
    memory: str
    shared_memory: str

    @property
    def replicas(self) -> int:
        return self.serving.replicas


@dataclass(frozen=True)
class PreflightSettings:
    """The cluster checks before anything is declared (infra/cluster.py)."""

    skip: bool = False
    # Where the Dynamo operator runs; empty: look in every namespace.
    operator_namespace: str = ""


@dataclass(frozen=True)
class NetworkSettings:
    """The stack's NetworkPolicies (infra/network_policies.py) and who else may call in."""

    policies: bool = True
    # CIDRs or namespace names that may reach the frontend's HTTP port and the workers'
    # system port (your clients, your Prometheus).
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class TimeoutSettings:
    download_secs: int
    download_retries: int
    graph_secs: int


@dataclass(frozen=True)
class Settings:
    """Everything one stack deploys, validated. `profile` is the stack name."""

    stack: str
    profile: str
    routing: Routing
    namespace: NamespaceSettings
    secrets: SecretSettings
    cache: CacheSettings
    images: ImageSettings
    placement: PlacementSettings
    workers: WorkerSettings
    timeouts: TimeoutSettings
    benchmark: BenchmarkSettings
    benchmark_placement: PlacementSettings = PlacementSettings((), ())
    preflight: PreflightSettings = PreflightSettings()
    network: NetworkSettings = NetworkSettings()
    # `kubernetes:context` (the provider's setting): the commands we print use it too.
    kube_context: str | None = None

    @property
    def kubectl(self) -> str:
        return kubectl_prefix(self.namespace.name, self.kube_context)

    @property
    def graph_name(self) -> str:
        return names.graph_name(self.profile)

    @property
    def worker_image(self) -> str:
        """The image the workers run: the NIM's, or (runtime vllm) the vLLM worker image."""
        return self.images.vllm or self.images.nim

    @property
    def download_job_name(self) -> str:
        return names.stack_object_name(self.graph_name, "model-download")

    @property
    def frontend_service(self) -> str:
        return names.frontend_service_name(self.graph_name)


# `Serving` field -> config key (the names users see in messages).
FIELD_KEYS = {
    "runtime": "runtime", "variant": "modelVariant", "precision": "precision",
    "replicas": "workerReplicas", "gpus_per_replica": "gpusPerWorker",
    "gpus_per_node": "gpusPerNode", "gpu_product": "gpuProduct", "gpu_budget": "gpuBudget",
}


def read_serving(r: ConfigReader, node_selector: tuple[tuple[str, str], ...]) -> Serving:
    """Read and check the serving keys; `node_selector` is the parsed gpuNodeSelector."""
    serving = Serving(
        runtime=r.string("runtime"),
        variant=r.string("modelVariant"),
        precision=r.string("precision"),
        replicas=r.integer("workerReplicas", 1, MAX_REPLICAS, " workers"),
        # A wide range: `serving_problems` names the tensor-parallel sizes it accepts.
        gpus_per_replica=r.integer("gpusPerWorker", 1, 64, " GPUs"),
        gpus_per_node=r.integer("gpusPerNode", 1, 64, " GPUs"),
        gpu_product=r.string("gpuProduct"),
        gpu_budget=r.integer("gpuBudget", 1, 100_000, " GPUs"),
    )
    keys = {field: r.full(key) for field, key in FIELD_KEYS.items()}
    # A key the reader already rejected (not a number, say) is reported once.
    reported = {p.split(": ", 1)[0] for p in r.problems}
    for key, message in serving_problems(serving, keys):
        if key not in reported:
            r.problems.append(f"{key}: {message}")
    selected = dict(node_selector).get(GPU_PRODUCT_LABEL)
    if selected in GPU_CLASSES and selected != serving.gpu_product:
        r.problems.append(
            f"{r.full('gpuNodeSelector')}/{r.full('gpuProduct')}: the workers select "
            f"{GPU_PRODUCT_LABEL}={selected} but the serving checks assume "
            f"{serving.gpu_product}; make them agree (`pulumi config set gpuProduct "
            f"{selected}`)"
        )
    return serving


def _read_routing(r: ConfigReader, profile: str) -> Routing:
    mode = r.choice("routerMode", ROUTER_MODES, " (the modes `dynamo.frontend` accepts)")
    affinity = r.boolean("sessionAffinity")
    ttl = r.integer(
        "sessionAffinityTtlSecs", AFFINITY_TTL_MIN_SECS, AFFINITY_TTL_MAX_SECS,
        " seconds (an idle timeout per session)",
    )
    affinity_mode = r.choice("sessionAffinityMode", AFFINITY_MODES)
    kv_events = r.boolean("routerKvEvents")
    if not kv_events and mode != "kv":
        r.problem("routerKvEvents", f"only applies to routerMode kv (it is {mode}); remove it "
                                    "with `pulumi config rm routerKvEvents`")
    routing = Routing(router_mode=mode, affinity_ttl_secs=ttl if affinity else None,
                      affinity_mode=affinity_mode, kv_events=kv_events)
    expected = PROFILES.get(profile)
    if expected is not None and not r.problems and routing != expected:
        r.problems.append(
            f"{r.full('routerMode')}/{r.full('sessionAffinity')}/"
            f"{r.full('sessionAffinityTtlSecs')}: stack '{profile}' is one of the recipe's "
            f"profiles and must route as it does ({_describe(expected)}), but this config "
            f"routes {_describe(routing)}; restore Pulumi.{profile}.yaml, or use a stack "
            "with another name for a custom routing profile"
        )
    return routing


def _describe(routing: Routing) -> str:
    mode = routing.router_mode + ("" if routing.kv_events else " without KV events")
    if routing.affinity_ttl_secs is None:
        return f"{mode}, no session affinity"
    return f"{mode}, session affinity {routing.affinity_ttl_secs} s {routing.affinity_mode}"


def _read_namespace(r: ConfigReader, profile: str) -> NamespaceSettings:
    name = r.string("namespace")
    graph = names.graph_name(profile)
    limit = names.max_namespace_len(graph)
    if not DNS_LABEL.match(name):
        r.problem(
            "namespace",
            f"'{name}' is not a valid namespace name; use lowercase letters, digits and '-'",
        )
    elif len(name) > limit:
        label = names.dynamo_namespace(name, graph)
        r.problem(
            "namespace",
            f"'{name}' is too long for graph {graph}: the Dynamo operator labels the graph's "
            f"objects {names.DYNAMO_NAMESPACE_LABEL}={label}, {len(label)} characters "
            f"(a label value holds {names.DNS_LABEL_MAX}); use a namespace of at "
            f"most {limit} characters, or a shorter stack name",
        )
    return NamespaceSettings(name=name, create=r.boolean("createNamespace"))


_SECRET_FIXES = {
    NGC_API_KEY: "run `pulumi config set --secret ngcApiKey` (an NGC API key with access to "
    "the Cosmos3 NIM)",
    HF_TOKEN: "runtime vllm downloads the gated model from Hugging Face: run `pulumi config "
    "set --secret hfToken` (a token of an account granted access to nvidia/Cosmos3-Super "
    "or -Nano)",
}


def _is_set(value: Any) -> bool:
    """A secret key counts as set once it holds something (Pulumi.yaml defaults it to "")."""
    return value is not None and not (isinstance(value, str) and not value.strip())


def _read_secrets(r: ConfigReader, runtime: str, graph: str) -> SecretSettings:
    required = (HF_TOKEN,) if runtime == "vllm" else (NGC_API_KEY,)
    for name in SECRET_KEYS:
        r.read.add(name)
    for name in required:
        if not _is_set(r.raw.get(r.full(name))):
            r.problem(name, f"missing; {_SECRET_FIXES[name]}")
    pulls = r.string_list("imagePullSecrets")
    for name in pulls:
        if not DNS_SUBDOMAIN.match(name):
            r.problem(
                "imagePullSecrets",
                f"'{name}' is not a Secret name; list names of existing docker-registry "
                "Secrets in the namespace (kubectl create secret docker-registry ...)",
            )
    return SecretSettings(
        ngc_secret_name=names.stack_object_name(graph, "ngc-api-key"),
        ngc_secret_key=names.NGC_SECRET_KEY,
        image_pull_secrets=pulls,
        required=required,
        hf_secret_name=names.stack_object_name(graph, "hf-token"),
    )


def _read_cache(r: ConfigReader, serving: Serving) -> CacheSettings:
    existing = r.string("cacheExistingClaim") or None
    storage_class = r.string("cacheStorageClass")
    known = serving.variant in VARIANTS and serving.precision in PRECISIONS
    need = cache_gib_needed(serving) if known else MIN_CACHE_GIB
    size = r.quantity(
        "cacheSize", need * 2**30, f" for the model cache of {serving.runtime} "
        f"{serving.variant} {serving.precision}: use at least {need}Gi",
    )
    keep = r.boolean("cacheKeepOnDestroy")
    if existing is not None:
        if not DNS_SUBDOMAIN.match(existing) or PLACEHOLDER.search(existing):
            r.problem(
                "cacheExistingClaim",
                f"'{existing}' is not a claim name; give the name of an existing "
                "ReadWriteMany PersistentVolumeClaim in the namespace, or leave it empty",
            )
        return CacheSettings(None, size, existing, keep)
    if not storage_class or PLACEHOLDER.search(storage_class):
        r.problem(
            "cacheStorageClass",
            f"'{storage_class}' is a placeholder; set a ReadWriteMany-capable storage class "
            "of your cluster (`kubectl get storageclass`), e.g. `pulumi config set "
            "cacheStorageClass <name>`, or set cacheExistingClaim to adopt an existing claim",
        )
    elif not DNS_SUBDOMAIN.match(storage_class):
        r.problem(
            "cacheStorageClass",
            f"'{storage_class}' is not a storage class name (lowercase DNS name)",
        )
    return CacheSettings(storage_class, size, None, keep)


def _read_images(r: ConfigReader, runtime: str) -> ImageSettings:
    images = {}
    vllm_image = r.string("vllmImage")
    keys = ("nimImage", "frontendImage", *(("vllmImage",) if runtime == "vllm" else ()))
    for key in keys:
        value = vllm_image if key == "vllmImage" else r.string(key)
        if key == "vllmImage" and PLACEHOLDER.search(value):
            r.problem(
                key,
                f"'{value}' is a placeholder; runtime vllm needs a Dynamo vLLM worker image "
                "that also has the vllm-cosmos3 plugin (docs/serving-paths.md): build "
                "and push one, then `pulumi config set vllmImage <registry/repo:tag>`",
            )
            continue
        if not IMAGE.match(value) or PLACEHOLDER.search(value):
            r.problem(
                key,
                f"'{value}' is not a pinned image; write registry/repository:tag with an "
                "explicit tag (e.g. nvcr.io/nim/nvidia/cosmos3:2.1.0) or @sha256:<digest>",
            )
        elif value.endswith(":latest"):
            r.problem(key, f"'{value}' is not pinned; use an explicit version tag, not latest")
        images[key] = value
    version = r.string("workerRuntimeVersion")
    if not SEMVER.match(version):
        r.problem(
            "workerRuntimeVersion",
            f"'{version}' is not MAJOR.MINOR.PATCH; give the Dynamo version inside the worker "
            "image (the operator cannot read it from a NIM or custom tag)",
        )
    return ImageSettings(
        images["nimImage"], images["frontendImage"], version,
        vllm=vllm_image if runtime == "vllm" else None,
    )


def _parse_toleration(text: str) -> Toleration | None:
    match = re.match(r"^([^=:]+)(=([^:]*))?(:(\w+))?$", text)
    if not match or not LABEL_KEY.match(match.group(1)):
        return None
    value, effect = match.group(3), match.group(5)
    if (value is not None and not LABEL_VALUE.match(value)) or (
        effect is not None and effect not in TAINT_EFFECTS
    ):
        return None
    return Toleration(match.group(1), value, effect)


def _read_placement(r: ConfigReader, prefix: str = "gpu") -> PlacementSettings:
    """`<prefix>NodeSelector` and `<prefix>Tolerations`: the GPU pods', or the benchmark's."""
    selector_key, tolerations_key = f"{prefix}NodeSelector", f"{prefix}Tolerations"
    selector: list[tuple[str, str]] = []
    for item in r.string_list(selector_key):
        key, sep, value = item.partition("=")
        if not sep or not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
            r.problem(
                selector_key,
                f"'{item}' is not label=value; e.g. nvidia.com/gpu.product=NVIDIA-H200 "
                "(`kubectl get nodes --show-labels` shows your node labels)",
            )
            continue
        selector.append((key, value))
    tolerations: list[Toleration] = []
    for item in r.string_list(tolerations_key):
        toleration = _parse_toleration(item)
        if toleration is None:
            r.problem(
                tolerations_key,
                f"'{item}' is not key[=value][:Effect]; e.g. nvidia.com/gpu:NoSchedule "
                f"(effects: {', '.join(TAINT_EFFECTS)})",
            )
            continue
        tolerations.append(toleration)
    return PlacementSettings(tuple(selector), tuple(tolerations))


def _read_workers(r: ConfigReader, placement: PlacementSettings) -> WorkerSettings:
    serving = read_serving(r, placement.node_selector)
    gpus = serving.gpus_per_replica
    # Empty: the NIM picks the profile for the GPUs it sees; set: exact manifest tags.
    tags = r.string("nimTagsSelector")
    for tag, value in (t.partition("=")[::2] for t in tags.split(",") if tags):
        if tag.strip() in NIM_GPU_TAGS and value.strip() != str(gpus):
            r.problem(
                "nimTagsSelector",
                f"'{tags}' selects {tag.strip()}={value.strip()} but gpusPerWorker is {gpus}; "
                "make them agree, or leave nimTagsSelector empty (the NIM then picks the "
                "profile for the GPUs each worker gets)",
            )
    profile = r.string("nimModelProfile") or None
    if profile is not None and not re.match(r"^[A-Za-z0-9][-A-Za-z0-9_.]*$", profile):
        r.problem(
            "nimModelProfile",
            f"'{profile}' is not a NIM profile id; run `list-model-profiles` in the NIM image "
            "or leave it empty to let the download Job detect the GPU",
        )
    served = r.string("servedModelName") or names.served_model_name(serving.variant)
    if not re.match(r"^[A-Za-z0-9][-A-Za-z0-9_./:]*$", served):
        r.problem("servedModelName", f"'{served}' is not a model id; use the id `/v1/models` "
                                     "lists (e.g. nvidia/cosmos3-super-reasoner), or leave it "
                                     "empty")
    if serving.runtime == "vllm":
        for key in ("nimTagsSelector", "nimModelProfile"):
            if r.string(key):
                r.problem(key, "only applies to runtime nim; remove it with `pulumi config "
                               f"rm {key}` (runtime is vllm)")
    return WorkerSettings(
        serving=serving,
        nim_tags_selector=tags,
        nim_model_profile=profile,
        served_model=served,
        cpu=r.quantity("workerCpu"),
        memory=r.quantity("workerMemory", 2**30, "; give a memory size such as 96Gi"),
        shared_memory=r.quantity("workerSharedMemory", 2**30, "; give a size such as 64Gi"),
    )


def _read_preflight(r: ConfigReader) -> PreflightSettings:
    where = r.string("dynamoOperatorNamespace")
    if where and not DNS_LABEL.match(where):
        r.problem("dynamoOperatorNamespace", f"'{where}' is not a namespace name; give the "
                                             "namespace of the Dynamo operator, or leave it empty")
    return PreflightSettings(skip=r.boolean("skipPreflight"), operator_namespace=where)


def _read_network(r: ConfigReader) -> NetworkSettings:
    sources = r.string_list("networkPolicySources")
    for source in sources:
        if cidr(source) is None and not DNS_LABEL.match(source):
            r.problem("networkPolicySources", f"'{source}' is neither a CIDR (10.0.0.0/8) "
                      "nor a namespace name; list the clients allowed to call the frontend")
    return NetworkSettings(policies=r.boolean("networkPolicies"), sources=sources)


def _check_profile(r: ConfigReader, stack: str) -> str:
    profile = stack.rsplit("/", 1)[-1]
    if not DNS_LABEL.match(profile) or len(profile) > MAX_PROFILE_LEN:
        r.problems.append(
            f"stack name '{stack}': it names the routing profile and the graph "
            f"({names.graph_name('<stack>')}, from which the Dynamo operator derives "
            "names that must fit Kubernetes' and Grove's limits); use lowercase letters, "
            f"digits and '-', at most {MAX_PROFILE_LEN} characters (e.g. session-affinity)"
        )
    return profile


def parse_settings(
    raw: Mapping[str, Any],
    stack: str,
    project: str = PROJECT,
    secret_keys: frozenset[str] | None = None,
) -> Settings:
    """Validate a stack's config; raise one `SettingsError` listing every problem.

    `raw` maps `<project>:<key>` to the value the CLI gives (strings, lists as JSON);
    native YAML values are accepted too. `secret_keys`, when known, are the full keys the
    CLI marked secret: the NGC key and the HF token must be among them.
    """
    r = ConfigReader(raw, project)
    profile = _check_profile(r, stack)
    routing = _read_routing(r, profile)
    placement = _read_placement(r)
    workers = _read_workers(r, placement)
    runtime = workers.serving.runtime
    settings = Settings(
        stack=stack,
        profile=profile,
        routing=routing,
        namespace=_read_namespace(r, profile),
        secrets=_read_secrets(r, runtime, names.graph_name(profile)),
        cache=_read_cache(r, workers.serving),
        images=_read_images(r, runtime),
        placement=placement,
        workers=workers,
        timeouts=TimeoutSettings(
            download_secs=r.seconds("downloadTimeoutSecs"),
            download_retries=r.integer("downloadRetries", 0, 10, " retries"),
            graph_secs=r.seconds("graphTimeoutSecs")),
        benchmark=read_benchmark_settings(r, profile),
        benchmark_placement=_read_placement(r, "benchmark"),
        preflight=_read_preflight(r),
        network=_read_network(r),
        kube_context=raw.get("kubernetes:context") or None,
    )
    for name in SECRET_KEYS:
        full = r.full(name)
        if secret_keys is not None and _is_set(raw.get(full)) and full not in secret_keys:
            r.problem(
                name,
                f"is stored in plain text; set it again with `pulumi config set --secret "
                f"{name}`",
            )
    if routing.router_mode == "kv" and routing.kv_events and runtime == "nim":
        r.problem("routerKvEvents", "the Cosmos3 NIM workers publish no KV events (its Dynamo "
                                    "settings document none), so a router waiting for them "
                                    "routes without prefix awareness: use the router's own "
                                    "prediction, `pulumi config set routerKvEvents false`")
    prefix = f"{project}:"
    for key in sorted(raw):
        if key.startswith(prefix) and key[len(prefix):] not in r.read:
            r.problems.append(
                f"{key}: unknown setting; check the spelling against the `config:` block of "
                "Pulumi.yaml, or remove it with `pulumi config rm`"
            )
    if r.problems:
        raise SettingsError(stack, r.problems)
    return settings
