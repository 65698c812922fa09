"""`kvstack plan`'s output: the tier table, the decisions with their reasons, warnings and errors, and
with --trace the capacity curve, what each tier serves and the TTFT prediction."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kvstack.rendering.console import out_console
from kvstack.units import fmt_ms

if TYPE_CHECKING:
    from kvstack.planning.predict.capacity_schema import LayoutCapacity, PlanCapacity, ResourceUse
    from kvstack.planning.schema import Plan


def _kv_layers(plan: Plan) -> str:
    """Which layers the per-token figure counts, in the layout the engine will run."""
    model = plan.model.geometry
    if plan.cache.hybrid_manager == "off":
        return f"all {model.attention_layers} attention layers at full length: hybrid KV cache manager off"
    if model.hybrid or model.sliding_layers:
        return f"full-attention layers; the model: {model.layer_summary()}"
    return "full-attention layers"


def _kv_fact(plan: Plan) -> str:
    """The KV dtype line: bytes per token of the full-length layers, or, where no layer keeps every
    token (every attention layer slides or is chunked), what the bounded layers keep; and whose
    figure it is."""
    from kvstack.planning.dtype import dtype_bytes
    from kvstack.units import fmt_bytes

    model = plan.model.geometry
    if not model.attention_layers and model.state_layers:
        figure = f"no per-token KV, a fixed state per sequence; the model: {model.layer_summary()}"
    elif plan.cache.kv_bytes_per_token or plan.cache.hybrid_manager == "off" or not model.attention_layers:
        figure = f"{fmt_bytes(plan.cache.kv_bytes_per_token)}/token, {_kv_layers(plan)}"
    else:
        scale = dtype_bytes(plan.cache.kv_cache_dtype, model) / model.dtype_bytes
        per_token = model.attention_layers * model.layer_kv_bytes_per_token * scale
        bound = model.sliding_window or model.attention_chunk
        figure = (
            f"{fmt_bytes(per_token)}/token up to {bound} tokens a layer: no layer keeps every token; "
            f"the model: {model.layer_summary()}"
        )
    return f"{plan.cache.kv_cache_dtype} ({figure}; {_kv_source(plan)})"


def _kv_source(plan: Plan) -> str:
    spec = plan.model.geometry.engine_spec
    if spec is None:
        return "estimated: kvstack's reader of config.json, not checked with the engine"
    if not spec.blocks_checked:
        return f"layers from {spec.source()}; block sizes estimated for {plan.platform}"
    return f"from {spec.source()}"


def _breakeven(kind: str, tokens: int | None, platform: str) -> str:
    from kvstack.units import fmt_tokens

    if kind == "gpu" or platform == "cpu":
        return "-"
    if tokens is None:
        return "never"
    return "always" if tokens == 0 else f"> {fmt_tokens(tokens)}"


def _predicted(plan: Plan, kind: str, *, engine_pool: bool) -> str:
    """The predicted TTFT of a context-sized prefix held by this tier (a hit, on the engine's pool)."""
    m = plan.ttft
    if m is None:
        return "-"
    if engine_pool:
        return fmt_ms(m.hit_s)
    seconds = m.tier_s.get(kind)
    if seconds is None:
        return "-"
    return fmt_ms(seconds) if m.step_s is not None else f"hit + {fmt_ms(seconds)}"


def render(plan: Plan) -> None:
    """The human form: a table of tiers, then the decisions with their reasons, warnings, errors."""
    from rich.markup import escape
    from rich.table import Table

    from kvstack.units import fmt_bw, fmt_bytes, fmt_tokens

    # Pipes and CI logs get a fixed width wide enough for the tier table; terminals their own.
    console = out_console(120)
    where = (
        f"{plan.gpu_name} x {plan.parallel.tensor_parallel_size}"
        if plan.platform == "cuda"
        else "CPU (no GPU)"
    )
    status = "[green]feasible[/green]" if plan.feasible else "[red]NOT feasible[/red]"
    console.print(
        f"[bold]{escape(plan.model.geometry.name)}[/bold] on {escape(where)} with {plan.engine}: {status}"
    )
    ctx = plan.workload.context_tokens
    table = Table(title=f"KV tiers ({fmt_tokens(ctx)}-token sessions)", title_justify="left")
    ttft_col = f"TTFT {fmt_tokens(ctx)} prefix"
    cols = ("tier", "size", "per rank", "tokens", "sessions", "read bw", "fetch beats recompute", ttft_col)
    for col in cols:
        table.add_column(col, justify="left" if col == "tier" else "right")
    for i, t in enumerate(plan.cache.tiers):
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
            _kv_fact(plan),
        ),
        ("connector", plan.transfer.connector),
        ("tensor parallel", str(plan.parallel.tensor_parallel_size)),
        ("max_model_len", str(plan.model.max_model_len)),
        ("chunk_size", str(plan.cache.chunk_size)),
        ("weights", fmt_bytes(plan.model.weight_bytes)),
    ]
    if plan.platform == "cuda":
        facts.append(("gpu_memory_utilization", f"{plan.cache.gpu_memory_utilization:.2f}"))
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
                fmt_ms(recompute) if recompute is not None else "no prefill figure for this platform",
            )
        )
    if plan.transfer.remote_url:
        facts.append(("remote", plan.transfer.remote_url))
    for key, value in facts:
        console.print(f"  {key:<24} {value}", markup=False)
    console.print("[bold]why[/bold]")
    for key, value in plan.reasons.items():
        console.print(f"  {key}: {value}", markup=False)
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
    for e in plan.errors:
        console.print(f"[red]error:[/red] {escape(e)}")


