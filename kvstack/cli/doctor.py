"""`kvstack doctor`: what this machine has and what it can serve."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated

import typer

from kvstack.errors import InputError


def _fio_budget(fio_seconds: float, no_fio: bool) -> float | None:
    if not math.isfinite(fio_seconds) or fio_seconds <= 0:
        raise InputError(
            f"--fio-seconds must be a positive number of seconds, not {fio_seconds:g}",
            hint="e.g. --fio-seconds 10, or --no-fio to skip the disk measurement",
        )
    return None if no_fio else fio_seconds


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def _cmd(
        json_out: Annotated[
            bool, typer.Option("--json", help="Print the hardware snapshot as JSON (for --hardware FILE).")
        ] = False,
        path: Annotated[
            list[Path] | None,
            typer.Option(
                "--path", help="Cache directory to check (repeatable; default: every writable disk)."
            ),
        ] = None,
        fio_seconds: Annotated[
            float, typer.Option("--fio-seconds", help="Time bound of the fio read test, per path.")
        ] = 10.0,
        no_fio: Annotated[bool, typer.Option("--no-fio", help="Skip the disk bandwidth test.")] = False,
        strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when any check fails.")] = False,
    ) -> None:
        """Probe GPUs, memory, disks and software, and say what this machine can serve."""
        budget = _fio_budget(fio_seconds, no_fio)
        # Imported here so that `kvstack --help` never pays for pydantic and the probes.
        from kvstack.cli.render_doctor import probing_status, render
        from kvstack.hardware.checks import any_failed
        from kvstack.hardware.probe import probe

        with probing_status(enabled=not json_out and budget is not None, fio_seconds=budget):
            snap = probe(path or None, budget)
        if json_out:
            sys.stdout.write(snap.to_json() + "\n")
        else:
            render(snap)
        if strict and any_failed(snap.checks):
            raise typer.Exit(1)
