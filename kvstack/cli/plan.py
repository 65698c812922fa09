"""`kvstack plan`: the tier layout, KV dtype and sizes kvstack would use, and why (no side effects)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvstack.cli.flags import command
from kvstack.remote.source import RemoteInputs
from kvstack.replay.inputs import TraceInputs
from kvstack.serving.plan_inputs import PlanInputs

CurvePng = Annotated[
    Path | None,
    typer.Option("--curve-png", help="Write the trace's capacity curve, tier boundaries marked, as a PNG."),
]


def register(app: typer.Typer) -> None:
    @command(app, "plan")
    def _cmd(
        plan_inputs: PlanInputs,
        remote: RemoteInputs,
        trace: TraceInputs,
        curve_png: CurvePng = None,
        json_out: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    ) -> None:
        """Choose the tier layout, sizes and KV dtype for a model on this hardware, and explain why."""
        from kvstack.rendering.plan import render_plan_result, write_png
        from kvstack.serving.planner import plan_for_inputs

        plan = plan_for_inputs(plan_inputs, remote.url(), trace.read(curve_png))
        if curve_png is not None and plan.trace is not None:
            write_png(plan, curve_png)
        if json_out:
            typer.echo(plan.model_dump_json(indent=2))
        else:
            render_plan_result(plan, curve_png)
        if not plan.feasible:
            raise typer.Exit(1)
