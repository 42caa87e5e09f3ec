"""The rehearsal's serving layer, for real: NATS, dynamo.mocker, dynamo.frontend on loopback.

Each test starts a small real stack (a few seconds) and checks what the rehearsal relies
on: the routing flags are accepted, every worker is reachable, everything listens on
127.0.0.1 only, and nothing survives a stop, Ctrl-C, SIGTERM or the parent's death.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.evidence import WORKER_ID_REQUEST_FIELDS, worker_id_from_body
from infra.manifests import graph
from infra.names import FRONTEND_COMPONENT, SERVED_MODEL_NAME, SESSION_HEADER, WORKER_COMPONENT
from infra.routing import PROFILES, Routing
from infra.settings import stack_names, stack_settings
from rehearsal.local_dynamo import (
    LOOPBACK,
    LocalDynamoError,
    dynamo_env,
    listeners,
    local_frontend_command,
)
from tests.conftest import REPO_ROOT, at_a_terminal
from tests.support_rehearsal import (
    alive,
    child_env,
    ports_of,
    small_stack,
    still_listening,
    wait_gone,
)

PROFILE_NAMES = sorted(PROFILES)


@pytest.mark.parametrize("profile", [*PROFILE_NAMES, "compare"])
def test_rehearsal_frontend_runs_the_graphs_frontend_arguments(profile: str) -> None:
    """Same flags as the stack's graph renders, frontend by frontend (the compare stack's
    too); only the bind address and port differ."""
    stack = stack_settings(profile)
    components = {c["name"]: c for c in graph(stack)["spec"]["components"]}
    for frontend in stack.frontends:
        container = components[frontend.component]["podTemplate"]["spec"]["containers"][0]
        local = local_frontend_command(sys.executable, frontend.routing, 12345)
        assert local[:3] == [sys.executable, *container["command"][1:]]
        graph_args = list(container["args"])
        local_args = local[3:]
        assert len(local_args) == len(graph_args)
        for i, (ours, theirs) in enumerate(zip(local_args, graph_args, strict=True)):
            if i > 0 and graph_args[i - 1] == "--http-host":
                assert ours == LOOPBACK
            elif i > 0 and graph_args[i - 1] == "--http-port":
                assert ours == "12345"
            else:
                assert ours == theirs
        assert frontend.routing == PROFILES[frontend.profile]
    assert [f.component for f in stack.frontends] == (
        [FRONTEND_COMPONENT] if profile in PROFILES else ["round-robin", "session-affinity"])
    assert stack.serving.replicas == components[WORKER_COMPONENT]["replicas"]


@pytest.mark.parametrize("stack", stack_names(REPO_ROOT))
def test_every_stack_file_can_be_rehearsed_without_its_secrets(stack: str) -> None:
    """The vLLM stacks too: the rehearsal needs no token, no image, no storage class."""
    settings = stack_settings(stack)
    assert settings.serving.replicas >= 1 and settings.routing is not None


def test_dynamo_env_keeps_everything_on_loopback(tmp_path: Path) -> None:
    env = dynamo_env({"PATH": "/bin"}, 4222, tmp_path)
    assert env["NATS_SERVER"] == f"nats://{LOOPBACK}:4222"
    for key in ("DYN_TCP_RPC_HOST", "DYN_TCP_RESPONSE_STREAM_HOST", "DYN_SYSTEM_HOST"):
        assert env[key] == LOOPBACK
    assert env["DYN_SYSTEM_PORT"] == "-1"
    assert env["DYN_DISCOVERY_BACKEND"] == "file" and env["DYN_FILE_KV"] == str(tmp_path)


def _chat(url: str, session: str | None) -> int | None:
    body = {
        "model": SERVED_MODEL_NAME,
        "messages": [{"role": "user", "content": "describe the video ?"}],
        "max_tokens": 2,
        **WORKER_ID_REQUEST_FIELDS,
    }
    headers = {"Content-Type": "application/json"}
    if session is not None:
        headers[SESSION_HEADER] = session
    request = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                     headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return worker_id_from_body(json.loads(response.read()))


def test_stack_starts_routes_as_profiled_and_stops_clean(tmp_path: Path) -> None:
    with small_stack(tmp_path, PROFILES["session-affinity"], workers=3) as stack:
        pids = stack.pids()
        assert len(stack.worker_ids) == 3
        found = listeners(stack.pids())
        assert found and all(lst.address == LOOPBACK for lst in found), found
        assert set(stack.ports.values()) <= {lst.port for lst in found}
        # Affinity: one session stays on one worker; no session spreads round robin.
        assert len({_chat(stack.url, "video-1") for _ in range(6)}) == 1
        assert len({_chat(stack.url, None) for _ in range(6)}) == 3
    assert not wait_gone(pids, timeout=1.0)
    assert not listeners(pids)


def test_frontends_of_one_graph_reach_the_same_workers_each_routing_as_its_profile(
        tmp_path: Path) -> None:
    """The compare stack's premise (Dynamo discovers workers by the graph's namespace, not
    by frontend): two frontends on one set of workers, affinity keeping a session on one,
    round robin spreading the same session over all."""
    routings = {p: PROFILES[p] for p in ("round-robin", "session-affinity")}
    with small_stack(tmp_path, routings, workers=3) as stack:
        pids = stack.pids()
        urls = stack.urls
        assert set(urls) == set(routings) and len(set(urls.values())) == 2
        sticky = {_chat(urls["session-affinity"], "video-1") for _ in range(6)}
        spread = {_chat(urls["round-robin"], "video-1") for _ in range(6)}
        assert len(sticky) == 1 and spread == set(stack.worker_ids)
        assert sticky <= spread
    assert not wait_gone(pids, timeout=1.0)


def test_kv_routing_with_session_affinity_is_accepted_and_keeps_a_session(tmp_path: Path
                                                                          ) -> None:
    """The combination a stack gets with routerMode kv, routerKvEvents false and
    sessionAffinity true: the real frontend takes the flags and binds the session."""
    routing = Routing(router_mode="kv", affinity_ttl_secs=300, kv_events=False)
    with small_stack(tmp_path, routing, workers=3) as stack:
        pids = stack.pids()
        assert len({_chat(stack.url, "video-1") for _ in range(6)}) == 1
    assert not wait_gone(pids, timeout=1.0)


def test_round_robin_profile_ignores_session_header(tmp_path: Path) -> None:
    with small_stack(tmp_path, PROFILES["round-robin"], workers=2) as stack:
        pids = stack.pids()
        assert len({_chat(stack.url, "video-1") for _ in range(4)}) == 2
    assert not wait_gone(pids, timeout=1.0)


def test_start_failure_reports_the_log_and_leaves_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "not-a-model"
    broken.mkdir()
    stack = replace(small_stack(tmp_path, PROFILES["round-robin"], workers=2), model_dir=broken,
                    ready_timeout_secs=30.0)
    with pytest.raises(LocalDynamoError) as failure:
        stack.__enter__()
    assert "log" in str(failure.value)
    pids = {p.pid for p in stack.processes}
    assert pids and not wait_gone(pids, timeout=1.0)


_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from benchmarks.sweep import sigterm_as_interrupt
    from infra.routing import PROFILES, Routing
    from tests.support_rehearsal import small_stack
    with sigterm_as_interrupt():
        with small_stack(Path(sys.argv[1]), PROFILES["round-robin"], 2) as s:
            print(json.dumps(sorted(s.pids())), flush=True)
            time.sleep(300)
    """
)


def _start_child(tmp_path: Path) -> tuple[subprocess.Popen[str], set[int]]:
    """The rehearsal as a user runs it in the foreground (`at_a_terminal`)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
        env=child_env(), start_new_session=True,
        preexec_fn=at_a_terminal,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"child exited with {child.wait(timeout=30)} before the stack was ready"
    pids = set(json.loads(line))
    assert pids and all(alive(p) for p in pids)
    return child, pids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL],
                         ids=["ctrl-c", "sigterm", "sigkill-parent"])
def test_interrupted_rehearsal_leaves_no_process_or_listener(tmp_path: Path, sig: int) -> None:
    child, pids = _start_child(tmp_path)
    ports = ports_of(pids)
    assert ports, "the stack listened on nothing"
    started = time.monotonic()
    child.send_signal(sig)
    child.wait(timeout=60)
    assert not wait_gone(pids, timeout=30.0), "processes survived the rehearsal"
    assert not still_listening(ports)
    assert time.monotonic() - started < 45
