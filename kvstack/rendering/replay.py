"""`kvstack bench --trace`'s tables: what was replayed, TTFT and prompt tokens by source per layout,
and each tier's predicted share of prompt tokens next to the measured one."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kvstack.bench.replay.results import Percentiles, TraceReplay, layouts_of
from kvstack.bench.schema import BenchResult
from kvstack.clients import token_sources
from kvstack.units import fmt_ms_cell, fmt_pct


def prediction_table(result: BenchResult) -> Table:
    table = Table(title="Predicted vs measured: share of prompt tokens served, per tier")
    for col in ("layout", "tier", "size (tokens)", "predicted", "measured", "gap (points)"):
        table.add_column(col, justify="left" if col in ("layout", "tier") else "right")
    for cmp_ in layouts_of(result):
        sizes = {lv.tier: lv.tokens for lv in cmp_.hierarchy.levels}
        for row in cmp_.tiers:
            gap = row.gap_points
            size = sizes.get(row.tier)
            table.add_row(
                cmp_.layout,
                token_sources.LABELS.get(row.tier, row.tier),
                "-" if size is None else f"{size:,}",
                fmt_pct(row.predicted),
                fmt_pct(row.measured),
                "-" if gap is None else f"{gap:+.1f}",
            )
    return table


def ttft_table(result: BenchResult) -> Table:
    table = Table(title="TTFT and prompt tokens by source, per layout")
    compared = layouts_of(result)
    per_layout = {c.layout: c.measured_tokens for c in compared}
    by_layout = {lay.name: per_layout.get(lay.name) or lay.cache.tokens_by_source for lay in result.layouts}
    sources = [s for s in token_sources.SOURCES if any(tokens.get(s) for tokens in by_layout.values())]
    predicted = {c.layout: c.ttft.predicted for c in compared if c.ttft is not None}
    columns = ["layout", "requests", "TTFT p50 ms", "TTFT p90 ms", "predicted p50 / p90 ms"]
    for col in [*columns, *[token_sources.LABELS[s] for s in sources]]:
        table.add_column(col, justify="left" if col == "layout" else "right")
    for lay in result.layouts:
        t = lay.summary.ttft_s
        tokens = by_layout[lay.name]
        p = predicted.get(lay.name) or Percentiles()
        table.add_row(
            lay.name,
            f"{lay.summary.ok}/{lay.summary.requests}",
            fmt_ms_cell(None if t is None else t.p50, sep=False),
            fmt_ms_cell(None if t is None else t.p90, sep=False),
            f"{fmt_ms_cell(p.p50_s, sep=False)} / {fmt_ms_cell(p.p90_s, sep=False)}",
            *[f"{tokens.get(s, 0.0):,.0f}" for s in sources],
        )
    return table


def trace_lines(result: BenchResult) -> list[str]:
    """What was replayed, and the replay's notes."""
    info = TraceReplay.of(result) or TraceReplay()
    head = (
        f"trace {info.source}: {info.requests_sent} requests, "
        f"{info.prompt_tokens:,} prompt tokens, blocks of {info.block_tokens} tokens; "
        f"an unbounded cache serves {fmt_pct(info.unbounded_hit_ratio)}"
    )
    return [head, *(f"note: {note}" for note in info.notes)]


def print_trace(console: Console, result: BenchResult) -> None:
    """The replay's own part of the report on ``console``."""
    for line in trace_lines(result):
        console.print(line, markup=False, highlight=False)
    console.print(ttft_table(result))
    console.print(prediction_table(result))
