"""One ``kvstack bench --sweep``: per layout (the server at --url, or each layout kvstack serves in
turn), the workload at every load of the ladder (after a short calibration of the served engine where
nothing else gives its costs: sweep/calibration.py), then up to --sweep-bisect loads between the highest
that met the SLO and the lowest that did not; each step is bench's own run (``run_layout``) with a
seed of its own, so that no step is served from an earlier step's cache. Every mistake the flags can
hold was refused when they were read; a step cut short keeps what it measured in the report."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kvstack.bench.events import BenchEvents
from kvstack.bench.report import environment
from kvstack.bench.request import BenchRequest
from kvstack.bench.runner import Progress, Recorder, RunOptions, run_layout
from kvstack.bench.sweep.calibration import calibrate_layout, needs_calibration
from kvstack.bench.sweep.ladder import LoadLadder
from kvstack.bench.sweep.predict import explain_sweep
from kvstack.bench.sweep.report import write_sweep
from kvstack.bench.sweep.schema import (
    Capacity,
    Environment,
    LayoutSweep,
    Slo,
    SweepConfig,
    SweepResult,
    SweepRow,
)
from kvstack.bench.sweep.steps import Record, StepPlan, StepRunner, sweep_steps
from kvstack.bench.text import TextBuilder
from kvstack.bench.tokenize import resolve_tokenizer
from kvstack.bench.workload_run import bench_target, check_out, load_plan, tier_sizes, workload_spec
from kvstack.bench.workloads import (
    RequestSet,
    TierSizes,
    WorkloadSpec,
    build_workload,
    tier_sizes_from_metrics,
)
from kvstack.clients.metrics import scrape_sync
from kvstack.errors import EngineError, Interrupted, KvstackError
from kvstack.planning.predict.simulator import SimRequest
from kvstack.planning.schema import Plan
from kvstack.redact import redact_url
from kvstack.serving.served_layout import ServedLayout, StartLayout


@dataclass(frozen=True)
class SweepPlan:
    ladder: LoadLadder
    bisect: int
    slo: Slo
    opts: RunOptions  # model, key, seed and timeout; each step sets its own load and seed
    longest_prompt: int = 0  # the workload's prompt length: the calibration's misses reach twice it


class _Workloads:
    """Each step's workload: the spec with the step's seed, over tiers sized once (tier-overflow on
    a layout kvstack serves: from the first layout's server, as bench sizes it)."""

    def __init__(
        self,
        spec: WorkloadSpec,
        text: TextBuilder,
        tiers: TierSizes | None,
        by_server: bool,
        api_key: str | None,
        announce: Callable[[RequestSet], None],
    ) -> None:
        self.spec, self.text, self.tiers = spec, text, tiers
        self.by_server, self.api_key, self.announce = by_server, api_key, announce
        self.built = 0

    def build(self, layout: ServedLayout, seed: int) -> RequestSet:
        if self.by_server and self.tiers is None:
            self.tiers = tier_sizes_from_metrics(scrape_sync(layout.metrics_urls, self.api_key))
        workload = build_workload(replace(self.spec, seed=seed), self.text, self.tiers)
        if not self.built:
            self.announce(workload)
        self.built += 1
        return workload


@dataclass
class _Measured:
    """What the sweep measured so far: kept in the report when a step fails or is interrupted."""

    layouts: list[LayoutSweep] = field(default_factory=list)
    rows: list[SweepRow] = field(default_factory=list)
    plans: dict[str, Plan | None] = field(default_factory=dict)  # what each layout ran, where known


def step_options(opts: RunOptions, ladder: LoadLadder, load: float, seed: int) -> RunOptions:
    """The run options of one step: its load (requests in flight, or Poisson requests/s) and seed."""
    if ladder.kind == "concurrency":
        return replace(opts, concurrency=int(load), rate=None, seed=seed)
    return replace(opts, concurrency=None, rate=load, seed=seed)


def _workload_runner(
    layout: ServedLayout, plan: SweepPlan, workloads: _Workloads, events: BenchEvents
) -> StepRunner:
    """A step of the workload on ``layout``: bench's own run at the step's load and seed."""

    def run(load: float, seed: int, record: Record) -> None:
        workload = workloads.build(layout, seed)
        recorder = Recorder(workload)
        label = plan.ladder.label(load)

        def progress(p: Progress) -> None:
            events.progress(replace(p, layout=f"{p.layout} {label}"))

        opts = step_options(plan.opts, plan.ladder, load, seed)
        try:
            asyncio.run(run_layout(layout, workload, opts, recorder, progress))
        finally:
            if recorder.layouts:  # the step ran (complete or cut short): its record, then its capacity
                record(recorder.layouts[-1], recorder.rows)

    return run


def sweep_layout(
    layout: ServedLayout, plan: SweepPlan, workloads: _Workloads, events: BenchEvents, measured: _Measured
) -> LayoutSweep:
    """The ladder on one layout, then the bisection of its bracket."""
    lay = LayoutSweep(
        name=layout.name, base_url=redact_url(layout.base_url), capacity=Capacity(status="not_measured")
    )
    measured.layouts.append(lay)
    measured.plans[layout.name] = layout.plan
    if needs_calibration(layout):  # before the steps: a predictor reads it (sweep_calibration)
        model = layout.served_model or plan.opts.model
        lay.calibration = calibrate_layout(layout, model, plan.opts.api_key, plan.longest_prompt)
    steps = StepPlan(plan.ladder, plan.bisect, plan.slo, plan.opts.seed)
    runner = _workload_runner(layout, plan, workloads, events)
    return sweep_steps(
        lay, steps, runner, measured.rows, lambda step: events.sweep_step(layout.name, plan.ladder, step)
    )


def _config(args: BenchRequest, plan: SweepPlan, base_url: str | None, metrics: list[str]) -> SweepConfig:
    return SweepConfig(
        url=redact_url(base_url) if base_url else None,
        model=plan.opts.model,
        api_key="***" if args.api_key else None,
        workload=args.workload,
        requests=args.requests,
        prompt_tokens=args.prompt_token_count,
        output_tokens=args.output_tokens,
        seed=args.seed,
        compare=args.layouts(),
        ladder=list(plan.ladder.loads),
        bisect=plan.bisect,
        metrics_urls=[redact_url(u) for u in metrics],
        timeout_s=args.timeout_s,
    )


def _measure(
    args: BenchRequest,
    base_url: str | None,
    metrics: list[str],
    start_layout: StartLayout | None,
    plan: SweepPlan,
    workloads: _Workloads,
    events: BenchEvents,
    measured: _Measured,
) -> None:
    with events.live():
        if base_url is not None:
            given = load_plan(args.plan_file) if args.plan_file is not None else None
            server = ServedLayout("server", base_url, tuple(metrics), plan=given)
            sweep_layout(server, plan, workloads, events, measured)
            return
        assert start_layout is not None
        for name in args.layouts():
            with start_layout(name) as layout:
                sweep_layout(layout, plan, workloads, events, measured)


def run_sweep(
    args: BenchRequest, start_layout: StartLayout | None = None, events: BenchEvents | None = None
) -> SweepResult:
    """``bench --sweep`` end to end: measure, write the report, hand it to ``events``, then raise
    what the sweep ended with (its own error, or an EngineError when no request succeeded)."""
    events = events or BenchEvents()
    ladder = args.ladder
    assert ladder is not None, "run_sweep without --sweep"
    check_out(args.out)
    spec = workload_spec(args)
    base_url, metrics, model = bench_target(args)
    opts = RunOptions(
        model=model, api_key=args.api_key, concurrency=1, seed=args.seed, timeout_s=args.timeout_s
    )
    plan = SweepPlan(ladder, args.sweep_bisect, args.slo, opts, args.prompt_token_count)
    first = step_options(opts, ladder, ladder.loads[0], args.seed)
    by_server = base_url is None and args.workload == "tier-overflow" and args.plan_file is None
    sizes = None if by_server else tier_sizes(args, base_url, metrics)
    text = TextBuilder(resolve_tokenizer(base_url, model, args.api_key))
    workloads = _Workloads(spec, text, sizes, by_server, args.api_key, lambda w: events.workload(w, first))
    measured = _Measured()
    failure: KvstackError | None = None
    try:
        _measure(args, base_url, metrics, start_layout, plan, workloads, events, measured)
    except KeyboardInterrupt:
        failure = Interrupted("interrupted: the steps measured so far are kept in the report")
    except KvstackError as exc:
        failure = exc
    result = SweepResult(kind=ladder.kind, slo=plan.slo, config=_config(args, plan, base_url, metrics),
                         environment=Environment.model_validate(environment()), layouts=measured.layouts,
                         requests=measured.rows)  # fmt: skip
    return conclude_sweep(result, args.out, events, failure, measured.plans)


def conclude_sweep(
    result: SweepResult,
    out: Path | None,
    events: BenchEvents,
    failure: KvstackError | None,
    plans: Mapping[str, Plan | None] | None = None,
    trace: Sequence[SimRequest] | None = None,
) -> SweepResult:
    """Each layout's predicted capacity, per-step TTFT and bound at its knee on the step simulator
    (bench/sweep/predict.py; ``plans``: what each ran, where known; ``trace``: a trace sweep's
    requests at load 1), then write the report, hand it to ``events``, then raise what the sweep
    ended with (its own error, or an EngineError when no request succeeded)."""
    result = explain_sweep(result, plans or {}, trace)
    written = write_sweep(result, out) if out is not None and result.requests else []
    events.sweep_report(result, written)
    if failure is not None:
        raise failure
    if result.requests and not any(r.ok for r in result.requests):
        raise EngineError(
            f"no request of the sweep succeeded ({len(result.requests)} failed)",
            hint="see requests.csv for every error" if out else "rerun with --out DIR to keep every error",
        )
    return result
