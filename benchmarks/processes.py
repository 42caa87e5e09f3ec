"""The rehearsal's processes and ports, through psutil (Linux and macOS alike).

Everything the rehearsal starts must listen on 127.0.0.1 only, and other engineers run
servers on the same machine, so ports are picked free (bind port 0), every listener of
the started processes can be listed to prove where it is bound, and the memory of the
whole tree (servers and AIPerf's workers running at once) is sampled.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """True when `host:port` cannot be bound right now (someone listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def accepts_connections(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 15) -> str:
    """The last `lines` non-blank lines of a log: what an error shows of a failed process."""
    try:
        text = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no output)"
    return "\n".join(text[-lines:]) or "(no output)"


@dataclass(frozen=True)
class Listener:
    """One listening TCP socket of a process."""

    pid: int
    address: str
    port: int

    @property
    def loopback_only(self) -> bool:
        return self.address in (LOOPBACK, "::1", "::ffff:127.0.0.1")


def listening_ports() -> set[int]:
    """Every TCP port something listens on here, whoever owns it."""
    return {c.laddr.port for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN}


def listeners(pids: set[int]) -> list[Listener]:
    """Every listening TCP socket owned by one of `pids`."""
    found: list[Listener] = []
    for pid in sorted(pids):
        try:
            connections = psutil.Process(pid).net_connections("tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found += [Listener(pid, c.laddr.ip, c.laddr.port) for c in connections
                  if c.status == psutil.CONN_LISTEN]
    return found


def process_group_members(pgid: int) -> set[int]:
    """Pids whose process group is `pgid` (a started server and anything it forked)."""
    members = set()
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                members.add(pid)
        except OSError:
            continue
    return members


def tree_pids(root: int) -> set[int]:
    """`root` and all its descendants (also those that started their own session)."""
    try:
        process = psutil.Process(root)
        return {root, *(p.pid for p in process.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def tree_resident_bytes(root: int) -> int:
    total = 0
    for pid in tree_pids(root):
        try:
            total += psutil.Process(pid).memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def cpu_times() -> tuple[float, float]:
    """(busy, total) CPU seconds of all CPUs since boot."""
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    total = sum(times)
    return total - idle, total


def available_memory() -> int | None:
    """Memory that can be used without swapping, in bytes."""
    return int(psutil.virtual_memory().available)


class PeakMemory:
    """Context manager: samples the tree's resident memory every `interval` seconds.

    Why sampling: `getrusage` reports the largest single child, but the rehearsal's
    footprint is the sum of several servers and AIPerf's worker processes at once."""

    def __init__(self, root: int | None = None, interval: float = 0.5) -> None:
        self.root = root if root is not None else os.getpid()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)

    def sample(self) -> int:
        current = tree_resident_bytes(self.root)
        self.peak = max(self.peak, current)
        return current

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> PeakMemory:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while inside, so `finally` blocks stop what was started."""
    def _raise(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
