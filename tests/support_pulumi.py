"""Run the real Pulumi program (`infra/__main__.py`) under the Pulumi SDK's mocks.

Config is loaded the way the CLI does it: the `config:` defaults of Pulumi.yaml overlaid
by `Pulumi.<stack>.yaml`, every key namespaced by the project, every value a string (lists
as JSON). What the program registers (type, name, parent, options, inputs), its stack
outputs and every log line are captured for the tests to inspect.
"""

from __future__ import annotations

import json
import logging
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as pulumi_settings

from infra import benchmark_manifests, cluster, settings
from infra.cluster import LiveObjects
from tests.conftest import REPO_ROOT, UNMUTATED_ROOT

# Distinctive so a leak is unmistakable; never a real key.
TEST_NGC_KEY = "nvapi-TEST-ONLY-3f9c2a7e51d04b8b9c6e"
# How the SDK marks a secret value on the wire (and in mock inputs).
SECRET_SIG = "4dabf18193072939515e22adb298388d"


def project_file() -> dict[str, Any]:
    return yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())


def project_name() -> str:
    return project_file()["name"]


def stack_config(stack: str, overrides: dict[str, Any] | None = None,
                 ngc_key: str | None = TEST_NGC_KEY,
                 storage_class: str | None = "rwx-test") -> dict[str, str]:
    """Pulumi.yaml defaults + Pulumi.<stack>.yaml, plus the settings a user must add.

    `ngc_key` stands for `pulumi config set --secret ngcApiKey`, `storage_class` for the
    cluster-specific storage class; `overrides` use short keys.
    """
    name, raw = settings.config_from_files(REPO_ROOT, stack, require_stack_file=False)
    if ngc_key is not None:
        raw[f"{name}:ngcApiKey"] = ngc_key
    if storage_class is not None:
        raw[f"{name}:cacheStorageClass"] = storage_class
    for key, value in (overrides or {}).items():
        raw[f"{name}:{key}"] = settings.cli_value(value)
    return raw


@dataclass
class Registration:
    """One RegisterResource call as the engine would receive it."""

    type: str
    name: str
    urn: str
    parent: str
    custom: bool
    inputs: dict[str, Any]
    dependencies: list[str]
    retain_on_delete: bool
    protect: bool
    ignore_changes: list[str]
    timeouts: dict[str, str]
    provider: str  # "<provider urn>::<id>", empty for the default provider

    @property
    def is_provider(self) -> bool:
        return self.type.startswith("pulumi:providers:")


@dataclass
class ProgramRun:
    resources: list[Registration] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the lines of `logs` said as warnings
    error: BaseException | None = None

    def objects(self) -> list[Registration]:
        """The Kubernetes objects declared (custom resources other than providers)."""
        return [r for r in self.resources if r.custom and not r.is_provider]

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str) -> Registration:
        found = self.of_type(type_)
        assert len(found) == 1, f"expected one {type_}, got {[r.name for r in found]}"
        return found[0]

    def by_urn(self, urn: str) -> Registration:
        return next(r for r in self.resources if r.urn == urn)


class _Mocks(pulumi.runtime.Mocks):
    """Each resource's state is its inputs, except what `live` says the cluster holds
    (by resource type), as when an earlier `up` made it."""

    def __init__(self, live: dict[str, dict[str, Any]] | None = None) -> None:
        self.live = live or {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        return f"{args.name}-id", {**args.inputs, **self.live.get(args.typ, {})}

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        return {}


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, run: ProgramRun, mocks: _Mocks) -> None:
        super().__init__(mocks)
        self.run = run

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            timeouts = request.customTimeouts
            self.run.resources.append(
                Registration(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent=request.parent,
                    custom=request.custom,
                    inputs=_plain(json.loads(_to_json(request.object))),
                    dependencies=list(request.dependencies),
                    retain_on_delete=request.retainOnDelete,
                    protect=request.protect,
                    ignore_changes=list(request.ignoreChanges),
                    timeouts={"create": timeouts.create, "update": timeouts.update},
                    provider=request.provider,
                )
            )
        return response


def _to_json(struct: Any) -> str:
    from google.protobuf import json_format

    return json_format.MessageToJson(struct)


def _plain(value: Any) -> Any:
    """Protobuf numbers arrive as floats; make whole ones ints again."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class _Capture(logging.Handler):
    def __init__(self, run: ProgramRun) -> None:
        super().__init__(logging.DEBUG)
        self.run = run

    def emit(self, record: logging.LogRecord) -> None:
        self.run.logs.append(record.getMessage())
        if record.levelno >= logging.WARNING:
            self.run.warnings.append(record.getMessage())


# What pulumi-kubernetes replaces a Job for (its forceNew paths of batch/v1 Job, plus name
# and namespace: provider/pkg/provider/diff.go at cafe8c4a); the name is fixed, so the
# replacement deletes the old Job first.
JOB_REPLACE_PATHS = ("metadata.name", "metadata.namespace", "spec.completions",
                     "spec.parallelism", "spec.selector", "spec.template")


def _at(tree: Any, path: str) -> Any:
    for key in path.split("."):
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree


def replaced_for(before: Registration, after: Registration) -> list[str]:
    """The paths for which the provider would replace the Job `before` declared by `after`:
    the engine first resets `after`'s ignore_changes paths to their old values."""
    news = json.loads(json.dumps(after.inputs))
    for path in after.ignore_changes:
        *parents, last = path.split(".")
        old, holder = _at(before.inputs, path), news
        for key in parents:
            holder = holder.setdefault(key, {})
        if old is None:
            holder.pop(last, None)
        else:
            holder[last] = old
    return [p for p in JOB_REPLACE_PATHS if _at(before.inputs, p) != _at(news, p)]


