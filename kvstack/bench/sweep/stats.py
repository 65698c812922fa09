"""Pure: one step's figures from its rows and its layout result (bench's own summary and counters)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from kvstack.bench.schema import LayoutResult, RequestRow
from kvstack.bench.sweep.schema import Slo, SweepRow, SweepStep


def within_slo(row: RequestRow, slo: Slo) -> bool:
    """A request that succeeded within every SLO given. A request with one output token has no
    TPOT, and nothing after its first token to be late: it meets a TPOT SLO."""
    if not row.ok:
        return False
    if slo.ttft_s is not None and (row.ttft_s is None or row.ttft_s > slo.ttft_s):
        return False
    return slo.tpot_s is None or row.tpot_s is None or row.tpot_s <= slo.tpot_s


def source_shares(tokens_by_source: dict[str, float]) -> dict[str, float]:
    """Prompt tokens by source as shares of their sum (empty: the server has no such counters)."""
    total = sum(tokens_by_source.values())
    return {k: v / total for k, v in tokens_by_source.items()} if total > 0 else {}


def step_of(
    step: int,
    origin: Literal["ladder", "bisect"],
    load: float,
    seed: int,
    layout: LayoutResult,
    rows: Sequence[RequestRow],
    slo: Slo,
) -> SweepStep:
    """The step's record: bench's summary of it, the requests within the SLO and the tiers' shares."""
    within = sum(within_slo(r, slo) for r in rows)
    share = within / len(rows) if rows else 0.0
    return SweepStep(
        step=step,
        origin=origin,
        load=load,
        seed=seed,
        complete=layout.complete,
        aborted=layout.aborted,
        summary=layout.summary,
        within_slo=within,
        share_within_slo=share,
        meets_slo=bool(rows) and share >= slo.share,
        token_hit_rate=layout.cache.token_hit_rate,
        prompt_token_shares=source_shares(layout.cache.tokens_by_source),
    )


def sweep_rows(step: int, load: float, rows: Sequence[RequestRow]) -> list[SweepRow]:
    """The step's requests as sweep rows, in the order the workload built them."""
    ordered = sorted(rows, key=lambda r: r.index)
    return [SweepRow(**r.model_dump(), step=step, load=load) for r in ordered]


def points(steps: Sequence[SweepStep]) -> list[tuple[float, bool]]:
    """The completed steps as (load, met the SLO): what capacity is computed from."""
    return [(s.load, s.meets_slo) for s in steps if s.complete]
