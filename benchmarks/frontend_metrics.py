"""What the Dynamo frontend itself counted during a level: the server's side of the evidence.

The frontend serves Prometheus metrics at `/metrics` on its HTTP port, so the sweep reads
them wherever it reaches the frontend (no other access in the cluster, no worker pod
scraped). The one that shows why a profile wins: the share of prompt tokens the workers
served from their prefix caches (the frontend's `cached_tokens` over its
`input_sequence_tokens`, as the workers report them). Read before and after a level, the
difference is that level's. Names as Dynamo 1.6.1's frontend exports them (seen on the
rehearsal's real frontend). Its per-worker router counters carry the router's own id, not
the workers', so how requests spread over workers comes from the responses instead
(benchmarks/stickiness.py).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

CACHED_TOKENS = "dynamo_frontend_cached_tokens_sum"
INPUT_TOKENS = "dynamo_frontend_input_sequence_tokens_sum"
SCRAPE_TIMEOUT_SECS = 10.0


@dataclass(frozen=True)
class FrontendCounts:
    cached_tokens: float = 0.0
    input_tokens: float = 0.0


def parse(text: str) -> FrontendCounts:
    """The counters we use from a /metrics page (summed over models)."""
    from prometheus_client.parser import text_string_to_metric_families

    cached = total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == CACHED_TOKENS:
                cached += sample.value
            elif sample.name == INPUT_TOKENS:
                total += sample.value
    return FrontendCounts(cached, total)


def scrape(base_url: str) -> FrontendCounts | None:
    """The frontend's counters now; None where it serves no Dynamo metrics."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/metrics",  # noqa: S310
                                    timeout=SCRAPE_TIMEOUT_SECS) as response:
            return parse(response.read().decode())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def prefix_cache_hit_pct(before: FrontendCounts, after: FrontendCounts) -> float | None:
    """The share of a level's prompt tokens served from prefix caches, in percent."""
    prompt = after.input_tokens - before.input_tokens
    return 100.0 * (after.cached_tokens - before.cached_tokens) / prompt if prompt > 0 else None
