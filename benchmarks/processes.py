"""Processes, through psutil (Linux and macOS alike): a failed one's log, a tree's memory,
and SIGTERM treated as Ctrl-C, for the sweep, the rehearsal and perf/.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil


def log_tail(path: Path, lines: int = 15) -> str:
    """The last `lines` non-blank lines of a log: what an error shows of a failed process."""
    try:
        text = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no output)"
    return "\n".join(text[-lines:]) or "(no output)"


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
