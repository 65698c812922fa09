"""`kvstack serve`: plan, write the connector config, launch the engine, validate, keep serving."""

from __future__ import annotations

from typing import Annotated

import typer

from kvstack.apikey import ApiKeyInputs
from kvstack.bench.replay.inputs import TraceInputs
from kvstack.canary.inputs import CanaryInputs
from kvstack.cli.flags import Pick, command
from kvstack.remote.source import RemoteInputs
from kvstack.serving.request import ServeRequest, ServeRunInputs

ServeFlags = Annotated[ServeRequest, Pick(without=("gpu_memory_utilization",))]
ServeTrace = Annotated[TraceInputs, Pick(without=("start", "max_requests"))]
ServeRun = Annotated[ServeRunInputs, Pick(help={"as_json": "Machine-readable output"})]


def register(app: typer.Typer) -> None:
    @command(app, "serve", context_settings={"allow_interspersed_args": False})
    def _cmd(
        request: ServeFlags,
        remote: RemoteInputs,
        trace: ServeTrace,
        key: ApiKeyInputs,
        canary: CanaryInputs,
        run: ServeRun,
        extra_args: list[str] = typer.Argument(
            None, help="Extra engine arguments, after --", show_default=False
        ),
    ) -> None:
        """Plan the KV tiers, write the connector config, launch the engine, validate it, keep serving."""
        from kvstack.rendering.serve import print_dry_run, serve_events
        from kvstack.serving.serve import serve

        json_mode = run.as_json
        events = serve_events(json_mode)
        full = request.completed(
            remote=remote.parsed(),
            api_key=key.value(),
            extra_args=extra_args,
            validate=not run.no_validate,
            canary=canary.fields(),
        )
        shown = (lambda launch: print_dry_run(launch, json_mode, events)) if run.dry_run else None
        code = serve(full, events, trace.read(), dry_run=shown)
        if code:
            raise typer.Exit(code)
