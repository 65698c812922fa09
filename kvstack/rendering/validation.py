"""`kvstack validate`'s table (and serve's validation pass): one row per step, its evidence, the verdict."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from kvstack.rendering.console import err_console, out_console

if TYPE_CHECKING:
    from kvstack.validation import ValidationReport

_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def render(report: ValidationReport) -> None:
    """The table a person reads: one row per step, evidence with numbers, the verdict."""
    from rich.table import Table
    from rich.text import Text

    # Pipes and CI logs get a fixed width wide enough for the table; terminals their own.
    console = out_console(140, soft_wrap=False, highlight=True)
    table = Table(title=f"kvstack validate: {report.base_url} ({report.engine}, {report.model})")
    table.add_column("step", no_wrap=True)
    table.add_column("TTFT", justify="right", no_wrap=True)
    table.add_column("predicted", justify="right", no_wrap=True)
    table.add_column("speedup", justify="right", no_wrap=True)
    table.add_column("evidence")
    table.add_column("verdict", no_wrap=True)
    for step in report.steps:
        ttft = f"{step.ttft_s * 1000:.1f} ms" if step.ttft_s is not None else "-"
        predicted = f"{step.predicted_ttft_s * 1000:.1f} ms" if step.predicted_ttft_s is not None else "-"
        speedup = f"{step.speedup:.2f}x" if step.speedup is not None else "-"
        style = _STYLE[step.verdict]
        # Text, not markup: evidence and log lines contain brackets and braces.
        lines = [*step.evidence, *([f"predicted: {step.prediction}"] if step.prediction else [])]
        evidence = Text("\n".join(lines))
        for warning in step.warnings:
            evidence.append(("\n" if evidence.plain else "") + f"warning: {warning}", style="yellow")
        if step.reason:
            evidence.append(("\n" if evidence.plain else "") + step.reason, style=style)
        table.add_row(step.name, ttft, predicted, speedup, evidence, Text(step.verdict, style=style))
    console.print(table)
    if report.load is not None:
        console.print(Text(report.load.line()))
    for d in report.diagnoses:
        console.print(Text(f"{d.name}: ", style="bold red") + Text(d.explanation))
        console.print(Text(f"  line {d.first_line}: {d.example}"))
    color = "green" if report.overall == "PASS" else "bold red"
    console.print(
        Text(report.overall, style=color) + Text(f" ({report.thresholds()}; {report.duration_s:.1f} s)")
    )


@contextlib.contextmanager
def validating(shown: bool) -> Iterator[Callable[[str], None] | None]:
    """A live status line on standard error while the pass runs (when ``shown``): yields the pass's
    progress callback, or None."""
    if not shown:
        yield None
        return

    with err_console(soft_wrap=False, highlight=True).status("validating ...") as status:
        yield lambda msg: status.update(f"validating: {msg}")


def render_report(report: ValidationReport, as_json: bool) -> None:
    """The report as JSON on standard output, or the table."""
    if as_json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        render(report)