def write_png(plan: Plan, path: Path) -> None:
    from kvstack.rendering.curve_png import write_curve_png

    assert plan.trace is not None
    title = f"{plan.model.geometry.name} ({plan.cache.kv_cache_dtype} KV) on {plan.trace.source}"
    write_curve_png(plan.trace, path, title)


def render_trace(plan: Plan, curve_png: Path | None) -> None:
    """The curve at key sizes with each tier's boundary, what each tier serves, the TTFT prediction."""
    from rich.markup import escape
    from rich.table import Table

    from kvstack.units import fmt_bytes

    t = plan.trace
    assert t is not None
    console = out_console(120)
    title = (
        f"capacity curve from {t.source} ({t.requests:,} requests over {t.duration_s / 60:.0f} min, "
        f"{t.block_tokens}-token blocks of {fmt_bytes(t.block_bytes)})"
    )
    table = Table(title=escape(title), title_justify="left")
    for col in ("cache size", "prompt tokens from cache", "mark"):
        table.add_column(col, justify="right" if col != "mark" else "left")
    names = {"engine": "engine pool", "cpu": "+ DRAM tier", "disk": "+ disk tier", "remote": "+ remote tier"}
    # Tiers the trace's verdict dropped (--offload auto) are shown as considered, not planned.
    planned = {"engine", *(x.kind for x in plan.offload_tiers)}
    dropped = " (considered, not planned)"
    for row in t.table:
        mark = names.get(row.label, row.label) + (
            dropped if row.label in names and row.label not in planned else ""
        )
        if row.label == "target":
            mark = f"target: {t.target_fraction:.0%} of the unbounded cache's hits"
        elif row.label == "max":
            mark = "unbounded (no larger cache serves more)"
        table.add_row(fmt_bytes(row.size_bytes), f"{row.hit_ratio:.1%}", mark)
    console.print(table)
    lines = [("sized by", f"the trace (sample: {t.sample})" if t.sample else "the trace")]
    for share in t.tiers:
        saved = f"{share.tokens_per_s:,.0f} tokens/s of prefill saved"
        note = dropped if share.kind not in planned else ""
        lines.append((f"{share.kind} serves", f"{share.hit_ratio:.1%} of prompt tokens ({saved}){note}"))
    if t.with_offload is not None and t.without_offload is not None:
        w, wo = t.with_offload, t.without_offload
        for d in t.by_depth:
            who = "TTFT " + (
                "engine pool alone"
                if d.tiers == "engine"
                else "+ " + d.tiers.removeprefix("engine+").replace("+", " + ")
            )
            lines.append((who, f"p50 {fmt_ms(d.p50_s)}, p90 {fmt_ms(d.p90_s)}, mean {fmt_ms(d.mean_s)}"))
        lines.append(("offload cost", f"{fmt_ms(t.offload_cost_s)} per request ({t.offload_cost_source})"))
        lines.append(
            (
                "prefill load",
                f"{w.prefill_busy:.2f} with offload, {wo.prefill_busy:.2f} without (> 1: queues)",
            )
        )
    if curve_png is not None:
        lines.append(("curve PNG", str(curve_png)))
    for key, value in lines:
        console.print(f"  {key:<24} {value}", markup=False)
    if t.verdict:
        console.print(f"  {'verdict':<24} {t.verdict}", markup=False)


