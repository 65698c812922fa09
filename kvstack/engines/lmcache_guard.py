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
/cache/objects``, the trace replay's ``/status``). The token comes in KVSTACK_CONTROL_TOKEN and is taken out
of the environment before LMCache starts, so not even ``/env`` shows it. Without one, a random
token that nobody holds closes the control routes to everyone.

    python -m kvstack.engines.lmcache_guard server --host 127.0.0.1 --port P ... --http-port H

On the CPU platform kvstack passes ``--shm-name kvstack`` (engines/lmcache.py): L1 is then a POSIX
shared-memory pool, /dev/shm/lmcache_l1_pool_NAME, which LMCache creates exclusively and unlinks at
a clean exit. The guard makes NAME ``kvstack-<this pid>``, so a server restarted while the old
engine still maps the old pool gets its own, and first removes the pools of kvstack's servers
that are gone (a killed server cannot unlink its pool, and /dev/shm is memory): this user's
``lmcache_l1_pool_kvstack-<pid>`` whose process no longer exists.

Imports only the standard library and the guard until LMCache itself: it runs in the engine's
interpreter.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import secrets
import sys
from collections.abc import MutableMapping, Sequence
from pathlib import Path

from kvstack.engines.vllm_guard import CONTROL_ENV, ControlGuard

PROBE_PATHS = frozenset({"/healthcheck", "/metrics"})
HTTP_APP_MODULE = "lmcache.v1.multiprocess.http_server"
CLI_MODULE = "lmcache.cli.main"
SHM_DIR = Path("/dev/shm")
SHM_FLAG, SHM_NAME = "--shm-name", "kvstack"  # as engines/lmcache.py renders them
POOL_PREFIX = "lmcache_l1_pool_"  # LMCache names its L1 pool this plus --shm-name
_OWN_POOL = re.compile(re.escape(f"{POOL_PREFIX}{SHM_NAME}-") + r"(\d+)")


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


def pool_name(pid: int) -> str:
    """The /dev/shm name of the L1 pool of kvstack's cache server ``pid``."""
    return f"{POOL_PREFIX}{SHM_NAME}-{pid}"


def own_shm_name(args: list[str], pid: int) -> list[str]:
    """``--shm-name kvstack`` made unique to this server's process: ``kvstack-<pid>``."""
    out = list(args)
    for i, arg in enumerate(out[:-1]):
        if arg == SHM_FLAG and out[i + 1] == SHM_NAME:
            out[i + 1] = f"{SHM_NAME}-{pid}"
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def sweep_stale_pools(shm_dir: Path = SHM_DIR) -> list[str]:
    """Remove this user's kvstack L1 pools whose server process is gone; their names."""
    removed: list[str] = []
    with contextlib.suppress(OSError):
        for entry in shm_dir.iterdir():
            m = _OWN_POOL.fullmatch(entry.name)
            if m is None or _alive(int(m.group(1))):
                continue
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == os.getuid():
                    entry.unlink()
                    removed.append(entry.name)
    return removed


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if SHM_FLAG in args:
        for name in sweep_stale_pools():
            print(
                f"kvstack: removed {SHM_DIR / name}, left by a server that is gone",
                file=sys.stderr,
                flush=True,
            )
        args = own_shm_name(args, os.getpid())
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
