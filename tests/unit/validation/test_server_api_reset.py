"""Validation's reset of the prefix cache: SGLang's admin route takes the run's control token as its
bearer (kvstack/engines/sglang.py makes it the admin key), not the API key."""

from __future__ import annotations

import asyncio

import httpx

from kvstack.clients.control import CONTROL_HEADER
from kvstack.validation.report import ValidationTarget
from kvstack.validation.server_api import ServerApi

TOKEN, KEY = "ctl-token-0123456789abcdef", "sk-api-key-1"


def _sglang_admin(request: httpx.Request) -> httpx.Response:
    """SGLang's decision for an admin route with an admin key set (utils/auth.py ADMIN_OPTIONAL)."""
    ok = request.headers.get("Authorization") == f"Bearer {TOKEN}"
    return httpx.Response(200, text="Cache flushed.") if ok else httpx.Response(401)


def _reset(token: str | None) -> tuple[bool, str, list[str | None]]:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization"))
        return _sglang_admin(request)

    async def go() -> tuple[bool, str]:
        api = ServerApi(ValidationTarget(base_url="http://127.0.0.1:30000", api_key=KEY), None)
        await api.client.aclose()
        headers = {CONTROL_HEADER: token} if token else {}
        api.client = httpx.AsyncClient(transport=httpx.MockTransport(handler), headers=headers)
        try:
            return await api.reset("/flush_cache")
        finally:
            await api.aclose()

    ok, detail = asyncio.run(go())
    return ok, detail, seen


def test_the_reset_retries_with_the_control_token_as_its_bearer() -> None:
    ok, detail, seen = _reset(TOKEN)
    assert ok and "emptied" in detail
    assert seen == [f"Bearer {KEY}", f"Bearer {TOKEN}"]  # the API key is refused, the token is not


def test_without_a_token_the_refusal_stands() -> None:
    ok, _detail, seen = _reset(None)
    assert not ok and seen[0] == f"Bearer {KEY}" and f"Bearer {TOKEN}" not in seen
