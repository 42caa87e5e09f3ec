"""The settings rules at their boundaries: what counts as a boolean, a whole number in
range, a quantity, a list (`_typed`, one row of `KEYS`), and the rules across keys; each
wrong value is one problem naming the setting and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from infra.names import (
    RUN_ID_MAX_LEN,
    dynamo_namespace,
    graph_name,
    max_namespace_len,
    max_run_id_len,
)
from infra.routing import PROFILES, ROUTER_MODES, Routing
from infra.run import Workload, run_seed
from infra.serving import Serving, cache_gib_needed
from infra.settings import (
    DEFAULT_BENCHMARK_IMAGE,
    KEYS,
    LEVELS_FIX,
    MAX_PROFILE_LEN,
    BenchmarkSettings,
    ConfigReader,
    Settings,
    SettingsError,
    _typed,
    parse_settings,
    quantity_amount,
)
from tests.support_pulumi import stack_config


def typed(kind: tuple, value: Any) -> tuple[Any, list[str]]:
    problems: list[str] = []
    return _typed(kind, value, problems.append), problems


def test_booleans_are_true_or_false_and_nothing_else() -> None:
    for value, expected in ((True, True), (False, False), ("TRUE", True), (" false ", False)):
        assert typed(("bool",), value) == (expected, [])
    assert typed(("bool",), "yes") == (False, ["'yes' is not a boolean; use true or false"])


def test_whole_numbers_in_range_including_both_ends() -> None:
    kind = ("int", 1, 8, " workers")
    for value in (1, 8, "8 "):
        assert typed(kind, value)[1] == [], value
    assert typed(kind, 9) == (9, ["9 is out of range; use 1..8 workers"])
    assert typed(kind, 0) == (0, ["0 is out of range; use 1..8 workers"])
    # A YAML boolean is not a number, though Python's int(True) is 1.
    assert typed(kind, True) == (1, ["'True' is not a whole number; use an integer 1..8"])


def test_quantities_must_be_positive_and_reach_the_minimum() -> None:
    assert quantity_amount("0") == 0.0 and quantity_amount("500m") == 0.5
    assert quantity_amount("-1") is None and quantity_amount("lots") is None
    assert typed(("quantity", 0, ""), "500m") == ("500m", [])
    assert typed(("quantity", 0, " for the cache"), "0") == (
        "0", ["'0' is too small for the cache"])


def test_lists_are_lists_of_strings_and_empty_text_is_an_empty_list() -> None:
    assert typed(("list",), "") == ((), [])
    assert typed(("list",), '[" a ", "b"]') == (("a", "b"), [])
    assert typed(("list",), "[1]") == ((), [
        "must be a list of strings; in Pulumi.<stack>.yaml write a YAML list, or run "
        "`pulumi config set --path '<key>[0]' <value>`"])


def test_every_key_has_a_kind_the_reader_knows() -> None:
    assert {kind[0] for kind in KEYS.values()} == {
        "bool", "int", "float", "str", "list", "levels", "choice", "quantity"}


def test_a_float_is_above_its_floor_and_at_most_its_ceiling() -> None:
    kind = ("float", 0, 50, " percent")
    assert typed(kind, "2.5") == (2.5, [])
    assert typed(kind, 50) == (50.0, [])
    assert typed(kind, "0") == (0.0, ["0.0 is out of range; use 0..50 percent, above 0"])
    assert typed(kind, "inf")[1] == ["inf is out of range; use 0..50 percent, above 0"]
    assert typed(kind, True)[1] == ["'True' is not a number; use one in 0..50"]


P = "cosmos3-routing"


def problems(overrides: dict[str, Any], stack: str = "round-robin", **kw: Any) -> list[str]:
    """The problems `parse_settings` reports for the stack's files plus `overrides`."""
    secret_keys = kw.pop("secret_keys", None)
    try:
        parse_settings(stack_config(stack, overrides, **kw), stack, secret_keys=secret_keys)
    except SettingsError as err:
        return err.problems
    return []


def settings(overrides: dict[str, Any], stack: str = "round-robin") -> Settings:
    return parse_settings(stack_config(stack, overrides), stack)


