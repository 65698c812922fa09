"""Token prompts for a trace replay: the same hash id gives the same token block, always.

A trace row says which 512-token prefix blocks a request shares with earlier ones (``hash_ids``)
and nothing of their text. The replay sends token ids (the completions API takes them as the
prompt, so no tokenizer merges across block boundaries and no BOS shifts them): block ``h`` is
``block_tokens`` ids drawn from a generator seeded with (run seed, h), from a pool of ordinary
word tokens of the served model. Equal ids, equal blocks; different ids differ in their first few
tokens with overwhelming probability. A row's last block may be partial: it is the leading part
of the same block, as the trace's prefix ids mean.

What is sent is also what the prediction simulates (``SentRequest.as_trace``): each prompt is cut
to a whole number of ``align`` tokens (the least common multiple of the engine's KV block and
LMCache's chunk), because engines cache only whole blocks and LMCache only whole chunks, and to
what the context holds with the request's output.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from kvstack.bench.text import pool_words
from kvstack.clients.client import auth_headers, trusts_env
from kvstack.errors import InputError
from kvstack.jsonvalue import JsonObject
from kvstack.traces.mooncake import TraceRow

MIN_POOL = 32  # distinct token ids needed so that blocks of different ids differ


@dataclass(frozen=True)
class SentRequest:
    """One trace row as replayed."""

    index: int  # position in the replayed slice
    line: int  # position in the trace after slicing and sampling (for the CSV)
    arrival_s: float  # send time after the replay's start (time-scaled)
    hash_ids: tuple[int, ...]  # the blocks actually sent (after cutting)
    prompt_tokens: int
    output_tokens: int
    session: str
    original_input: int  # input_length in the trace, before scaling

    def as_trace(self) -> TraceRow:
        return TraceRow(
            timestamp_ms=self.arrival_s * 1000.0,
            input_length=self.prompt_tokens,
            output_length=self.output_tokens,
            hash_ids=list(self.hash_ids),
            session_id=self.session,
        )


@dataclass(frozen=True)
class ReplayShape:
    block_tokens: int
    align: int  # prompts are whole multiples of this many tokens
    max_prompt_tokens: int  # the context minus the output
    max_output_tokens: int
    time_scale: float  # arrival = trace timestamp x time_scale (0: back to back)


def plan_requests(
    requests: Sequence[TraceRow], shape: ReplayShape, session_of: Any = None
) -> tuple[list[SentRequest], list[str]]:
    """The rows as sent (already scaled to ``shape.block_tokens``); notes say what was cut."""
    out: list[SentRequest] = []
    cut_context = dropped = 0
    t0 = min((r.timestamp_ms for r in requests), default=0.0)
    for i, r in enumerate(requests):
        output = max(1, min(r.output_length, shape.max_output_tokens))
        limit = min(r.input_length, shape.max_prompt_tokens, len(r.hash_ids) * shape.block_tokens)
        if limit < r.input_length:
            cut_context += 1
        tokens = (limit // shape.align) * shape.align
        if tokens < shape.align:
            dropped += 1
            continue
        blocks = math.ceil(tokens / shape.block_tokens)
        session = str(session_of(r)) if session_of is not None else (r.session_id or "")
        out.append(
            SentRequest(
                index=len(out),
                line=i,
                arrival_s=(r.timestamp_ms - t0) / 1000.0 * shape.time_scale,
                hash_ids=tuple(r.hash_ids[:blocks]),
                prompt_tokens=tokens,
                output_tokens=output,
                session=session,
                original_input=r.input_length,
            )
        )
    notes = [f"prompts cut to whole multiples of {shape.align} tokens (the engine caches whole blocks)"]
    if cut_context:
        notes.append(
            f"{cut_context} prompts cut to the context ({shape.max_prompt_tokens} tokens with the output)"
        )
    if dropped:
        notes.append(f"{dropped} rows shorter than {shape.align} tokens after scaling were left out")
    return out, notes


class BlockTokens:
    """Token ids per hash id, drawn once and kept (a replay's distinct blocks fit in memory)."""

    def __init__(self, pool: Sequence[int], block_tokens: int, seed: int) -> None:
        if len(set(pool)) < MIN_POOL:
            raise InputError(
                f"the served model's tokenizer gave only {len(set(pool))} distinct word tokens",
                hint="replay against a model with an ordinary text vocabulary",
            )
        self.pool = sorted(set(pool))
        self.block_tokens = block_tokens
        self.seed = seed
        self._blocks: dict[int, list[int]] = {}

    def block(self, hash_id: int) -> list[int]:
        got = self._blocks.get(hash_id)
        if got is None:
            rng = random.Random(f"kvstack-trace:{self.seed}:{hash_id}")
            got = self._blocks[hash_id] = [rng.choice(self.pool) for _ in range(self.block_tokens)]
        return got

    def prompt(self, sent: SentRequest) -> list[int]:
        ids: list[int] = []
        for h in sent.hash_ids:
            ids.extend(self.block(h))
        return ids[: sent.prompt_tokens]


def _server_pool(base_url: str, model: str, api_key: str | None) -> list[int]:
    text = "".join(f" {w}" for w in pool_words())
    body: JsonObject = {"model": model, "prompt": text, "add_special_tokens": False}
    with httpx.Client(timeout=30, trust_env=trusts_env(base_url)) as client:
        resp = client.post(base_url.rstrip("/") + "/tokenize", json=body, headers=auth_headers(api_key))
    resp.raise_for_status()
    tokens = resp.json().get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise ValueError("no token ids in the /tokenize answer")
    return tokens


def _local_pool(model: str) -> list[int] | None:
    path = Path(model) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer  # the engine's dependency; only a local model dir needs it

    tok = Tokenizer.from_file(str(path))
    return list(tok.encode("".join(f" {w}" for w in pool_words()), add_special_tokens=False).ids)


def token_pool(base_url: str, model: str, api_key: str | None, model_dir: str | None = None) -> list[int]:
    """Ordinary word tokens of the served model: from its /tokenize, else its local tokenizer.json."""
    try:
        return _server_pool(base_url, model, api_key)
    except (httpx.HTTPError, ValueError):
        pass
    for candidate in (model_dir, model):
        if candidate:
            pool = _local_pool(candidate)
            if pool:
                return pool
    raise InputError(
        f"cannot build token prompts: {base_url}/tokenize did not answer with token ids and the model "
        "has no local tokenizer.json",
        hint="replay against vLLM or SGLang (both serve /tokenize), or pass --model DIR",
    )
