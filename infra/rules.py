"""The shapes stack settings must have: one place for each rule, read by every check."""

from __future__ import annotations

import ipaddress
import re

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


def cidr(text: str) -> str | None:
    """`text` as a CIDR (a bare address is its /32 or /128), or None when it is not one."""
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        return None