def test_a_missing_key_is_reported_and_read_as_its_kind_s_floor() -> None:
    r = ConfigReader({}, P)
    assert f"{P}:workerReplicas: missing; it is declared with a default in Pulumi.yaml, so " \
           "restore that entry or run `pulumi config set workerReplicas <value>`" in r.problems
    missing = [p for p in r.problems if "missing; it is declared with a default" in p]
    assert len(missing) == len(KEYS) and r.rejected == set(KEYS)
    assert (r.v["workerReplicas"], r.v["downloadRetries"], r.v["sessionAffinity"]) == (1, 0, False)
    assert (r.v["namespace"], r.v["imagePullSecrets"]) == ("", ())


def test_a_missing_key_is_one_problem_not_also_a_bad_value() -> None:
    r = ConfigReader({}, P)
    assert len(r.problems) == len(KEYS)  # a missing cacheSize is not also "not a quantity"


def test_an_empty_choice_is_refused_on_its_key() -> None:
    assert problems({"routerMode": ""}, "custom") == [
        f"{P}:routerMode: '' is not one of {', '.join(ROUTER_MODES)} (the modes "
        "`dynamo.frontend` accepts)"]


# The cache must hold the model: the serving table's size for a known variant and
# precision, the 100Gi floor for an unknown one (reported on its own key).
def test_the_cache_size_boundary_is_the_model_s_size_in_gib() -> None:
    assert problems({"cacheSize": "100Gi"}) == []
    assert problems({"cacheSize": "102399Mi"}) == [
        f"{P}:cacheSize: '102399Mi' is too small for the model cache of nim super fp8: use at "
        "least 100Gi"]
    need = cache_gib_needed(Serving(variant="super", precision="bf16"))
    assert need > 100
    bf16 = {"precision": "bf16", "gpusPerWorker": 2, "workerReplicas": 4}
    assert problems({**bf16, "cacheSize": f"{need}Gi"}) == []
    assert problems({**bf16, "cacheSize": f"{need - 1}Gi"}) == [
        f"{P}:cacheSize: '{need - 1}Gi' is too small for the model cache of nim super bf16: use "
        f"at least {need}Gi"]


def test_an_unknown_variant_or_precision_needs_the_minimum_cache() -> None:
    for key, value in (("modelVariant", "ultra"), ("precision", "int3")):
        found = problems({key: value, "cacheSize": "100Gi"})
        assert [p for p in found if p.startswith(f"{P}:cacheSize")] == []
        found = problems({key: value, "cacheSize": "99Gi"})
        assert f"{P}:cacheSize: '99Gi' is too small" in " ".join(found)


def test_a_cache_size_that_is_no_quantity_is_reported_once() -> None:
    assert problems({"cacheSize": "lots"}) == [
        f"{P}:cacheSize: 'lots' is not a Kubernetes quantity; write e.g. 16, 96Gi or 300Gi"]


def test_an_existing_claim_is_adopted_and_must_be_a_claim_name() -> None:
    cache = settings({"cacheExistingClaim": "shared-cache"})
    assert (cache.cache_existing_claim, cache.cache_storage_class, cache.cache_claim_name) == (
        "shared-cache", None, "shared-cache")
    for bad in ("Bad_Name", "your-claim"):
        assert problems({"cacheExistingClaim": bad}) == [
            f"{P}:cacheExistingClaim: '{bad}' is not a claim name; give the name of an existing "
            "ReadWriteMany PersistentVolumeClaim in the namespace, or leave it empty"]
    assert problems({"cacheStorageClass": ""}) == [
        f"{P}:cacheStorageClass: '' is a placeholder; set a ReadWriteMany-capable storage "
        "class of your cluster (`kubectl get storageclass`), e.g. `pulumi config set "
        "cacheStorageClass <name>`, or set cacheExistingClaim to adopt an existing claim"]
    assert problems({"cacheStorageClass": "Fast_RWX"}) == [
        f"{P}:cacheStorageClass: 'Fast_RWX' is not a storage class name (lowercase DNS name)"]
    created = settings({})
    assert (created.cache_storage_class, created.cache_existing_claim,
            created.cache_claim_name) == ("rwx-test", "", "shared-model-cache")


def test_the_runtime_s_secret_is_required_and_a_blank_one_is_missing() -> None:
    assert problems({}, ngc_key="  ") == [
        f"{P}:ngcApiKey: missing; run `pulumi config set --secret ngcApiKey` (an NGC API key "
        "with access to the Cosmos3 NIM)"]
    vllm = {"runtime": "vllm", "vllmImage": "reg.example/dynamo-vllm:1.0.0"}
    assert problems(vllm) == [
        f"{P}:hfToken: missing; runtime vllm downloads the gated model from Hugging Face: run "
        "`pulumi config set --secret hfToken` (a token of an account granted access to "
        "nvidia/Cosmos3-Super or -Nano)"]
    ok = settings({**vllm, "hfToken": "hf-test"})
    assert ok.required_secrets == ("hfToken",)
    assert settings({}).required_secrets == ("ngcApiKey",)


