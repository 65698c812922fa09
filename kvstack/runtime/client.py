"""The httpx client for an engine's JSON endpoints (models, tokenize, metrics, resets).

Streamed completions, where client overhead is measured, go through runtime/streaming.py.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0"})


def trusts_env(base_url: str) -> bool:
    """Honour proxy variables only for non-loopback servers: a proxy never reaches 127.0.0.1."""
    return (urlsplit(base_url).hostname or "") not in _LOOPBACK


def make_client(base_url: str, max_connections: int = 100) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.AsyncClient(trust_env=trusts_env(base_url), limits=limits, timeout=None)


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}
