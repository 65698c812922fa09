"""``plan --slo-ttft``: each layout's predicted capacity under a TTFT SLO, on the step-level simulator
(planning/predict/simulator), from the plan's own costs and the workload it sizes. Pure.

The layouts are the plan's depths, as the trace's ``by_depth``: the engine's pool alone, then one
offload tier more each; each is the simulator's Layout (planning/predict/sim_layouts.py) from its
``LayoutCosts``: measured on the served engine where the plan has a calibration (``--calibration``:
planning/predict/served_capacity.py), on every platform; else the plan's FLOP model
(``plan_costs``). The result names them.

The workload:

- with ``plan --trace``: the trace's requests (its first ``TRACE_REQUESTS``) at their own prompt
  lengths and timestamps (simulator ``from_trace``, prompts cut to the model's context less the
  output, outputs to ``CapacityAsk.output_tokens``); load 1 is the trace's own rate;
- else a synthetic one from the plan's workload (simulator ``synthetic``): ``SYNTHETIC_REQUESTS``
  requests, seeded, on Poisson arrivals, each prompt the workload's context (less the output where
  the two overrun the model's context), wholly one of ``users x reuse`` shared prefixes drawn
  uniformly (the warm set), ``output_tokens`` out. The warm set is the plan's steady state, so the
  caches are warmed first: one request a prefix, in turn, each far enough from the next to run
  alone at any load searched (only the last prefixes the largest cache holds: the LRU would keep
  just those of all of them); they are not counted (simulator ``capacity``'s ``warmup``), and the
  figures at the capacity are the measured window's. Load 1 is a rough guess of the engine's
  saturation (where the search starts; nothing reported depends on it).

A trace's load replays it from empty caches, as a sweep's step does; the capacity is the highest
rate at which at least ``share`` of the measured requests have TTFT within the SLO and the engine
keeps up (the last of them done within ``KEEP_UP`` of their arrival span, plus one request's
unloaded residence, after the last arrives: an overloaded engine's queue grows while a finite
replay's TTFT can still look fine, a decode-bound one's above all), bisected to within 10%
(simulator ``capacity``, over 1/1024 to 1024 x the workload's rate). At it the result
gives the TTFT at the SLO's quantile, the requests in flight (Little's law over the simulated
residences), each source's share of the prompt tokens, the engine's busy fraction and preemptions,
and the TTFT p50 and p90 at half and at 0.9 of the capacity.

What bounds it, from the run at the capacity (each resource's share of the run's time, from the
requests' own figures and the layout's costs):

- the engine's compute, busy ``busy_fraction`` of the time, split into prefill (each request's
  recomputed tokens with their attention, preempted recompute included), decode (each decoded token's
  per-sequence and KV-read cost) and the steps' fixed cost (forward steps x ``fixed_s``, plus the
  offload path's per-request cost); it is named by the largest of the three, or by a tier whose
  transfers take more of the time (a blocking one adds to the step, an overlapped one stretches it
  when longer than its compute);
- the KV pool: the mean KV the requests computed themselves held while they decode (a shared
  prefix's blocks counted once, with the request that computed them) over its tokens, taken as
  full (1) where requests were preempted;
- each offload tier: its loads (each hit's latency and tokens at its bandwidth) and stores (the
  whole chunks recomputed) over the run, as a share of its link.

The bound is the resource nearest saturation (the engine's parts at the engine's busy fraction). A
bound below ``LATENCY_BOUND`` busy says the SLO is met or missed by the requests' own latency (a long
prompt's prefill, a cold tier), not by a saturated resource: the note says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvstack.planning.predict.capacity_schema import (
    RESOURCE_LABELS,
    CapacityAsk,
    FetchCost,
    LayoutCapacity,
    LayoutCosts,
    PlanCapacity,
    ResourceUse,
    TtftAt,
)
from kvstack.planning.predict.served_capacity import layout_names, served_costs
from kvstack.planning.predict.served_ttft import ServedCalibration
from kvstack.planning.predict.sim_layouts import chunk_tokens, sim_layouts
from kvstack.planning.predict.simulator import (
    CapacitySearch,
    Layout,
    RequestResult,
    SimRequest,
    SimResult,
    Slo,
    capacity,
    from_trace,
    rate_per_s,
    run_at,
    synthetic,
)
from kvstack.planning.predict.trace_sizing import OFFLOAD_REQUEST_COST_S, SizingTrace
from kvstack.planning.schema import Plan

TRACE_REQUESTS = 2000  # a trace's requests simulated (its first; each load replays them all)
SYNTHETIC_REQUESTS = 200
HIGHEST = 1024.0  # the loads searched: 1 / HIGHEST to HIGHEST x the workload's rate
SEED = 0
TOLERANCE = 0.1  # the capacity's bracket, (hi - lo) / hi
AT_CAPACITY = (0.5, 0.9)  # the TTFT reported at these shares of the capacity
KEEP_UP = 0.25  # a load keeps up: its last request done within a quarter of its span after the last arrival
LATENCY_BOUND = 0.5  # a bound this far from saturation: the SLO is the requests' own latency


def plan_costs(plan: Plan) -> list[LayoutCosts] | None:
    """The plan's layouts by depth, in seconds; None without a prefill figure or a forward step."""
    m, pool = plan.ttft, plan.engine_pool
    if m is None or pool is None or m.step_s is None:
        return None
    if m.prefill_flops_per_s is None or m.linear_flops_per_token is None or m.attn_flops_coeff is None:
        return None
    cost_s = plan.trace.offload_cost_s if plan.trace is not None else OFFLOAD_REQUEST_COST_S
    fetch = [
        FetchCost(t.kind, p.bw_bytes_per_s, p.latency_s, p.source)
        for t in plan.offload_tiers
        if (p := m.fetch.get(t.kind)) is not None
    ]
    names = layout_names([f.kind for f in fetch])
    return [
        LayoutCosts(
            name=name,
            fixed_s=m.step_s + (cost_s if k else 0.0),
            linear_s=m.linear_flops_per_token / m.prefill_flops_per_s,
            quadratic_s=m.attn_flops_coeff / m.prefill_flops_per_s,
            bytes_per_token=m.bytes_per_token,
            step_s=m.step_s,
            pool_tokens=pool.tokens,
            fetch=tuple(fetch[:k]),
            prefill_source=m.prefill_source,
            levels=("engine", *(f.kind for f in fetch[:k])),
        )
        for k, name in enumerate(names)
    ]


