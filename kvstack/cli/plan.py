"""`kvstack plan`: the tier layout, KV dtype and sizes kvstack would use, and why (no side effects)."""

from __future__ import annotations

from typing import Annotated

import typer

from kvstack.bench.replay.inputs import TraceInputs
from kvstack.cli.flags import Pick, command
from kvstack.remote.source import RemoteInputs
from kvstack.serving.plan_inputs import PlanInputs, PlanOutputInputs

PlanOutput = Annotated[
    PlanOutputInputs,
    Pick(
        help={
            "as_json": "Print the plan as JSON.",
            "slo_ttft": "Predict each layout's capacity (requests/s) under this TTFT SLO, and the resource "
            "that bounds it.",
            "slo_share": "--slo-ttft: the share of requests that must meet it (default 0.9).",
            "output_tokens": "--slo-ttft: tokens generated per request (decode, and the KV in flight).",
        }
    ),
]


def register(app: typer.Typer) -> None:
    @command(app, "plan")
    def _cmd(plan_inputs: PlanInputs, remote: RemoteInputs, trace: TraceInputs, output: PlanOutput) -> None:
        """Choose the tier layout, sizes and KV dtype for a model on this hardware, and explain why."""
        from kvstack.rendering.plan import render_plan_result, write_png
        from kvstack.serving.planner import plan_for_inputs

        curve_png = output.curve_png
        ask = output.capacity_ask()
        plan = plan_for_inputs(plan_inputs, remote.parsed(), trace.read(curve_png), capacity=ask)
        if curve_png is not None and plan.trace is not None:
            write_png(plan, curve_png)
        if output.as_json:
            typer.echo(plan.model_dump_json(indent=2))
        else:
            render_plan_result(plan, curve_png)
        if not plan.feasible:
            raise typer.Exit(1)
