"""One validation run's conversation with the server: models, tokenize, requests, scrapes, resets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from kvstack.clients import models
from kvstack.clients.client import auth_headers, make_client
from kvstack.clients.metrics import MetricsSnapshot, scrape
from kvstack.clients.reset import reset_cache
from kvstack.clients.streaming import RequestResult, StreamClient
from kvstack.errors import InputError
from kvstack.validation.prompts import Prompt
from kvstack.validation.report import ValidationTarget
from kvstack.validation.scoring import (
    CHECKED_EXTRA_BODY,
    CHECKED_LOGPROBS,
    PositionScore,
    recompute_answer,
    score,
)


class ServerApi:
    """One validation run against one server: requests, scrapes, resets. Close it with aclose()."""

    def __init__(self, target: ValidationTarget, between: Callable[[], None] | None) -> None:
        self.target = target
        self.client = make_client(target.base_url, max_connections=8)  # the JSON endpoints
        self.streams = StreamClient(target.base_url, max_connections=8)  # streamed completions
        self.base = target.base_url.rstrip("/")
        self.metrics_urls = target.metrics_urls or [self.base + "/metrics"]
        self.headers = auth_headers(target.api_key)
        self.between = between
        self.model = target.model or ""
        self.max_model_len: int | None = None

    async def aclose(self) -> None:
        await self.streams.aclose()
        await self.client.aclose()

    async def __aenter__(self) -> ServerApi:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def discover(self) -> None:
        try:
            resp = await self.client.get(self.base + models.PATH, headers=self.headers, timeout=15.0)
        except httpx.HTTPError as exc:
            raise models.request_failed(exc, self.target.base_url) from exc
        data = models.model_cards(resp, self.target.base_url)
        ids = [str(d.get("id")) for d in data if isinstance(d, dict)]
        if not self.model:
            self.model = ids[0]
        elif self.model not in ids:
            raise InputError(
                f"the server does not serve model {self.model!r}", hint=f"it serves: {', '.join(ids)}"
            )
        card = next((d for d in data if isinstance(d, dict) and d.get("id") == self.model), {})
        if isinstance(card.get("max_model_len"), int):
            self.max_model_len = card["max_model_len"]

    async def tokenize(self, text: str) -> list[int] | None:
        try:
            body = {"model": self.model, "prompt": text}
            url = self.base + "/tokenize"
            resp = await self.client.post(url, json=body, headers=self.headers, timeout=30)
            tokens = resp.json().get("tokens") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        if isinstance(tokens, list) and all(isinstance(x, int) for x in tokens):
            return tokens
        return None

    async def send(self, prompt: Prompt, generate: bool = False) -> RequestResult:
        """One streamed request; ``generate``: greedy tokens, with their ids, for the correctness
        gate (TTFT is still the first token's)."""
        if self.between is not None:
            self.between()
        n = self.target.correctness_tokens if generate else 0
        return await self.streams.completion(
            self.model,
            prompt.payload,
            max(1, n),
            self.target.api_key,
            self.target.timeout_s,
            extra_body=CHECKED_EXTRA_BODY if n else None,
            logprobs=CHECKED_LOGPROBS if n else None,
        )

    async def score(self, prompt: Prompt, served: RequestResult, engine: str) -> list[PositionScore] | str:
        """A guaranteed recompute's log-probabilities of every token ``served`` generated."""
        if self.between is not None:
            self.between()
        prompt_ids = served.prompt_token_ids or prompt.token_ids
        if prompt_ids is None:
            return "the prompt's token ids are unknown (no /tokenize and no prompt_token_ids in the stream)"
        if not served.token_ids:
            return "the served request returned no token ids (return_token_ids is not supported)"
        return await score(
            self.client,
            self.base,
            self.headers,
            engine,
            self.model,
            prompt_ids,
            served.token_ids,
            self.target.top_k,
        )

    async def recompute_scored(
        self, prompt: Prompt, engine: str
    ) -> tuple[RequestResult | str, list[PositionScore] | str]:
        """The prompt answered by a recompute that reads no cache (scoring.recompute_answer), and that
        answer's scores by the same recompute prefill as every served answer's; or why not."""
        if self.between is not None:
            self.between()
        if prompt.token_ids is None:
            why = "the prompt's token ids are unknown (the server has no /tokenize)"
            return why, why
        n = self.target.correctness_tokens
        own = await recompute_answer(
            self.client, self.base, self.headers, engine, self.model, prompt.token_ids, n
        )
        if isinstance(own, str):
            return own, own
        return own, await self.score(prompt, own, engine)

    async def scrape(self) -> MetricsSnapshot:
        return await scrape(self.client, self.metrics_urls, self.target.api_key)

    async def settled(
        self, before: MetricsSnapshot, moved: Callable[[MetricsSnapshot], bool], wait_s: float = 1.5
    ) -> MetricsSnapshot:
        # Engines update counters just after the response; poll briefly before calling it "no hit".
        deadline = time.monotonic() + wait_s
        snap = await self.scrape()
        while snap.samples and not moved(snap) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            snap = await self.scrape()
        return snap

    async def reset(self, path: str) -> tuple[bool, str]:
        return await reset_cache(self.client, self.base, path, self.headers)
