"""LMCache's cache server as validation drives it: health, emptying L1, hiding an L2 tier's objects.

The server's HTTP API (lmcache/v1/multiprocess/http_apis, lmcache 0.5.6) has no authentication
and listens on loopback only; kvstack runs it behind its guard (engines/lmcache_guard.py), so every
route but /healthcheck and /metrics wants the run's control token, which this client sends when
this user's serve started the server (clients/control.py). ``POST /cache/clear`` empties L1 (DRAM)
and keeps the L2 adapters, which is what proves a disk or remote tier. The fs adapter finds an
object by its file (``_key_exists_on_disk``) and cannot list its keys over HTTP, so to prove the
remote tier where a disk tier also holds the prompt (the lowest-indexed adapter serves first),
the prompt's new files are moved aside for one request and put back.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import httpx

from kvstack.clients.control import control_headers, token_for

HEALTH_TIMEOUT_S = 3.0


class CacheServer:
    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client = client
        self.url = url.rstrip("/")
        self.headers = control_headers(token_for(self.url))

    async def problem(self) -> str | None:
        """Why the server cannot serve, or None when /healthcheck says healthy."""
        try:
            resp = await self.client.get(self.url + "/healthcheck", timeout=HEALTH_TIMEOUT_S)
        except httpx.HTTPError as exc:
            return (
                f"LMCache's cache server at {self.url} does not answer ({type(exc).__name__}): an engine "
                "whose cache server is gone hangs every request; restart both (kvstack serve does)"
            )
        if resp.status_code != 200:
            detail = f"HTTP {resp.status_code}: {resp.text[:120]}"
            return f"LMCache's cache server at {self.url} is unhealthy ({detail})"
        return None

    async def clear_l1(self) -> tuple[bool, str]:
        try:
            resp = await self.client.post(
                self.url + "/cache/clear", json={"tier": "l1"}, headers=self.headers, timeout=30.0
            )
        except httpx.HTTPError as exc:
            return False, f"POST {self.url}/cache/clear failed: {type(exc).__name__}"
        if resp.status_code != 200:
            return False, f"POST {self.url}/cache/clear answered HTTP {resp.status_code}: {resp.text[:120]}"
        return True, f"POST {self.url}/cache/clear: LMCache's DRAM tier (L1) emptied"


@contextlib.contextmanager
def moved_aside(root: str, files: list[str]) -> Iterator[int]:
    """Move ``files`` (relative to ``root``) into a sibling directory, and back on exit.

    Yields how many were moved. The sibling stays on the same filesystem (a rename, no copy) and
    outside ``root``, where the adapter never looks.
    """
    base = Path(root)
    hold = base.parent / f".{base.name}.kvstack-validation-{os.getpid()}"
    moved: list[str] = []
    try:
        for rel in files:
            src, dst = base / rel, hold / rel
            dst.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with contextlib.suppress(FileNotFoundError):
                src.rename(dst)
                moved.append(rel)
        yield len(moved)
    finally:
        for rel in moved:
            with contextlib.suppress(OSError):
                (base / rel).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                (hold / rel).rename(base / rel)
        with contextlib.suppress(OSError):
            for d in sorted((p for p in hold.rglob("*") if p.is_dir()), reverse=True):
                d.rmdir()
            hold.rmdir()
