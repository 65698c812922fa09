"""The streaming client against a real HTTP server streaming SSE with controlled delays."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from kvstack.clients import client as client_module
from kvstack.clients import streaming
from kvstack.clients.client import make_client, trusts_env
from kvstack.clients.streaming import RequestResult, StreamClient
from tests.support.stream_server import ServerKnobs, StreamServer


def _one(
    url: str, prompt: str | list[int] = "a b c d e f", max_tokens: int = 4, **kw: object
) -> RequestResult:
    async def go() -> RequestResult:
        async with StreamClient(url) as client:
            return await client.completion("demo-model", prompt, max_tokens, **kw)  # type: ignore[arg-type]

    return asyncio.run(go())


def test_ttft_and_itl_are_stamped_from_the_stream() -> None:
    knobs = ServerKnobs(base_ttft_s=0.15, prefill_s_per_token=0.0, itl_s=0.05)
    with StreamServer(knobs) as srv:
        r = _one(srv.url, max_tokens=4)
    assert r.ok and r.error is None and r.status == 200
    assert r.ttft_s is not None and 0.15 <= r.ttft_s < 0.6
    assert len(r.itl_s) == 3 and all(0.04 <= gap < 0.5 for gap in r.itl_s)
    assert r.e2e_s is not None and r.e2e_s >= r.ttft_s + sum(r.itl_s) - 1e-6
    assert r.prompt_tokens == 7  # BOS + six words, from the usage event
    assert r.output_tokens == 4
    assert r.start_time > 0


def test_ttft_ignores_events_with_empty_choices() -> None:
    # Events before the first token (empty ``choices``) must not stop the clock.
    knobs = ServerKnobs(base_ttft_s=0.2, prefill_s_per_token=0.0, lead_empty_events=2)
    with StreamServer(knobs) as srv:
        r = _one(srv.url, max_tokens=1)
    assert r.ok
    assert r.ttft_s is not None and r.ttft_s >= 0.2


def test_prompt_as_token_ids_and_cached_tokens() -> None:
    with StreamServer(ServerKnobs(usage_cached_tokens=True, block_size=16)) as srv:
        ids = list(range(2, 102))
        first = _one(srv.url, prompt=ids, max_tokens=1)
        again = _one(srv.url, prompt=ids, max_tokens=1)
    assert first.ok and first.prompt_tokens == 100 and first.cached_tokens == 0
    assert again.ok and again.cached_tokens == 96  # whole 16-token blocks, last token recomputed


def test_http_error_is_recorded_not_raised() -> None:
    with StreamServer(ServerKnobs(status=503)) as srv:
        r = _one(srv.url)
    assert not r.ok and r.status == 503
    assert r.error is not None and "503" in r.error and "injected failure 503" in r.error
    assert r.ttft_s is None


def test_api_key_is_sent_as_bearer() -> None:
    with StreamServer(ServerKnobs(api_key="sk-test-key")) as srv:
        denied = _one(srv.url)
        allowed = _one(srv.url, api_key="sk-test-key")
    assert not denied.ok and denied.status == 401
    assert allowed.ok


def test_mid_stream_disconnect_is_recorded() -> None:
    with StreamServer(ServerKnobs(disconnect_after=2)) as srv:
        r = _one(srv.url, max_tokens=6)
    assert not r.ok
    assert r.ttft_s is not None  # the first tokens did arrive
    assert r.error is not None and ("connection lost" in r.error or "before [DONE]" in r.error)


def test_malformed_event_is_recorded() -> None:
    with StreamServer(ServerKnobs(malformed_after=1)) as srv:
        r = _one(srv.url, max_tokens=4)
    assert not r.ok and r.error is not None and r.error.startswith("malformed SSE event")


def test_error_event_is_recorded() -> None:
    with StreamServer(ServerKnobs(error_event="engine dead")) as srv:
        r = _one(srv.url)
    assert not r.ok and r.error == "engine dead"


def test_timeout_is_recorded_promptly() -> None:
    with StreamServer(ServerKnobs(stall_s=3.0)) as srv:
        r = _one(srv.url, timeout_s=0.5)
    assert not r.ok and r.error is not None and "timed out" in r.error
    assert r.e2e_s is not None and r.e2e_s < 2.0


def test_nothing_listening_is_recorded() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = _one(f"http://127.0.0.1:{port}")
    assert not r.ok and r.status is None
    assert r.error is not None and "cannot connect" in r.error


def test_concurrent_streams_on_one_client() -> None:
    async def go(url: str) -> list[RequestResult]:
        async with StreamClient(url) as client:
            jobs = [client.completion("demo-model", f"p{i} x y z", 3) for i in range(24)]
            return await asyncio.gather(*jobs)

    with StreamServer(ServerKnobs(base_ttft_s=0.05, prefill_s_per_token=0.0)) as srv:
        results = asyncio.run(go(srv.url))
    assert all(r.ok for r in results)
    # Served in parallel: 24 requests of >= 50 ms each finish far sooner than back to back.
    assert max(r.e2e_s or 0 for r in results) < 24 * 0.05


def test_events_cut_across_reads_are_reassembled() -> None:
    with StreamServer(ServerKnobs(split_events=True, prefill_s_per_token=0.0)) as srv:
        r = _one(srv.url, max_tokens=5)
    assert r.ok and r.output_tokens == 5 and len(r.itl_s) == 4 and r.prompt_tokens == 7


def test_sequential_requests_reuse_one_connection() -> None:
    # Reading every stream to its end keeps the connection alive: a client that opened a new
    # connection per request would measure TCP setup as TTFT and run out of ports under load.
    async def go(url: str) -> list[RequestResult]:
        async with StreamClient(url, max_connections=4) as client:
            return [await client.completion("demo-model", f"q{i} a b", 2) for i in range(6)]

    with StreamServer(ServerKnobs(prefill_s_per_token=0.0)) as srv:
        results = asyncio.run(go(srv.url))
        assert srv.connections == 1
    assert all(r.ok for r in results)


def test_a_failed_stream_does_not_poison_the_next_request() -> None:
    async def go(url: str) -> tuple[RequestResult, RequestResult]:
        async with StreamClient(url) as client:
            first = await client.completion("demo-model", "a b c", 6)
            srv.knobs.disconnect_after = None
            return first, await client.completion("demo-model", "a b c", 6)

    with StreamServer(ServerKnobs(disconnect_after=2)) as srv:
        broken, fine = asyncio.run(go(srv.url))
    assert not broken.ok and fine.ok and fine.output_tokens == 6


def test_proxies_apply_only_to_remote_hosts() -> None:
    assert not trusts_env("http://127.0.0.1:8000")
    assert not trusts_env("http://localhost:8000")
    assert trusts_env("https://gpu-box.example.com:8000")
    assert isinstance(make_client("http://127.0.0.1:1"), httpx.AsyncClient)


def _after_idle(url: str, idle_s: float) -> tuple[RequestResult, RequestResult]:
    async def go() -> tuple[RequestResult, RequestResult]:
        async with StreamClient(url) as client:
            first = await client.completion("demo-model", "a b c", 2)
            await asyncio.sleep(idle_s)
            return first, await client.completion("demo-model", "a b c d", 2)

    return asyncio.run(go())


def test_a_connection_idle_near_the_servers_keep_alive_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server closes a connection idle past its limit as the next request arrives (uvicorn's
    # keep-alive timer racing the request); the client reuses only connections idle below its own
    # limit (IDLE_KEEPALIVE_S, well below vLLM's 5 s), so the request goes out on a new connection.
    monkeypatch.setattr(streaming, "IDLE_KEEPALIVE_S", 0.2)
    with StreamServer(ServerKnobs(prefill_s_per_token=0.0, idle_close_s=0.4)) as srv:
        first, second = _after_idle(srv.url, 0.8)
        assert srv.connections == 2
    assert first.ok and second.ok, second.error


def test_a_client_keeping_connections_past_the_servers_limit_loses_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The failure the limit prevents (aiohttp's default keeps idle connections 15 s): the request
    # goes out on the connection the server is closing and comes back "connection lost".
    monkeypatch.setattr(streaming, "IDLE_KEEPALIVE_S", 15.0)
    with StreamServer(ServerKnobs(prefill_s_per_token=0.0, idle_close_s=0.4)) as srv:
        first, second = _after_idle(srv.url, 0.8)
    assert first.ok and not second.ok
    assert second.error is not None and second.error.startswith("connection lost")


def test_the_json_client_does_not_reuse_a_connection_idle_near_the_servers_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_module, "IDLE_KEEPALIVE_S", 0.2)

    async def go(url: str) -> tuple[int, int]:
        async with make_client(url) as client:
            first = await client.post(url + "/reset_prefix_cache")
            await asyncio.sleep(0.8)
            second = await client.post(url + "/reset_prefix_cache")
            return first.status_code, second.status_code

    with StreamServer(ServerKnobs(idle_close_s=0.4)) as srv:
        assert asyncio.run(go(srv.url)) == (200, 200)
        assert srv.connections == 2
