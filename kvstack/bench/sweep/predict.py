"""Pure: the step-level simulator's prediction beside what a sweep measured (issue 61), per layout:
its capacity under the sweep's SLO, each step's TTFT p50 / p90 at the step's load, and what binds
at the knee, all from one simulation of the served engine (planning/predict/simulator).

The simulated layout (``layout_model``): its costs from the sweep's own calibration of the layout
where it ran one (bench/sweep/calibration.py ``sweep_calibration``), else the plan's TTFT model
(planning/predict/plan_capacity.py ``capacity_costs``); as ``plan --slo-ttft`` maps them
(planning/predict/sim_layouts.py: the plan's deepest layout, its scheduler's defaults). Without a
plan (``--url``) the calibration's costs alone: its prefill and decode, the pool its counters gave
(``SweepCalibration.pool_tokens``) and the engine's scheduler defaults for the platform its block
size says (a 128-token block: vLLM's CPU backend), no offload tier.

The workload it replays, as the sweep sent it:

- a trace sweep (``bench --trace --sweep rate:...``): the slice's requests as replayed (their
  prompts, outputs and blocks at --block-tokens, arrivals on the trace's clock x --time-scale:
  ``sent_requests``), a step at load ``k`` arriving ``k`` times as fast (the replay's ``stepped``);
- a synthetic one: each step's own requests (``row_requests``: their prompt and output tokens,
  rounds in order, each request's shared prefix the longest its group's requests expect a perfect
  cache to hold, the rest its own), on their own send times (``rate:``, Poisson) or sent by
  ``load`` clients in a closed loop (``concurrency:``).

Each load replays from empty caches, as each step's fresh prompts find them. The capacity is
bisected on the lowest completed step's workload (simulator ``capacity``, to ``TOLERANCE``; a
closed loop by whole clients, up to the requests a step sends: more clients than requests change
nothing), in the sweep's unit. The knee's bound is read off the simulation of the step's own
workload at the load the measured knee is read at (simulator ``busy_by``: plan_capacity.py
``resources_at``, ``binding``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvstack.bench.replay.prompts import SentRequest
from kvstack.bench.sweep.calibration import sweep_calibration
from kvstack.bench.sweep.schema import (
    CapacityPrediction,
    KneeBound,
    LayoutSweep,
    StepPrediction,
    SweepCalibration,
    SweepResult,
    SweepRow,
    SweepStep,
)
from kvstack.bench.sweep.schema import Slo as SweepSlo
from kvstack.connectors.engines import engine_spec
from kvstack.names import Platform
from kvstack.planning.predict.capacity_schema import CapacityStatus, ResourceUse
from kvstack.planning.predict.plan_capacity import LATENCY_BOUND, binding, capacity_costs, resources_at
from kvstack.planning.predict.served_ttft import ServedCalibration
from kvstack.planning.predict.sim_layouts import served_step_costs, sim_layouts
from kvstack.planning.predict.simulator import (
    Layout,
    SchedulerLimits,
    SimRequest,
    SimResult,
    Slo,
    capacity,
    run_at,
    share_within,
)
from kvstack.planning.schema import Plan
from kvstack.units import fmt_ms, fmt_tokens

ID_TOKENS = 16  # a synthetic step's prefix ids (any size: the simulator splits them into its blocks)
HIGHEST = 1024.0  # the loads searched: 1 / HIGHEST to HIGHEST x the workload's
TOLERANCE = 0.1  # the capacity's bracket, (hi - lo) / hi (as plan --slo-ttft's)
SEARCH_STATUS: dict[str, CapacityStatus] = {
    "bracketed": "slo",
    "above_range": "above_range",
    "below_range": "slo_below_unloaded",
}


@dataclass(frozen=True)
class SweepModel:
    """A swept layout as the simulator serves it, and where its costs and scheduler come from."""

    layout: Layout
    source: str


# --- the layout ------------------------------------------------------------------------------------


def _served_alone(name: str, served: ServedCalibration, cal: SweepCalibration | None) -> SweepModel | str:
    """The calibration's costs with no plan: its pool, the engine's scheduler defaults."""
    if cal is None or not cal.pool_tokens or not cal.block_tokens:
        return "no plan, and the calibration read no engine pool from the server's counters"
    plain = served.plain
    step = served.forward_step()
    scheduler = engine_spec(cal.engine or "vllm").scheduler
    platform: Platform = "cpu" if cal.block_tokens == scheduler.block_tokens["cpu"] else "cuda"
    tokens, seqs = scheduler.limits(platform, None, None, 1)
    limits = SchedulerLimits.of_engine(
        batched_tokens=tokens, max_seqs=seqs, block_tokens=cal.block_tokens, pool_tokens=cal.pool_tokens
    )
    recompute = f"measured: {plain.linear_s * 1e6:.3g} us a token recomputed, {served.source}"
    costs = served_step_costs(step, plain, recompute)
    source = (
        f"costs measured on the served engine ({served.source}): decode step {step.how}; its pool "
        f"{fmt_tokens(cal.pool_tokens)} tokens in {cal.block_tokens}-token blocks (its counters); "
        f"{tokens:,} tokens a step, {seqs:,} sequences: {scheduler.source}, {platform} (by its block)"
        f"; {fmt_ms(step.outside_s)} a request outside the engine's steps (its fixed cost less the step)"
    )
    return SweepModel(Layout(name=name, costs=costs, limits=limits, outside_s=step.outside_s), source)


def layout_model(
    name: str,
    plan: Plan | None,
    served: ServedCalibration | None,
    calibration: SweepCalibration | None,
    prompt_tokens: int,
) -> SweepModel | str:
    """The swept layout ``name`` as the simulator's (see the module's docstring); a string: why none.
    ``prompt_tokens``: the workload's mean prompt (an offload path's per-chunk cost)."""
    if plan is None:
        if served is None:
            return "no plan and no calibration to take the engine's costs from"
        return _served_alone(name, served, calibration)
    if served is not None and plan.engine_pool is None:
        return _served_alone(name, served, calibration)
    costed = capacity_costs(plan, served, prompt_tokens)
    if costed is None:
        return "the plan has no prefill figure and the sweep did not calibrate the layout"
    layouts, costs_from = costed
    sims, limits_from = sim_layouts(plan, layouts)
    return SweepModel(sims[-1].named(name), f"{costs_from}; scheduler: {limits_from}")


# --- the workload ----------------------------------------------------------------------------------


def sent_requests(sent: Sequence[SentRequest], block_tokens: int) -> list[SimRequest]:
    """A trace sweep's requests at load 1, as its replay sends them (bench/replay/prompts.py)."""
    top = max((i for s in sent for i in s.hash_ids), default=-1)
    out = []
    for s in sent:
        ids = tuple(s.hash_ids)
        short = -(-s.prompt_tokens // block_tokens) - len(ids)
        if short > 0:  # a prompt past its blocks (cannot be, as cut): its own ids for the rest
            ids += tuple(range(top + 1, top + 1 + short))
            top += short
        out.append(
            SimRequest(s.arrival_s, max(1, s.prompt_tokens), max(1, s.output_tokens), ids, block_tokens)
        )
    return out


def row_requests(rows: Sequence[SweepRow], output_tokens: int) -> list[SimRequest]:
    """A synthetic step's requests as sent (see the module's docstring); ``output_tokens``: what a
    failed request, which returned none, asked for."""
    rows = sorted(rows, key=lambda r: (r.round, r.start_s, r.index))
    starts: dict[int, float] = {}
    shared: dict[str, int] = {}
    for r in rows:
        starts[r.round] = min(starts.get(r.round, r.start_s), r.start_s)
        shared[r.group] = max(shared.get(r.group, 0), r.expected_prefix_tokens // ID_TOKENS)
    base, top = {}, 0
    for group, n in shared.items():
        base[group], top = top, top + n
    out = []
    for r in rows:
        prompt = max(1, r.prompt_tokens)
        n = -(-prompt // ID_TOKENS)
        own = min(n, shared[r.group])
        ids = (*range(base[r.group], base[r.group] + own), *range(top, top + n - own))
        top += n - own
        output = max(1, r.output_tokens if r.ok else output_tokens)
        out.append(SimRequest(r.start_s - starts[r.round], prompt, output, ids, ID_TOKENS, round=r.round))
    return out


@dataclass(frozen=True)
class _Replay:
    """One step's workload and how it is sent: at ``multiplier`` x its rate, or by that many clients."""

    requests: list[SimRequest]
    multiplier: float
    closed: bool

    def run(self, layout: Layout) -> SimResult:
        return run_at(self.requests, layout, self.multiplier, closed=self.closed)


def step_replay(
    result: SweepResult, lay: LayoutSweep, step: SweepStep, trace: Sequence[SimRequest] | None
) -> _Replay | None:
    """What ``step`` sent, to replay (None: no request of it recorded)."""
    if result.kind == "trace_rate":
        return _Replay(list(trace), step.load, False) if trace else None
    rows = [r for r in result.requests if r.layout == lay.name and r.step == step.step]
    if not rows:
        return None
    requests = row_requests(rows, result.config.output_tokens)
    return (
        _Replay(requests, step.load, True) if result.kind == "concurrency" else _Replay(requests, 1.0, False)
    )


def _slo(slo: SweepSlo) -> Slo:
    return Slo(ttft_s=slo.ttft_s, tpot_s=slo.tpot_s, share=slo.share)


# --- the prediction --------------------------------------------------------------------------------


def step_prediction(run: SimResult, slo: SweepSlo) -> StepPrediction:
    return StepPrediction(
        ttft_p50_s=run.ttft_quantile(0.5),
        ttft_p90_s=run.ttft_quantile(0.9),
        share_within_slo=share_within(run, _slo(slo)),
        busy_fraction=run.busy_fraction,
    )


def _bound_at(run: SimResult, layout: Layout) -> tuple[ResourceUse | None, list[ResourceUse]]:
    uses = resources_at(run, layout)
    return binding(uses), uses


def knee_bound(lay: LayoutSweep, runs: Mapping[float, SimResult], model: SweepModel) -> KneeBound | None:
    """The bound at the layout's knee, in the simulator's accounting: at the lowest failing step's
    load (the top step's when none failed, the first's when it already failed), beside the highest
    step that passed below it."""
    cap = lay.capacity
    if cap.status == "not_measured":
        return None
    at = cap.load if cap.status == "above_ladder" else cap.lowest_failing
    if at is None or at not in runs:
        return None
    passing = cap.highest_passing if cap.status == "bracketed" else None
    notes = {"above_ladder": "no step failed: read at the top step", "below_first_step":
             "the first step already failed: read there"}  # fmt: skip
    bound, uses = _bound_at(runs[at], model.layout)
    note = notes.get(cap.status, "")
    if bound is not None and bound.pressure < LATENCY_BOUND:
        latency = f"{bound.pressure:.0%} busy: the requests' own latency, not a saturated resource"
        note = "; ".join(x for x in (note, latency) if x)
    return KneeBound(
        at_load=at,
        passing_load=passing,
        bound=bound,
        resources=uses,
        passing=_bound_at(runs[passing], model.layout)[1] if passing is not None and passing in runs else [],
        figures=model.source,
        note=note,
    )


def _describe(result: SweepResult, base: _Replay) -> str:
    n = len(base.requests)
    if result.kind == "trace_rate":
        return f"the trace's {n} requests as replayed (its blocks, arrivals on its clock x the step's load)"
    sent = (
        "by the step's clients in a closed loop"
        if base.closed
        else "at their send times x the load's multiple"
    )
    return f"the lowest step's {n} requests (their prompts, outputs, shared prefixes and rounds), {sent}"


def capacity_prediction(
    result: SweepResult, lay: LayoutSweep, model: SweepModel, base: _Replay, base_load: float
) -> CapacityPrediction:
    """The simulator's capacity on ``base`` (the lowest step's workload, sent at ``base_load``), in
    the sweep's unit, beside the measured one."""
    slo = _slo(result.slo)
    closed = base.closed
    trace = result.kind == "trace_rate"
    search = capacity(
        base.requests,
        model.layout,
        slo,
        start=min(base_load, len(base.requests)) if closed else base_load if trace else 1.0,
        tolerance=TOLERANCE,
        lowest=1 / HIGHEST,
        highest=float(len(base.requests)) if closed else HIGHEST,
        closed=closed,
    )
    scale = 1.0 if closed or trace else base_load  # a multiplier in the sweep's unit
    cap = lay.capacity
    measured = cap.load if cap.status in ("bracketed", "above_ladder") else None
    out = CapacityPrediction(
        status=SEARCH_STATUS[search.status],
        measured_load=measured,
        at_least=cap.status == "above_ladder",
        source=model.source,
        workload=_describe(result, base),
    )
    if search.lo is None:
        out.note = "the lightest load searched misses the SLO: an idle engine's TTFT is above it"
        return out
    out.load = search.lo * scale
    at = _Replay(base.requests, search.lo, closed).run(model.layout)
    out.rate_per_s = result.rate_per_s(out.load)
    if out.rate_per_s is None and at.duration_s > 0:  # a closed loop: its throughput there
        out.rate_per_s = len(at.requests) / at.duration_s
    out.bound = _bound_at(at, model.layout)[0]
    out.ratio = out.load / measured if measured else None
    if search.status == "above_range":
        out.note = f"every load searched meets the SLO (up to {out.load:g}" + (
            ": more clients than the step's requests change nothing)" if closed else ")"
        )
    return out


def no_prediction(note: str) -> CapacityPrediction:
    return CapacityPrediction(status="no_costs", note=note)


def predict_layout(
    result: SweepResult,
    lay: LayoutSweep,
    plan: Plan | None,
    served: ServedCalibration | None,
    trace: Sequence[SimRequest] | None = None,
) -> LayoutSweep:
    """``lay`` with the simulator's prediction: each completed step's, the capacity and the knee's
    bound (costs from ``served`` where given, else ``plan``'s; ``trace``: a trace sweep's requests
    at load 1, ``sent_requests``)."""
    out = lay.model_copy(deep=True)
    done = sorted((s for s in out.steps if s.complete), key=lambda s: s.load)
    replays = {s.step: r for s in done if (r := step_replay(result, lay, s, trace)) is not None}
    if not replays:
        out.predicted = no_prediction("no step completed to take the workload from")
        return out
    if result.slo.ttft_s is None and result.slo.tpot_s is None:
        out.predicted = no_prediction("the SLO asks nothing to predict a capacity under")
        return out
    first = next(s for s in done if s.step in replays)
    base = replays[first.step]
    prompt = round(sum(r.prompt_tokens for r in base.requests) / len(base.requests))
    model = layout_model(lay.name, plan, served, lay.calibration, prompt)
    if isinstance(model, str):
        out.predicted = no_prediction(model)
        return out
    runs: dict[float, SimResult] = {}
    for s in done:
        if s.step in replays:
            runs[s.load] = run = replays[s.step].run(model.layout)
            s.predicted = step_prediction(run, result.slo)
    out.predicted = capacity_prediction(result, out, model, base, first.load)
    out.bound = knee_bound(out, runs, model)
    return out


def explain_sweep(
    result: SweepResult, plans: Mapping[str, Plan | None], trace: Sequence[SimRequest] | None = None
) -> SweepResult:
    """Each layout with the simulator's prediction beside what it measured (``predict_layout``, its
    costs from the sweep's calibration of it where it ran one, else its plan's)."""
    out = result.model_copy()
    out.layouts = [
        predict_layout(result, lay, plans.get(lay.name), sweep_calibration(result, lay.name), trace)
        for lay in result.layouts
    ]
    return out
