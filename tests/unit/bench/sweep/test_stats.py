"""A step's figures from its rows: within the SLO, the share, the verdict, the tiers' shares."""

from __future__ import annotations

from typing import Any

from kvstack.bench.schema import CacheStats, LayoutResult, RequestRow
from kvstack.bench.stats import summarize
from kvstack.bench.sweep.schema import Slo
from kvstack.bench.sweep.stats import points, source_shares, step_of, sweep_rows, within_slo


def _row(i: int, ttft: float | None, tpot: float | None = None, ok: bool = True) -> RequestRow:
    extra: dict[str, Any] = {} if ok else {"error": "HTTP 500"}
    return RequestRow(layout="l", id=f"r{i}", index=i, round=0, group="g", prompt_tokens=10,
                      expected_prefix_tokens=0, ok=ok, start_s=0.0, ttft_s=ttft, tpot_s=tpot, e2e_s=ttft,
                      output_tokens=2 if ok else 0, **extra)  # fmt: skip


def test_within_slo() -> None:
    slo = Slo(ttft_s=0.1, tpot_s=0.01)
    assert within_slo(_row(0, 0.1, 0.01), slo)  # at the bound is within
    assert not within_slo(_row(0, 0.11, 0.001), slo)
    assert not within_slo(_row(0, 0.05, 0.02), slo)
    assert within_slo(_row(0, 0.05, None), slo)  # one output token: nothing after it to be late
    assert not within_slo(_row(0, 0.01, 0.001, ok=False), slo)  # a failure never meets it
    assert within_slo(_row(0, 9.0, 0.001), Slo(tpot_s=0.01))  # only what is given is judged


def _layout(rows: list[RequestRow], sources: dict[str, float]) -> LayoutResult:
    cache = CacheStats(token_hit_rate=0.25, tokens_by_source=sources)
    return LayoutResult(name="l", base_url="u", metrics_urls=[], started_at=0.0, complete=True,
                        summary=summarize(rows), cache=cache)  # fmt: skip


def test_step_of_counts_failures_against_the_share() -> None:
    rows = [_row(i, 0.05) for i in range(8)] + [_row(8, 0.5), _row(9, None, ok=False)]
    sources = {"recomputed": 300.0, "engine_cache": 100.0}
    step = step_of(3, "bisect", 4.0, 7, _layout(rows, sources), rows, Slo(ttft_s=0.1, share=0.8))
    assert (step.step, step.origin, step.load, step.seed) == (3, "bisect", 4.0, 7)
    assert step.within_slo == 8 and step.share_within_slo == 0.8 and step.meets_slo
    assert step.summary.requests == 10 and step.summary.ok == 9
    assert step.token_hit_rate == 0.25 and step.prompt_token_shares == {
        "recomputed": 0.75,
        "engine_cache": 0.25,
    }
    strict = step_of(0, "ladder", 4.0, 0, _layout(rows, {}), rows, Slo(ttft_s=0.1, share=0.81))
    assert not strict.meets_slo and strict.prompt_token_shares == {}


def test_a_step_without_rows_does_not_pass() -> None:
    step = step_of(0, "ladder", 1.0, 0, _layout([], {}), [], Slo(ttft_s=1.0, share=0.5))
    assert step.share_within_slo == 0.0 and not step.meets_slo


def test_rows_and_points() -> None:
    rows = [_row(2, 0.1), _row(0, 0.1)]
    out = sweep_rows(1, 2.0, rows)
    assert [(r.index, r.step, r.load) for r in out] == [(0, 1, 2.0), (2, 1, 2.0)]
    a = step_of(0, "ladder", 1.0, 0, _layout(rows, {}), rows, Slo(ttft_s=1.0))
    b = a.model_copy(update={"load": 2.0, "complete": False})
    assert points([a, b]) == [(1.0, True)]  # a step cut short is no point of the capacity
    assert source_shares({"dram": 0.0}) == {}
