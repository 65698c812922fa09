"""Requests in flight while a verdict is taken: ``validate --concurrency N`` keeps N-1 of them.

Production judges a cache with other requests running beside the one that reads it: their prefill
and decode share the engine's batches (other batch shapes, other numerics) and their KV passes
through the same tiers. The load here is that: ``streams`` loops, each sending a fresh nonce-led
prompt (validation/prompts.py: nothing cached can serve it, so it moves no hit counter the steps
read) and decoding ``tokens`` greedily, one after another until stopped. What it did is reported
with the verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from dataclasses import dataclass, field

from pydantic import BaseModel

from kvstack.clients.streaming import StreamClient
from kvstack.validation.prompts import PromptBuilder, Tokenizer

DEFAULT_LOAD_TOKENS = 128  # decoded per load request: requests in flight spend most of their time decoding


class LoadReport(BaseModel):
    """The load a verdict was taken under, recorded in validation.json."""

    concurrency: int  # requests in flight: the judged one and the load's
    streams: int
    prompt_tokens: int
    output_tokens: int
    requests: int = 0
    failed: int = 0
    median_ttft_s: float | None = None
    first_error: str = ""

    def line(self) -> str:
        text = (
            f"judged with {self.concurrency} requests in flight: {self.streams} load streams of fresh "
            f"{self.prompt_tokens}-token prompts decoding {self.output_tokens} tokens each, "
            f"{self.requests} load requests answered"
        )
        if self.median_ttft_s is not None:
            text += f" (median TTFT {self.median_ttft_s:.3f} s)"
        if self.failed:
            text += f", {self.failed} failed: {self.first_error}"
        return text


@dataclass
class Load:
    """``async with Load(...)``: the streams run inside the block."""

    base_url: str
    model: str
    api_key: str | None
    streams: int
    prompt_tokens: int
    tokenizer: Tokenizer | None = None
    output_tokens: int = DEFAULT_LOAD_TOKENS
    timeout_s: float = 300.0
    ttfts: list[float] = field(default_factory=list)
    failed: int = 0
    first_error: str = ""
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _client: StreamClient | None = None

    async def __aenter__(self) -> Load:
        if self.streams > 0:
            self._client = StreamClient(self.base_url, max_connections=self.streams)
            builder = PromptBuilder(self.tokenizer)
            self._tasks = [asyncio.create_task(self._stream(builder)) for _ in range(self.streams)]
            await asyncio.sleep(0)  # the streams' first requests go out before the judged one
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._client is not None:
            await self._client.aclose()

    async def _stream(self, builder: PromptBuilder) -> None:
        assert self._client is not None
        while True:
            prompt = await builder.build(self.prompt_tokens)
            r = await self._client.completion(
                self.model, prompt.payload, self.output_tokens, self.api_key, self.timeout_s
            )
            if r.ok and r.ttft_s is not None:
                self.ttfts.append(r.ttft_s)
            else:
                self.failed += 1
                self.first_error = self.first_error or str(r.error)
                await asyncio.sleep(0.5)

    def report(self) -> LoadReport:
        return LoadReport(
            concurrency=self.streams + 1,
            streams=self.streams,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            requests=len(self.ttfts),
            failed=self.failed,
            median_ttft_s=round(statistics.median(self.ttfts), 4) if self.ttfts else None,
            first_error=self.first_error[:200],
        )