def capacity_costs(
    plan: Plan, served: ServedCalibration | None, prompt: int
) -> tuple[list[LayoutCosts], str] | None:
    """(the layouts' costs by depth, what they come from): measured on the served engine (``served``,
    for requests of ``prompt`` tokens), else the plan's FLOP model; None: neither."""
    if served is not None:
        return served_costs(plan, served, prompt)
    layouts = plan_costs(plan)
    if layouts is None or plan.ttft is None:
        return None
    return layouts, f"the plan's TTFT model ({plan.ttft.prefill_source})"


# --- the workload --------------------------------------------------------------------------------


def trace_workload(plan: Plan, ask: CapacityAsk, trace: SizingTrace) -> list[SimRequest]:
    """The trace's first ``TRACE_REQUESTS`` requests, at their own prompt lengths."""
    out = max(1, ask.output_tokens)
    return from_trace(
        list(trace.requests[:TRACE_REQUESTS]),
        trace_block_tokens=trace.block_tokens,
        max_prompt_tokens=max(1, plan.model.max_model_len - out),
        max_output_tokens=out,
    )


@dataclass(frozen=True)
class SimWorkload:
    """The requests each load replays: the first ``warmup`` (one a shared prefix, each alone) warm the
    caches and are not counted."""

    requests: list[SimRequest]
    describe: str
    warmup: int = 0

    @property
    def measured(self) -> list[SimRequest]:
        return self.requests[self.warmup :]


