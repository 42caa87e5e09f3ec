"""The machine's processes as (pid -> parent, process group), read from /proc.

Why: the rehearsal must account for every process it started, including what those
forked, both to stop them (process groups) and to measure their memory (descendants).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessEntry:
    pid: int
    ppid: int
    pgid: int


def process_table(proc: Path = PROC) -> list[ProcessEntry]:
    entries: list[ProcessEntry] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name: state ppid pgrp ...
        fields = stat[stat.rindex(")") + 2:].split()
        entries.append(ProcessEntry(int(entry.name), int(fields[1]), int(fields[2])))
    return entries
