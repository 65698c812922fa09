"""`kvstack bench`'s output: the workload line on standard error before the run, a live bar on a
terminal while it runs, then the report rendered from its ``BenchResult`` (results.json itself with
--json): the summary and per-round tables (or the trace replay's tables), the correctness lines, and
on standard error the errors and the files written."""

from __future__ import annotations

import sys
from pathlib import Path

from rich import box
from rich.table import Table

from kvstack.bench.events import BenchEvents
from kvstack.bench.runner import RunOptions
from kvstack.bench.schema import BenchResult, Distribution
from kvstack.bench.workloads import RequestSet
from kvstack.rendering.bench_sweep import print_sweep, step_line
from kvstack.rendering.console import err_console, out_console
from kvstack.rendering.progress import ProgressView
from kvstack.rendering.replay import print_trace
from kvstack.rendering.serve import serve_events
from kvstack.units import fmt_ms_cell, fmt_pct


def headline(workload: RequestSet, opts: RunOptions) -> str:
    """What will be sent and how: the workload's shape, the load, whether token counts are exact."""
    load = f"concurrency {opts.concurrency}" if opts.concurrency else f"rate {opts.rate:g}/s"
    shape = ", ".join(f"{k} {v}" for k, v in workload.shape.items())
    exact = "exact" if workload.exact else "estimated"
    lines = [
        f"bench {workload.spec.name}: {len(workload.requests)} requests in {len(workload.round_labels)} "
        f"round(s), {load}; {shape}",
        f"prompt tokens {exact} ({workload.tokenizer})",
    ]
    lines += [f"note: {n}" for n in workload.notes]
    return "\n".join(lines)


def _cell(d: Distribution | None, field: str) -> str:
    """A distribution's ``field`` (p50, p90, ...) as a table cell in milliseconds."""
    return fmt_ms_cell(None if d is None else getattr(d, field), sep=False)


_CAPTION = "hit: prompt tokens the server did not recompute; ideal: tokens shared with earlier rounds"


def summary_table(result: BenchResult) -> Table:
    """One row per layout: completion, TTFT/TPOT percentiles, throughput, hit rates."""
    name = result.workload.get("spec", {}).get("name", "?")
    table = Table(
        title=f"kvstack bench: {name} (times in ms)",
        caption=_CAPTION,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,
    )
    table.add_column("layout", no_wrap=True)
    # Numbers never wrap or get cut: a narrow terminal folds the headers instead.
    for col in ("ok", "TTFT p50", "p90", "p99", "TPOT p50", "req/s", "tok/s", "hit", "ideal"):
        table.add_column(col, justify="right", no_wrap=True, min_width=4)
    for lay in result.layouts:
        s = lay.summary
        name = lay.name if lay.complete else f"{lay.name} (cut short)"
        table.add_row(
            name,
            f"{s.ok}/{s.requests}",
            _cell(s.ttft_s, "p50"),
            _cell(s.ttft_s, "p90"),
            _cell(s.ttft_s, "p99"),
            _cell(s.tpot_s, "p50"),
            f"{s.requests_per_s:.1f}",
            f"{s.output_tokens_per_s:.0f}",
            fmt_pct(lay.cache.token_hit_rate),
            fmt_pct(s.ideal_hit_rate),
        )
    return table


def rounds_table(result: BenchResult) -> Table:
    """TTFT and hit rate per round (or turn) and layout: where the cache pays off."""
    table = Table(title="by round (times in ms)", box=box.SIMPLE_HEAD, show_edge=False, padding=0)
    table.add_column("layout", no_wrap=True)
    table.add_column("round", no_wrap=True)
    for col in ("n", "TTFT p50", "p90", "hit", "ideal", "errors"):
        table.add_column(col, justify="right")
    for lay in result.layouts:
        for rnd in lay.rounds:
            s = rnd.summary
            table.add_row(
                lay.name,
                rnd.label,
                str(s.requests),
                _cell(s.ttft_s, "p50"),
                _cell(s.ttft_s, "p90"),
                fmt_pct(rnd.cache.token_hit_rate),
                fmt_pct(s.ideal_hit_rate),
                str(s.errors),
            )
    return table


def correctness_lines(result: BenchResult) -> list[str]:
    """One line per layout checked with --check-correctness, and the first failure's figures."""
    lines: list[str] = []
    for lay in result.layouts:
        c = lay.correctness
        if c is None:
            continue
        line = (
            f"{lay.name}: correctness {c.passed}/{c.checked} cached answers within the engine's own noise "
            f"of recompute's ({c.in_flight} in flight)"
        )
        counts = ((c.failed, "FAILED"), (c.unknown, "NOT CHECKED"))
        lines.append(line + "".join(f", {n} {what}" for n, what in counts if n))
        if c.summary:
            lines.append(f"{lay.name}:   {c.summary}")
        if c.noise_floor is not None:
            lines.append(f"{lay.name}:   {c.noise_floor.line()}")
        lines += [f"{lay.name}:   request {x.request}: {x.detail}" for x in c.checks if x.verdict != "pass"][
            :3
        ]
    return lines


def error_lines(result: BenchResult, limit: int = 5) -> list[str]:
    """The most frequent error kinds per layout, for the terminal."""
    lines: list[str] = []
    for lay in result.layouts:
        if lay.aborted:
            lines.append(f"{lay.name}: cut short: {lay.aborted}")
        for kind, n in list(lay.summary.error_kinds.items())[:limit]:
            lines.append(f"{lay.name}: {n} x {kind}")
        for err in lay.cache.scrape_errors[:2]:
            lines.append(f"{lay.name}: metrics: {err}")
    return lines


def print_result(result: BenchResult, written: list[Path], json_mode: bool) -> None:
    """The report: results.json on stdout with --json; else the tables and correctness lines on
    stdout, then the errors and the files written on stderr. A replay's result (it carries its trace
    section) gets the replay's tables and no error lines."""
    if json_mode:
        sys.stdout.write(result.model_dump_json(by_alias=True, indent=1) + "\n")
        return
    console = out_console(None, soft_wrap=False, highlight=True)  # rich's Console()
    problems: list[str] = []
    if result.trace is not None:
        print_trace(console, result)
    else:
        console.print(summary_table(result))
        if any(len(lay.rounds) > 1 for lay in result.layouts):
            console.print(rounds_table(result))
        problems = error_lines(result)
    for line in correctness_lines(result):
        console.print(line, markup=False, highlight=False)
    err = err_console(soft_wrap=False, highlight=True)  # rich's Console(stderr=True)
    for line in [*problems, *(f"wrote {path}" for path in written)]:
        err.print(line, markup=False, highlight=False)


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")  # stderr even with --json: stdout carries only the JSON


def bench_events(json_mode: bool, *, live: bool | None = None) -> BenchEvents:
    """`kvstack bench` (and --trace) rendered: the workload line on stderr even with --json (stdout
    carries only the JSON), the live bar (``live``; default: on a terminal, without --json), then
    the report; the layouts kvstack serves tell their start on stderr."""
    view = ProgressView(enabled=(not json_mode and sys.stderr.isatty()) if live is None else live)
    return BenchEvents(
        workload=lambda workload, opts: _say(headline(workload, opts)),
        live=lambda: view,
        progress=view.update,
        report=lambda result, written: print_result(result, written, json_mode),
        sweep_step=lambda layout, ladder, step: _say(step_line(layout, ladder, step)),
        sweep_report=lambda result, written: print_sweep(result, written, json_mode),
        serving=serve_events(json_mode=True),
    )
