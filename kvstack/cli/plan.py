"""`kvstack plan`: the tier layout, KV dtype and sizes kvstack would use, and why (no side effects)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from kvstack.cli import options as opt

if TYPE_CHECKING:
    pass


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def _cmd(
        model: opt.Model,
        revision: opt.Revision = None,
        hardware: opt.Hardware = None,
        context: opt.Context = None,
        users: opt.Users = None,
        engine: opt.Engine = "vllm",
        tp: opt.TensorParallel = None,
        kv_dtype: opt.KvDtype = None,
        remote: opt.Remote = None,
        workload: opt.Workload = None,
        offload: opt.Offload = "auto",
        cache_dir: opt.CacheDir = None,
        gpu_memory_utilization: float | None = typer.Option(
            None, "--gpu-memory-utilization", help="Fraction of GPU memory for weights + KV (default 0.92)."
        ),
        min_disk_bw: opt.MinDiskBw = None,
        retain: opt.Retain = None,
        no_disk: opt.NoDisk = False,
        trace: opt.Trace = None,
        trace_sample: opt.TraceSample = None,
        start: opt.TraceStart = 0,
        max_requests: opt.TraceMaxRequests = None,
        offload_cost: opt.OffloadCost = None,
        offload_cost_from: opt.OffloadCostFrom = None,
        calibration: opt.Calibration = None,
        tuned: opt.Tuned = None,
        curve_png: opt.CurvePng = None,
        json_out: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    ) -> None:
        """Choose the tier layout, sizes and KV dtype for a model on this hardware, and explain why."""
        from kvstack.serving.plan_inputs import load_or_probe, plan_request

        request = plan_request(
            engine=engine,
            offload=offload,
            context=context,
            users=users,
            tp=tp,
            kv_dtype=kv_dtype,
            remote=remote,
            retain=retain,
            no_disk=no_disk,
            cache_dir=cache_dir,
            min_disk_bw=min_disk_bw,
            gpu_memory_utilization=gpu_memory_utilization,
            tuned=tuned,
        )
        from kvstack.model.source import resolve_model
        from kvstack.rendering.plan import render, render_trace, write_png
        from kvstack.replay.inputs import read_trace_input
        from kvstack.serving.planner import plan_for_model

        traced = read_trace_input(
            trace,
            trace_sample,
            start,
            max_requests,
            (offload_cost, offload_cost_from),
            curve_png,
            calibration,
        )
        source = resolve_model(model, revision)  # before the probe: a model that is not there fails at once
        snapshot = load_or_probe(hardware, cache_dir)
        plan = plan_for_model(request, source, workload, snapshot, traced)
        if curve_png is not None and plan.trace is not None:
            write_png(plan, curve_png)
        if json_out:
            typer.echo(plan.model_dump_json(indent=2))
        else:
            render(plan)
            if plan.trace is not None:
                render_trace(plan, curve_png)
        if not plan.feasible:
            raise typer.Exit(1)
