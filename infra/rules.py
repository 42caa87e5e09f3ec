"""The rules input must follow, one place for each, read by every check (the stack's
settings, the sweep's and the rehearsal's options), and the one error type for bad input.
Standard library only: the benchmark pods import it."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

# The seed's placeholder shape (`<your-rwx-storage-class>`); Pulumi.yaml ships it as the
# default so a stack that forgot its storage class fails here, not in the cluster.
PLACEHOLDER = re.compile(r"[<>]|^your-|^changeme$|^todo$", re.IGNORECASE)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
# Pinned: an explicit tag, a digest, or both (`repo:tag@sha256:...`).
IMAGE = re.compile(r"^[a-z0-9]([-a-z0-9._/:]*[a-z0-9])?"
                   r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})$")
SEMVER = re.compile(r"^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# A run id names Jobs, labels and folders: a DNS label (the stack may shorten it further).
RUN_ID = DNS_LABEL
RUN_ID_MAX_LEN = 30
# Every wait a stack sets (download, graph, smoke test, sweep...): a minute to a week.
MIN_TIMEOUT_SECS = 60
MAX_TIMEOUT_SECS = 7 * 24 * 3600
MAX_CONCURRENCY = 1024


def levels_problems(levels: Sequence[int]) -> list[str]:
    """What is wrong with a sweep's concurrency levels (the stack's, the sweep's and the
    rehearsal's alike): at least one, each 1..MAX_CONCURRENCY, none twice."""
    problems = [] if levels else ["needs at least one level"]
    if any(not 1 <= c <= MAX_CONCURRENCY for c in levels):
        problems.append(f"levels must be >= 1 and at most {MAX_CONCURRENCY} (got {list(levels)})")
    if len(set(levels)) != len(levels):
        problems.append(f"levels repeat (got {list(levels)})")
    return problems


class InputError(ValueError):
    """Bad input, found before anything started: every problem, one line each, naming the
    setting and the fix. The one error type of every check (stack, sweep, rehearsal)."""

    def __init__(self, heading: str, problems: list[str]) -> None:
        self.heading, self.problems = heading, problems
        super().__init__(f"{heading}:\n" + "\n".join(f"  - {p}" for p in problems))


def cidr(text: str) -> str | None:
    """`text` as a CIDR (a bare address is its /32 or /128), or None when it is not one."""
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        return None
