"""Least privilege and closed networks: checkov's Kubernetes checks over everything the stacks
make, and the NetworkPolicies evaluated against the pods they must let through or keep out.

The graph's components are scanned as the pods the Dynamo operator makes of them
(tests/support_operator.py); the results reader pod (made by `collect`) is scanned too.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import benchmark_manifests, manifests
from infra.manifests import network_policies
from infra.settings import SettingsError, parse_settings
from tests.conftest import REPO_ROOT, UNMUTATED_ROOT
from tests.support_operator import component_deployments
from tests.support_pulumi import ProgramRun, run_program, stack_config
from tests.support_schemas import validate_k8s

STACKS = ("round-robin", "session-affinity", "kv-routing", "vllm-super-tp4-sa")
CHECKOV = REPO_ROOT / ".venv-scan" / "bin" / "checkov"
MAX_SKIPS = 8


def _config(stack: str, **overrides: Any) -> dict[str, str]:
    raw = stack_config(stack, {"vllmImage": "registry.example.com/team/vllm:1.6.1",
                               **overrides})
    raw["cosmos3-routing:hfToken"] = "hf_test_token_not_real"
    return raw


def _run(stack: str, **overrides: Any) -> ProgramRun:
    config = _config(stack, **overrides)
    secrets = [k for k in config if k.endswith((":ngcApiKey", ":hfToken"))]
    run = run_program(stack, config, secret_keys=secrets)
    assert run.error is None, f"{stack}: {run.error}"
    return run


def _settings(stack: str, **overrides: Any):
    return parse_settings(_config(stack, **overrides), stack)


def rendered(stack: str, **overrides: Any) -> list[dict[str, Any]]:
    """What the stack makes in the cluster, as the program declares it (each manifest as the
    pure builders make it: infra/__main__.py): its objects, the graph as the operator's
    Deployments, the benchmark's objects and the results reader `collect` starts."""
    settings = _settings(stack, **overrides)
    objects, policies = manifests.recipe(
        settings, {key: "not-a-real-token" for key in settings.required_secrets})
    run = benchmark_manifests.run_of(settings, objects["graph"])
    bench = benchmark_manifests.benchmark_objects(
        run, settings.benchmark, benchmark_manifests.shipped_sources(UNMUTATED_ROOT))
    out: list[dict[str, Any]] = []
    for manifest in [*objects.values(), *policies.values(), *bench.values()]:
        out += (component_deployments(manifest) if manifest["kind"] == "DynamoGraphDeployment"
                else [manifest])
    return [*out, benchmark_manifests.results_reader_pod(run, f"reader-{stack}")]


@pytest.fixture(scope="module")
def stacks() -> dict[str, list[dict[str, Any]]]:
    return {stack: rendered(stack) for stack in STACKS}


def _pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    specs = {}
    for obj in objects:
        if obj["kind"] == "Pod":
            specs[obj["metadata"]["name"]] = obj["spec"]
        elif obj["kind"] in ("Deployment", "Job"):
            specs[obj["metadata"]["name"]] = obj["spec"]["template"]["spec"]
    return specs


# ---------------------------------------------------------------------------------------
# checkov


