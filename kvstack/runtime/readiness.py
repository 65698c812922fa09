"""Is a supervised process ready: one HTTP probe of its readiness URL (and, for an engine, its API),
and the one wait that repeats it until ready, dead or out of time (one supervisor's or a group's)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

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


SLICE_S = 0.1  # deaths are looked for this often while waiting, so one is seen well within 2 s
FIRST_PAUSE_S = 0.1  # between probes: from this, x1.5 each round, up to MAX_PAUSE_S
MAX_PAUSE_S = 1.0

Outcome = Literal["ready", "died", "timeout"]


def wait_until_ready(
    ready: Callable[[httpx.Client], bool],
    died: Callable[[], bool],
    timeout_s: float,
    *,
    waiting: Callable[[], None] | None = None,
) -> Outcome:
    """Probe with ``ready`` (one round: True once everything is ready) until it is, ``died``
    says a process died, or ``timeout_s`` passes; the caller turns the outcome into its error.

    Probes back off from 0.1 s to 1 s apart; between them ``died`` is asked every 0.1 s, so a
    death is seen well within 2 s, and ``waiting`` is called (to refresh a status line).
    """
    deadline = time.monotonic() + timeout_s
    pause = FIRST_PAUSE_S
    with httpx.Client(trust_env=False) as client:  # loopback probes: never through a proxy
        while True:
            if died():
                return "died"
            if ready(client):
                return "ready"
            if time.monotonic() >= deadline:
                return "timeout"
            wake = min(deadline, time.monotonic() + pause)
            while time.monotonic() < wake and not died():
                time.sleep(SLICE_S)
                if waiting is not None:
                    waiting()
            pause = min(pause * 1.5, MAX_PAUSE_S)
