"""Which cache served a probe asked again: the counters around its one request.

vLLM reports per request only how many tokens were cached (``usage.prompt_tokens_details``, behind
a flag), never which tier held them, so the tier is read from counter deltas taken just before and
after the request: the engine's own prefix-cache hits and its connector hits, and LMCache's cache
server's L1 (DRAM) and L2 hits and the loads each L2 adapter completed (validation/evidence.py).
The engine's connector hits say whether any of the probe came from an offload tier (``gpu`` when
none did and its own prefix cache covered it); the cache server's say which. Requests in flight move
the same counters; where two tiers both moved enough in that window the answer is ``mixed``, never
a guess.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvstack.clients import metrics as m
from kvstack.clients.metrics import MetricsSnapshot
from kvstack.validation.evidence import connector_hits, prefix_hits


def served_from(
    engine: str,
    before: MetricsSnapshot,
    after: MetricsSnapshot,
    need: float,
    adapters: Mapping[str, str],
    cache_server: bool,
) -> tuple[str, dict[str, float]]:
    """(where the probe was served from, the counter deltas read). ``need``: the hit tokens that
    cover the probe (its full chunks less one); ``adapters``: tier -> the cache server's L2 adapter."""
    local = prefix_hits(engine, before, after).tokens or 0.0
    external = connector_hits(engine, before, after)
    hits: dict[str, float] = {"gpu": local, "offload": external.tokens or 0.0}
    tiers: dict[str, float] = {}
    if cache_server:
        tiers["cpu"] = m.delta(before, after, m.LMCACHE_MP_L1_HIT_TOKENS)
        l2 = m.delta(before, after, m.LMCACHE_MP_L2_HIT_TOKENS)
        loaded = {
            tier: m.delta(before, after, m.LMCACHE_MP_L2_LOADS, l2_name=name)
            for tier, name in adapters.items()
            if tier != "cpu"
        }
        moved = [tier for tier, n in loaded.items() if n > 0]
        if len(moved) == 1:
            tiers[moved[0]] = l2
        elif l2 > 0:
            tiers["l2"] = l2
    else:
        tiers.update(external.by_tier)
    hits.update({k: v for k, v in tiers.items() if k != "gpu"})
    # What the engine took from the connector (its hits, or its per-source counts of them).
    taken = max(external.tokens or 0.0, sum(external.by_tier.values()))
    if taken <= 0:
        # The cache server's lookups count the whole prompt (LMCacheMPConnector looks up every token,
        # lmcache 0.5.6), also the part the engine already held: only the engine says what it loaded.
        return ("gpu" if local >= need else "recompute"), hits
    if local < need and taken < need:
        return "recompute", hits  # neither covered the probe: other requests' hits, or a partial one
    # Some or all of the probe came from the offload tiers: name the one whose counters cover it.
    served = [tier for tier, n in tiers.items() if n >= min(need, taken)]
    if len(served) == 1:
        return ("offload" if served[0] == "l2" else served[0]), hits
    return ("mixed" if served else "offload"), hits
