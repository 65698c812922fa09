"""`kvstack validate`: the TTFT validation pass against a running server."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from kvstack.apikey import ApiKeyInputs
from kvstack.cli.flags import Pick, command
from kvstack.remote.source import RemoteInputs
from kvstack.validation.inputs import ServerInputs, ValidateInputs, ValidationInputs

ValidateFlags = Annotated[ValidateInputs, Pick(help={"as_json": "Print the report as JSON"})]


def register(app: typer.Typer) -> None:
    @command(app, "validate")
    def _cmd(
        server: ServerInputs,
        remote: RemoteInputs,
        key: ApiKeyInputs,
        checks: ValidationInputs,
        run: ValidateFlags,
    ) -> None:
        """Prove with TTFT and the server's counters that the prefix cache and each tier serve hits."""
        from kvstack.validation import run_validation, write_report

        target = server.target(
            remote.url(),  # --remote-file, --remote, KVSTACK_REMOTE_URL
            key.value(),
            **checks.model_dump(),
            **run.target_fields(),
        )
        from kvstack.rendering.validation import render_report, validating

        with validating(shown=not run.as_json and sys.stderr.isatty()) as on_progress:
            report = run_validation(target, on_progress=on_progress)
        if run.out is not None:
            write_report(report, run.out)
        render_report(report, run.as_json)
        raise typer.Exit(0 if report.overall == "PASS" else 1)
