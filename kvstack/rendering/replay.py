"""`kvstack bench --trace`'s tables: what was replayed, TTFT and prompt tokens by source per layout,
and each tier's predicted share of prompt tokens next to the measured one."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from kvstack.bench.schema import BenchResult
from kvstack.clients import token_sources
from kvstack.units import fmt_ms, fmt_pct


def _ms(seconds: float | None) -> str:
    return fmt_ms(seconds, 1, unit=False, sep=False)


def _layouts(result: BenchResult) -> list[dict[str, Any]]:
    """The replay's predicted vs measured comparison, one per layout."""
    return list((result.trace or {}).get("layouts", []))


def prediction_table(result: BenchResult) -> Table:
    table = Table(title="Predicted vs measured: share of prompt tokens served, per tier")
    for col in ("layout", "tier", "size (tokens)", "predicted", "measured", "gap (points)"):
        table.add_column(col, justify="left" if col in ("layout", "tier") else "right")
    for cmp_ in _layouts(result):
        sizes = {lv["tier"]: lv["tokens"] for lv in cmp_["hierarchy"]["levels"]}
        for row in cmp_["tiers"]:
            gap = row["gap_points"]
            size = sizes.get(row["tier"])
            table.add_row(
                cmp_["layout"],
                token_sources.LABELS.get(row["tier"], row["tier"]),
                "-" if size is None else f"{size:,}",
                fmt_pct(row["predicted"]),
                fmt_pct(row["measured"]),
                "-" if gap is None else f"{gap:+.1f}",
            )
    return table


def ttft_table(result: BenchResult) -> Table:
    table = Table(title="TTFT and prompt tokens by source, per layout")
    per_layout = {c["layout"]: c["measured_tokens"] for c in _layouts(result)}
    by_layout = {lay.name: per_layout.get(lay.name) or lay.cache.tokens_by_source for lay in result.layouts}
    sources = [s for s in token_sources.SOURCES if any(tokens.get(s) for tokens in by_layout.values())]
    predicted = {c["layout"]: (c.get("ttft") or {}).get("predicted") or {} for c in _layouts(result)}
    columns = ["layout", "requests", "TTFT p50 ms", "TTFT p90 ms", "predicted p50 / p90 ms"]
    for col in [*columns, *[token_sources.LABELS[s] for s in sources]]:
        table.add_column(col, justify="left" if col == "layout" else "right")
    for lay in result.layouts:
        t = lay.summary.ttft_s
        tokens = by_layout[lay.name]
        p = predicted.get(lay.name) or {}
        table.add_row(
            lay.name,
            f"{lay.summary.ok}/{lay.summary.requests}",
            _ms(None if t is None else t.p50),
            _ms(None if t is None else t.p90),
            f"{_ms(p.get('p50_s'))} / {_ms(p.get('p90_s'))}",
            *[f"{tokens.get(s, 0.0):,.0f}" for s in sources],
        )
    return table


def trace_lines(result: BenchResult) -> list[str]:
    """What was replayed, and the replay's notes."""
    info = result.trace or {}
    head = (
        f"trace {info.get('source')}: {info.get('requests_sent')} requests, "
        f"{info.get('prompt_tokens') or 0:,} prompt tokens, blocks of {info.get('block_tokens')} tokens; "
        f"an unbounded cache serves {fmt_pct(info.get('unbounded_hit_ratio'))}"
    )
    return [head, *(f"note: {note}" for note in info.get("notes", []))]


def print_trace(console: Console, result: BenchResult) -> None:
    """The replay's own part of the report on ``console``."""
    for line in trace_lines(result):
        console.print(line, markup=False, highlight=False)
    console.print(ttft_table(result))
    console.print(prediction_table(result))
