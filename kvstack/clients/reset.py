"""Emptying an engine's own prefix cache (its GPU copy) through its control route.

vLLM: ``POST /reset_prefix_cache`` (served with VLLM_SERVER_DEV_MODE=1, which kvstack sets only on a
loopback bind; its guard wants the run's control token, which ``make_client`` carries). SGLang:
``POST /flush_cache`` (its admin routes take the control token as their bearer). Validation drops a
tier's upper copies with it; the replay's calibration (bench/replay/calibrate.py) drops a prompt from the
engine's pool with it, so that the offload tier serves the prompt next.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from kvstack.clients.client import auth_headers
from kvstack.clients.control import CONTROL_HEADER
from kvstack.connectors.engines import ENGINE_SPECS, SGLANG, VLLM

# Endpoints that empty the GPU prefix cache and keep the offload tiers. vLLM's keeps connector
# caches unless ?reset_external=true (vllm/entrypoints/serve/dev/cache/api_router.py). SGLang's
# /flush_cache also clears HiCache's host pool (HiRadixCache.reset), so SGLang's DRAM tier is
# proven by overflowing the GPU pool instead.
# Each engine's is its spec's (connectors/engines.py).
VLLM_RESET_PATH = VLLM.reset_path
SGLANG_FLUSH_PATH = SGLANG.reset_path  # HiCache's disk step flushes with it (validation/tier_step.py)
RESET_PATHS = {s.name: s.reset_path for s in ENGINE_SPECS.values() if s.reset_path}


async def reset_cache(
    client: httpx.AsyncClient, base_url: str, path: str, headers: dict[str, str], retry_s: float = 10.0
) -> tuple[bool, str]:
    """``POST base_url + path`` until the engine says it emptied the cache (vLLM refuses while
    in-flight offload transfers hold blocks), for up to ``retry_s``: (done, what happened)."""
    url = base_url.rstrip("/") + path
    deadline = time.monotonic() + retry_s
    while True:
        try:
            resp = await client.post(url, headers=headers, timeout=30)
            token = client.headers.get(CONTROL_HEADER)
            if resp.status_code == 401 and token:
                # SGLang's admin routes take the run's control token as their bearer (its admin
                # key, kvstack/engines/sglang.py), not the API key.
                resp = await client.post(url, headers=auth_headers(token), timeout=30)
        except httpx.HTTPError as exc:
            return False, f"POST {path} failed: {type(exc).__name__}"
        if resp.status_code in (404, 405):
            return False, (
                f"POST {path} is not served (HTTP {resp.status_code}; vLLM serves it only with "
                "VLLM_SERVER_DEV_MODE=1, which kvstack sets only while the engine listens on loopback)"
            )
        ok = resp.status_code == 200
        if ok:
            try:
                body = resp.json()
                ok = not (isinstance(body, dict) and body.get("success") is False)
            except ValueError:
                ok = True  # SGLang answers /flush_cache with plain text
        if ok:
            return True, f"POST {path}: GPU prefix cache emptied"
        if time.monotonic() > deadline:
            return False, f"POST {path} kept failing (HTTP {resp.status_code}: {resp.text[:120]})"
        await asyncio.sleep(0.25)
