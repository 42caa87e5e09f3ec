"""Stack settings: the real stack files parse; every bad value fails naming its key."""

from __future__ import annotations

import pytest

from infra import names
from infra.routing import PROFILES, Frontend
from infra.serving import Serving
from infra.settings import HF_TOKEN, KEYS, SECRETS, SettingsError, parse_settings
from tests.support_pulumi import TEST_NGC_KEY, project_file, project_name, stack_config

STACKS = sorted(PROFILES)


@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_file_parses_to_its_recipe_profile(stack: str) -> None:
    settings = parse_settings(stack_config(stack), stack)
    assert settings.profile == stack
    # One frontend, the recipe's `Frontend` component, routing as the profile does.
    assert settings.frontends == (Frontend(stack, PROFILES[stack], names.FRONTEND_COMPONENT,
                                           f"{names.graph_name(stack)}-frontend"),)
    assert settings.graph_name == names.graph_name(stack)
    assert settings.serving == Serving()  # nim, super fp8, 8x1 on H200
    # A first cold start reads 8 x 67 GiB from one share: about 90 minutes (graph 7200 s).
    assert (settings.download_timeout_secs, settings.graph_timeout_secs) == (7200, 7200)
    assert settings.cache_keep_on_destroy and not settings.cache_existing_claim
    assert settings.cache_claim_name == names.MODEL_CACHE_PVC_NAME


def test_settings_hold_no_secret() -> None:
    settings = parse_settings(stack_config("round-robin"), "round-robin")
    assert TEST_NGC_KEY not in repr(settings)


def test_pulumi_yaml_declares_exactly_the_keys_the_program_reads() -> None:
    """Each key has a type, a default and a description: the CLI refuses a stack that
    leaves a key without a default unset, so the secret keys default to empty (the
    program, not the CLI, requires the one its runtime needs)."""
    declared = project_file()["config"]
    name = project_name()
    for key, spec in declared.items():
        assert {"type", "default", "description"} <= set(spec), key
    assert all(declared[key]["default"] == "" for key in SECRETS)
    raw = stack_config("round-robin")
    extra = dict(raw, **{f"{name}:notDeclared": "x"})
    with pytest.raises(SettingsError) as err:
        parse_settings(extra, "round-robin")
    assert err.value.problems == [
        f"{name}:notDeclared: unknown setting; check the spelling against the `config:` "
        "block of Pulumi.yaml, or remove it with `pulumi config rm`"
    ]
    # Every declared key is read: dropping any one of them is reported by name.
    for key in declared:
        partial = {k: v for k, v in raw.items() if k != f"{name}:{key}"}
        if key in ("cacheStorageClass", HF_TOKEN):
            continue  # absent: the placeholder (reported below); not needed by runtime nim
        with pytest.raises(SettingsError, match=f"{name}:{key}"):
            parse_settings(partial, "round-robin")


def test_one_table_types_every_key_pulumi_yaml_declares() -> None:
    """Type and bounds live in `settings.KEYS`, the default in Pulumi.yaml: the two agree."""
    kinds = {"string": ("str", "choice", "quantity", "float"), "boolean": ("bool",),
             "integer": ("int",), "array": ("list", "levels")}
    declared = project_file()["config"]
    assert set(declared) == {*KEYS, *SECRETS}
    for key, kind in KEYS.items():
        assert kind[0] in kinds[declared[key]["type"]], key


def test_native_yaml_values_read_as_the_cli_strings_do() -> None:
    raw = stack_config("round-robin")
    native = dict(raw, **{"cosmos3-routing:benchmarkConcurrencies": [1, 4],
                          "cosmos3-routing:createNamespace": False,
                          "cosmos3-routing:workerReplicas": 8})
    settings = parse_settings(native, "round-robin")
    assert settings.benchmark.workload.concurrencies == (1, 4) and not settings.create_namespace


def test_the_seed_placeholder_storage_class_is_rejected() -> None:
    raw = stack_config("round-robin", storage_class=None)  # Pulumi.yaml's placeholder
    with pytest.raises(SettingsError) as err:
        parse_settings(raw, "round-robin")
    assert len(err.value.problems) == 1
    assert "cacheStorageClass" in err.value.problems[0]
    assert "ReadWriteMany" in err.value.problems[0]


def test_an_existing_claim_needs_no_storage_class() -> None:
    raw = stack_config("round-robin", {"cacheExistingClaim": "my-cache"}, storage_class=None)
    settings = parse_settings(raw, "round-robin")
    assert settings.cache_claim_name == settings.cache_existing_claim == "my-cache"


