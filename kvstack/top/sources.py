"""One scrape of everything `kvstack top` watches. Failures are data, never raised: a server
that stops answering is shown down, and the view keeps running."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kvstack.canary.state import CanaryState, read_state
from kvstack.clients.metrics import MetricsSnapshot, scrape_sync
from kvstack.errors import KvstackError
from kvstack.redact import redact_text
from kvstack.top.targets import Targets

if TYPE_CHECKING:  # redis-py loads only when a store is watched
    from kvstack.remote.writers import Lookups

SCRAPE_TIMEOUT_S = 3.0
DISK_WALK_LIMIT = 200_000  # files: a bigger tier is reported as "at least"


@dataclass(frozen=True)
class RedisStats:
    up: bool
    error: str | None = None
    used_memory: int | None = None
    maxmemory: int | None = None
    keys: int | None = None
    evicted_keys: int | None = None
    keyspace_hits: int | None = None
    keyspace_misses: int | None = None
    # The KV layouts written there now by kvstack's engines (remote/writers.py), fingerprint ->
    # their writers; None: not read.
    live_layouts: dict[str, list[str]] | None = None
    # The keyspace hits and misses that read made, after INFO was read: counted in the next window's
    # INFO, which takes them out (the tier's hit ratio is its users', not kvstack's).
    own_hits: int = 0
    own_misses: int = 0


@dataclass(frozen=True)
class DiskStats:
    path: str
    bytes: int | None = None
    files: int | None = None
    partial: bool = False  # the walk stopped at DISK_WALK_LIMIT files
    free_bytes: int | None = None
    error: str | None = None


@dataclass
class Scrape:
    at: float  # time.monotonic()
    wall: float  # time.time()
    servers: dict[str, MetricsSnapshot] = field(default_factory=dict)  # base URL -> its /metrics
    lmcache: dict[str, MetricsSnapshot] = field(default_factory=dict)  # cache server URL -> /metrics
    redis: RedisStats | None = None
    disk: DiskStats | None = None
    canary: CanaryState | None = None  # the run dir's canary.json, when it has one


def _int(info: Mapping[str, object], key: str) -> int | None:
    value = info.get(key)
    return int(value) if isinstance(value, int | float) else None


def _live_layouts(url: str, timeout_s: float) -> tuple[dict[str, list[str]] | None, Lookups]:
    from kvstack.remote.writers import Lookups, recorded_layouts

    lookups = Lookups()
    found = recorded_layouts(url, timeout_s, lookups)
    live = None if found is None else {k.fingerprint: k.live_writers for k in found if k.live_writers}
    return live, lookups


def redis_stats(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> RedisStats:
    from kvstack.remote.preflight import store_info  # redis-py loads only when a store is watched

    try:
        info, keys, error = store_info(url, timeout_s)
    except KvstackError as exc:
        return RedisStats(False, exc.message)
    if info is None:
        return RedisStats(False, error or "no answer")
    live, own = _live_layouts(url, timeout_s)  # after INFO: its lookups fall in the next window
    return RedisStats(
        True,
        live_layouts=live,
        own_hits=own.hits,
        own_misses=own.misses,
        used_memory=_int(info, "used_memory"),
        maxmemory=_int(info, "maxmemory") or None,  # 0: no limit
        keys=keys,
        evicted_keys=_int(info, "evicted_keys"),
        keyspace_hits=_int(info, "keyspace_hits"),
        keyspace_misses=_int(info, "keyspace_misses"),
    )


def disk_stats(path: str, limit: int = DISK_WALK_LIMIT) -> DiskStats:
    """Bytes of the files under ``path`` (symlinks not followed) and the free space of its filesystem."""
    root = Path(path)
    if not root.is_dir():
        return DiskStats(path, error="no such directory (yet)")
    total = files = 0
    partial = False
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if files >= limit:  # LMCache's fs adapter keeps every object in one directory
                partial = True
                break
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue  # evicted while we walked
            files += 1
        if partial:
            break
    try:
        free = shutil.disk_usage(root).free
    except OSError as exc:
        return DiskStats(path, total, files, partial, error=exc.strerror)
    return DiskStats(path, total, files, partial, free)


def _metrics(base: str, api_key: str | None, timeout_s: float) -> MetricsSnapshot:
    snap = scrape_sync([base + "/metrics"], api_key, timeout_s)
    secrets = [api_key] if api_key else []
    snap.errors = [redact_text(e, secrets) for e in snap.errors]
    return snap


def collect(targets: Targets, api_key: str | None = None, timeout_s: float = SCRAPE_TIMEOUT_S) -> Scrape:
    out = Scrape(time.monotonic(), time.time())
    for base in targets.servers:
        out.servers[base] = _metrics(base, api_key, timeout_s)
    for base in dict.fromkeys(targets.lmcache):
        out.lmcache[base] = _metrics(base, None, timeout_s)  # its /metrics takes no key
    if targets.remote:
        out.redis = redis_stats(targets.remote, timeout_s)
    if targets.disk_dir:
        out.disk = disk_stats(targets.disk_dir)
    if targets.run_dir:
        out.canary = read_state(Path(targets.run_dir))  # None: this run has no canary (yet)
    return out
