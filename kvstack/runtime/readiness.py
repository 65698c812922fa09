"""Is a supervised process ready: one HTTP probe of its readiness URL (and, for an engine, its API)."""

from __future__ import annotations

import httpx

from kvstack.clients.client import auth_headers


def probe_ready(
    client: httpx.Client,
    ready_url: str | None,
    *,
    api_base_url: str | None = None,
    api_key: str | None = None,
) -> bool:
    """True when ``ready_url`` answers 2xx and, for an engine (``api_base_url``), its API routes serve.

    A process without a readiness URL is ready once started. An engine's /health answers before its
    API routes do; /v1/models answering 2xx, or 401/403 with a key, proves they are up.
    """
    if ready_url is None:
        return True
    headers = auth_headers(api_key)
    try:
        if client.get(ready_url, headers=headers, timeout=1.0).status_code // 100 != 2:
            return False
        if api_base_url is None:
            return True
        resp = client.get(api_base_url.rstrip("/") + "/v1/models", headers=headers, timeout=1.0)
        return resp.status_code // 100 == 2 or resp.status_code in (401, 403)
    except httpx.HTTPError:
        return False
