"""Streaming OpenAI ``/v1/completions`` client that stamps TTFT the way vLLM's bench does.

TTFT is the monotonic time from just before the request is sent to the first SSE ``data:``
event whose ``choices`` is non-empty (vllm/benchmarks/lib/endpoint_request_func.py). Every
failure (HTTP status, disconnect, timeout, malformed SSE, an error event) is recorded in the
result, never raised: a benchmark keeps its rows and the report says what went wrong.

The transport is aiohttp, the client ``vllm bench serve`` uses: per streamed request it costs
about half the CPU of httpx here (scripts/bench-client-overhead), and a benchmark client must
not be the bottleneck it measures. The JSON calls (models, tokenize, metrics) stay on httpx.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import aiohttp
from pydantic import BaseModel, Field

from kvstack.clients.client import IDLE_KEEPALIVE_S, auth_headers, trusts_env
from kvstack.jsonvalue import JsonObject


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
    # With ``logprobs`` asked for: each generated token and the top candidates' log-probabilities.
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float]] = Field(default_factory=list)
    # The served path's own log-probability of each token it generated (None where not reported).
    token_logprobs: list[float | None] = Field(default_factory=list)
    # With ``return_token_ids`` asked for (vLLM and SGLang): the generated tokens' ids, per event.
    token_ids: list[int] = Field(default_factory=list)
    prompt_token_ids: list[int] | None = None  # sent in the first event with ``return_token_ids``


class StreamClient:
    """A pool of keep-alive connections to one server for streamed completions.

    The pool opens on the first request, inside the event loop that uses it; close it with
    ``aclose()`` or use ``async with StreamClient(url) as client``.
    """

    def __init__(self, base_url: str, max_connections: int = 100) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> StreamClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self.max_connections, limit_per_host=0, keepalive_timeout=IDLE_KEEPALIVE_S
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),  # each request has its own deadline
                trust_env=trusts_env(self.base_url),
                auto_decompress=False,  # engines do not compress SSE; no decoder in the hot path
            )
        return self._session

    async def completion(
        self,
        model: str,
        prompt: str | list[int],
        max_tokens: int,
        api_key: str | None = None,
        timeout_s: float = 300,
        extra_body: JsonObject | None = None,
        logprobs: int | None = None,
    ) -> RequestResult:
        """Send one streamed completion and return its timings; never raises on server failures."""
        body: JsonObject = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            # Keep generation going to max_tokens so output lengths are comparable across runs.
            "ignore_eos": True,
        }
        if logprobs is not None:
            body["logprobs"] = logprobs
        if extra_body:
            body.update(extra_body)
        url = self.base_url + "/v1/completions"
        result = RequestResult(start_time=time.time())
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                async with self.session.post(url, json=body, headers=auth_headers(api_key)) as resp:
                    result.status = resp.status
                    if resp.status != 200:
                        result.error = f"HTTP {resp.status}: {_error_text(await resp.read())}"
                    else:
                        await _consume(resp.content.iter_any(), result, t0)
        except TimeoutError:
            result.error = f"timed out after {timeout_s:g} s"
        except aiohttp.ClientConnectorError as exc:
            result.error = f"cannot connect to {self.base_url}: {exc.os_error or exc}"
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as exc:
            result.error = f"connection lost mid-stream: {exc or type(exc).__name__}"
        except aiohttp.ClientError as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        result.e2e_s = time.perf_counter() - t0
        if not result.ok and result.error is None:
            result.error = "unknown failure"
        return result


def _usage(result: RequestResult, usage: JsonObject) -> None:
    if isinstance(usage.get("prompt_tokens"), int):
        result.prompt_tokens = usage["prompt_tokens"]
    if isinstance(usage.get("completion_tokens"), int):
        result.output_tokens = usage["completion_tokens"]
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        result.cached_tokens = details["cached_tokens"]


def _logprobs(result: RequestResult, lp: Any) -> None:
    """The OpenAI completions form: parallel lists ``tokens``, ``token_logprobs`` and ``top_logprobs``
    per event."""
    if not isinstance(lp, dict):
        return
    tokens, tops = lp.get("tokens") or [], lp.get("top_logprobs") or []
    own = lp.get("token_logprobs") or []
    for i, token in enumerate(tokens):
        result.tokens.append(str(token))
        value = own[i] if i < len(own) else None
        result.token_logprobs.append(float(value) if isinstance(value, int | float) else None)
        top = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
        result.top_logprobs.append({str(k): float(v) for k, v in top.items() if isinstance(v, int | float)})


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


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """SSE lines from the raw body, however the chunks cut it."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        if b"\n" not in chunk:
            continue
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            yield raw
    if pending:
        yield pending


async def _consume(chunks: AsyncIterator[bytes], result: RequestResult, t0: float) -> None:
    content_events = 0
    last = t0
    done = False
    async for line in _lines(chunks):
        line = line.strip()
        if not line.startswith(b"data:"):
            continue  # blank separators, SSE comments, "event:", "id:", "retry:" carry nothing we use
        payload = line[5:].strip()
        if payload == b"[DONE]":
            # Read on to the end of the body rather than break: a response left unread closes
            # the connection, and every request would then open a new one.
            done = True
            continue
        try:
            data = json.loads(payload)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            result.error = f"malformed SSE event: {payload[:120].decode('utf-8', 'replace')!r}"
            return
        if "error" in data and not data.get("choices"):
            err = data["error"]
            result.error = str(err.get("message", err) if isinstance(err, dict) else err)[:300]
            return
        now = time.perf_counter()
        if data.get("choices"):
            choice = data["choices"][0]
            if (lp := choice.get("logprobs")) is not None:
                _logprobs(result, lp)
            if isinstance(ids := choice.get("token_ids"), list):
                result.token_ids.extend(int(t) for t in ids if isinstance(t, int))
            if isinstance(ids := choice.get("prompt_token_ids"), list) and result.prompt_token_ids is None:
                result.prompt_token_ids = [int(t) for t in ids if isinstance(t, int)]
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
