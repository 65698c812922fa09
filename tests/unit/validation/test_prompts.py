"""Unique prompts of N tokens: nonce first, token-exact through a real /tokenize."""

from __future__ import annotations

import asyncio

import httpx

from kvstack.validation.prompts import Prompt, PromptBuilder, new_nonce, prompt_text
from tests.support.stream_server import BOS, ServerKnobs, StreamServer


def build_many(builder: PromptBuilder, n_tokens: int, count: int) -> list[Prompt]:
    async def go() -> list[Prompt]:
        return [await builder.build(n_tokens) for _ in range(count)]

    return asyncio.run(go())


def test_estimated_prompts_start_with_distinct_words() -> None:
    prompts = build_many(PromptBuilder(), 512, 60)
    firsts = [p.text.split()[0].split("-")[0] for p in prompts]
    assert len(set(firsts)) == 60  # a new leading word every time
    assert len({p.nonce for p in prompts}) == 60
    assert all(not p.exact and p.payload == p.text for p in prompts)
    assert all(abs(p.tokens - 512) <= 2 for p in prompts)


def test_calibration_sizes_text_prompts() -> None:
    builder = PromptBuilder(tokens_per_word=1.3)
    builder.calibrate(words=100, prompt_tokens=200)
    (p,) = build_many(builder, 1000, 1)
    assert builder.calibrated and p.words == 500


def test_filler_is_reproducible_per_nonce() -> None:
    assert prompt_text("Tree-abc", 50) == prompt_text("Tree-abc", 50)
    assert prompt_text("Tree-abc", 50) != prompt_text("Tree-abd", 50)
    assert new_nonce() != new_nonce()


def test_token_exact_prompts_through_tokenize() -> None:
    with StreamServer(ServerKnobs()) as srv:

        async def tokenize(text: str) -> list[int] | None:
            async with httpx.AsyncClient(trust_env=False) as client:
                resp = await client.post(srv.url + "/tokenize", json={"prompt": text})
                return list(resp.json()["tokens"])

        prompts = build_many(PromptBuilder(tokenize), 777, 12)
    assert all(p.exact and p.tokens == 777 and len(p.payload) == 777 for p in prompts)
    assert all(isinstance(p.payload, list) and p.payload[0] == BOS for p in prompts)
    first_content = [p.payload[1] for p in prompts if isinstance(p.payload, list)]
    assert len(set(first_content)) == 12  # unique from the first token after BOS


def test_falls_back_when_the_server_has_no_tokenize() -> None:
    with StreamServer(ServerKnobs(tokenize=False)) as srv:

        async def tokenize(text: str) -> list[int] | None:
            async with httpx.AsyncClient(trust_env=False) as client:
                resp = await client.post(srv.url + "/tokenize", json={"prompt": text})
                return list(resp.json()["tokens"]) if resp.status_code == 200 else None

        builder = PromptBuilder(tokenize)
        (p,) = build_many(builder, 300, 1)
    assert not p.exact and builder.tokenizer is None