def test_either_secret_in_plain_text_is_refused_once_the_secret_keys_are_known() -> None:
    secret = frozenset({f"{P}:ngcApiKey"})
    assert problems({}, secret_keys=secret) == []
    assert problems({"hfToken": "hf-test"}, secret_keys=secret) == [
        f"{P}:hfToken: is stored in plain text; set it again with `pulumi config set --secret "
        "hfToken`"]
    assert problems({"hfToken": "hf-test"}) == []  # unknown which keys are secret: not judged
    assert problems({"hfToken": " "}, secret_keys=secret) == []  # blank: nothing stored


def test_image_pull_secrets_must_name_secrets() -> None:
    assert problems({"imagePullSecrets": ["ok-secret", "Bad Name"]}) == [
        f"{P}:imagePullSecrets: 'Bad Name' is not a Secret name; list names of existing "
        "docker-registry Secrets in the namespace (kubectl create secret docker-registry ...)"]
    assert settings({"imagePullSecrets": ["ok-secret"]}).image_pull_secrets == (
        "ok-secret",)


NOT_PINNED = ("is not a pinned image; write registry/repository:tag with an explicit tag (e.g. "
              "nvcr.io/nim/nvidia/cosmos3:2.1.0) or @sha256:<digest>")


def test_images_must_be_pinned_and_the_vllm_image_only_counts_on_runtime_vllm() -> None:
    assert problems({"nimImage": "<img>"}) == [f"{P}:nimImage: '<img>' {NOT_PINNED}"]
    assert problems({"nimImage": "your-registry/cosmos3:1.0"}) == [
        f"{P}:nimImage: 'your-registry/cosmos3:1.0' {NOT_PINNED}"]
    assert problems({"frontendImage": "nvcr.io/x:latest"}) == [
        f"{P}:frontendImage: 'nvcr.io/x:latest' is not pinned; use an explicit version tag, "
        "not latest"]
    nim = settings({"vllmImage": "<placeholder>"})  # runtime nim
    assert nim.worker_image == nim.nim_image
    vllm = {"runtime": "vllm", "hfToken": "hf-test"}
    assert problems({**vllm, "vllmImage": "<your-image>"}) == [
        f"{P}:vllmImage: '<your-image>' is a placeholder; runtime vllm needs a Dynamo vLLM "
        "worker image that also has the vllm-cosmos3 plugin (docs/serving-paths.md): build and "
        "push one, then `pulumi config set vllmImage <registry/repo:tag>`"]
    assert problems({**vllm, "vllmImage": "reg/x"}) == [f"{P}:vllmImage: 'reg/x' {NOT_PINNED}"]
    assert problems({**vllm, "vllmImage": "reg/x:latest"}) == [
        f"{P}:vllmImage: 'reg/x:latest' is not pinned; use an explicit version tag, not latest"]
    assert settings({**vllm, "vllmImage": "reg/x:1.0"}).worker_image == "reg/x:1.0"
    assert problems({"workerRuntimeVersion": "1.6"}) == [
        f"{P}:workerRuntimeVersion: '1.6' is not MAJOR.MINOR.PATCH; give the Dynamo version "
        "inside the worker image (the operator cannot read it from a NIM or custom tag)"]


def test_tolerations_are_key_optional_value_optional_effect() -> None:
    items = ["a=:NoSchedule", "k=v", "k", "k:NoExecute", "k:PreferNoSchedule"]
    placement = settings({"gpuTolerations": items}).placement
    exists = {"key": "k", "operator": "Exists"}
    assert placement["tolerations"] == [
        {"key": "a", "operator": "Equal", "value": "", "effect": "NoSchedule"},
        {"key": "k", "operator": "Equal", "value": "v"}, exists,
        {**exists, "effect": "NoExecute"}, {**exists, "effect": "PreferNoSchedule"}]
    fix = ("is not key[=value][:Effect]; e.g. nvidia.com/gpu:NoSchedule (effects: NoSchedule, "
           "PreferNoSchedule, NoExecute)")
    for bad in ("=v", "k=v:Bad", "k=v v", "bad key", "k:", "k=v:NoSchedule:x"):
        assert problems({"benchmarkTolerations": [bad]}) == [
            f"{P}:benchmarkTolerations: '{bad}' {fix}"], bad