def synthetic_prompt(plan: Plan, ask: CapacityAsk) -> int:
    """The synthetic workload's prompt: the context, less the output where both overrun the model's."""
    return max(1, min(plan.workload.context_tokens, plan.model.max_model_len - max(1, ask.output_tokens)))


def cold_s(layout: Layout, prompt: int) -> float:
    """A lone request's cold prefill of ``prompt`` tokens, every chunk stored: its service, alone."""
    c, budget = layout.costs, layout.limits.max_num_batched_tokens
    stores = sum(t.store_s(prompt) for t in layout.tiers)
    return -(-prompt // budget) * c.fixed_s + c.prefill_s(0, prompt) + stores + layout.request_s


def residence_s(layout: Layout, requests: Sequence[SimRequest]) -> float:
    """A mean request's residence alone, its prompt all held: a step, then a step a token decoded
    (the backlog a load may leave at its end: ``KEEP_UP``)."""
    if not requests:
        return 0.0
    prompt = sum(r.prompt_tokens for r in requests) / len(requests)
    output = sum(r.output_tokens for r in requests) / len(requests)
    c = layout.costs
    step = c.fixed_s + c.decode_s_per_seq + c.decode_s_per_kv_token * prompt
    return c.fixed_s + layout.request_s + output * step


def held_tokens(layout: Layout) -> int:
    """The most tokens ``layout``'s caches hold: its largest (the tiers are inclusive)."""
    tiers = [t.capacity_chunks * t.chunk_tokens for t in layout.tiers]
    return max([layout.limits.pool_blocks * layout.limits.block_tokens, *tiers])


def synthetic_rate(layout: Layout, prompt: int, output: int) -> float:
    """A rough guess at the engine's saturation with warm prefixes, requests/s (where the search
    starts): a step and the request's decode steps, shared by as many requests as the pool and the
    scheduler hold."""
    c, lim = layout.costs, layout.limits
    batch = max(1, min(lim.max_num_seqs, lim.pool_blocks * lim.block_tokens // (prompt + output)))
    per_request = c.fixed_s + output * (c.decode_s(1, prompt) + c.fixed_s / batch) + layout.request_s
    return 1.0 / per_request if per_request > 0 else 1.0


def synthetic_workload(plan: Plan, ask: CapacityAsk, layouts: Sequence[Layout]) -> SimWorkload:
    """The synthetic warm-set workload (see the module's docstring), warm-ups first."""
    wl = plan.workload
    first = layouts[0]
    prompt, out = synthetic_prompt(plan, ask), max(1, ask.output_tokens)
    groups = max(1, round(wl.users * wl.reuse))
    ids = chunk_tokens(plan, first.limits.block_tokens)  # a tier's chunk: whole engine blocks
    shared = prompt // ids
    measured = synthetic(
        requests=SYNTHETIC_REQUESTS,
        rate_per_s=synthetic_rate(first, prompt, out),
        prompt_tokens=prompt,
        output_tokens=out,
        shared_prefix_share=1.0,
        prefix_groups=groups,
        id_tokens=ids,
        seed=SEED,
    )
    why = (
        f"synthetic: {SYNTHETIC_REQUESTS} requests, Poisson arrivals, each a {prompt:,}-token prompt wholly "
        f"one of {groups} shared prefix(es) ({wl.users} user(s) x {wl.reuse:g}) drawn uniformly, seed {SEED}"
    )
    if shared < 1:
        return SimWorkload(measured, why + " (shorter than a chunk: nothing to share)")
    # One warm-up a prefix, its shared ids whole, far enough apart to run alone at any load searched;
    # only the last prefixes the largest cache can hold (the LRU keeps those of all of them).
    gap = 2 * HIGHEST * max(cold_s(lay, prompt) for lay in layouts)
    first_warm = max(0, groups - (max(held_tokens(lay) for lay in layouts) // (shared * ids) + 1))
    warm = [
        SimRequest((g - first_warm) * gap, shared * ids, 1, tuple(range(g * shared, (g + 1) * shared)), ids)
        for g in range(first_warm, groups)
    ]
    start = (len(warm) + 1) * gap
    measured = [replace(r, arrival_s=start + r.arrival_s) for r in measured]
    why += f"; the caches warmed first by one request for each of the last {len(warm)} (not counted)"
    return SimWorkload([*warm, *measured], why, warmup=len(warm))


def own_seconds(requests: Sequence[RequestResult], steps: int, layout: Layout) -> dict[str, float]:
    """What ``requests`` cost each resource by their own figures (SimResult ``busy_by``'s keys), in
    ``steps`` steps: their recompute (with attention), their decoded tokens, the steps' fixed cost and
    the offload path's per request, each tier's loads and stores. Exact for requests that ran alone
    (the warm-ups)."""
    c = layout.costs
    served = [r for r in requests if not r.rejected]
    out = {
        "prefill": sum(
            c.prefill_s(r.prompt_tokens - r.recomputed_tokens, r.recomputed_tokens)
            + c.prefill_s(0, r.preempted_recompute_tokens)
            for r in served
        ),
        "decode": sum(
            c.decode_s_per_seq * (r.output_tokens - 1)
            + c.decode_s_per_kv_token
            * ((r.output_tokens - 1) * r.prompt_tokens + (r.output_tokens - 1) * r.output_tokens // 2)
            for r in served
        ),
        "step": steps * c.fixed_s
        + (layout.request_s * sum(1 + r.preemptions for r in served if not r.gated) if layout.tiers else 0.0),
    }
    for k, tier in enumerate(layout.tiers):
        out[tier.kind] = sum(tier.load_s(r.tier_hit_tokens[k]) for r in served if r.tier_hit_tokens[k])
        out[tier.kind] += tier.store_s(
            stored_tokens(served, layout.chunk_tokens) if tier.capacity_chunks else 0
        )
    return out


def stored_tokens(requests: Sequence[RequestResult], chunk: int) -> int:
    """The whole chunks each request computed, stored to a tier."""
    return sum(
        (r.prompt_tokens // chunk - (r.prompt_tokens - r.recomputed_tokens) // chunk) * chunk
        for r in requests
    )


def measured_result(result: SimResult, workload: SimWorkload, layout: Layout) -> SimResult:
    """``result`` less the warm-ups: the measured requests from the first's arrival, the warm-ups'
    steps and busy time (each ran alone: its whole residence, each resource its own figures) taken
    out."""
    w = workload.warmup
    if not w:
        return result
    warm, rest = result.requests[:w], result.requests[w:]
    budget = layout.limits.max_num_batched_tokens
    warm_busy = sum(r.finish_s - r.arrival_s for r in warm if r.finish_s is not None)
    warm_steps = sum(-(-max(1, r.recomputed_tokens) // budget) for r in warm)
    warm_by = own_seconds(warm, warm_steps, layout)
    return SimResult(
        layout=result.layout,
        tier_kinds=result.tier_kinds,
        requests=rest,
        steps=max(0, result.steps - warm_steps),
        busy_s=max(0.0, result.busy_s - warm_busy),
        start_s=min((r.arrival_s for r in rest), default=result.start_s),
        end_s=result.end_s,
        busy_by={k: max(0.0, v - warm_by.get(k, 0.0)) for k, v in result.busy_by.items()},
    )


# --- what bounds it ------------------------------------------------------------------------------


def _use(
    resource: str,
    seconds: float,
    duration: float,
    demand: float,
    unit: str,
    engine: float | None,
    source: str,
) -> ResourceUse:
    """A resource busy ``seconds`` of ``duration`` moving ``demand`` (its unit) in them."""
    share = seconds / duration if duration > 0 else 0.0
    rate = demand / duration if duration > 0 else 0.0
    cap = demand / seconds if seconds > 0 else 0.0
    return ResourceUse(
        resource=resource,
        label=RESOURCE_LABELS.get(resource, resource),
        utilisation=share,
        demand=rate,
        capacity=cap,
        unit=unit,  # type: ignore[arg-type]  # "tokens/s" or "B/s" here
        engine_busy=engine,
        source=source,
    )


def resources_at(result: SimResult, layout: Layout) -> list[ResourceUse]:
    """Each resource's share of the run's time (see the module's docstring), from the engine's own
    accounting (SimResult ``busy_by``): the engine's parts (prefill, decode, step), the pool, then
    each tier."""
    dur = result.duration_s
    served = [r for r in result.requests if not r.rejected]
    busy, by = result.busy_fraction, result.busy_by
    prefill_tokens = sum(r.recomputed_tokens + r.preempted_recompute_tokens for r in served)
    decoded = sum(r.output_tokens - 1 for r in served)
    steps = f"{result.steps:,} forward steps"
    out = [
        _use("prefill", by.get("prefill", 0.0), dur, prefill_tokens, "tokens/s", busy, layout.costs.source),
        _use(
            "decode",
            by.get("decode", 0.0),
            dur,
            decoded,
            "tokens/s",
            busy,
            "each decoding sequence's step cost",
        ),
        _use("step", by.get("step", 0.0), dur, prefill_tokens + decoded, "tokens/s", busy, steps),
    ]
    pool_tokens = layout.limits.pool_blocks * layout.limits.block_tokens
    held = sum(  # each request's own KV (what it computed; a hit's blocks are its computer's)
        (r.finish_s - r.arrival_s - r.ttft_s) * (r.recomputed_tokens + r.output_tokens / 2)
        for r in served
        if r.finish_s is not None and r.ttft_s is not None
    )
    mean_held = held / dur if dur > 0 else 0.0
    preempted = sum(r.preemptions for r in served)
    out.append(
        ResourceUse(
            resource="pool",
            label=RESOURCE_LABELS["pool"],
            utilisation=1.0 if preempted else (mean_held / pool_tokens if pool_tokens else 0.0),
            demand=mean_held,
            capacity=float(pool_tokens),
            unit="tokens",
            source=f"{preempted} preemption(s)" if preempted else "mean KV held while decoding",
        )
    )
    for k, tier in enumerate(layout.tiers):
        stored = stored_tokens(served, layout.chunk_tokens) if tier.capacity_chunks else 0
        moved = (sum(r.tier_hit_tokens[k] for r in served) + stored) * tier.bytes_per_token
        use = _use(tier.kind, by.get(tier.kind, 0.0), dur, moved, "B/s", None, "loads and stores")
        use.capacity = tier.load_bw_bytes_per_s
        out.append(use)
    return out


ENGINE_PARTS = ("prefill", "decode", "step")


def binding(uses: Sequence[ResourceUse]) -> ResourceUse | None:
    """The resource nearest saturation; the engine is named by the largest part of its busy time,
    which a tier's transfers are when they are the largest (blocking it, or stretching its steps)."""
    top = max(uses, key=lambda u: (u.pressure, u.utilisation), default=None)
    if top is None or top.resource not in ENGINE_PARTS:
        return top
    part = max((u for u in uses if u.resource != "pool"), key=lambda u: u.utilisation)
    if part.resource in ENGINE_PARTS:
        return part
    return part.with_engine_busy(top.engine_busy)


def in_flight(result: SimResult) -> float:
    """Requests in the system on average (Little's law: their residences over the run)."""
    dur = result.duration_s
    total = sum(r.finish_s - r.arrival_s for r in result.requests if r.finish_s is not None)
    return total / dur if dur > 0 else 0.0


# --- one layout ------------------------------------------------------------------------------------


def layout_capacity(workload: SimWorkload, layout: Layout, ask: CapacityAsk) -> LayoutCapacity:
    """``layout``'s capacity under ``ask``'s SLO on ``workload`` (see the module's docstring)."""
    requests = workload.requests
    search: CapacitySearch = capacity(
        requests,
        layout,
        Slo(ttft_s=ask.slo_ttft_s, share=ask.share),
        tolerance=TOLERANCE,
        lowest=1 / HIGHEST,
        highest=HIGHEST,
        warmup=workload.warmup,
        keep_up=KEEP_UP,
        drain_s=residence_s(layout, workload.measured),
    )
    base = search.base_rate_per_s
    out = LayoutCapacity(layout=layout.name, status="no_costs")  # filled in below

    def measured_at(multiplier: float) -> SimResult:
        return measured_result(run_at(requests, layout, multiplier), workload, layout)

    if search.status == "below_range" or search.lo is None:
        lightest = search.hi if search.hi is not None else 1 / HIGHEST
        out.status, out.rate_per_s = "slo_below_unloaded", 0.0
        out.unloaded_ttft_s = measured_at(lightest).ttft_quantile(ask.share)
        out.note = "the lightest load searched misses the SLO: an idle engine's TTFT is above it"
        return out
    lo = search.lo
    out.status = "above_range" if search.status == "above_range" else "slo"
    out.rate_per_s = lo * base
    out.failing_rate_per_s = None if search.hi is None else search.hi * base
    at = measured_at(lo)
    out.ttft_at_capacity_s = at.ttft_quantile(ask.share)
    out.in_flight = in_flight(at)
    out.busy_fraction = at.busy_fraction
    out.preemptions = sum(r.preemptions for r in at.requests)
    out.shares = {k: round(v, 6) for k, v in at.shares().items()}
    out.resources = resources_at(at, layout)
    out.bound = binding(out.resources)
    for share in AT_CAPACITY:
        r = measured_at(lo * share)
        out.ttft_at.append(
            TtftAt(
                of_capacity=share,
                rate_per_s=lo * share * base,
                ttft_p50_s=r.ttft_quantile(0.5),
                ttft_p90_s=r.ttft_quantile(0.9),
            )
        )
    if out.status == "above_range":
        out.note = "the heaviest load searched still meets the SLO"
    elif out.bound is not None and out.bound.pressure < LATENCY_BOUND:
        out.note = (
            f"the SLO binds at {out.bound.pressure:.0%} busy: the requests' own latency (a prompt's "
            "prefill, a tier's fetch), not a saturated resource"
        )
    return out


def plan_capacity(
    plan: Plan,
    ask: CapacityAsk,
    served: ServedCalibration | None = None,
    trace: SizingTrace | None = None,
    device_bytes: int | None = None,
) -> PlanCapacity:
    """Each of the plan's layouts' predicted capacity under ``ask``'s SLO, and what bounds it, on the
    simulator: ``trace``'s requests where given, else the plan's synthetic workload; costs from
    ``served`` (measured on the served engine) where given, else the plan's TTFT model;
    ``device_bytes``: one GPU's memory (the scheduler's defaults follow it; None: from the plan)."""
    traced = trace_workload(plan, ask, trace) if trace is not None and trace.requests else []
    prompt = synthetic_prompt(plan, ask)
    if traced:
        prompt = round(sum(r.prompt_tokens for r in traced) / len(traced))
    out = PlanCapacity(ask=ask, prompt_tokens=prompt, shares_from="")  # filled in below
    costed = capacity_costs(plan, served, prompt)
    if costed is None and served is not None:
        out.note = "the plan has no engine pool to hold the KV in flight"
        return out
    if costed is None:
        out.note = (
            "no prefill figure on this platform to predict TTFT with "
            f"({plan.prefill_source}): calibrate it (doctor --calibrate) or measure with bench --sweep"
        )
        return out
    layouts, costs_from = costed
    sims, limits_from = sim_layouts(plan, layouts, device_bytes)
    out.costs_from, out.limits_from = costs_from, limits_from
    if traced:
        assert trace is not None
        shown = min(len(trace.requests), TRACE_REQUESTS)
        workload = SimWorkload(
            traced,
            f"the trace {trace.source}: its first {shown:,} requests ({len(traced):,} kept) at their own "
            f"prompt lengths and arrivals, output cut to {max(1, ask.output_tokens)} tokens",
        )
    else:
        workload = synthetic_workload(plan, ask, sims)
    out.shares_from = workload.describe
    out.requests = len(workload.measured)
    out.base_rate_per_s, out.traced = rate_per_s(workload.measured), bool(traced)
    out.layouts = [layout_capacity(workload, lay, ask) for lay in sims]
    return out
