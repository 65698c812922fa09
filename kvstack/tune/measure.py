"""One candidate measured on a running layout: bench --trace's replay of the slice, then bench
--check-correctness's judgement on prompts the replay's tiers served.

The replay is ``bench.trace_command.run_layout_replay``, exactly as ``bench --trace --compare``
runs each layout: the first layout decides what is sent (its context and KV block, the token
pool of the served model) and every later one gets the same prompts (``Shared``). tune keeps that
decision in results.json (``replay_state``) so that a resumed tune sends the same prompts too.

The correctness check sends again the K replayed prompts that the offload tiers served most of
(the engine's own cache for ``none``), as they are and led by a nonce of random pool tokens
(bench/correctness.py's ``token_checks``), and judges each answer against recompute.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvstack.bench.correctness import NONCE_TOKENS, check_prompts, token_checks
from kvstack.bench.schema import CorrectnessResult, LayoutResult, RequestRow
from kvstack.bench.trace_command import Shared, TraceArgs, run_layout_replay
from kvstack.bench.trace_prompts import BlockTokens, ReplayShape, plan_requests
from kvstack.clients import token_sources as ts
from kvstack.clients.streaming import StreamClient
from kvstack.serving.served_layout import Layout
from kvstack.traces.mooncake import TraceRequest
from kvstack.traces.sample import session_key
from kvstack.validation.thresholds import DEFAULT_TOKENS

DEFAULT_CHECKS = 4
_TIER_FIELDS = ("dram_tokens", "disk_tokens", "remote_tokens", "offload_tokens")


@dataclass(frozen=True)
class ReplaySetup:
    """What every candidate's replay shares: the slice (scaled), how it is sent, the check's size."""

    rows: list[TraceRequest]
    args: TraceArgs
    model: str
    api_key: str | None = None
    timeout_s: float = 300.0
    check_k: int = DEFAULT_CHECKS
    engine: str = "vllm"


@dataclass(frozen=True)
class EngineSize:
    """The served engine's prefix cache, as its counters report it (the slice is predicted on it)."""

    block_tokens: int
    pool_tokens: int


def replay(
    layout: Layout, setup: ReplaySetup, shared: Shared, on_row: Callable[[RequestRow], None] | None = None
) -> tuple[LayoutResult, list[RequestRow], dict[str, Any]]:
    """bench --trace's replay of ``setup``'s slice on ``layout`` (no TTFT calibration after it)."""
    return run_layout_replay(
        layout, setup.rows, setup.args, shared, model=setup.model, api_key=setup.api_key,
        timeout_s=setup.timeout_s, on_row=on_row, ttft_check=False,
    )  # fmt: skip


def engine_size(compared: Mapping[str, Any]) -> EngineSize | None:
    """The engine level of a replay's hierarchy (vllm:cache_config_info), if its counters gave one."""
    for level in (compared.get("hierarchy") or {}).get("levels") or []:
        if level.get("tier") == ts.ENGINE_CACHE:
            unit = int(level["unit_tokens"])
            return EngineSize(unit, unit * int(level["nominal_blocks"]))
    return None


def _tier_tokens(r: RequestRow) -> float:
    return float(sum(getattr(r, f) or 0.0 for f in _TIER_FIELDS))


def checked_requests(rows: Sequence[RequestRow], k: int) -> list[int]:
    """The ``k`` answered requests the offload tiers served most of, then the engine's cache (the
    later first among equals: more likely still held)."""
    ok = [r for r in rows if r.ok]
    order = sorted(ok, key=lambda r: (_tier_tokens(r), r.engine_cache_tokens or 0.0, r.index), reverse=True)
    return [r.index for r in order[:k]]


def check(
    layout: Layout, setup: ReplaySetup, shared: Shared, rows: Sequence[RequestRow]
) -> CorrectnessResult:
    """bench --check-correctness's judgement of the prompts ``checked_requests`` picks."""
    assert shared.blocks is not None and shared.shape is not None
    by_index = {s.index: s for s in shared.sent}
    # The prompt, the nonce and the answer must fit the context the replay was shaped to.
    room = shared.shape.max_prompt_tokens + shared.shape.max_output_tokens - DEFAULT_TOKENS - NONCE_TOKENS
    prompts = [
        (i, shared.blocks.prompt(by_index[i])[: max(1, room)]) for i in checked_requests(rows, setup.check_k)
    ]
    checked = token_checks(prompts, shared.blocks.pool)
    model = layout.served_model or setup.model

    async def run() -> CorrectnessResult:
        async with StreamClient(layout.base_url, 1) as client:
            return await check_prompts(client, checked, model, setup.api_key, setup.timeout_s, setup.engine)

    return asyncio.run(run())


def shared_state(shared: Shared, engine: EngineSize | None) -> dict[str, Any]:
    """What the first layout decided, as results.json keeps it (``restore`` reads it back)."""
    assert shared.shape is not None and shared.blocks is not None
    s = shared.shape
    return {
        "shape": {
            "block_tokens": s.block_tokens,
            "align": s.align,
            "max_prompt_tokens": s.max_prompt_tokens,
            "max_output_tokens": s.max_output_tokens,
            "time_scale": s.time_scale,
        },
        "pool": shared.blocks.pool,
        "seed": shared.blocks.seed,
        "notes": shared.notes,
        "engine": None
        if engine is None
        else {"block_tokens": engine.block_tokens, "pool_tokens": engine.pool_tokens},
        "requests_sent": len(shared.sent),
        "prompt_tokens": sum(s.prompt_tokens for s in shared.sent),
    }


def restore(doc: Mapping[str, Any], rows: Sequence[TraceRequest]) -> tuple[Shared, EngineSize | None]:
    """``shared_state``'s document back: the same prompts for the candidates still to measure.
    KeyError, TypeError or ValueError on a damaged one."""
    sh = doc["shape"]
    shape = ReplayShape(
        int(sh["block_tokens"]), int(sh["align"]), int(sh["max_prompt_tokens"]),
        int(sh["max_output_tokens"]), float(sh["time_scale"]),
    )  # fmt: skip
    sent, _ = plan_requests(rows, shape, session_key)
    if len(sent) != int(doc["requests_sent"]):
        raise ValueError(f"{len(sent)} requests to send, {doc['requests_sent']} when it was saved")
    blocks = BlockTokens([int(t) for t in doc["pool"]], shape.block_tokens, int(doc["seed"]))
    engine = doc.get("engine")
    size = EngineSize(int(engine["block_tokens"]), int(engine["pool_tokens"])) if engine else None
    return Shared(sent=sent, blocks=blocks, shape=shape, notes=[str(n) for n in doc.get("notes") or []]), size