def test_node_selectors_are_label_equals_value() -> None:
    placement = settings({"benchmarkNodeSelector": ["pool=cpu", "empty="]})
    assert placement.benchmark_placement == {"nodeSelector": {"pool": "cpu", "empty": ""}}
    fix = ("is not label=value; e.g. nvidia.com/gpu.product=NVIDIA-H200 (`kubectl get nodes "
           "--show-labels` shows your node labels)")
    for bad in ("=v", "a=b c", "a", "bad key=v"):
        assert problems({"gpuNodeSelector": [bad]}) == [f"{P}:gpuNodeSelector: '{bad}' {fix}"]


def test_the_selected_gpu_product_must_be_the_one_the_serving_checks_assume() -> None:
    h100 = "NVIDIA-H100-80GB-HBM3"
    assert problems({"gpuNodeSelector": [f"nvidia.com/gpu.product={h100}"]}) == [
        f"{P}:gpuNodeSelector/{P}:gpuProduct: the workers select nvidia.com/gpu.product={h100} "
        f"but the serving checks assume NVIDIA-H200; make them agree (`pulumi config set "
        f"gpuProduct {h100}`)"]
    assert problems({"gpuNodeSelector": ["nvidia.com/gpu.product=NVIDIA-H200"]}) == []
    assert problems({"gpuNodeSelector": ["nvidia.com/gpu.product=Some-Other-GPU"]}) == []


def test_a_rejected_serving_key_is_reported_once() -> None:
    found = problems({"workerReplicas": 0})
    assert [p for p in found if p.startswith(f"{P}:workerReplicas")] == [
        f"{P}:workerReplicas: 0 is out of range; use 1..64 workers"]


def test_nim_tags_must_agree_with_the_gpus_per_worker() -> None:
    assert problems({"nimTagsSelector": "nim_tp=1,n_gpus=1,other=3"}) == []
    tags = " n_gpus = 2 , nim_tp=1"
    assert problems({"nimTagsSelector": tags}) == [
        f"{P}:nimTagsSelector: '{tags.strip()}' selects n_gpus=2 but gpusPerWorker is 1; make "
        "them agree, or leave nimTagsSelector empty (the NIM then picks the profile for the "
        "GPUs each worker gets)"]
    two = {"gpusPerWorker": 2, "workerReplicas": 4}
    assert problems({**two, "nimTagsSelector": "nim_tp=2"}) == []
    assert len(problems({**two, "nimTagsSelector": "nim_tp=1"})) == 1
    workers = settings({**two, "nimTagsSelector": "nim_tp=2"})
    assert (workers.nim_tags_selector, workers.serving.replicas) == ("nim_tp=2", 4)


def test_profile_and_served_model_ids() -> None:
    assert settings({"nimModelProfile": "a1.b-c_d"}).nim_model_profile == "a1.b-c_d"
    assert settings({}).nim_model_profile is None
    assert problems({"nimModelProfile": "-x"}) == [
        f"{P}:nimModelProfile: '-x' is not a NIM profile id; run `list-model-profiles` in the "
        "NIM image or leave it empty to let the download Job detect the GPU"]
    assert settings({"servedModelName": "org/m-1.0:x_y"}).served_model == "org/m-1.0:x_y"
    assert problems({"servedModelName": "-bad"}) == [
        f"{P}:servedModelName: '-bad' is not a model id; use the id `/v1/models` lists (e.g. "
        "nvidia/cosmos3-super-reasoner), or leave it empty"]
    w = settings({"workerCpu": "12", "workerMemory": "90Gi", "workerSharedMemory": "32Gi"})
    assert (w.worker_cpu, w.worker_memory, w.worker_shared_memory) == ("12", "90Gi", "32Gi")


def test_nim_only_keys_are_refused_on_runtime_vllm() -> None:
    vllm = {"runtime": "vllm", "vllmImage": "reg/x:1.0", "hfToken": "hf-test"}
    assert problems({**vllm, "nimTagsSelector": "a=b", "nimModelProfile": "p"}) == [
        f"{P}:{key}: only applies to runtime nim; remove it with `pulumi config rm {key}` "
        "(runtime is vllm)" for key in ("nimTagsSelector", "nimModelProfile")]


