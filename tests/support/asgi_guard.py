"""Drive an ASGI middleware (kvstack's ControlGuard and what wraps it) with one request, no server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

App = Callable[[dict[str, Any], Any, Any], Any]


def through_guard(
    guard: Callable[[App], App], scope: dict[str, Any]
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """One bodiless request with ``scope`` through ``guard`` wrapped around an app that answers
    nothing: the scope the app was handed (None: the guard answered itself) and what the guard sent."""
    reached: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reached.append(scope)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    asyncio.run(guard(app)(scope, receive, send))
    return (reached[0] if reached else None), sent
