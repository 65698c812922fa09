"""One candidate measured on a running layout: bench --trace's replay of the slice with its
--check-correctness judgement.

The replay is ``bench.replay.trace_bench.run_layout_replay``, exactly as ``bench --trace --compare
--check-correctness K`` runs each layout: the first layout decides what is sent (its context and
KV block, the token pool of the served model) and every later one gets the same prompts
(``Shared``); the K replayed answers the caches served most of (the offload tiers' first) are
judged against recompute (bench/correctness.py ``check_replayed``). tune keeps the first layout's
decision in results.json (``shared_state``) so that a resumed tune sends the same prompts too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from kvstack.bench.replay.prompts import BlockTokens, ReplayShape, plan_requests
from kvstack.bench.replay.results import LayoutComparison
from kvstack.bench.replay.trace_bench import ReplayOutcome, ReplayRequest, Shared, run_layout_replay
from kvstack.bench.schema import RequestRow
from kvstack.clients import token_sources
from kvstack.serving.served_layout import ServedLayout
from kvstack.traces.mooncake import TraceRow
from kvstack.traces.sample import session_key
from kvstack.tune import results


@dataclass(frozen=True)
class CandidateReplay:
    """What every candidate's replay shares: the slice (scaled) and how it is sent (``args``: its
    ``check_correctness`` is the answers judged)."""

    rows: list[TraceRow]
    args: ReplayRequest
    model: str
    api_key: str | None = None
    timeout_s: float = 300.0


@dataclass(frozen=True)
class EngineSize:
    """The served engine's prefix cache, as its counters report it (the slice is predicted on it)."""

    block_tokens: int
    pool_tokens: int


def replay(
    layout: ServedLayout,
    setup: CandidateReplay,
    shared: Shared,
    on_row: Callable[[RequestRow], None] | None = None,
    calibrate: bool = False,
) -> ReplayOutcome:
    """bench --trace's replay of ``setup``'s slice on ``layout``, its answers judged (the result's
    ``correctness``); ``calibrate``: then the layout's costs measured as bench --trace measures
    them (the comparison's ``ttft.calibration``), else none (tune predicts with its own)."""
    return run_layout_replay(
        layout, setup.rows, setup.args, shared, model=setup.model, api_key=setup.api_key,
        timeout_s=setup.timeout_s, on_row=on_row, ttft_check=calibrate,
    )  # fmt: skip


def engine_size(compared: LayoutComparison) -> EngineSize | None:
    """The engine level of a replay's hierarchy (vllm:cache_config_info), if its counters gave one."""
    for level in compared.hierarchy.levels:
        if level.tier == token_sources.ENGINE_CACHE:
            return EngineSize(level.unit_tokens, level.unit_tokens * level.nominal_blocks)
    return None


def shared_state(shared: Shared, engine: EngineSize | None) -> results.ReplayState:
    """What the first layout decided, as results.json keeps it (``restore`` reads it back)."""
    assert shared.shape is not None and shared.blocks is not None
    return results.ReplayState(
        shape=results.Shape(**asdict(shared.shape)),  # the replay's shape, field for field
        pool=shared.blocks.pool,
        seed=shared.blocks.seed,
        notes=shared.notes,
        engine=None
        if engine is None
        else results.EngineSize(block_tokens=engine.block_tokens, pool_tokens=engine.pool_tokens),
        requests_sent=len(shared.sent),
        prompt_tokens=sum(s.prompt_tokens for s in shared.sent),
    )


def restore(doc: results.ReplayState, rows: Sequence[TraceRow]) -> tuple[Shared, EngineSize | None]:
    """``shared_state``'s document back: the same prompts for the candidates still to measure;
    ValueError when this slice does not send what was saved."""
    sh = doc.shape
    shape = ReplayShape(sh.block_tokens, sh.align, sh.max_prompt_tokens, sh.max_output_tokens, sh.time_scale)
    sent, _ = plan_requests(rows, shape, session_key)
    if len(sent) != doc.requests_sent:
        raise ValueError(f"{len(sent)} requests to send, {doc.requests_sent} when it was saved")
    blocks = BlockTokens(list(doc.pool), shape.block_tokens, doc.seed)
    engine = doc.engine
    size = EngineSize(engine.block_tokens, engine.pool_tokens) if engine is not None else None
    return Shared(sent=sent, blocks=blocks, shape=shape, notes=list(doc.notes)), size