def test_run_ids_fit_the_job_names_of_the_stack() -> None:
    long_stack = "x" * MAX_PROFILE_LEN
    longest = max_run_id_len(long_stack)
    assert 1 <= longest < RUN_ID_MAX_LEN
    assert problems({"benchmarkRunId": "r" * longest}, long_stack) == []
    assert problems({"benchmarkRunId": "r" * (longest + 1)}, long_stack) == [
        f"{P}:benchmarkRunId: '{'r' * (longest + 1)}' is not a run id for stack '{long_stack}'; "
        f"use lowercase letters, digits and '-', at most {longest} characters (it names the "
        "Jobs and the results folder), e.g. `pulumi config set benchmarkRunId run-2`"]
    assert problems({"benchmarkRunId": "r" * RUN_ID_MAX_LEN}) == []
    assert len(problems({"benchmarkRunId": "r" * (RUN_ID_MAX_LEN + 1)})) == 1
    assert len(problems({"benchmarkRunId": "Run_2"})) == 1


def test_benchmark_image_and_package_index() -> None:
    assert problems({"benchmarkImage": "x:latest", "benchmarkPipIndexUrl": "ftp://x"}) == [
        f"{P}:benchmarkImage: 'x:latest' is not a pinned image; write registry/repository:tag or "
        f"@sha256:<digest>, e.g. {DEFAULT_BENCHMARK_IMAGE} (or your prebuilt image with the "
        "client installed)",
        f"{P}:benchmarkPipIndexUrl: 'ftp://x' is not an http(s) URL; give your package mirror's "
        "simple index, e.g. https://pypi.example.com/simple"]
    assert len(problems({"benchmarkImage": "reg/x"})) == 1
    for url in ("http://mirror/simple", "https://pypi.example.com/simple", ""):
        assert settings({"benchmarkPipIndexUrl": url}).benchmark.pip_index_url == url


def test_benchmark_levels_and_counts_are_read_as_given() -> None:
    b = settings({"benchmarkConcurrencies": [2, 8], "benchmarkVideos": 8,
                  "benchmarkQuestionsPerVideo": 2,
                  "benchmarkSmoke": True, "benchmarkSweep": True,
                  "benchmarkWaitForSweep": True, "benchmarkSmokeTimeoutSecs": 601,
                  "benchmarkSweepTimeoutSecs": 602, "benchmarkVideoServerTimeoutSecs": 603,
                  "benchmarkRunId": "run-9", "benchmarkImage": "reg/b:1"}).benchmark
    # The videos' seed comes from the run id: each run sends videos no earlier run cached.
    assert b == BenchmarkSettings(
        smoke=True, sweep=True, wait_for_sweep=True, run_id="run-9", image="reg/b:1",
        smoke_timeout_secs=601, sweep_timeout_secs=602, video_server_timeout_secs=603,
        pip_index_url=b.pip_index_url, workload=Workload(
            concurrencies=(2, 8), videos=8, questions_per_video=2, seed=run_seed("run-9"),
            stop_within_pct=b.workload.stop_within_pct, full=b.workload.full))
    # The stop rule: the seed's 3 % and the adaptive sweep by default; a stack may widen
    # or narrow it (a number as the CLI's string or native YAML), or send every video.
    assert (b.workload.stop_within_pct, b.workload.full) == (3.0, False)
    for value in ("5", 5, 0.5, "50"):
        assert settings({"benchmarkStopWithinPct": value}).benchmark.workload.stop_within_pct \
            == float(value)
    assert settings({"benchmarkFull": True}).benchmark.workload.full is True
    assert len(problems({"benchmarkConcurrencies": []})) == 1  # no level: nothing to measure
    levels = "`pulumi config set --path 'benchmarkConcurrencies[0]' 1`"
    assert problems({"benchmarkConcurrencies": "[0]"}) == [
        f"{P}:benchmarkConcurrencies: levels must be >= 1 and at most 1024 (got [0]); set the "
        f"levels one by one, in order: {levels}, then `--path 'benchmarkConcurrencies[1]' 4`, "
        "... (or list them under benchmarkConcurrencies in Pulumi.<stack>.yaml)"]
    assert len(problems({"benchmarkConcurrencies": "x"})) == 1  # not also judged as levels


