"""The frontend's routing flags in one place: the graph and the rehearsal's real frontend run
the same list, so a flag Dynamo rejects shows up locally first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from infra import names

# What `python -m dynamo.frontend --router-mode` accepts (Dynamo 1.6.1).
ROUTER_MODES = ("round-robin", "random", "power-of-two", "kv", "direct", "least-loaded",
                "device-aware-weighted")
AFFINITY_MODES = ("hard", "soft")
AFFINITY_TTL_MIN_SECS = 1
AFFINITY_TTL_MAX_SECS = 31_536_000
FRONTEND_COMMAND = ("python3", "-m", "dynamo.frontend")  # the Frontend container's; then its args


@dataclass(frozen=True)
class Routing:
    """How the frontend picks a worker. `affinity_ttl_secs` None: session affinity off (no
    TTL flag; an `X-Dynamo-Session-ID` header only tags requests)."""

    router_mode: str = "round-robin"
    affinity_ttl_secs: int | None = None
    affinity_mode: str = "hard"
    # KV mode only: False predicts each worker's cache from the router's own decisions
    # (`--no-router-kv-events`) instead of listening to the workers' KV events.
    kv_events: bool = True

    @property
    def affinity(self) -> bool:
        return self.affinity_ttl_secs is not None


class Frontend(NamedTuple):
    """One frontend component of a graph: the profile it routes as, its component's name and
    the Service the operator makes for it (names.component_name)."""

    profile: str
    routing: Routing
    component: str
    service: str


# The profiles we compare, by stack name: the recipe's two, then KV-aware routing. The
# Cosmos3 NIM documents no KV-event setting for its Dynamo worker (its Dynamo settings
# list discovery, request plane and media lookups only), so `kv-routing` uses the
# router's approximate mode, which needs nothing from the workers or the clients.
PROFILES: dict[str, Routing] = {
    "round-robin": Routing(router_mode="round-robin"),
    "session-affinity": Routing(router_mode="round-robin", affinity_ttl_secs=300),
    "kv-routing": Routing(router_mode="kv", kv_events=False),
}


def routing_args(routing: Routing) -> list[str]:
    """The router flags alone (no host or port)."""
    args = ["--router-mode", routing.router_mode]
    if routing.router_mode == "kv" and not routing.kv_events:
        args.append("--no-router-kv-events")
    if routing.affinity:
        args += ["--router-session-affinity-ttl-secs", str(routing.affinity_ttl_secs)]
        # `hard` is Dynamo's default; render it only when it differs, as the recipe does.
        if routing.affinity_mode != "hard":
            args += ["--router-session-affinity-mode", routing.affinity_mode]
    return args


def frontend_args(routing: Routing, host: str = "0.0.0.0",
                  port: int = names.FRONTEND_PORT) -> list[str]:
    """Arguments after `python3 -m dynamo.frontend`; it binds 0.0.0.0, as NVIDIA's manifests
    do (IPv6: docs/deploy-reference.md)."""
    return ["--http-host", host, "--http-port", str(port), *routing_args(routing)]
