"""LMCache's cache server's ``GET /status`` (lmcache 0.5.6), asked and read in one place: the chunk
size, L1's size and use with its eviction band, each L2 adapter's type and the capacities its
eviction controller declares. Missing or malformed figures read as absent, never as an error."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from kvstack.clients.client import auth_headers, trusts_env
from kvstack.clients.control import control_headers, token_for
from kvstack.jsonvalue import JsonObject

PATH = "/status"
DEFAULT_WATERMARK, DEFAULT_RATIO = 0.8, 0.2


@dataclass(frozen=True)
class Eviction:
    """A level's eviction: past ``watermark`` of its size it drops ``ratio`` of its objects."""

    watermark: float = DEFAULT_WATERMARK
    ratio: float = DEFAULT_RATIO


@dataclass(frozen=True)
class L2Capacity:
    """An L2 adapter's declared capacity (``l2_eviction_controller.adapters``) and its eviction."""

    capacity_bytes: int
    eviction: Eviction


@dataclass(frozen=True)
class LMCacheStatus:
    chunk_size: int | None = None  # None: not reported
    l1_total_bytes: int = 0
    l1_used_bytes: int = 0
    l1_objects: int = 0
    l1_eviction: Eviction = field(default_factory=Eviction)
    l2_capacities: list[L2Capacity] = field(default_factory=list)
    l2_types: list[str] = field(default_factory=list)  # each L2 adapter's type, lower case

    @classmethod
    def parse(cls, doc: Any) -> LMCacheStatus | None:
        """The status in ``doc`` (the route's JSON), or None when it is not an LMCache status."""
        if not isinstance(doc, dict) or "storage_manager" not in doc:
            return None
        storage = _obj(doc.get("storage_manager"))
        l1 = _obj(storage.get("l1_manager"))
        l2 = _obj(storage.get("l2_eviction_controller")).get("adapters") or []
        return cls(
            chunk_size=int(doc.get("chunk_size") or 0) or None,
            l1_total_bytes=int(l1.get("memory_total_bytes") or 0),
            l1_used_bytes=int(l1.get("memory_used_bytes") or 0),
            l1_objects=int(l1.get("total_object_count") or 0),
            l1_eviction=_eviction(_obj(storage.get("l1_eviction_controller"))),
            l2_capacities=[
                L2Capacity(int(a.get("total_capacity_bytes") or 0), _eviction(a))
                for a in l2
                if isinstance(a, dict)
            ],
            l2_types=[
                str(a.get("type", "")).lower()
                for a in storage.get("l2_adapters") or []
                if isinstance(a, dict)
            ],
        )

    def bytes_per_token(self, default_chunk: int = 256) -> int:
        """KV bytes per token as L1's use says (1 when L1 holds nothing)."""
        chunk = self.chunk_size or default_chunk
        return max(1, self.l1_used_bytes // self.l1_objects // chunk) if self.l1_objects else 1

    def adapter_tiers(self) -> dict[str, str]:
        """tier (disk, remote) -> the L2 adapter's type serving it."""
        out: dict[str, str] = {}
        for kind in self.l2_types:
            if kind.startswith("fs"):
                out["disk"] = kind
            elif "resp" in kind or "redis" in kind:
                out["remote"] = kind
        return out

    def first_capacity(self) -> L2Capacity | None:
        """The first L2 adapter that declares a capacity."""
        return next((a for a in self.l2_capacities if a.capacity_bytes > 0), None)


def _obj(value: Any) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _eviction(doc: JsonObject) -> Eviction:
    return Eviction(
        float(doc.get("trigger_watermark", DEFAULT_WATERMARK)),
        float(doc.get("eviction_ratio", DEFAULT_RATIO)),
    )


def cache_server_status(url: str, api_key: str | None = None) -> LMCacheStatus | None:
    """LMCache's status at ``url``, or None when ``url`` is not an LMCache cache server."""
    try:
        with httpx.Client(timeout=10, trust_env=trusts_env(url)) as client:
            # /status is a control route of the guarded server (engines/lmcache_guard.py).
            headers = {**auth_headers(api_key), **control_headers(token_for(url))}
            resp = client.get(url.rstrip("/") + PATH, headers=headers)
        data = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return LMCacheStatus.parse(data)
