"""``kvstack bench --sweep``'s output: a line on standard error per step as it is measured, then a
table per layout (load, TTFT p50/p90/p99 measured and p50/p90 simulated, TPOT, tok/s, share within
the SLO), its capacity line, the simulator's bound at the knee and predicted capacity, rendered from
the ``SweepResult`` (results.json itself with --json; bench/sweep/predict.py predicts)."""

from __future__ import annotations

import sys
from pathlib import Path

from rich import box
from rich.table import Table

from kvstack.bench.schema import Distribution
from kvstack.bench.sweep.ladder import LoadKind, LoadLadder
from kvstack.bench.sweep.schema import Capacity, LayoutSweep, Slo, SweepResult, SweepStep
from kvstack.rendering.bound import bound_text
from kvstack.rendering.console import err_console, out_console
from kvstack.units import fmt_ms_cell, fmt_pct


def _cell(d: Distribution | None, field: str) -> str:
    return fmt_ms_cell(None if d is None else getattr(d, field), sep=False)


def slo_text(slo: Slo) -> str:
    """``90% of requests within TTFT <= 500 ms and TPOT <= 50 ms``."""
    parts = [f"{what} <= {s * 1000:g} ms" for what, s in (("TTFT", slo.ttft_s), ("TPOT", slo.tpot_s)) if s]
    return f"{slo.share * 100:g}% of requests within {' and '.join(parts)}"


def load_text(kind: LoadKind, load: float) -> str:
    return LoadLadder(kind, (load,)).label(load)


def capacity_line(name: str, kind: LoadKind, capacity: Capacity, slo: Slo) -> str:
    """The layout's capacity with its bracket, in one line."""

    def at(load: float | None) -> str:
        return "-" if load is None else load_text(kind, load)

    if capacity.status == "bracketed":
        text = (f"capacity {at(capacity.load)} (passes at {at(capacity.highest_passing)}, "
                f"fails at {at(capacity.lowest_failing)})")  # fmt: skip
    elif capacity.status == "above_ladder":
        text = f"capacity above the ladder: every step up to {at(capacity.load)} passed"
    elif capacity.status == "below_first_step":
        text = f"capacity below the first step: {at(capacity.lowest_failing)} already fails"
    else:
        text = "capacity not measured: no step completed"
    if capacity.passing_above_failure:
        noisy = ", ".join(at(x) for x in capacity.passing_above_failure)
        text += f"; passed again at {noisy}, above a failing step (not counted)"
    return f"{name}: {text}; SLO {slo_text(slo)}"


def bound_line(name: str, kind: LoadKind, lay: LayoutSweep) -> str | None:
    """``none: bound at the knee: disk read 92% of 1.9 GB/s at 4x (61% at 2x)``; None: not judged."""
    b = lay.bound
    if b is None:
        return None
    if b.bound is None:
        return (
            f"{name}: bound at the knee: not judged at {load_text(kind, b.at_load)} ({b.note or 'no figure'})"
        )
    text = f"{name}: bound at the knee (simulated): {bound_text(b.bound)} at {load_text(kind, b.at_load)}"
    below = next((u for u in b.passing if u.resource == b.bound.resource), None)
    if below is not None and b.passing_load is not None:
        text += f" ({below.utilisation:.0%} at {load_text(kind, b.passing_load)}, which passed)"
    return text + (f"; {b.note}" if b.note else "")


def predicted_line(name: str, kind: LoadKind, lay: LayoutSweep) -> str | None:
    """The simulator's predicted capacity beside the measured one, and their ratio; None: not
    predicted (a report written before the simulator)."""
    p = lay.predicted
    if p is None:
        return None
    if p.load is None:
        why = p.note or ("an idle engine's TTFT is above the SLO" if p.status == "slo_below_unloaded" else "")
        return f"{name}: predicted capacity (simulated): none ({why})"
    at_least = "at least " if p.status == "above_range" else ""
    text = f"{name}: predicted capacity (simulated) {at_least}{load_text(kind, float(f'{p.load:.3g}'))}"
    if p.bound is not None:
        text += f", bound: {bound_text(p.bound)}"
    if p.measured_load is None:
        return text + "; no measured capacity to compare"
    measured = load_text(kind, p.measured_load)
    if p.at_least:
        return text + f"; measured at least {measured} (no step failed)"
    ratio = "" if p.ratio is None else f", predicted / measured {p.ratio:.2f}"
    return text + f"; measured {measured}{ratio}"


