"""Peak memory of a process tree: this process and everything it started, sampled.

Why sampling: `getrusage` reports the largest single child, but the rehearsal's footprint
is the sum of several servers and AIPerf's worker processes running at once.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from benchmarks.process_table import process_table

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _children_map(proc: Path) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in process_table(proc):
        children.setdefault(entry.ppid, []).append(entry.pid)
    return children


def tree_pids(root: int, proc: Path = Path("/proc")) -> set[int]:
    """`root` and all its descendants (also those that started their own session)."""
    children = _children_map(proc)
    found, stack = set(), [root]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found


def resident_bytes(pid: int, proc: Path = Path("/proc")) -> int:
    try:
        return int((proc / str(pid) / "statm").read_text().split()[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


def tree_resident_bytes(root: int, proc: Path = Path("/proc")) -> int:
    return sum(resident_bytes(pid, proc) for pid in tree_pids(root, proc))


class PeakMemory:
    """Context manager: samples the tree's resident memory every `interval` seconds."""

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
