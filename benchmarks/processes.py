"""What the sweep and the rehearsal both do with processes: show a failed one's log, and
treat SIGTERM as Ctrl-C (the rehearsal's own process trees live in rehearsal/)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def log_tail(path: Path, lines: int = 15) -> str:
    """The last `lines` non-blank lines of a log: what an error shows of a failed process."""
    try:
        text = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no output)"
    return "\n".join(text[-lines:]) or "(no output)"


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while inside, so `finally` blocks stop what was started."""
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
