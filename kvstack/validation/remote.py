"""Is the remote tier's store there? The evidence a failing ``tier:remote`` step needs.

When Redis goes away the engine keeps serving (LMCache logs the failure and recomputes), so the
tier step sees only "no hits"; pinging the store names the cause.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kvstack.errors import KvstackError

PING_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class StoreState:
    evidence: str
    problem: str | None = None  # None: the store answered
    keys: int | None = None  # DBSIZE


async def remote_store_state(url: str, timeout_s: float = PING_TIMEOUT_S) -> StoreState:
    # Lazy: redis-py loads only when a remote tier is validated.
    from kvstack.remote.preflight import ping

    try:
        info = await asyncio.to_thread(ping, url, timeout_s)
    except KvstackError as exc:  # a malformed URL
        return StoreState(f"remote store: {exc.message}", f"the remote store URL is unusable: {exc.message}")
    if info.reachable:
        return StoreState(f"remote store {info.url} answers ({info.keys} keys)", keys=info.keys)
    why = info.error or "no answer"
    return StoreState(
        f"remote store {info.url}: {why}",
        f"the remote store {info.url} is unreachable ({why}): the remote tier serves nothing and the "
        "engine recomputes those prefixes; start the store again or fix --remote",
    )