def render_plan_result(plan: Plan, curve_png: Path | None) -> None:
    """`kvstack plan`'s human output: the plan, then what the trace says when it sized the tiers."""
    render(plan)
    if plan.trace is not None:
        render_trace(plan, curve_png)
    if plan.capacity is not None:
        console = out_console(120)
        for line in capacity_lines(plan.capacity):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _resource_text(use: ResourceUse) -> str:
    """``decode 60% of the time (the engine 96% busy)``; a tier or the pool: its share of its figure."""
    if use.resource == "pool":
        held = f"{use.demand:,.0f} of {use.capacity:,.0f} tokens held"
        return f"{use.label} {use.utilisation:.0%} ({use.source or held})"
    text = f"{use.label} {use.utilisation:.0%} of the time"
    if use.engine_busy is not None:
        text += f" (the engine {use.engine_busy:.0%} busy)"
    return text


def _layout_capacity_line(lay: LayoutCapacity, quantile: str) -> str:
    tiers = lay.layout.removeprefix("engine+").replace("+", " + ")
    name = "engine pool alone" if lay.layout == "engine" else f"+ {tiers}"
    if lay.status == "no_costs" or lay.rate_per_s is None:
        return f"{name}: no prediction ({lay.note})"
    if lay.status == "slo_below_unloaded":
        return f"{name}: no capacity: TTFT {quantile} at the lightest load is {fmt_ms(lay.unloaded_ttft_s)}"
    bracket = (
        f"below {_rate(lay.failing_rate_per_s)}" if lay.failing_rate_per_s is not None else "above the range"
    )
    inflight = f", ~{lay.in_flight:.1f} in flight" if lay.in_flight is not None else ""
    bound = _resource_text(lay.bound) if lay.bound is not None else "none"
    at = ", ".join(
        f"at {t.of_capacity:g}x {fmt_ms(t.ttft_p50_s)} / {fmt_ms(t.ttft_p90_s)}" for t in lay.ttft_at
    )
    line = (
        f"{name}: {_rate(lay.rate_per_s)} requests/s ({bracket}{inflight}); TTFT {quantile} at it "
        f"{fmt_ms(lay.ttft_at_capacity_s)}; bound: {bound}"
    )
    if at:
        line += f"; TTFT p50 / p90 {at}"
    return line + (f" ({lay.note})" if lay.note else "")


def capacity_lines(cap: PlanCapacity) -> list[str]:
    """``plan --slo-ttft``: the heading, the workload, what the costs and limits come from, then one
    line per layout (planning/predict/plan_capacity.py computes; this only words it)."""
    q = f"p{cap.ask.share * 100:g}"
    head = (
        f"predicted capacity under TTFT {q} <= {cap.ask.slo_ttft_s * 1000:g} ms (step-level simulator): "
        f"requests of {cap.prompt_tokens:,} prompt tokens on average and {cap.ask.output_tokens} output"
    )
    if not cap.layouts:
        return [head, f"  no prediction: {cap.note}"]
    how = (
        f"x {cap.base_rate_per_s:.3g}/s, the trace's own rate, is a sweep's rate:; each load replays "
        "it from empty caches"
        if cap.traced and cap.base_rate_per_s
        else "Poisson arrivals; each load replays the warm-ups, then the requests"
    )
    return [
        head,
        f"  workload: {cap.shares_from}",
        f"  costs: {cap.costs_from}",
        f"  scheduler: {cap.limits_from}",
        f"  capacity in requests/s ({how}), bisected to within 10%",
        *(f"  {_layout_capacity_line(lay, q)}" for lay in cap.layouts),
    ]