def test_custom_stack_routes_as_configured() -> None:
    raw = stack_config("kv-trial", {"routerMode": "kv", "routerKvEvents": False,
                                    "sessionAffinity": True, "sessionAffinityMode": "soft"})
    settings = parse_settings(raw, "kv-trial")
    assert settings.routing.router_mode == "kv"
    assert settings.routing.affinity_mode == "soft"
    assert settings.graph_name == names.graph_name("kv-trial")


def test_node_selector_and_tolerations_parse() -> None:
    raw = stack_config("round-robin", {
        "gpuNodeSelector": ["nvidia.com/gpu.product=NVIDIA-H200"],
        "gpuTolerations": ["nvidia.com/gpu:NoSchedule", "dedicated=gpu:NoExecute"],
        "imagePullSecrets": ["registry-pull-secret"],
    })
    settings = parse_settings(raw, "round-robin")
    assert settings.placement["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert settings.placement["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"},
    ]
    assert settings.image_pull_secrets == ("registry-pull-secret",)


# (stack, short key overrides, key the message must name, words the fix must contain)
BAD = [
    ("round-robin", {"routerMode": "fastest"}, "routerMode", "round-robin"),
    ("round-robin", {"sessionAffinity": "maybe"}, "sessionAffinity", "true or false"),
    ("kv-trial", {"sessionAffinity": True, "sessionAffinityTtlSecs": 0},
     "sessionAffinityTtlSecs", "1..31536000"),
    ("kv-trial", {"sessionAffinityTtlSecs": "5m"}, "sessionAffinityTtlSecs", "integer"),
    ("kv-trial", {"sessionAffinityMode": "sticky"}, "sessionAffinityMode", "hard, soft"),
    ("session-affinity", {"sessionAffinity": False}, "sessionAffinity", "Pulumi.session-affinity"),
    ("round-robin", {"sessionAffinity": True}, "sessionAffinityTtlSecs", "another name"),
    ("round-robin", {"namespace": "Cosmos_3"}, "namespace", "lowercase"),
    ("round-robin", {"createNamespace": "yes"}, "createNamespace", "true or false"),
    ("round-robin", {"imagePullSecrets": "registry-pull-secret"}, "imagePullSecrets", "list"),
    ("round-robin", {"imagePullSecrets": ["Bad Name"]}, "imagePullSecrets", "docker-registry"),
    ("round-robin", {"cacheStorageClass": "<your-rwx-storage-class>"}, "cacheStorageClass",
     "ReadWriteMany"),
    ("round-robin", {"cacheStorageClass": "Fast_RWX"}, "cacheStorageClass", "storage class"),
    ("round-robin", {"cacheSize": "50Gi"}, "cacheSize", "100Gi"),
    ("round-robin", {"cacheSize": "lots"}, "cacheSize", "quantity"),
    ("round-robin", {"cacheExistingClaim": "<existing-claim>"}, "cacheExistingClaim",
     "existing"),
    ("round-robin", {"cacheKeepOnDestroy": "sometimes"}, "cacheKeepOnDestroy", "true or false"),
    ("round-robin", {"nimImage": "nvcr.io/nim/nvidia/cosmos3"}, "nimImage", "tag"),
    ("round-robin", {"frontendImage": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest"},
     "frontendImage", "explicit version"),
    ("round-robin", {"workerRuntimeVersion": "v1.6"}, "workerRuntimeVersion", "MAJOR.MINOR"),
    ("round-robin", {"workerReplicas": 0}, "workerReplicas", "1..64"),
    ("round-robin", {"gpusPerWorker": 3}, "gpusPerWorker", "1, 2, 4, 8"),
    ("round-robin",
     {"gpusPerWorker": 2, "workerReplicas": 4, "nimTagsSelector": "n_gpus=1,nim_tp=1"},
     "nimTagsSelector", "gpusPerWorker"),
    ("round-robin", {"modelVariant": "ultra"}, "modelVariant", "super"),
    ("round-robin", {"precision": "int3"}, "precision", "fp8"),
    ("round-robin", {"nimModelProfile": "a b"}, "nimModelProfile", "list-model-profiles"),
    ("round-robin", {"gpuNodeSelector": ["NVIDIA-H200"]}, "gpuNodeSelector", "label=value"),
    ("round-robin", {"gpuTolerations": ["nvidia.com/gpu:Never"]}, "gpuTolerations", "NoSchedule"),
    ("round-robin", {"workerCpu": "sixteen"}, "workerCpu", "quantity"),
    ("round-robin", {"workerMemory": "96"}, "workerMemory", "96Gi"),
    ("round-robin", {"workerSharedMemory": "-1Gi"}, "workerSharedMemory", "quantity"),
    ("round-robin", {"downloadTimeoutSecs": 10}, "downloadTimeoutSecs", "60.."),
    ("round-robin", {"downloadRetries": -1}, "downloadRetries", "0..10"),
    ("round-robin", {"graphTimeoutSecs": "an hour"}, "graphTimeoutSecs", "integer"),
    ("round-robin", {"benchmarkStopWithinPct": "0"}, "benchmarkStopWithinPct", "above 0"),
    ("round-robin", {"benchmarkStopWithinPct": 50.5}, "benchmarkStopWithinPct", "0..50"),
    ("round-robin", {"benchmarkStopWithinPct": "tight"}, "benchmarkStopWithinPct", "a number"),
    ("round-robin", {"benchmarkStopWithinPct": "nan"}, "benchmarkStopWithinPct", "a number"),
    ("round-robin", {"benchmarkFull": "all"}, "benchmarkFull", "true or false"),
]


@pytest.mark.parametrize(("stack", "overrides", "key", "fix"), BAD,
                         ids=[f"{b[2]}-{i}" for i, b in enumerate(BAD)])
def test_bad_setting_is_rejected_naming_the_key_and_fix(
    stack: str, overrides: dict, key: str, fix: str
) -> None:
    with pytest.raises(SettingsError) as err:
        parse_settings(stack_config(stack, overrides), stack)
    message = str(err.value)
    assert f"{project_name()}:{key}" in message
    assert fix in message
    assert "nothing was created" in message
    assert TEST_NGC_KEY not in message


def test_missing_or_plaintext_ngc_key_is_rejected_without_echoing_it() -> None:
    with pytest.raises(SettingsError, match=r"cosmos3-routing:ngcApiKey: missing; run "
                                            r"`pulumi config set --secret ngcApiKey`"):
        parse_settings(stack_config("round-robin", ngc_key=None), "round-robin")
    with pytest.raises(SettingsError, match="plain text") as err:
        parse_settings(stack_config("round-robin"), "round-robin", secret_keys=frozenset())
    assert TEST_NGC_KEY not in str(err.value)


def test_bad_stack_name_is_rejected() -> None:
    with pytest.raises(SettingsError, match="stack name 'Round_Robin'"):
        parse_settings(stack_config("Round_Robin"), "Round_Robin")
    too_long = "x" * 30
    with pytest.raises(SettingsError, match="at most"):
        parse_settings(stack_config(too_long), too_long)


def test_all_problems_are_reported_at_once() -> None:
    raw = stack_config("round-robin", {"routerMode": "fastest", "workerReplicas": -2,
                                       "cacheSize": "1Gi"}, ngc_key=None, storage_class=None)
    with pytest.raises(SettingsError) as err:
        parse_settings(raw, "round-robin")
    named = " ".join(err.value.problems)
    for key in ("routerMode", "workerReplicas", "cacheSize", "ngcApiKey", "cacheStorageClass"):
        assert f"cosmos3-routing:{key}" in named
    assert len(err.value.problems) == 5


def test_images_may_be_pinned_by_digest_but_not_left_unpinned() -> None:
    digest = "nvcr.io/nim/nvidia/cosmos3@sha256:" + "ab12" * 16
    settings = parse_settings(stack_config("round-robin", {"nimImage": digest}), "round-robin")
    assert settings.nim_image == digest
    for unpinned in ("nvcr.io/nim/nvidia/cosmos3", "nvcr.io/nim/nvidia/cosmos3@sha256:short"):
        with pytest.raises(SettingsError, match="cosmos3-routing:nimImage.*not a pinned image"):
            parse_settings(stack_config("round-robin", {"nimImage": unpinned}), "round-robin")


def test_kv_events_are_a_setting_of_kv_routing_only() -> None:
    stack = "kv-trial"
    with_affinity = parse_settings(stack_config("round-robin", {
        "routerMode": "kv", "routerKvEvents": False, "sessionAffinity": True}), stack)
    assert (with_affinity.routing.kv_events, with_affinity.routing.affinity) == (False, True)
    with pytest.raises(SettingsError, match="routerKvEvents: only applies to routerMode kv"):
        parse_settings(stack_config("round-robin", {"routerKvEvents": False}), stack)


def test_kv_routing_on_nim_workers_never_waits_for_kv_events() -> None:
    """The Cosmos3 NIM documents no KV-event publishing for its Dynamo worker: a router that
    listens for events would get none and route without prefix awareness, silently."""
    config = stack_config("round-robin", {"routerMode": "kv"})
    with pytest.raises(SettingsError, match="routerKvEvents: .*pulumi config set routerKvEvents "
                                            "false"):
        parse_settings(config, "kv-trial")
    approximate = stack_config("round-robin", {"routerMode": "kv", "routerKvEvents": False})
    assert not parse_settings(approximate, "kv-trial").routing.kv_events
