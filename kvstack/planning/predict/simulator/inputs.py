"""What the simulator takes: a step's costs, the scheduler's limits, the offload tiers and the
requests. Pure, typed, validated where made.

The costs are those of the plan's TTFT model (planning/predict/capacity_schema.py ``LayoutCosts``)
or a calibration's, in seconds, spent per forward step rather than per request:

- a step costs ``fixed_s`` (reading every weight once), whatever it runs;
- a prefill chunk of ``c`` new tokens after ``p`` tokens already in the KV (cached, loaded or
  computed by an earlier chunk) costs ``prefill_s_per_token x c + prefill_attn_s_per_token2 x
  ((p + c)^2 - p^2)``: the attention term is the integral of the per-position cost ``2 x attn x
  position``, so a prompt of ``N`` tokens computed whole or in chunks costs ``attn x N^2``
  (planning/predict/breakeven.py's ``attn_flops_coeff x N^2 / flops``), and ``N - H`` tokens after
  ``H`` cached ones ``attn x (N^2 - H^2)`` (``LayoutCosts.quadratic_s``);
- each decoding sequence costs ``decode_s_per_seq`` a step, plus ``decode_s_per_kv_token`` for
  each token of KV it attends to (the KV read of a memory-bound decode);
- a tier's load of ``T`` tokens costs ``load_latency_s + T x bytes_per_token / load_bw``, a store
  ``T x bytes_per_token / store_bw``; added to the step, or, where the connector overlaps them with
  compute, the step lasts ``max(compute, transfers)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

TierKind = Literal["cpu", "disk", "remote"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StepCosts(_Frozen):
    """A forward step's cost terms, in seconds (see the module's equations)."""

    fixed_s: float = Field(ge=0)
    prefill_s_per_token: float = Field(ge=0)
    prefill_attn_s_per_token2: float = Field(default=0.0, ge=0)
    decode_s_per_seq: float = Field(ge=0)
    decode_s_per_kv_token: float = Field(default=0.0, ge=0)
    source: str = ""  # "calibrated on ..." or "estimate: roofline ..."

    def prefill_s(self, cached: int, new: int) -> float:
        """``new`` prompt tokens computed after ``cached`` ones already in the KV."""
        end = cached + new
        return self.prefill_s_per_token * new + self.prefill_attn_s_per_token2 * (end * end - cached * cached)

    def decode_s(self, seqs: int, kv_tokens: int) -> float:
        """``seqs`` sequences decoding one token each, attending to ``kv_tokens`` in all."""
        return self.decode_s_per_seq * seqs + self.decode_s_per_kv_token * kv_tokens


class SchedulerLimits(_Frozen):
    """The engine's scheduler and KV pool (vLLM's ``--max-num-batched-tokens``, ``--max-num-seqs``,
    ``--block-size``, the blocks its memory profile leaves, ``--enable-chunked-prefill``,
    ``--enable-prefix-caching``)."""

    max_num_batched_tokens: int = Field(ge=1)
    max_num_seqs: int = Field(ge=1)
    block_tokens: int = Field(ge=1)
    pool_blocks: int = Field(ge=1)
    chunked_prefill: bool = True
    prefix_caching: bool = True

    @classmethod
    def of_engine(
        cls,
        *,
        batched_tokens: int,
        max_seqs: int,
        block_tokens: int,
        pool_tokens: int,
        chunked_prefill: bool = True,
        prefix_caching: bool = True,
        min_pool_blocks: int = 1,
    ) -> SchedulerLimits:
        """The engine's limits from its settings (connectors/engines.py ``SchedulerDefaults.limits``
        or the served engine's): a token budget under its sequences raised to them, its pool in whole
        blocks, at least ``min_pool_blocks`` (vLLM refuses to start with fewer than its longest
        request needs)."""
        return cls(
            max_num_batched_tokens=max(batched_tokens, max_seqs),
            max_num_seqs=max_seqs,
            block_tokens=block_tokens,
            pool_blocks=max(1, min_pool_blocks, pool_tokens // block_tokens),
            chunked_prefill=chunked_prefill,
            prefix_caching=prefix_caching,
        )

    @model_validator(mode="after")
    def _budget(self) -> SchedulerLimits:
        # vLLM's SchedulerConfig refuses it too: every running sequence gets its token each step.
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be at least max_num_seqs")
        return self


class TierSpec(_Frozen):
    """One offload tier: an LRU of ``capacity_chunks`` chunks of ``chunk_tokens`` tokens."""

    kind: TierKind
    capacity_chunks: int = Field(ge=0)
    chunk_tokens: int = Field(ge=1)
    bytes_per_token: float = Field(gt=0)
    load_bw_bytes_per_s: float = Field(gt=0)
    load_latency_s: float = Field(default=0.0, ge=0)
    store_bw_bytes_per_s: float = Field(gt=0)
    overlapped: bool = False  # its loads overlap the step's compute (connector-dependent)
    # ... and the request loaded waits for its own load: it computes from the next step on (engine.py)
    load_waits: bool = False
    store_overlapped: bool | None = None  # its stores do (None: as its loads; LMCache's are async)

    @property
    def stores_overlap(self) -> bool:
        return self.overlapped if self.store_overlapped is None else self.store_overlapped

    def load_s(self, tokens: int) -> float:
        return self.load_latency_s + tokens * self.bytes_per_token / self.load_bw_bytes_per_s

    def store_s(self, tokens: int) -> float:
        return tokens * self.bytes_per_token / self.store_bw_bytes_per_s


class Layout(_Frozen):
    """A served layout: the engine's costs and limits, and its offload tiers, fastest first.

    The tiers are inclusive (every computed chunk is written to each, as LMCache's L1 and its L2
    adapters, vLLM's native offload and HiCache's write-through do); ``readmit``: a chunk served from
    a lower tier is copied into the tiers above it (LMCache 0.5.6's server does not: False).
    ``request_s``: the offload path's own cost for each request it admits (lookup, transfer setup;
    planning/predict/trace_sizing.py's ``OFFLOAD_REQUEST_COST_S``), added to that step; none without
    tiers. A request-level gate (tune's candidates: tune/space.py ``Gate``): a prompt shorter than
    ``gate_prompt_tokens`` skips the offload path (no lookup, no load, no ``request_s``; its chunks
    still stored: kvstack's gated connector); a request the tiers would serve fewer than
    ``gate_load_tokens`` recomputes them, its lookup paid (in-process LMCache's
    ``min_retrieve_tokens``). 0: no gate. ``outside_s``: what each request spends outside the
    engine's steps before the scheduler sees it (HTTP, tokenization: a calibration's fixed cost a
    request less the forward step), in its TTFT and, in a closed loop, before its client's next.
    """

    name: str = "engine"
    costs: StepCosts
    limits: SchedulerLimits
    tiers: tuple[TierSpec, ...] = ()
    readmit: bool = False
    request_s: float = Field(default=0.0, ge=0)
    gate_prompt_tokens: int = Field(default=0, ge=0)
    gate_load_tokens: int = Field(default=0, ge=0)
    outside_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _chunks(self) -> Layout:
        sizes = {t.chunk_tokens for t in self.tiers}
        if len(sizes) > 1:
            raise ValueError("the offload tiers share one chunk size (the connector's)")
        if sizes and next(iter(sizes)) % self.limits.block_tokens:
            raise ValueError("a tier's chunk must be a whole number of the engine's blocks")
        return self

    @property
    def chunk_tokens(self) -> int:
        return self.tiers[0].chunk_tokens if self.tiers else 0

    def named(self, name: str) -> Layout:
        """This layout under another name (a sweep's layout served as the plan's deepest)."""
        return self.model_copy(update={"name": name})

    def pool_alone(self) -> Layout:
        """This layout without its offload tiers (nor their per-request cost or gates)."""
        return self.model_copy(
            update={"tiers": (), "request_s": 0.0, "gate_prompt_tokens": 0, "gate_load_tokens": 0}
        )

    def tier_alone(self, tier: int) -> Layout:
        """This layout with its ``tier``-th offload tier alone and a pool that serves no prefix: what
        serves a hit from that tier (simulator/alone.py)."""
        limits = self.limits.model_copy(update={"prefix_caching": False})
        return self.model_copy(update={"tiers": (self.tiers[tier],), "limits": limits})


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request: when it arrives (its round's start and its offset in it), its tokens, and its
    prompt's prefix ids.

    ``prefix_ids[i]`` names the prompt's tokens ``[i x id_tokens, (i + 1) x id_tokens)`` *and every
    token before them* (a prefix-chain id, as a Mooncake trace's ``hash_ids`` or an engine's chained
    block hash): two prompts share a prefix exactly as far as they share leading ids. The simulator
    derives the keys of its own blocks and chunks from them (``unit_keys``), so the ids may be at
    any block size: the trace's 512 tokens, the engine's block, or the one a replay scales to.
    """

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_ids: tuple[int, ...]
    id_tokens: int
    # Rounds run in order (bench's, bench/runner.py): a request of round ``r > 0`` is sent
    # ``arrival_s`` after the last of round ``r - 1`` finished (closed loop: when a client is free).
    round: int = 0

    def __post_init__(self) -> None:
        if self.round < 0:
            raise ValueError("a request's round must not be negative")
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError("a request needs a prompt token and an output token at least")
        if self.arrival_s < 0 or self.id_tokens < 1:
            raise ValueError("arrival_s must not be negative, id_tokens must be positive")
        if len(self.prefix_ids) * self.id_tokens < self.prompt_tokens:
            raise ValueError("prefix_ids must cover the prompt")
        if any(i < 0 for i in self.prefix_ids):
            raise ValueError("prefix ids are non-negative (the simulator keys its own blocks below 0)")


def unit_keys(prefix_ids: Sequence[int], id_tokens: int, unit_tokens: int, tokens: int) -> list[int]:
    """The keys of the whole ``unit_tokens`` blocks in a prompt's first ``tokens`` tokens.

    A block is the prefix it ends: the id holding its last token and that token's offset in it,
    ``id x id_tokens + offset`` (planning/predict/capacity.py's identity). An id of 512 tokens thus
    splits into 512 / 16 engine blocks ``id x 512 + 15, id x 512 + 31, ...``; two prompts' blocks
    are equal exactly when the prompts share every token up to the block's end.
    """
    n = tokens // unit_tokens
    if n <= 0:
        return []
    if id_tokens % unit_tokens == 0:
        per = id_tokens // unit_tokens
        ids = np.asarray(prefix_ids[: -(-n // per)], dtype=np.int64) * id_tokens
        offsets = np.arange(unit_tokens - 1, id_tokens, unit_tokens, dtype=np.int64)
        keys: list[int] = (ids[:, None] + offsets).ravel()[:n].tolist()
        return keys
    return [
        prefix_ids[(e - 1) // id_tokens] * id_tokens + (e - 1) % id_tokens
        for e in range(unit_tokens, n * unit_tokens + 1, unit_tokens)
    ]
