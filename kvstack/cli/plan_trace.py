"""`kvstack plan --trace`: read the trace the options name, and render what it says in the plan."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kvstack.errors import InputError

if TYPE_CHECKING:
    from kvstack.planning.schema import Plan
    from kvstack.planning.trace_sizing import TraceInput


def read_trace_input(
    path: Path | None,
    sample: str | None,
    start: int,
    max_requests: int | None,
    offload_cost: tuple[float | None, Path | None],
    curve_png: Path | None,
    calibration: Path | None = None,
) -> TraceInput | None:
    """The trace as planning takes it, or None without --trace (options that need one are bad input).
    ``offload_cost``: (--offload-cost in ms, --offload-cost-from), at most one given;
    ``calibration``: --calibration (served-TTFT costs, the offload path's among them)."""
    offload_cost_ms, offload_cost_from = offload_cost
    if path is None:
        needs = [
            name
            for name, given in (
                ("--trace-sample", sample is not None),
                ("--start", start != 0),
                ("--max-requests", max_requests is not None),
                ("--offload-cost", offload_cost_ms is not None),
                ("--offload-cost-from", offload_cost_from is not None),
                ("--curve-png", curve_png is not None),
                ("--calibration", calibration is not None),
            )
            if given
        ]
        if needs:
            raise InputError(f"{needs[0]} needs --trace", hint="add --trace FILE (Mooncake JSONL)")
        return None
    from kvstack.planning import trace_sizing as ts
    from kvstack.traces.mooncake import read_trace
    from kvstack.traces.sample import parse_ratio, sample_sessions

    if calibration is not None and (offload_cost_ms is not None or offload_cost_from is not None):
        given = "--offload-cost" if offload_cost_ms is not None else "--offload-cost-from"
        raise InputError(
            f"--calibration and {given} both give the offload cost",
            hint=f"drop {given}: the calibration's offload layout measures it",
        )
    cost = _offload_cost(offload_cost_ms, offload_cost_from)  # before the trace: bad input fails at once
    served = None
    if calibration is not None:
        from kvstack.replay.served_calibration import served_calibration_from

        served = served_calibration_from(calibration)
    ratio = parse_ratio(sample) if sample is not None else None
    trace = read_trace(path, start=start, max_requests=max_requests)
    requests = trace.requests
    how = []
    if start or max_requests is not None:
        how.append(f"requests {start}..{start + len(requests) - 1} (file lines from {trace.first_line})")
    if ratio is not None:
        requests = sample_sessions(requests, ratio)
        how.append(f"a {ratio:.4g} share of sessions ({len(requests)} requests)")
        if not requests:
            raise InputError(
                f"--trace-sample {sample} keeps no request of {path}", hint="use a larger share, e.g. 1/10"
            )
    return ts.TraceInput(
        requests=requests,
        block_tokens=trace.block_tokens,
        source=str(path),
        sample="; ".join(how),
        offload_cost_s=cost[0],
        offload_cost_source=cost[1],
        served=served,
    )


def _offload_cost(ms: float | None, from_: Path | None) -> tuple[float, str]:
    """(seconds, source) of the offload path's per-request cost: given, measured by bench, or the default."""
    from kvstack.planning import trace_sizing as ts

    if ms is not None and from_ is not None:
        raise InputError(
            "--offload-cost and --offload-cost-from both give the offload cost", hint="keep one of them"
        )
    if ms is not None:
        if not 0 <= ms < 60_000:
            raise InputError(
                f"--offload-cost must be milliseconds in [0, 60000), not {ms:g}",
                hint="e.g. --offload-cost 15",
            )
        return ms / 1000, "--offload-cost"
    if from_ is not None:
        from kvstack.replay.offload_cost import offload_cost_from

        return offload_cost_from(from_)
    return ts.OFFLOAD_REQUEST_COST_S, ts.OFFLOAD_REQUEST_COST_SOURCE


def write_png(plan: Plan, path: Path) -> None:
    from kvstack.cli.curve_png import write_curve_png

    assert plan.trace is not None
    title = f"{plan.model.name} ({plan.kv_cache_dtype} KV) on {plan.trace.source}"
    write_curve_png(plan.trace, path, title)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def render_trace(plan: Plan, curve_png: Path | None) -> None:
    """The curve at key sizes with each tier's boundary, what each tier serves, the TTFT prediction."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from kvstack.units import fmt_bytes

    t = plan.trace
    assert t is not None
    console = Console(soft_wrap=True, highlight=False, width=None if sys.stdout.isatty() else 120)
    title = (
        f"capacity curve from {t.source} ({t.requests:,} requests over {t.duration_s / 60:.0f} min, "
        f"{t.block_tokens}-token blocks of {fmt_bytes(t.block_bytes)})"
    )
    table = Table(title=escape(title), title_justify="left")
    for col in ("cache size", "prompt tokens from cache", "mark"):
        table.add_column(col, justify="right" if col != "mark" else "left")
    names = {"engine": "engine pool", "cpu": "+ DRAM tier", "disk": "+ disk tier", "remote": "+ remote tier"}
    # Tiers the trace's verdict dropped (--offload auto) are shown as considered, not planned.
    planned = {"engine", *(x.kind for x in plan.offload_tiers)}
    dropped = " (considered, not planned)"
    for row in t.table:
        mark = names.get(row.label, row.label) + (
            dropped if row.label in names and row.label not in planned else ""
        )
        if row.label == "target":
            mark = f"target: {t.target_fraction:.0%} of the unbounded cache's hits"
        elif row.label == "max":
            mark = "unbounded (no larger cache serves more)"
        table.add_row(fmt_bytes(row.size_bytes), f"{row.hit_ratio:.1%}", mark)
    console.print(table)
    lines = [("sized by", f"the trace (sample: {t.sample})" if t.sample else "the trace")]
    for share in t.tiers:
        saved = f"{share.tokens_per_s:,.0f} tokens/s of prefill saved"
        note = dropped if share.kind not in planned else ""
        lines.append((f"{share.kind} serves", f"{share.hit_ratio:.1%} of prompt tokens ({saved}){note}"))
    if t.with_offload is not None and t.without_offload is not None:
        w, wo = t.with_offload, t.without_offload
        for d in t.by_depth:
            who = "TTFT " + (
                "engine pool alone"
                if d.tiers == "engine"
                else "+ " + d.tiers.removeprefix("engine+").replace("+", " + ")
            )
            lines.append((who, f"p50 {_ms(d.p50_s)}, p90 {_ms(d.p90_s)}, mean {_ms(d.mean_s)}"))
        lines.append(("offload cost", f"{_ms(t.offload_cost_s)} per request ({t.offload_cost_source})"))
        lines.append(
            (
                "prefill load",
                f"{w.prefill_busy:.2f} with offload, {wo.prefill_busy:.2f} without (> 1: queues)",
            )
        )
    if curve_png is not None:
        lines.append(("curve PNG", str(curve_png)))
    for key, value in lines:
        console.print(f"  {key:<24} {value}", markup=False)
    if t.verdict:
        console.print(f"  {'verdict':<24} {t.verdict}", markup=False)
