"""``kvstack bench --trace FILE --sweep rate:0.5,1,2,4``: the user's trace replayed at multiples of
its own rate, per layout (the server at --url, or each layout kvstack serves in turn), with the
synthetic sweep's steps, capacity, bracket and files (bench/sweep/).

A step at load ``k`` replays the slice bench --trace replays (``--start``, ``--session-sample``,
``--max-requests``, ``--block-tokens``) with its arrival times (the trace's clock x --time-scale)
divided by ``k``: load 1 is the trace's own rate, 2 twice it. Arrivals are an open loop: a request
goes out at its time whatever is still in flight (up to bench's cap on --rate runs), as the users'
traffic does. The first layout decides what is sent (its context, KV block and chunk), and every
layout's step ``i`` sends the same prompts.

No step is served from an earlier step's cache: step ``i``'s blocks are drawn from the seed
``--seed + i`` (``Shared.stepped``), so a step shares prefixes exactly as the trace does and no
block with any earlier step. The caches are not emptied between steps, which a reset could not do
for every tier (vLLM's reset keeps LMCache's tiers, and LMCache's server has no route that empties
its disk tier); a cache already full of earlier blocks is what a busy server holds, and flatters
nothing. results.json says so (``trace.caches``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kvstack.bench.events import BenchEvents
from kvstack.bench.replay.target import url_layout
from kvstack.bench.replay.trace_bench import (
    ReplayRequest,
    Shared,
    decide_once,
    load_slice,
    replay_of,
    replay_step,
)
from kvstack.bench.report import environment
from kvstack.bench.request import BenchRequest
from kvstack.bench.runner import DEFAULT_MAX_IN_FLIGHT
from kvstack.bench.sweep.calibration import calibrate_layout, needs_calibration
from kvstack.bench.sweep.predict import sent_requests
from kvstack.bench.sweep.run import conclude_sweep
from kvstack.bench.sweep.schema import (
    Capacity,
    Environment,
    LayoutSweep,
    SweepConfig,
    SweepResult,
    SweepRow,
    TraceLoad,
)
from kvstack.bench.sweep.steps import Record, StepPlan, StepRunner, sweep_steps
from kvstack.bench.workload_run import check_out, target
from kvstack.clients import quiet
from kvstack.errors import InputError, Interrupted, KvstackError
from kvstack.planning.schema import Plan
from kvstack.redact import redact_url
from kvstack.serving.served_layout import ServedLayout, StartLayout
from kvstack.traces.mooncake import TraceRow

CACHES = (
    "each step's prompts are drawn from a seed of its own (--seed + the step's index): the trace's "
    "prefix sharing, new tokens, so no tier serves a step from an earlier step's blocks; the caches "
    "are not emptied between steps (vLLM's reset keeps LMCache's tiers, LMCache's server has no route "
    "that empties its disk tier), and a cache full of earlier blocks flatters no step"
)


def sweep_replay(args: ReplayRequest) -> ReplayRequest:
    """How each step replays: an open loop on the trace's clock (in flight up to bench's cap on
    --rate runs, which only bounds memory), no correctness check (a sweep is refused one)."""
    return dataclasses.replace(args, concurrency=DEFAULT_MAX_IN_FLIGHT, check_correctness=0)


def span_s(arrivals: list[float]) -> float:
    return max(arrivals) - min(arrivals) if arrivals else 0.0


def check_span(rows: list[TraceRow], time_scale: float, path: str) -> None:
    """A slice whose requests all arrive at once has no rate to take multiples of."""
    arrivals = [r.timestamp_ms / 1000 * time_scale for r in rows]
    if len(rows) < 2 or span_s(arrivals) <= 0:
        raise InputError(
            f"{path}: the replayed slice ({len(rows)} requests) spans no time, so it has no rate to sweep",
            hint="replay more of the trace (--max-requests, --session-sample) or a trace with timestamps",
        )


def trace_load(shared: Shared, args: ReplayRequest) -> TraceLoad:
    """What load 1 is: the requests sent per step, their span and rate (1 / the mean gap)."""
    arrivals = [s.arrival_s for s in shared.sent]
    span = span_s(arrivals)
    return TraceLoad(
        source=str(args.path),
        requests=len(shared.sent),
        span_s=span,
        rate_per_s=(len(arrivals) - 1) / span if span > 0 else 0.0,
        time_scale=args.time_scale,
        caches=CACHES,
    )


def trace_runner(
    layout: ServedLayout, args: ReplayRequest, base: Shared, model: str, api_key: str | None, timeout_s: float
) -> StepRunner:
    """A step on ``layout``: the slice at ``load`` x its rate, its blocks drawn from ``seed``."""

    def run(load: float, seed: int, record: Record) -> None:
        with quiet.hold(layout.base_url):  # the server's canary sends nothing while a step measures
            replay_step(layout, args, base.stepped(load, seed), model, api_key, timeout_s, record)

    return run


def _config(
    o: BenchRequest, shared: Shared, base_url: str | None, model: str, metrics: list[str]
) -> SweepConfig:
    sent = shared.sent
    ladder = o.ladder
    assert ladder is not None
    return SweepConfig(
        url=redact_url(base_url) if base_url else None, model=model, api_key="***" if o.api_key else None,
        workload="trace", requests=len(sent),
        prompt_tokens=sum(s.prompt_tokens for s in sent) // len(sent) if sent else 0,
        output_tokens=o.max_output_tokens, seed=o.seed, compare=o.layouts(), ladder=list(ladder.loads),
        bisect=o.sweep_bisect, metrics_urls=[redact_url(u) for u in metrics], timeout_s=o.timeout_s,
    )  # fmt: skip


def _measure(
    o: BenchRequest,
    replay: ReplayRequest,
    rows: list[TraceRow],
    shared: Shared,
    base_url: str | None,
    metrics: list[str],
    model: str,
    start_layout: StartLayout | None,
    events: BenchEvents,
    found: tuple[list[LayoutSweep], list[SweepRow], dict[str, Plan | None]],
) -> None:
    ladder = o.ladder
    assert ladder is not None
    plan = StepPlan(ladder, o.sweep_bisect, o.slo, o.seed)
    layouts, requests, plans = found

    def one(layout: ServedLayout) -> None:
        served = layout.served_model or model
        decide_once(layout, rows, replay, shared, o.api_key, served)
        lay = LayoutSweep(
            name=layout.name, base_url=redact_url(layout.base_url), capacity=Capacity(status="not_measured")
        )
        layouts.append(lay)
        plans[layout.name] = layout.plan
        if needs_calibration(layout):  # before the steps: a predictor reads it (sweep_calibration)
            longest = max((s.prompt_tokens for s in shared.sent), default=0)
            lay.calibration = calibrate_layout(layout, served, o.api_key, longest)
        runner = trace_runner(layout, replay, shared, served, o.api_key, o.timeout_s)
        on_step: Callable[..., None] = lambda step: events.sweep_step(layout.name, ladder, step)  # noqa: E731
        sweep_steps(lay, plan, runner, requests, on_step)

    with events.live():
        if base_url is not None:
            one(url_layout(base_url, metrics, o.lmcache, o.run_dir)[0])
            return
        assert start_layout is not None
        for name in o.layouts():
            with start_layout(name) as layout:
                one(layout)


def run_trace_sweep(
    o: BenchRequest, start_layout: StartLayout | None, events: BenchEvents | None = None
) -> SweepResult:
    """``bench --trace --sweep``: each layout's steps, the report written and handed to ``events``,
    then what the sweep ended with raised (as ``run_sweep``)."""
    events = events or BenchEvents()
    assert o.ladder is not None and o.ladder.kind == "trace_rate", "run_trace_sweep without a trace ladder"
    check_out(o.out)
    replay = sweep_replay(replay_of(o))
    rows, _ = load_slice(replay)  # a bad trace is named before any server is asked
    check_span(rows, replay.time_scale, str(replay.path))
    base_url, metrics, model = target(o.url, o.metrics_urls, o.model, o.api_key)
    if base_url is None and (not model or start_layout is None):
        raise InputError("a trace sweep needs --url or a layout kvstack serves", hint="add --url URL")
    shared = Shared()
    layouts: list[LayoutSweep] = []
    requests: list[SweepRow] = []
    plans: dict[str, Plan | None] = {}
    failure: KvstackError | None = None
    try:
        found = (layouts, requests, plans)
        _measure(o, replay, rows, shared, base_url, metrics, model, start_layout, events, found)
    except KeyboardInterrupt:
        failure = Interrupted("interrupted: the steps measured so far are kept in the report")
    except KvstackError as exc:
        failure = exc
    result = SweepResult(
        kind="trace_rate", slo=o.slo, config=_config(o, shared, base_url, model, metrics),
        environment=Environment.model_validate(environment()), layouts=layouts, requests=requests,
        trace=trace_load(shared, replay) if shared.sent else None,
    )  # fmt: skip
    replayed = sent_requests(shared.sent, shared.shape.block_tokens) if shared.shape is not None else None
    return conclude_sweep(result, o.out, events, failure, plans, replayed)
