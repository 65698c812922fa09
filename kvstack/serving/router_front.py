"""vllm-router behind kvstack's guard: its admin routes answer kvstack alone, its OpenAI routes the key.

vllm-router 0.1.17 (a Rust server, vllm_router_rs) serves, besides the OpenAI routes it proxies,
``/add_worker``, ``/remove_worker``, ``/workers`` (POST, DELETE ``/workers/{url}``),
``/flush_cache``, ``/list_workers``, ``/get_loads``, ``/start_profile``, ... without
authentication: on loopback any local user could add a worker of their own and receive every
prompt (run against a worker on this machine: all answer 200, ``--api-key`` or not; that key is
only what the router sends its workers). Its one check of a client is a constructor argument the CLI
does not expose, ``api_key_validation_urls``: once set, every route, ``/health`` included, wants
a bearer, which the router checks by a GET to that URL with the bearer (and remembers). Nothing in
it sorts routes, and its port is reachable by every local user, so:

- the router (a child process: its ``start()`` holds the GIL) binds an ephemeral loopback port and
  checks every request's bearer against a validator in this process that accepts only the run's
  control token;
- this process serves the user's ``--host``/``--port`` through kvstack's guard (the same
  ``ControlGuard`` and rule as every vLLM kvstack starts, engines/vllm_guard.py: probes open, the
  OpenAI routes the user's key, every other route this machine and the control token) and passes
  what the guard lets through to the router with the token as the bearer;
- the router forwards that bearer to the engines, whose guard takes the run's token in place of the
  key (and hands vLLM the key), and sends it on its own calls to them (``api_key``).

So without the token nothing reaches the router's admin routes, by the front or straight to its
port, and the token is kvstack's alone (0600 in the run dir, in these processes' environment).

    python -m kvstack.serving.router_front --host H --port P -- <vllm-router arguments>

It runs in the engine's interpreter, which has vllm-router and so its aiohttp and uvicorn.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hmac
import importlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kvstack.engines.vllm_guard import CONTROL_ENV, CONTROL_HEADER, ControlGuard

MODULE = "kvstack.serving.router_front"
INTERNAL_HOST = "127.0.0.1"
# Not passed on: they belong to one hop (RFC 9110 7.6.1), or are the front's to set.
HOP_HEADERS = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"authorization",
        CONTROL_HEADER.lower().encode(),  # the bearer carries the token from here on
    }
)
VALIDATION_ARG = "api_key_validation_urls"  # vllm_router_rs.Router's, not on its CLI
PR_SET_PDEATHSIG = 1


# --- the validator the router asks about each new bearer ------------------------------------


def validator(token: str) -> ThreadingHTTPServer:
    """A loopback server that answers 200 to ``Authorization: Bearer <token>`` and 401 to anything
    else (what the router's api_key_validation_urls asks); not started."""
    expected = f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            given = (self.headers.get("Authorization") or "").encode("latin-1", "replace")
            ok = hmac.compare_digest(given, expected)
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((INTERNAL_HOST, 0), Handler)
    server.daemon_threads = True
    return server


# --- the proxy behind the guard --------------------------------------------------------------


class Proxy:
    """An ASGI app that passes each request to the router at ``upstream`` with ``token`` as its
    bearer, streaming the answer back (SSE included)."""

    def __init__(self, upstream: str, token: str) -> None:
        self.upstream = upstream
        self.bearer = f"Bearer {token}"
        self._session: Any = None

    def _client(self) -> Any:
        if self._session is None:
            aiohttp = importlib.import_module("aiohttp")
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None),
                connector=aiohttp.TCPConnector(limit=0),
                auto_decompress=False,
                trust_env=False,
            )
        return self._session

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1003})
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope.get("headers") or []
            if k.lower() not in HOP_HEADERS
        ]
        headers.append(("Authorization", self.bearer))
        url = self.upstream + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        try:
            async with self._client().request(
                scope["method"],
                importlib.import_module("yarl").URL(url, encoded=True),  # as the client spelled it
                headers=headers,
                data=bytes(body),
                allow_redirects=False,
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),  # the client's own
            ) as resp:
                out = [(k.lower(), v) for k, v in resp.raw_headers if k.lower() not in HOP_HEADERS]
                await send({"type": "http.response.start", "status": resp.status, "headers": out})
                async for chunk in resp.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except OSError as exc:  # aiohttp's ClientError is an OSError: the router is not up (yet)
            body_out = f'{{"error": "vllm-router does not answer: {type(exc).__name__}"}}'.encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 502,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body_out})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._session is not None:
                    await self._session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


