"""`kvstack tune`'s output: the ranking table, the candidates measured (read from results.json's
typed model, tune/results.py), the command that serves the winner, and the files it wrote."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kvstack.connectors import SPECS
from kvstack.units import fmt_ms, fmt_ms_cell, fmt_pct, fmt_pct_of

if TYPE_CHECKING:
    from rich.console import Console

    from kvstack.tune.ranking import TuneResult
    from kvstack.tune.results import Interval, Measured, Refit, TuneResults
    from kvstack.tune.tune import TuneRun

PIPED_WIDTH = 160  # tune's tables are wider than most commands'


def _offloads(connector: str) -> bool:
    """Whether a candidate's connector moves KV below the engine (one kvstack does not know: yes)."""
    spec = SPECS.get(connector)
    return spec is None or spec.offloads


def _interval(iv: Interval | None) -> str:
    return "-" if iv is None else f"{fmt_ms_cell(iv.value)} ± {fmt_ms_cell(iv.noise)}"


def render_ranking(result: TuneResult, top: int, console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    ranked = result.ranked
    shown = ranked[:top] + ([result.baseline] if result.baseline not in ranked[:top] else [])
    table = Table(title=f"kvstack tune: {len(ranked)} candidates ranked by predicted TTFT {result.objective}")
    cols = ["#", "candidate", "p50 ms", "p90 ms", "mean ms", "engine", "DRAM", "disk", "recomputed", "note"]
    if result.slo_s is not None:
        cols.insert(5, "within SLO")
    for col in cols:
        table.add_column(col, justify="left" if col in ("candidate", "note") else "right")
    for p in shown:
        t, total = p.tokens, sum(p.tokens.values())
        note = "modelled only" if p.candidate.not_settable else ("" if p.gated == 0 else f"{p.gated} gated")
        cells = [
            str(ranked.index(p) + 1),
            escape(p.candidate.label),
            fmt_ms_cell(p.p50_s),
            fmt_ms_cell(p.p90_s),
            fmt_ms_cell(p.mean_s),
            fmt_pct_of(t["engine_cache"], total),
            fmt_pct_of(t["dram"], total),
            fmt_pct_of(t["disk"], total),
            fmt_pct_of(t["recomputed"], total),
            note,
        ]
        if result.slo_s is not None:
            cells.insert(5, fmt_pct(p.under_slo or 0.0))
        table.add_row(*cells)
    console.print(table)
    win, base = result.winner, result.baseline
    knobs = ", ".join(f"{k} {v:g}" for k, v in win.candidate.knobs().items()) or "no offload"
    console.print(
        f"  predicted best: {win.candidate.label} ({knobs}): p50 {fmt_ms(win.p50_s, 1)}, "
        f"p90 {fmt_ms(win.p90_s, 1)}; none p50 {fmt_ms(base.p50_s, 1)}, p90 {fmt_ms(base.p90_s, 1)}",
        markup=False,
    )
    if ranked[0] is not win:
        c = ranked[0].candidate
        console.print(f"  ranked above it, modelled only: {c.label}: {c.not_settable}", markup=False)


def capacity_lines(measured: Measured) -> list[str]:
    """--objective capacity: what load 1 is, then each swept candidate's capacity with its bracket."""
    from kvstack.rendering.bench_sweep import capacity_line

    setup = measured.capacity
    if setup is None:
        return []
    rate = setup.trace_rate_per_s
    ladder = ", ".join(f"{k:g}x" for k in setup.multiples)
    head = f"  capacity: swept at {ladder} the trace's rate" + (
        f" (1x = {rate:.3g} requests/s)" if rate is not None else ""
    )
    lines = [head]
    for c in measured.candidates:
        if c.capacity is not None:
            lines.append("    " + capacity_line(c.label, "trace_rate", c.capacity.sweep.capacity, setup.slo))
    return lines


def render_measured(results: TuneResults, console: Console) -> None:
    """The candidates replayed, predicted against measured, the verdict and why."""
    from rich.markup import escape
    from rich.table import Table

    from kvstack.tune.budget import fmt_duration

    measured = results.measured
    if measured is None:
        return
    verdict = measured.verdict
    excluded = verdict.excluded if verdict is not None else {}
    winner = verdict.winner if verdict is not None else None
    table = Table(
        title=f"measured: {len(measured.candidates)} candidates replayed "
        f"({measured.setup.requests} requests each; TTFT in ms, predicted for the "
        "requests sent, measured ± its noise: 95% bootstrap; prompt tokens by source measured)"
    )
    slo = measured.slo_ms
    cols = ["#", "candidate", "p50 pred", "p50 meas", "p90 pred", "p90 meas", "meas/pred p50"]
    cols += [f"within {slo:g} ms"] if slo is not None else []
    cols += ["engine", "DRAM", "disk", "recomputed", "correct", "verdict"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("candidate", "verdict") else "right")
    for c in measured.candidates:
        m, pred, tokens = c.measured, c.predicted, c.measured_tokens
        total = sum(tokens.values())
        ratio = c.measured_over_predicted_p50
        if c.label == winner:
            verdict_text = "winner"
        elif c.label in excluded:
            verdict_text = "out"
        else:
            # The candidate that moves no KV is the baseline: kept when nothing beats it.
            verdict_text = "not better" if _offloads(c.connector) else "kept"
        good = m.goodput if m is not None else None
        within = [f"{fmt_pct(good.value)} ± {good.noise * 100:.1f}" if good else "-"]
        table.add_row(
            str(c.rank),
            escape(c.label),
            fmt_ms_cell(pred.p50_s),
            _interval(m.p50 if m else None),
            fmt_ms_cell(pred.p90_s),
            _interval(m.p90 if m else None),
            "-" if ratio is None else f"{ratio:.2f}x",
            *(within if slo is not None else []),
            fmt_pct_of(tokens.get("engine_cache", 0.0), total),
            fmt_pct_of(tokens.get("dram", 0.0), total),
            fmt_pct_of(tokens.get("disk", 0.0), total),
            fmt_pct_of(tokens.get("recomputed", 0.0), total),
            "yes" if c.correct else "no",
            verdict_text,
        )
    console.print(table)
    for line in capacity_lines(measured):
        console.print(line, markup=False)
    if verdict is not None:
        console.print(f"  winner (measured, {measured.objective}): {verdict.why}", markup=False)
    for label, why in excluded.items():
        console.print(f"  out: {label}: {why}", markup=False)
    for c in measured.candidates:
        if c.below_gate is not None:
            lookups = "-" if c.lookups is None else f"{c.lookups:,}"
            console.print(
                f"  gate: {c.label}: {c.below_gate:,} of {c.requests:,} requests below it; "
                f"LMCache's server counted {lookups} lookups",
                markup=False,
            )
    inversions = verdict.inversions if verdict is not None else []
    for inv in inversions:
        how = "beyond the noise" if inv.beyond_noise else "within the noise"
        console.print(
            f"  the model ranked {inv.model_ranked_higher} above {inv.measured_better}, which "
            f"measured better ({how})",
            markup=False,
        )
    if verdict is not None and not inversions:
        console.print("  the model's order held for every pair measured", markup=False)
    if measured.refits:
        console.print(f"  {refit_line(measured.refits[-1])}", markup=False)
    for label, why in measured.skipped.items():
        console.print(f"  not measured: {label}: {why}", markup=False)
    console.print(
        f"  {measured.stopped}; {fmt_duration(measured.elapsed_s)} of the "
        f"{fmt_duration(measured.budget_s)} budget",
        markup=False,
    )


def refit_line(fit: Refit) -> str:
    """The model as the last replay left it (results.json's ``measured.refits[-1]``)."""
    p = fit.plain
    parts = [
        f"model refit from the replays of {', '.join(fit.after)}: none {p.hit_s + p.miss_s:.4f} s "
        f"+ {p.linear_s_per_token * 1e6:.2f} µs per recomputed token"
    ]
    for name, c in fit.by_connector.items():
        fetch = max(c.fetch_s_per_token.values(), default=0.0)
        request, chunk = fmt_ms(c.miss_s, 1, sep=False), fmt_ms(c.chunk_s, 2, sep=False)
        parts.append(f"{name} +{request} a request, +{chunk} a chunk, {fetch * 1e6:.2f} µs per tier token")
    return "; ".join(parts)


def serve_command(out: Path, model: str | None, extra_args: list[str]) -> str:
    """The exact command that serves what tune measured: its layout, the model, the engine arguments."""
    where = f"--model {shlex.quote(model)} " if model else ""
    engine = (" -- " + shlex.join(extra_args)) if extra_args else ""
    return f"kvstack serve {where}--tuned {shlex.quote(str(out))}{engine}"


def render(run: TuneRun, top: int, model: str | None, extra_args: list[str] | None = None) -> None:
    """The ranking, the candidates measured (if any), how to serve the winner; the files written on
    standard error."""
    from kvstack.rendering.console import err_console, out_console

    console = out_console(PIPED_WIDTH)
    render_ranking(run.result, top, console)
    if run.proof is None:
        console.print(
            "  predicted, not measured (--budget 0): no replay proved it on the engine", markup=False
        )
    else:
        render_measured(run.results, console)
    if run.out is not None:
        console.print(f"  serve it: {serve_command(run.out, model, extra_args or [])}", markup=False)
    else:
        console.print(
            "  keep it: --out DIR writes results.json and tuned.json (serve --tuned DIR)", markup=False
        )
    err = err_console()
    for path in run.written:
        err.print(f"wrote {path}", markup=False, highlight=False)


def show(run: TuneRun, top: int, model: str | None, extra_args: list[str], json_mode: bool) -> None:
    """``--json``: results.json on standard output; else the report."""
    if json_mode:
        sys.stdout.write(json.dumps(run.doc, indent=2) + "\n")
        sys.stdout.flush()
    else:
        render(run, top, model, extra_args)
