"""One request alone on a served layout: its TTFT recomputed, served by the engine's pool, or served
by one offload tier (the plan's tier table: planning/predict/tier_ttft.py). Pure.

Each is the simulator's own accounting (engine.py), not a formula beside it: a recomputed prompt is
one request on empty caches, in the chunks the step's token budget allows, each step paying its fixed
part; a hit is the same prompt sent again once the first finished (the next round), and served by
the pool alone (the layout without its tiers) or by one tier alone (``Layout.tier_alone``: that tier,
a pool that serves no prefix). A hit recomputes what no cache can give (at least the last token, and
the tail past the last whole block or chunk), and an offload hit pays its path's per-request cost and
its load, overlapped where the connector overlaps it.
"""

from __future__ import annotations

from kvstack.planning.predict.simulator.engine import simulate
from kvstack.planning.predict.simulator.inputs import Layout, SimRequest


def _prompt(layout: Layout, tokens: int, round_: int) -> SimRequest:
    bt = layout.limits.block_tokens
    return SimRequest(0.0, tokens, 1, tuple(range(-(-tokens // bt))), bt, round=round_)


def _ttft(layout: Layout, tokens: int, *, again: bool) -> float | None:
    """The TTFT of a ``tokens``-token prompt (sent a second time with ``again``); None: the engine
    could not hold it."""
    requests = [_prompt(layout, tokens, 0), *([_prompt(layout, tokens, 1)] if again else [])]
    return simulate(requests, layout).requests[-1].ttft_s


def recomputed_ttft(layout: Layout, tokens: int) -> float | None:
    """A ``tokens``-token prompt no cache holds, alone on ``layout``."""
    return _ttft(layout, tokens, again=False)


def pool_hit_ttft(layout: Layout, tokens: int) -> float | None:
    """The same prompt again, the engine's pool holding it (``layout`` without its tiers)."""
    return _ttft(layout.pool_alone(), tokens, again=True)


def tier_hit_ttft(layout: Layout, tier: int, tokens: int) -> float | None:
    """The same prompt again, served by ``layout``'s ``tier``-th offload tier alone."""
    return _ttft(layout.tier_alone(tier), tokens, again=True)