# --- the two processes -----------------------------------------------------------------------


def free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind((INTERNAL_HOST, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run_router(port: int, validate_url: str, router_args: Sequence[str], token: str) -> None:
    """The router itself (this process: its ``start`` holds the GIL until it stops)."""
    rs = importlib.import_module("vllm_router_rs")
    if VALIDATION_ARG not in (getattr(rs.Router, "__text_signature__", None) or ""):
        sys.exit(
            "kvstack: this vllm-router cannot check a bearer on its own routes (no "
            f"{VALIDATION_ARG}), so its admin routes would be open: install vllm-router==0.1.17"
        )
    with contextlib.suppress(ImportError):  # vllm-router's own name for its process (ps, top)
        importlib.import_module("setproctitle").setproctitle("vllm::router")
    launch = importlib.import_module("vllm_router.launch_router")
    args = launch.parse_router_args(["--host", INTERNAL_HOST, "--port", str(port), *router_args])
    args.api_key = token  # what it sends the engines on its own calls (their guard takes it)
    args._validate_router_args()
    setattr(args, VALIDATION_ARG, [validate_url])
    importlib.import_module("vllm_router.router").Router.from_args(args).start()


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    args = list(argv)
    if "--" not in args:
        sys.exit("kvstack.serving.router_front: usage: --host H --port P -- VLLM-ROUTER ARGS...")
    at = args.index("--")
    parser = argparse.ArgumentParser(prog="kvstack.serving.router_front")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--router", action="store_true", help="run the router itself (internal)")
    parser.add_argument("--validate-url")
    return parser.parse_args(args[:at]), args[at + 1 :]


def main(argv: Sequence[str] | None = None) -> None:
    opts, router_args = _parse(sys.argv[1:] if argv is None else argv)
    token = os.environ.get(CONTROL_ENV) or ""
    if opts.router:
        run_router(opts.port, opts.validate_url, router_args, token)
        return
    if not token:
        # Nobody's token: the router's routes answer no one, its OpenAI routes through the front.
        token = secrets.token_urlsafe(32)
        print(
            f"kvstack: no control token in {CONTROL_ENV}: the router's admin routes answer nobody", flush=True
        )
    check = validator(token)
    threading.Thread(target=check.serve_forever, daemon=True, name="kvstack-router-validator").start()
    internal = free_loopback_port()
    validate_url = f"http://{INTERNAL_HOST}:{check.server_address[1]}/validate"
    child = subprocess.Popen(
        [sys.executable, "-m", MODULE, "--router", "--port", str(internal),
         "--validate-url", validate_url, "--", *router_args],
        env={**os.environ, CONTROL_ENV: token},
        preexec_fn=_die_with_parent,
    )  # fmt: skip

    def follow() -> None:
        code = child.wait()
        print(f"kvstack: vllm-router exited with code {code}", flush=True)
        os._exit(code if code > 0 else 1)

    threading.Thread(target=follow, daemon=True, name="kvstack-router-child").start()
    print(
        f"kvstack: vllm-router on {INTERNAL_HOST}:{internal} (every request needs the run's token), "
        f"served through kvstack's guard on {opts.host}:{opts.port}",
        flush=True,
    )
    uvicorn = importlib.import_module("uvicorn")
    app = ControlGuard(Proxy(f"http://{INTERNAL_HOST}:{internal}", token), token=token)
    uvicorn.run(app, host=opts.host, port=opts.port, log_level="warning", access_log=False, lifespan="on")
    with contextlib.suppress(ProcessLookupError):
        child.terminate()


if __name__ == "__main__":
    main()