def test_operator_namespace_and_network_sources() -> None:
    assert problems({"dynamoOperatorNamespace": "Bad_",
                     "networkPolicySources": ["10.0.0.0/8", "team-a", "Bad_"]}) == [
        f"{P}:dynamoOperatorNamespace: 'Bad_' is not a namespace name; give the namespace of "
        "the Dynamo operator, or leave it empty",
        f"{P}:networkPolicySources: 'Bad_' is neither a CIDR (10.0.0.0/8) nor a namespace name; "
        "list the clients allowed to call the frontend"]
    s = settings({"dynamoOperatorNamespace": "dynamo", "skipPreflight": True,
                  "networkPolicies": True, "networkPolicySources": ["team-a"]})
    assert (s.skip_preflight, s.dynamo_operator_namespace) == (True, "dynamo")
    assert (s.network_policies, s.network_policy_sources) == (True, ("team-a",))
    assert settings({}).dynamo_operator_namespace == ""


ROUTES = (f"{P}:routerMode/{P}:sessionAffinity/{P}:sessionAffinityTtlSecs: stack '{{stack}}' is "
          "one of the recipe's profiles and must route as it does ({expected}), but this config "
          "routes {got}; restore Pulumi.{stack}.yaml, or use a stack with another name for a "
          "custom routing profile")


def test_a_recipe_stack_must_route_as_its_profile() -> None:
    assert problems({"routerKvEvents": False}) == [
        f"{P}:routerKvEvents: only applies to routerMode kv (it is round-robin); remove it "
        "with `pulumi config rm routerKvEvents`",
        ROUTES.format(stack="round-robin", expected="round-robin, no session affinity",
                      got="round-robin without KV events, no session affinity")]
    assert problems({"sessionAffinityMode": "soft"}, "session-affinity") == [
        ROUTES.format(stack="session-affinity", expected="round-robin, session affinity 300 s "
                      "hard", got="round-robin, session affinity 300 s soft")]
    # The ttl is read only with affinity on: the round-robin stack may keep another one.
    assert problems({"sessionAffinityTtlSecs": 60}) == []


def test_the_affinity_mode_without_affinity_does_not_change_a_recipe_stack_s_routing() -> None:
    """With sessionAffinity false the mode renders no flag: it routes nothing."""
    assert problems({"sessionAffinityMode": "soft"}) == []


def test_a_rejected_routing_key_is_not_reported_again_as_a_wrong_profile() -> None:
    for key, value, message in (
            ("sessionAffinityMode", "bad", "'bad' is not one of hard, soft"),
            ("sessionAffinity", "maybe", "'maybe' is not a boolean; use true or false"),
            ("routerMode", "fastest", f"'fastest' is not one of {', '.join(ROUTER_MODES)} (the "
             "modes `dynamo.frontend` accepts)")):
        assert problems({key: value}, "session-affinity") == [f"{P}:{key}: {message}"], key
    assert problems({"sessionAffinityTtlSecs": 0}, "session-affinity") == [
        f"{P}:sessionAffinityTtlSecs: 0 is out of range; use 1..31536000 seconds (an idle "
        "timeout per session)"]


def test_a_custom_stack_routes_as_configured() -> None:
    routing = settings({"routerMode": "kv", "routerKvEvents": False, "sessionAffinity": True,
                        "sessionAffinityMode": "soft", "sessionAffinityTtlSecs": 60},
                       "kv-trial").routing
    assert routing == Routing(router_mode="kv", affinity_ttl_secs=60, affinity_mode="soft",
                              kv_events=False)
    assert settings({}, "my-trial").routing.affinity_ttl_secs is None


def test_namespace_names_and_their_length_limit() -> None:
    assert problems({"namespace": "Bad_"}) == [
        f"{P}:namespace: 'Bad_' is not a valid namespace name; use lowercase letters, digits "
        "and '-'"]
    graph = "cosmos3-round-robin"
    limit = max_namespace_len(graph)
    ns = settings({"namespace": "n" * limit, "createNamespace": False})
    assert (ns.namespace, ns.create_namespace) == ("n" * limit, False)
    assert settings({"createNamespace": True}).create_namespace is True
    long = "n" * (limit + 1)
    label = dynamo_namespace(long, graph)
    assert problems({"namespace": long}) == [
        f"{P}:namespace: '{long}' is too long for graph {graph}: the Dynamo operator labels the "
        f"graph's objects nvidia.com/dynamo-namespace={label}, {len(label)} characters (a label "
        f"value holds 63); use a namespace of at most {limit} characters, or a shorter stack "
        "name"]


