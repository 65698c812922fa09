"""A rendered launch without its remote tier: what serving restarts when Redis hangs.

What was read in lmcache 0.5.6, and why a restart is the cheapest way out:
- The `resp` L2 adapter (v1/distributed/l2_adapters/resp_l2_adapter.py) takes host, port,
  num_workers, username, password and max_capacity_gb: no timeout. Its C++ client
  (``lmcache.lmcache_redis.LMCacheRedisClient(host, port, num_workers, username, password)``)
  takes none either, and LMCACHE_RESP_* variables set only host, port and credentials.
- NativeConnectorL2Adapter (native_connector_l2_adapter.py) turns a completion with ``ok=False``
  into an empty bitmap: a lookup that fails (connection refused, Redis dead) is a miss and the
  engine recomputes. A lookup that never completes (Redis stopped, a stuck host) is waited for:
  only ``delete`` has a 30 s timeout, lookups, loads and stores have none, so requests hang.
- LMCache drops or swaps an L2 adapter at runtime only through ``reconfigure``
  (storage_manager.reconfigure_l2_adapter), which only the DAX adapter implements.
So a hung Redis is left only by restarting the cache server without the `resp` adapter, and the
engine with it (an engine whose cache server restarts never re-registers its KV caches).
"""

from __future__ import annotations

import json

from kvstack.runtime.specs import LaunchSpec, ProcessSpec

RESP_TYPE = "resp"  # kvstack.engines.lmcache.RESP_ADAPTER
RESP_ENV_PREFIX = "LMCACHE_RESP_"
DROPPED_NOTE = (
    "the remote tier was dropped while serving: Redis stopped answering (the unit restarted without it)"
)


def _is_resp(arg: str) -> bool:
    try:
        doc = json.loads(arg)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("type") == RESP_TYPE


def _without_resp(argv: list[str]) -> list[str] | None:
    """``argv`` less every ``--l2-adapter {"type":"resp",...}`` pair; None when it has none."""
    out: list[str] = []
    dropped = False
    i = 0
    while i < len(argv):
        if argv[i] == "--l2-adapter" and i + 1 < len(argv) and _is_resp(argv[i + 1]):
            dropped = True
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out if dropped else None


def without_remote_tier(spec: LaunchSpec) -> LaunchSpec | None:
    """``spec`` with LMCache's cache server rendered without its Redis adapter (and without the
    credentials in its environment); None when no process of it reaches Redis that way."""
    helpers: list[ProcessSpec] = []
    changed = False
    for helper in spec.helpers:
        argv = _without_resp(helper.argv)
        if argv is None:
            helpers.append(helper)
            continue
        changed = True
        env = {k: v for k, v in helper.env.items() if not k.startswith(RESP_ENV_PREFIX)}
        helpers.append(helper.with_command(argv=argv, env=env))
    if not changed:
        return None
    out = spec.with_processes(helpers=helpers, note=DROPPED_NOTE)
    out.tier_adapters = {kind: name for kind, name in spec.tier_adapters.items() if name != RESP_TYPE}
    return out