# pulumi-kubernetes (at 94977969, provider/pkg/provider/provider.go): Read answers an object
# the API server no longer has (404) with an empty id, which the engine's refresh takes for
# deleted (pulumi/pulumi at 1b594989, pkg/resource/deploy/step.go, RefreshStep: isDeleted).
def refreshed(state: list[Registration], in_cluster: Any) -> list[Registration]:
    """The state after `pulumi refresh` (or `up --refresh`): what the cluster still has."""
    return [r for r in state if r.is_provider or not r.custom or in_cluster(r)]


# The order of an update's steps (pulumi/pulumi at 1b594989, pkg/resource/deploy/): each
# registration is created, updated or replaced while the program runs (step_generator.go);
# what the program no longer registers, and the old object of a create-before-delete
# replacement, are deleted only after it has finished registering (deployment_executor.go,
# performPostSteps, then GenerateDeletes: "delete ... due to replacement"). pulumi-kubernetes
# deletes first only when the new object keeps the old one's name and namespace (provider.go,
# Diff: deleteBeforeReplace).
def engine_steps(state: list[Registration], run: ProgramRun) -> list[tuple[str, str]]:
    """("create" | "update" | "delete", URN) in the order the engine takes them (Jobs only
    replace; other kinds are updated in place here)."""
    old = {r.urn: r for r in state if r.custom and not r.is_provider}
    steps, last = [], []
    for new in run.objects():
        before = old.pop(new.urn, None)
        if before is None:
            steps.append(("create", new.urn))
        elif new.type != "kubernetes:batch/v1:Job" or not replaced_for(before, new):
            steps.append(("update", new.urn))
        elif all(_at(before.inputs, k) == _at(new.inputs, k)
                 for k in ("metadata.name", "metadata.namespace")):
            steps += [("delete", new.urn), ("create", new.urn)]
        else:
            steps.append(("create", new.urn))
            last.append(("delete", new.urn))
    return steps + last + [("delete", urn) for urn in old]


def run_program(stack: str, config: dict[str, str], secret_keys: list[str] | None = None,
                preview: bool = True, live: dict[str, dict[str, Any]] | None = None,
                cluster_objects: LiveObjects | None = None) -> ProgramRun:
    """Run infra/__main__.py once, as `pulumi preview` (or `up`) would, under mocks.

    `cluster_objects` is what the program finds in the cluster before it declares
    anything (None: no cluster, as in an offline preview); no test reaches a real one."""
    run = ProgramRun()
    logger = logging.getLogger(f"pulumi-program-{stack}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = _Capture(run)
    logger.addHandler(handler)
    if secret_keys is None:
        secret_keys = [k for k in config if k.endswith(":ngcApiKey")]
    pulumi_settings.ROOT.set(None)
    mocks = _Mocks(live)
    pulumi.runtime.set_mocks(
        mocks, project=project_name(), stack=stack, preview=preview, logger=logger,
        monitor=_RecordingMonitor(run, mocks),
    )
    pulumi.runtime.set_all_config(dict(config), list(secret_keys))

    @pulumi.runtime.test
    def program() -> pulumi.Output:
        runpy.run_path(str(REPO_ROOT / "infra"), run_name="__main__")
        exported = pulumi_settings.get_root_resource().outputs
        names = list(exported)
        values = [pulumi.Output.from_input(exported[n]) for n in names]

        def record(resolved: list[Any]) -> None:
            run.outputs.update(dict(zip(names, resolved, strict=True)))

        return pulumi.Output.all(*values).apply(record)

    observe, shipped = cluster.observe, benchmark_manifests.shipped_sources
    cluster.observe = lambda *_, **__: cluster_objects
    if UNMUTATED_ROOT != REPO_ROOT:  # mutation testing: ship the code at its real size
        benchmark_manifests.shipped_sources = lambda _root: shipped(UNMUTATED_ROOT)
    try:
        program()
    except BaseException as err:  # noqa: BLE001 (the test inspects it)
        run.error = err
    finally:
        cluster.observe, benchmark_manifests.shipped_sources = observe, shipped
        logger.removeHandler(handler)
        pulumi.runtime.set_all_config({}, [])
    return run


def repo_path(*parts: str) -> Path:
    return REPO_ROOT.joinpath(*parts)