def test_the_stack_name_is_the_profile_and_bounded_by_the_graph_names() -> None:
    fix = (f"({graph_name('<stack>')}, from which the Dynamo operator derives names that must "
           "fit Kubernetes' and Grove's limits); use lowercase letters, digits and '-', at most "
           f"{MAX_PROFILE_LEN} characters (e.g. session-affinity)")
    longest = "x" * MAX_PROFILE_LEN
    assert problems({}, longest) == []
    assert problems({}, longest + "x") == [
        f"stack name '{longest}x': it names the routing profile and the graph {fix}"]
    raw = stack_config("round-robin")
    s = parse_settings(raw, "org/project/round-robin")
    assert (s.stack, s.profile) == ("org/project/round-robin", "round-robin")
    assert s.routing == PROFILES["round-robin"]
    assert s.kube_context is None
    assert parse_settings({**raw, "kubernetes:context": "gpu-east"}, "round-robin"
                          ).kube_context == "gpu-east"


def test_unknown_keys_of_this_project_are_reported_in_order_and_others_ignored() -> None:
    raw = {**stack_config("round-robin"), f"{P}:zeta": "1", f"{P}:alpha": "1",
           "other:alpha": "1", "kubernetes:context": "c"}
    with pytest.raises(SettingsError) as err:
        parse_settings(raw, "round-robin")
    assert err.value.problems == [
        f"{P}:{key}: unknown setting; check the spelling against the `config:` block of "
        "Pulumi.yaml, or remove it with `pulumi config rm`" for key in ("alpha", "zeta")]
    assert str(err.value).startswith("stack 'round-robin': 2 setting(s) need fixing before "
                                     "anything is deployed (nothing was created)")


def test_kv_events_are_refused_only_for_kv_routing_on_nim_workers() -> None:
    kv = {"routerMode": "kv", "routerKvEvents": True}
    assert problems(kv, "kv-trial") == [
        f"{P}:routerKvEvents: the Cosmos3 NIM workers publish no KV events (its Dynamo settings "
        "document none), so a router waiting for them routes without prefix awareness: use "
        "the router's own prediction, `pulumi config set routerKvEvents false`"]
    vllm = {"runtime": "vllm", "vllmImage": "reg/x:1.0", "hfToken": "hf-test"}
    assert settings({**kv, **vllm}, "kv-trial").routing.kv_events is True


def test_each_secret_is_a_stack_s_own_kubernetes_secret() -> None:
    assert settings({}).secret_refs == {
        "ngcApiKey": ("cosmos3-round-robin-ngc-api-key", "NGC_API_KEY"),
        "hfToken": ("cosmos3-round-robin-hf-token", "HF_TOKEN")}


def test_the_cache_size_and_keep_are_read_as_given_with_or_without_an_existing_claim() -> None:
    for claim in ("", "shared-cache"):
        cache = settings({"cacheSize": "250Gi", "cacheKeepOnDestroy": False,
                          "cacheExistingClaim": claim})
        assert (cache.cache_size, cache.cache_keep_on_destroy) == ("250Gi", False)
        cache = settings({"cacheKeepOnDestroy": True, "cacheExistingClaim": claim})
        assert cache.cache_keep_on_destroy is True


def test_memory_sizes_start_at_one_gib() -> None:
    assert problems({"workerMemory": "1Gi", "workerSharedMemory": "1Gi"}) == []
    assert problems({"workerMemory": "1023Mi", "workerSharedMemory": "1023Mi"}) == [
        f"{P}:workerMemory: '1023Mi' is too small; give a memory size such as 96Gi",
        f"{P}:workerSharedMemory: '1023Mi' is too small; give a size such as 64Gi"]
    assert problems({"workerCpu": "0"}) == [f"{P}:workerCpu: '0' is too small"]
    assert settings({"workerCpu": "100m"}).worker_cpu == "100m"


def test_the_vllm_image_is_not_judged_on_runtime_nim() -> None:
    assert problems({"vllmImage": "reg/x"}) == []


def test_the_images_and_runtime_version_are_read_as_given() -> None:
    s = settings({"frontendImage": "reg/front:1.2", "workerRuntimeVersion": "1.2.3"})
    assert (s.frontend_image, s.worker_runtime_version) == ("reg/front:1.2", "1.2.3")


def test_a_nim_tag_s_value_is_everything_after_its_first_equals_sign() -> None:
    assert len(problems({"nimTagsSelector": "n_gpus=1=1"})) == 1


