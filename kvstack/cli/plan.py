"""`kvstack plan`: the tier layout, KV dtype and sizes kvstack would use, and why (no side effects)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from kvstack.cli import options as opt

if TYPE_CHECKING:
    from kvstack.planning.schema import Plan


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
        from kvstack.cli.plan_trace import read_trace_input, render_trace, write_png
        from kvstack.model.source import resolve_model
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


def _kv_layers(plan: Plan) -> str:
    """Which layers the per-token figure counts, in the layout the engine will run."""
    model = plan.model
    if plan.hybrid_manager == "off":
        return f"all {model.attention_layers} attention layers at full length: hybrid KV cache manager off"
    if model.hybrid or model.sliding_layers:
        return f"full-attention layers; the model: {model.layer_summary()}"
    return "full-attention layers"


def _breakeven(kind: str, tokens: int | None, platform: str) -> str:
    from kvstack.units import fmt_tokens

    if kind == "gpu" or platform == "cpu":
        return "-"
    if tokens is None:
        return "never"
    return "always" if tokens == 0 else f"> {fmt_tokens(tokens)}"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:,.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def _predicted(plan: Plan, kind: str, *, engine_pool: bool) -> str:
    """The predicted TTFT of a context-sized prefix held by this tier (a hit, on the engine's pool)."""
    m = plan.ttft
    if m is None:
        return "-"
    if engine_pool:
        return _ms(m.hit_s)
    seconds = m.tier_s.get(kind)
    if seconds is None:
        return "-"
    return _ms(seconds) if m.step_s is not None else f"hit + {_ms(seconds)}"


def render(plan: Plan) -> None:
    """The human form: a table of tiers, then the decisions with their reasons, warnings, errors."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from kvstack.units import fmt_bw, fmt_bytes, fmt_tokens

    # Pipes and CI logs get a fixed width wide enough for the tier table; terminals their own.
    console = Console(soft_wrap=True, highlight=False, width=None if sys.stdout.isatty() else 120)
    where = f"{plan.gpu_name} x {plan.tensor_parallel_size}" if plan.platform == "cuda" else "CPU (no GPU)"
    status = "[green]feasible[/green]" if plan.feasible else "[red]NOT feasible[/red]"
    console.print(f"[bold]{escape(plan.model.name)}[/bold] on {escape(where)} with {plan.engine}: {status}")
    ctx = plan.workload.context_tokens
    table = Table(title=f"KV tiers ({fmt_tokens(ctx)}-token sessions)", title_justify="left")
    ttft_col = f"TTFT {fmt_tokens(ctx)} prefix"
    cols = ("tier", "size", "per rank", "tokens", "sessions", "read bw", "fetch beats recompute", ttft_col)
    for col in cols:
        table.add_column(col, justify="left" if col == "tier" else "right")
    for i, t in enumerate(plan.tiers):
        label = t.kind + (f" {t.path}" if t.path else "") + (f" {t.url}" if t.url else "")
        unsized = t.kind == "remote" and t.size_bytes == 0  # the store's own limit, not known here
        table.add_row(
            label,
            "server's" if unsized else fmt_bytes(t.size_bytes),
            "-" if unsized else fmt_bytes(t.size_bytes_per_rank),
            fmt_tokens(t.tokens),
            str(t.tokens // ctx),
            fmt_bw(t.read_bw_bytes_per_s),
            _breakeven(t.kind, t.breakeven_tokens, plan.platform),
            _predicted(plan, t.kind, engine_pool=i == 0),
        )
    console.print(table)
    facts = [
        (
            "KV dtype",
            f"{plan.kv_cache_dtype} ({fmt_bytes(plan.kv_bytes_per_token)}/token, {_kv_layers(plan)})",
        ),
        ("connector", plan.connector),
        ("tensor parallel", str(plan.tensor_parallel_size)),
        ("max_model_len", str(plan.max_model_len)),
        ("chunk_size", str(plan.chunk_size)),
        ("weights", fmt_bytes(plan.weight_bytes)),
    ]
    if plan.platform == "cuda":
        facts.append(("gpu_memory_utilization", f"{plan.gpu_memory_utilization:.2f}"))
    if plan.prefill_tokens_per_s:
        facts.append(("prefill", f"~{plan.prefill_tokens_per_s:,.0f} tokens/s ({plan.prefill_source})"))
    if plan.concurrency is not None:
        c = plan.concurrency
        facts.append(("sessions", f"{c.sessions_gpu} on the GPU, {c.sessions_all_tiers} in all tiers"))
        facts.append(("working set", fmt_bytes(c.working_set_bytes)))
        if c.retention_target_bytes is not None:
            held = fmt_bytes(c.retained_bytes)
            facts.append(("retention target", f"{fmt_bytes(c.retention_target_bytes)} ({held} held)"))
    if plan.ttft is not None:
        recompute = plan.ttft.recompute_s
        facts.append(
            (
                "TTFT if recomputed",
                _ms(recompute) if recompute is not None else "no prefill figure for this platform",
            )
        )
    if plan.remote_url:
        facts.append(("remote", plan.remote_url))
    for key, value in facts:
        console.print(f"  {key:<24} {value}", markup=False)
    console.print("[bold]why[/bold]")
    for key, value in plan.reasons.items():
        console.print(f"  {key}: {value}", markup=False)
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
    for e in plan.errors:
        console.print(f"[red]error:[/red] {escape(e)}")
