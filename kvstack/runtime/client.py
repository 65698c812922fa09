"""Streaming OpenAI ``/v1/completions`` client that stamps TTFT the way vLLM's bench does.

TTFT is the monotonic time from just before the request is sent to the first SSE ``data:``
event whose ``choices`` is non-empty (vllm/benchmarks/lib/endpoint_request_func.py). Every
failure (HTTP status, disconnect, timeout, malformed SSE, an error event) is recorded in the
result, never raised: a benchmark keeps its rows and the report says what went wrong.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, Field

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0"})


class RequestResult(BaseModel):
    ok: bool = False
    status: int | None = None  # HTTP status; None when no response arrived
    error: str | None = None
    start_time: float = 0.0  # wall clock (time.time) when the request was sent
    ttft_s: float | None = None
    itl_s: list[float] = Field(default_factory=list)  # gaps between later content events
    e2e_s: float | None = None
    prompt_tokens: int | None = None  # from the usage event
    output_tokens: int = 0
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens when reported


def trusts_env(base_url: str) -> bool:
    """Honour proxy variables only for non-loopback servers: a proxy never reaches 127.0.0.1."""
    return (urlsplit(base_url).hostname or "") not in _LOOPBACK


def make_client(base_url: str, max_connections: int = 100) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.AsyncClient(trust_env=trusts_env(base_url), limits=limits, timeout=None)


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _usage(result: RequestResult, usage: dict[str, Any]) -> None:
    if isinstance(usage.get("prompt_tokens"), int):
        result.prompt_tokens = usage["prompt_tokens"]
    if isinstance(usage.get("completion_tokens"), int):
        result.output_tokens = usage["completion_tokens"]
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        result.cached_tokens = details["cached_tokens"]


def _error_text(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(data, dict):
        err = data.get("error", data.get("message", data.get("detail")))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)[:300]
    return text[:300]


async def _lines(resp: httpx.Response) -> AsyncIterator[str]:
    """SSE lines from the raw body: cheaper per event than httpx's text line decoder."""
    pending = b""
    async for chunk in resp.aiter_bytes():
        pending += chunk
        if b"\n" not in chunk:
            continue
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            yield raw.decode("utf-8", "replace")
    if pending:
        yield pending.decode("utf-8", "replace")


async def _consume(resp: httpx.Response, result: RequestResult, t0: float) -> None:
    content_events = 0
    last = t0
    done = False
    async for line in _lines(resp):
        line = line.strip()
        if not line.startswith("data:"):
            continue  # blank separators, SSE comments, "event:", "id:", "retry:" carry nothing we use
        payload = line[5:].strip()
        if payload == "[DONE]":
            # Read on to the end of the body rather than break: a response left unread makes
            # httpx close the connection, and every request would then open a new one.
            done = True
            continue
        try:
            data = json.loads(payload)
        except ValueError:
            result.error = f"malformed SSE event: {payload[:120]!r}"
            return
        if not isinstance(data, dict):
            result.error = f"malformed SSE event: {payload[:120]!r}"
            return
        if "error" in data and not data.get("choices"):
            err = data["error"]
            result.error = str(err.get("message", err) if isinstance(err, dict) else err)[:300]
            return
        now = time.perf_counter()
        if data.get("choices"):
            content_events += 1
            if result.ttft_s is None:
                result.ttft_s = now - t0
            else:
                result.itl_s.append(now - last)
            last = now
        if isinstance(data.get("usage"), dict):
            _usage(result, data["usage"])
    if not done:
        result.error = "stream ended before [DONE] (server closed the connection)"
        return
    if result.ttft_s is None:
        result.error = "stream finished without any token"
        return
    if result.output_tokens == 0:
        result.output_tokens = content_events
    result.ok = True


async def stream_completion(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    prompt: str | list[int],
    max_tokens: int,
    api_key: str | None = None,
    timeout_s: float = 300,
    extra_body: dict[str, Any] | None = None,
) -> RequestResult:
    """Send one streamed completion and return its timings; never raises on server failures."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        # Keep generation going to max_tokens so output lengths are comparable across runs.
        "ignore_eos": True,
    }
    if extra_body:
        body.update(extra_body)
    url = base_url.rstrip("/") + "/v1/completions"
    result = RequestResult(start_time=time.time())
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream(
                "POST", url, json=body, headers=auth_headers(api_key), timeout=timeout_s
            ) as resp:
                result.status = resp.status_code
                if resp.status_code != 200:
                    result.error = f"HTTP {resp.status_code}: {_error_text(await resp.aread())}"
                else:
                    await _consume(resp, result, t0)
    except TimeoutError:
        result.error = f"timed out after {timeout_s:g} s"
    except httpx.TimeoutException as exc:
        result.error = f"timed out ({type(exc).__name__})"
    except httpx.ConnectError as exc:
        result.error = f"cannot connect to {base_url}: {exc}"
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        result.error = f"connection lost mid-stream: {exc or type(exc).__name__}"
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.e2e_s = time.perf_counter() - t0
    if not result.ok and result.error is None:
        result.error = "unknown failure"
    return result
