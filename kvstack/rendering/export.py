"""`kvstack export`'s output: the main file on standard output (or the files written), then notes
and the plan's warnings on standard error."""

from __future__ import annotations

from pathlib import Path

import typer

from kvstack.export.bundle import Bundle
from kvstack.planning.schema import Plan


def render_bundle(bundle: Bundle, plan: Plan, written: list[Path] | None) -> None:
    """``written``: the paths --out got (None: nothing written, the main file is printed)."""
    if written is None:
        typer.echo(bundle.main.content, nl=False)
        for f in bundle.files[1:]:
            kept = "holds a secret, " if f.secret else ""
            typer.echo(f"note: {f.name} not printed ({kept}use --out DIR to write it)", err=True)
    else:
        for path, f in zip(written, bundle.files, strict=True):
            typer.echo(f"wrote {path} ({'0600' if f.secret else oct(f.mode)[2:].rjust(4, '0')})")
    for note in bundle.notes:
        typer.echo(f"note: {note}", err=True)
    for warning in plan.warnings:
        typer.echo(f"warning: {warning}", err=True)