def test_checkov_finds_nothing_beyond_the_justified_skips(
    stacks: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    config = yaml.safe_load((REPO_ROOT / ".checkov.yaml").read_text())
    skips = config["skip-check"]
    assert len(skips) <= MAX_SKIPS
    text = (REPO_ROOT / ".checkov.yaml").read_text().splitlines()
    for check in skips:
        line = text.index(f"  - {check}")
        assert text[line - 1].strip().startswith("#"), f"{check} has no reason beside it"
    if not CHECKOV.exists():
        pytest.skip(f"no {CHECKOV}: run scripts/setup.sh (it installs the pinned checkov)")
    for stack, objects in stacks.items():
        (tmp_path / f"{stack}.yaml").write_text(yaml.safe_dump_all(objects))
    result = subprocess.run(
        [str(CHECKOV), "--directory", str(tmp_path), "--config-file",
         str(REPO_ROOT / ".checkov.yaml"), "--output", "json", "--quiet", "--compact"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    summary = reports[0]["summary"]
    print(f"checkov {summary['checkov_version']}: {summary['passed']} passed, "
          f"{summary['failed']} failed over {summary['resource_count']} resources, "
          f"{len(skips)} checks skipped")
    failed = [(f["check_id"], f["resource"]) for r in reports
              for f in r["results"]["failed_checks"]]
    assert summary["resource_count"] >= 10 * len(STACKS)
    assert not failed, failed


def test_every_pod_but_the_graph_s_runs_without_a_service_account_token(
        stacks: dict[str, list[dict[str, Any]]]) -> None:
    """The skip of CKV_K8S_38 covers the frontend and workers alone (the operator's
    discovery service account); every other pod opts out."""
    for stack, objects in stacks.items():
        for name, spec in _pod_specs(objects).items():
            # The operator's names: `<graph>-frontend`, `<graph>-worker-<hash>`.
            graph_pod = name.startswith(f"cosmos3-{stack}-") and name.removesuffix(
                "-00000000").endswith(("-frontend", "-worker"))
            assert spec.get("automountServiceAccountToken") is (None if graph_pod else False), name
            assert spec["securityContext"]["runAsNonRoot"] is True, name
            assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            for container in spec["containers"] + spec.get("initContainers", []):
                security = container["securityContext"]
                assert security["allowPrivilegeEscalation"] is False, name
                assert security["capabilities"] == {"drop": ["ALL"]}, name
                assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name


def test_every_policy_is_an_ingress_policy_labelled_with_its_stack(
        stacks: dict[str, list[dict[str, Any]]]) -> None:
    for stack, objects in stacks.items():
        for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
            assert policy["spec"]["policyTypes"] == ["Ingress"], policy["metadata"]["name"]
            assert policy["metadata"]["labels"] == manifests.labels(stack)


def test_the_policies_exist_before_any_pod(stacks: dict[str, list[dict[str, Any]]]) -> None:
    run = _run("round-robin")
    policies = next(r for r in run.resources if r.type.endswith(":NetworkPolicies"))
    cache = next(r for r in run.resources if r.type.endswith(":ModelCache"))
    own = {r.urn for r in run.resources if r.parent == policies.urn}
    assert len(own) == 5 and own <= set(cache.dependencies), "the download starts behind them"
    for obj in stacks["round-robin"]:
        if obj["kind"] == "NetworkPolicy":
            validate_k8s(obj)


# ---------------------------------------------------------------------------------------
# The policies, evaluated: which paths they open


@dataclass(frozen=True)
class Pod:
    name: str
    labels: dict[str, str]
    namespace: str = "cosmos3-reasoner"
    namespace_labels: dict[str, str] = field(default_factory=dict)
    ip: str = "10.244.0.10"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        value, op = labels.get(expr["key"]), expr["operator"]
        # The API server refuses any other operator (case counts): the object would not apply.
        assert op in ("In", "NotIn"), f"operator {op!r}: Kubernetes has In and NotIn here"
        if op == "In" and value not in expr["values"]:
            return False
        if op == "NotIn" and value in expr["values"]:
            return False
    return True


def _peer_admits(peer: dict[str, Any], source: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return ipaddress.ip_address(source.ip) in ipaddress.ip_network(peer["ipBlock"]["cidr"])
    if "namespaceSelector" in peer:
        ns_labels = {"kubernetes.io/metadata.name": source.namespace, **source.namespace_labels}
        in_namespace = _selects(peer["namespaceSelector"], ns_labels)
    else:
        in_namespace = source.namespace == policy_namespace
    return in_namespace and _selects(peer.get("podSelector", {}), source.labels)


def allowed(policies: list[dict[str, Any]], source: Pod, target: Pod, port: int) -> bool:
    """Kubernetes' ingress rule: open unless a policy selects the target; then open only
    where one of those policies' rules admits both the source and the port."""
    selecting = [p for p in policies if p["metadata"]["namespace"] == target.namespace
                 and _selects(p["spec"]["podSelector"], target.labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            peers, ports = rule.get("from"), rule.get("ports")
            if peers and not any(_peer_admits(p, source, policy["metadata"]["namespace"])
                                 for p in peers):
                continue
            if ports and not any(p["port"] == port and p["protocol"] == "TCP" for p in ports):
                continue
            return True
    return False


def _pods(objects: list[dict[str, Any]], stack: str) -> dict[str, Pod]:
    """The stack's pods by role, with the labels they run with."""
    pods = {}
    for obj in objects:
        if obj["kind"] == "Pod":
            labels = obj["metadata"]["labels"]
        elif obj["kind"] in ("Deployment", "Job"):
            labels = obj["spec"]["template"]["metadata"]["labels"]
        else:
            continue
        role = (labels.get("nvidia.com/dynamo-component-type")
                or labels.get("app.kubernetes.io/component"))
        pods[role] = Pod(f"{stack}/{role}", labels)
    return pods


def test_the_policies_open_what_the_benchmark_needs_and_close_the_rest(
        stacks: dict[str, list[dict[str, Any]]]) -> None:
    gateway = Pod("gateway", {"app": "gateway"}, namespace="gateway")
    stranger = Pod("stranger", {"app": "x"}, namespace="elsewhere", ip="10.9.0.1")
    scraper = Pod("prometheus", {"app": "prometheus"}, ip="192.168.5.5")
    objects = rendered("session-affinity", networkPolicySources=["gateway", "192.168.0.0/16"])
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    pods = _pods(objects, "session-affinity")
    other = _pods(stacks["round-robin"], "round-robin")
    frontend, worker, videos = pods["frontend"], pods["worker"], pods["benchmark-videos"]
    every_policy = policies + [o for o in stacks["round-robin"] if o["kind"] == "NetworkPolicy"]

    def is_open(source: Pod, target: Pod, port: int) -> bool:
        return allowed(every_policy, source, target, port)

    opened = [
        (pods["benchmark-sweep"], frontend, 8000), (pods["benchmark-smoke"], frontend, 8000),
        (frontend, worker, 9090), (frontend, worker, 34567),  # requests, any port
        (worker, frontend, 45678),  # the response stream the worker opens
        (worker, videos, 8080), (frontend, videos, 8080),
        (gateway, frontend, 8000), (scraper, frontend, 8000), (scraper, worker, 9090),
    ]
    # Were the operator to label the workers by another type (v1beta1's "decode"), the
    # graph's own traffic still flows and strangers stay out.
    decode = Pod("decode-worker", {**worker.labels, "nvidia.com/dynamo-component-type": "decode"})
    # A graph's pods reach each other (the NIM's per-worker frontend may fetch from a peer).
    opened += [(decode, frontend, 45678), (frontend, decode, 34567), (worker, decode, 34567)]
    closed_decode = [(stranger, decode, 9090), (pods["benchmark-sweep"], decode, 34567)]
    for source, target, port in opened:
        assert is_open(source, target, port), f"{source.name} -> {target.name}:{port}"
    closed = [
        (stranger, frontend, 8000), (stranger, worker, 9090), (gateway, worker, 34567),
        (gateway, frontend, 9090), (pods["benchmark-sweep"], worker, 9090),
        (pods["benchmark-smoke"], videos, 8080), (pods["benchmark-sweep"], videos, 8080),
        (videos, worker, 9090),
        (other["benchmark-sweep"], frontend, 8000), (other["worker"], frontend, 45678),
        (other["frontend"], worker, 34567), (frontend, other["worker"], 34567),
        (frontend, pods["model-download"], 8000), (frontend, pods["benchmark-sweep"], 8000),
        (worker, pods["benchmark-smoke"], 8000),
        (frontend, pods["benchmark-results-reader"], 8000),
        # The frontend's port on a worker, a video server's on other pods or stacks.
        (pods["benchmark-sweep"], worker, 8000), (gateway, worker, 8000),
        (worker, pods["benchmark-sweep"], 8080), (worker, other["benchmark-videos"], 8080),
    ]
    for source, target, port in closed + closed_decode:
        assert not is_open(source, target, port), f"{source.name} -> {target.name}:{port}"


def test_every_frontend_of_a_compare_graph_is_covered_by_the_policies() -> None:
    """One frontend per profile, each its own Deployment: the frontend policy selects them
    by their type label, so each takes the sweep and the graph's pods, and no stranger."""
    objects = rendered("compare")
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    pods = _pods(objects, "compare")
    frontends = [Pod(o["metadata"]["name"], o["spec"]["template"]["metadata"]["labels"])
                 for o in objects if o["kind"] == "Deployment"
                 and o["metadata"]["labels"].get(manifests.COMPONENT_TYPE_LABEL) == "frontend"]
    assert len(frontends) == 2
    (selecting,) = (p for p in policies if p["metadata"]["name"].endswith("-frontend"))
    stranger = Pod("stranger", {"app": "x"}, namespace="elsewhere", ip="10.9.0.1")
    for frontend in frontends:
        assert _selects(selecting["spec"]["podSelector"], frontend.labels), frontend.name
        assert allowed(policies, pods["benchmark-sweep"], frontend, 8000), frontend.name
        assert allowed(policies, pods["worker"], frontend, 45678), frontend.name
        assert not allowed(policies, stranger, frontend, 8000), frontend.name


def test_policies_can_be_turned_off_and_bad_sources_are_refused() -> None:
    assert network_policies(_settings("round-robin", networkPolicies=False)) == {}
    with pytest.raises(SettingsError, match="networkPolicySources") as err:
        _settings("round-robin", networkPolicySources=["not a source!"])
    assert "CIDR" in str(err.value)
    run = _run("round-robin", networkPolicies=False)
    assert not [r for r in run.objects() if r.type.endswith(":NetworkPolicy")]


def test_the_download_pod_is_selected_by_its_own_stack_alone() -> None:
    a, b = _settings("round-robin"), _settings("session-affinity")
    assert manifests.download_pod_labels(a) != manifests.download_pod_labels(b)
    selector = network_policies(a)["download"]["spec"]["podSelector"]
    assert _selects(selector, manifests.download_pod_labels(a))
    assert not _selects(selector, manifests.download_pod_labels(b))