def test_the_benchmark_stages_can_each_be_turned_off() -> None:
    b = settings({"benchmarkSmoke": False, "benchmarkSweep": False,
                  "benchmarkWaitForSweep": False}).benchmark
    assert (b.smoke, b.sweep, b.wait_for_sweep) == (False, False, False)


def test_ids_may_hold_capitals_and_the_served_model_follows_the_variant() -> None:
    workers = settings({"nimModelProfile": "Abc.1", "servedModelName": "Org/Model"})
    assert (workers.nim_model_profile, workers.served_model) == ("Abc.1", "Org/Model")
    assert settings({"modelVariant": "nano"}).served_model == "nvidia/cosmos3-nano-reasoner"


def test_a_run_id_of_one_character_is_all_an_overlong_stack_leaves() -> None:
    stack = "x" * 60
    found = problems({"benchmarkRunId": "rr"}, stack)
    assert any(p.startswith(f"{P}:benchmarkRunId: 'rr'") and "at most 1 characters" in p
               for p in found)
    assert not any(p.startswith(f"{P}:benchmarkRunId") for p in problems(
        {"benchmarkRunId": "r"}, stack))


def test_the_timeouts_are_read_as_given() -> None:
    t = settings({"downloadTimeoutSecs": 601, "downloadRetries": 3, "graphTimeoutSecs": 602})
    assert (t.download_timeout_secs, t.download_retries, t.graph_timeout_secs) == (601, 3, 602)


def test_a_wrong_list_is_quoted_as_the_user_wrote_it() -> None:
    levels = ("levels",)
    assert typed(levels, [1, "x"]) == ((), [
        "'[1, \"x\"]' is not a list of whole numbers" + LEVELS_FIX])
    assert typed(levels, '["a"]') == ((), ["'[\"a\"]' is not a list of whole numbers" + LEVELS_FIX])
    assert typed(levels, "[1, 4]") == ((1, 4), [])
    # A native YAML list or map where text belongs is read as its JSON, not Python's repr.
    assert typed(("str",), ["a"]) == ('["a"]', [])


def test_a_missing_whole_number_or_boolean_is_one_problem_not_two() -> None:
    r = ConfigReader({}, P)
    for key in ("workerReplicas", "sessionAffinity"):
        assert [p for p in r.problems if p.startswith(f"{P}:{key}:")] == [
            f"{P}:{key}: missing; it is declared with a default in Pulumi.yaml, so restore that "
            f"entry or run `pulumi config set {key} <value>`"]


def test_a_list_s_fix_names_its_key() -> None:
    assert problems({"imagePullSecrets": "[1]"}) == [
        f"{P}:imagePullSecrets: must be a list of strings; in Pulumi.<stack>.yaml write a YAML "
        "list, or run `pulumi config set --path 'imagePullSecrets[0]' <value>`"]


def test_a_key_with_a_problem_is_not_judged_again_by_a_rule_across_keys() -> None:
    """A missing run id is one problem, not also 'not a run id' from the stack's rule."""
    raw = {k: v for k, v in stack_config("round-robin").items() if k != f"{P}:benchmarkRunId"}
    with pytest.raises(SettingsError) as err:
        parse_settings(raw, "round-robin")
    assert err.value.problems == [
        f"{P}:benchmarkRunId: missing; it is declared with a default in Pulumi.yaml, so restore "
        "that entry or run `pulumi config set benchmarkRunId <value>`"]


def test_the_names_and_the_kubectl_prefix_derived_from_a_stack() -> None:
    """What the program, `collect` and every printed command read: the stack's own names,
    the kubectl prefix with its context and namespace, the image the workers run."""
    raw = {**stack_config("session-affinity", {"namespace": "vision"}),
           "kubernetes:context": "h200"}
    s = parse_settings(raw, "session-affinity")
    assert s.kubectl == "kubectl --context h200 -n vision"
    assert (s.graph_name, s.download_job_name, s.frontends[0].service) == (
        "cosmos3-session-affinity", "cosmos3-session-affinity-model-download",
        "cosmos3-session-affinity-frontend")
    assert s.worker_image == s.nim_image
    assert settings({"namespace": "vision"}).kubectl == "kubectl -n vision"
    vllm = settings({"runtime": "vllm", "hfToken": "hf-test",
                     "vllmImage": "reg.example/dynamo-vllm:1.0.0"})
    assert vllm.worker_image == "reg.example/dynamo-vllm:1.0.0" != vllm.nim_image
