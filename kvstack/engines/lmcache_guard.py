"""LMCache's cache server behind kvstack's guard: its HTTP API answers kvstack alone.

LMCache 0.5.6's cache server (``lmcache server``: lmcache/cli/commands/server.py runs
lmcache/v1/multiprocess/http_server.py, a FastAPI app under uvicorn whose routes are discovered in
v1/multiprocess/http_apis and v1/internal_api_server/common) has no authentication: its own
``--http-host`` help says to bind loopback only, and on loopback every local user reaches it. Its
routes (listed from the app it builds) change the cache (``POST /cache/clear``,
``DELETE /cache/objects``, ``POST /cache/prefetches``, ``PUT``/``DELETE /quota/{salt}``,
``POST /reconfigure/...``, ``POST /metrics/reset``) or read what is not theirs to read: ``GET /env``
prints the server's environment, where LMCache reads the Redis password (LMCACHE_RESP_PASSWORD).

This module runs LMCache's own CLI in this process after adding kvstack's guard to that app: the
same ``ControlGuard`` and rule as every vLLM kvstack starts (engines/vllm_guard.py), with LMCache's
routes sorted here: ``/healthcheck`` and ``/metrics`` are probes (the supervisor's liveness probe,
``top``, Prometheus), and every other route, a later LMCache's too, is a control route, which
answers only a request from this machine carrying the run's control token (``X-Kvstack-Control``,
as kvstack's clients send it: validation's ``/cache/clear``, the disk bound's ``DELETE
/cache/objects``, bench's ``/status``). The token comes in KVSTACK_CONTROL_TOKEN and is taken out
of the environment before LMCache starts, so not even ``/env`` shows it. Without one, a random
token that nobody holds closes the control routes to everyone.

    python -m kvstack.engines.lmcache_guard server --host 127.0.0.1 --port P ... --http-port H

Imports only the standard library and the guard until LMCache itself: it runs in the engine's
interpreter.
"""

from __future__ import annotations

import importlib
import os
import secrets
import sys
from collections.abc import MutableMapping, Sequence

from kvstack.engines.vllm_guard import CONTROL_ENV, ControlGuard

PROBE_PATHS = frozenset({"/healthcheck", "/metrics"})
HTTP_APP_MODULE = "lmcache.v1.multiprocess.http_server"
CLI_MODULE = "lmcache.cli.main"


def kind_of(path: str) -> str:
    """LMCache's routes: its health and metrics are probes, everything else is control."""
    return "probe" if path in PROBE_PATHS else "control"


def take_token(environ: MutableMapping[str, str]) -> tuple[str, bool]:
    """The run's control token, removed from ``environ``; a random one (nobody's) when none is given."""
    token = environ.pop(CONTROL_ENV, "") or ""
    return (token, True) if token else (secrets.token_urlsafe(32), False)


def guard(app: object, token: str) -> None:
    """Add kvstack's guard to LMCache's HTTP app (before it starts: Starlette builds its middleware
    stack at the first ASGI event)."""
    app.add_middleware(ControlGuard, kind_of=kind_of, token=token, key_env=None)  # type: ignore[attr-defined]


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    token, given = take_token(os.environ)
    if not given:
        print(
            f"kvstack: no control token in {CONTROL_ENV}: LMCache's control routes answer nobody",
            file=sys.stderr,
            flush=True,
        )
    guard(importlib.import_module(HTTP_APP_MODULE).app, token)
    importlib.import_module(CLI_MODULE).main(args)


if __name__ == "__main__":
    main()
