"""The httpx client for an engine's JSON endpoints (models, tokenize, metrics, resets).

Streamed completions, where client overhead is measured, go through clients/streaming.py.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from kvstack.errors import NetworkTargetError
from kvstack.netaddr import PORT_RANGE, is_port, reaches_local
from kvstack.redact import redact_url

# How long a client keeps an idle connection for reuse. vLLM's API server (uvicorn) closes a
# connection idle for VLLM_HTTP_TIMEOUT_KEEP_ALIVE = 5 s, uvicorn's own default too; a client that
# keeps it longer (aiohttp: 15 s, httpx: 5 s) sometimes sends its next request just as the server
# closes it, and a POST is not retried: "Server disconnected" on a request the server never read.
# Reusing only connections idle well below the server's limit closes that window.
IDLE_KEEPALIVE_S = 2.0


def check_http_url(url: str, flag: str, example: str = "http://127.0.0.1:8000") -> None:
    """An http(s) URL with a host and a port a client can connect to (netaddr.is_port: not 0), or a
    NetworkTargetError naming ``flag`` (exit 2). No port: the scheme's (80, 443)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NetworkTargetError(
            f"{flag} {redact_url(url)!r} is not an http(s) URL like http://HOST:PORT",
            hint=f"e.g. {flag} {example}",
        )
    try:
        port = parts.port
    except ValueError:
        port = -1  # not a number, or past 65535
    if port is not None and not is_port(port):
        raise NetworkTargetError(
            f"{flag} {redact_url(url)!r} has an invalid port", hint=f"ports are {PORT_RANGE}"
        )


def trusts_env(base_url: str) -> bool:
    """Honour proxy variables only for non-loopback servers: a proxy never reaches 127.0.0.1."""
    return not reaches_local(urlsplit(base_url).hostname or "")


def make_client(base_url: str, max_connections: int = 100) -> httpx.AsyncClient:
    """A client of ``base_url``; it carries the server's control token when this user's serve
    started it (kvstack/clients/control.py), so that kvstack's own resets pass the engine's guard."""
    from kvstack.clients.control import control_headers, token_for

    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=IDLE_KEEPALIVE_S,
    )
    return httpx.AsyncClient(
        trust_env=trusts_env(base_url),
        limits=limits,
        timeout=None,
        headers=control_headers(token_for(base_url)),
    )


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}