def source_line(name: str, lay: LayoutSweep) -> str | None:
    """What the simulator replayed and what its costs come from; None: nothing simulated."""
    p = lay.predicted
    if p is None or not p.source:
        return None
    return f"{name}: simulated: {p.workload}; {p.source}"


def layout_table(result: SweepResult, lay: LayoutSweep) -> Table:
    """One row per step of the layout, by load; a bisect step is marked *."""
    over = "load (x trace rate)" if result.kind == "trace_rate" else result.kind
    table = Table(title=f"{lay.name}: sweep over {over} (times in ms)", box=box.SIMPLE_HEAD,
                  show_edge=False, padding=0, caption="*: a bisect step between the ladder's")  # fmt: skip
    table.add_column("load", no_wrap=True)
    cols = (
        "ok",
        "TTFT p50",
        "p90",
        "p99",
        "sim p50",
        "sim p90",
        "TPOT p50",
        "tok/s",
        "in SLO",
        "pass",
        "hit",
    )
    for col in cols:
        table.add_column(col, justify="right", no_wrap=True, min_width=4)
    for s in sorted(lay.steps, key=lambda s: s.load):
        d, sim = s.summary, s.predicted
        mark = "*" if s.origin == "bisect" else ""
        load = load_text(result.kind, s.load) + mark + ("" if s.complete else " (cut short)")
        sim50 = fmt_ms_cell(None if sim is None else sim.ttft_p50_s, sep=False)
        sim90 = fmt_ms_cell(None if sim is None else sim.ttft_p90_s, sep=False)
        table.add_row(load, f"{d.ok}/{d.requests}", _cell(d.ttft_s, "p50"), _cell(d.ttft_s, "p90"),
                      _cell(d.ttft_s, "p99"), sim50, sim90, _cell(d.tpot_s, "p50"),
                      f"{d.output_tokens_per_s:.0f}", fmt_pct(s.share_within_slo),
                      "yes" if s.meets_slo else "NO", fmt_pct(s.token_hit_rate))  # fmt: skip
    return table


def step_line(layout: str, ladder: LoadLadder, step: SweepStep) -> str:
    """One step as it is measured (standard error)."""
    d = step.summary
    p90 = "-" if d.ttft_s is None else f"{d.ttft_s.p90 * 1000:.1f} ms"
    verdict = "meets the SLO" if step.meets_slo else "misses the SLO"
    cut = "" if step.complete else f" (cut short: {step.aborted})"
    head = f"sweep {layout} {ladder.label(step.load)} ({step.origin}): {d.ok}/{d.requests} ok"
    return f"{head}, TTFT p90 {p90}, {fmt_pct(step.share_within_slo)} within the SLO: {verdict}{cut}"


def trace_line(result: SweepResult) -> str | None:
    """What load 1 is in a trace sweep, and why no step is served from an earlier one."""
    t = result.trace
    if t is None:
        return None
    return (
        f"load 1x = the trace's own rate: {t.requests} requests of {t.source} over {t.span_s:,.1f} s "
        f"({t.rate_per_s:.3g} requests/s); caches: {t.caches}"
    )


def print_sweep(result: SweepResult, written: list[Path], json_mode: bool) -> None:
    """The report: results.json on stdout with --json; else a table and capacity line per layout on
    stdout, the files written on stderr."""
    if json_mode:
        sys.stdout.write(result.model_dump_json(by_alias=True, indent=1) + "\n")
        return
    console = out_console(None, soft_wrap=False, highlight=True)
    trace = trace_line(result)
    if trace is not None:
        console.print(trace, markup=False, highlight=False, soft_wrap=True)
    for lay in result.layouts:
        console.print(layout_table(result, lay))
        capacity = capacity_line(lay.name, result.kind, lay.capacity, result.slo)
        lines = [
            capacity,
            predicted_line(lay.name, result.kind, lay),
            bound_line(lay.name, result.kind, lay),
            source_line(lay.name, lay),
        ]
        for line in lines:
            if line is not None:
                console.print(line, markup=False, highlight=False, soft_wrap=True)  # one line, for grep
    err = err_console(soft_wrap=False, highlight=True)
    for path in written:
        err.print(f"wrote {path}", markup=False, highlight=False)
