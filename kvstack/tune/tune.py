"""One ``kvstack tune`` invocation, the use case the CLI calls: read the inputs, get the costs
(``--calibration``, or measured first on the engine: calibration.py), rank (ranking.py), prove by
replay (prove.py) within the budget, keep what was measured (files.py: results.json after each
candidate, tuned.json, PNGs). The run it returns says what decides the exit code
(``TuneRun.failure``).

Every user mistake (an unreadable trace or calibration, a bad knob, a budget too small for one
candidate, a --resume DIR of another tune) is raised before any engine starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kvstack.bench.replay.trace_bench import ReplayRequest
from kvstack.errors import InputError, KvstackError
from kvstack.planning.predict.served_ttft import ServedCalibration
from kvstack.planning.predict.trace_sizing import SizingTrace
from kvstack.serving.served_layout import StartLayout
from kvstack.traces.mooncake import TraceRow
from kvstack.tune.calibration import MeasuredCosts
from kvstack.tune.capacity import CapacityRequest
from kvstack.tune.files import now, source_line, write_json, write_ranking, write_results
from kvstack.tune.measure import CandidateReplay, EngineSize, shared_state
from kvstack.tune.options import DEFAULT_REPLAY_REQUESTS, TuneRequest
from kvstack.tune.progress import View
from kvstack.tune.prove import Proof, ProofRequest, StartCandidate, preflight, previous_proof, prove
from kvstack.tune.ranking import TuneResult
from kvstack.tune.results import CalibrationReplay, Setup, Source, TuneResults
from kvstack.tune.space import Limits

__all__ = ["DEFAULT_REPLAY_REQUESTS", "RUNS", "TuneRequest", "TuneRun", "rank_inputs", "run_tune"]

RUNS = "runs"  # under --out: each measured candidate's run dir (NN/) with the tuned.json it served


@dataclass
class TuneRun:
    result: TuneResult
    results: TuneResults  # results.json
    out: Path | None
    proof: Proof | None = None
    written: list[Path] = field(default_factory=list)

    @property
    def doc(self) -> dict[str, object]:
        """results.json, as written."""
        return self.results.document()

    @property
    def failure(self) -> KvstackError | None:
        """What fails the command once its report is out: none's own cached answers are not
        recompute's, so the engine itself serves wrong KV and no layout can be chosen (exit 1)."""
        from kvstack.errors import ValidationFailed

        base = self.proof.baseline() if self.proof is not None else None
        if base is None or base.correct:
            return None
        return ValidationFailed(
            f"none's cached answers are not recompute's ({base.correctness_problem()}): the engine "
            "itself serves wrong KV, so no layout can be chosen",
            hint=f"results.json in {self.out} has every position judged",
        )


@dataclass(frozen=True)
class TuneBasis:
    """What a ranking reads besides the costs: the trace's requests (scaled), the machine's limits."""

    traced: SizingTrace
    requests: list[TraceRow]
    block_tokens: int
    limits: Limits
    model: str  # the model's name, as results.json's source keeps it


def read_trace(o: TuneRequest) -> SizingTrace:
    """``o.trace`` as tune reads it: its sample, start and first requests."""
    from kvstack.bench.replay.inputs import read_trace_input

    traced = read_trace_input(o.trace, o.trace_sample, o.start, o.max_requests, (None, None), None)
    assert traced is not None
    return traced


def read_basis(o: TuneRequest, traced: SizingTrace) -> TuneBasis:
    from kvstack.model.source import resolve_model
    from kvstack.planning.plan import PlanRequest
    from kvstack.planning.workload import default_workload
    from kvstack.serving.plan_inputs import load_or_probe
    from kvstack.serving.request import demo_model_dir
    from kvstack.traces.sample import scale_request
    from kvstack.tune.limits import limits_of, most_plan

    source = resolve_model(o.model or str(demo_model_dir()), o.revision)
    snapshot = load_or_probe(o.hardware, None)
    requests, bt = list(traced.requests), traced.block_tokens
    if o.block_tokens is not None:
        requests, bt = [scale_request(r, o.block_tokens, bt) for r in requests], o.block_tokens
    workload = default_workload(source.geometry.max_context)
    plan = most_plan(snapshot, source.geometry, source.path, PlanRequest(), workload)
    return TuneBasis(traced, requests, bt, limits_of(plan, o.engine_pool_tokens), source.geometry.name)


def _slo_s(o: TuneRequest) -> float | None:
    return o.slo_ms / 1000 if o.slo_ms is not None else None


def rank(o: TuneRequest, inputs: TuneBasis, cal: ServedCalibration) -> tuple[TuneResult, TuneResults]:
    """The ranking with ``cal``'s costs, and its results.json document."""
    from kvstack.tune.predict import REPLAY_IN_FLIGHT, Sent
    from kvstack.tune.ranking import tune
    from kvstack.tune.report import results_document

    t0 = time.perf_counter()
    result = tune(
        inputs.requests, inputs.block_tokens, inputs.limits, cal, objective=o.ranking_objective,
        connector=o.connector, knobs=o.knobs, slo_s=_slo_s(o),
        sent=Sent(o.time_scale, o.max_output_tokens, REPLAY_IN_FLIGHT),
    )  # fmt: skip
    rank_s = time.perf_counter() - t0
    source = Source(
        trace=str(o.trace),
        sample=inputs.traced.sample,
        block_tokens=inputs.block_tokens,
        requests=len(inputs.requests),
        model=inputs.model,
        calibration=cal.source,
        connector=o.connector,
        knobs=o.knobs,
    )
    return result, results_document(result, source, cal, rank_s)


def rank_inputs(o: TuneRequest, traced: SizingTrace) -> tuple[TuneResult, TuneResults, list[TraceRow], int]:
    """The ranking of ``traced`` with ``o.calibration``: (result, results.json document, the trace's
    requests as ranked, their block)."""
    from kvstack.bench.replay.served_calibration import served_calibration_from

    assert o.calibration is not None
    cal = served_calibration_from(o.calibration)  # before the probe: bad input fails at once
    inputs = read_basis(o, traced)
    return (*rank(o, inputs, cal), inputs.requests, inputs.block_tokens)


def _setup_info(setup: CandidateReplay) -> Setup:
    return setup.args.record(Setup, requests=len(setup.rows))


_RESUME_HINT = "pass the --out DIR of a kvstack tune that measured candidates"


def _saved(o: TuneRequest) -> TuneResults | None:
    """The results.json of the stopped tune --resume continues (None for a fresh one)."""
    from kvstack.tune.report import RESULTS_JSON
    from kvstack.userfile import read_json_object

    if o.resume is None:
        return None
    path = o.resume / RESULTS_JSON
    if not path.is_file():
        raise InputError(f"--resume {o.resume} has no {RESULTS_JSON}", hint=_RESUME_HINT)
    old = read_json_object(path, InputError, _RESUME_HINT, what="--resume")
    if old.get("kind") != "kvstack-tune" or not isinstance(old.get("measured"), dict):
        raise InputError(f"{path} is not a kvstack tune result with candidates measured", hint=_RESUME_HINT)
    try:
        return TuneResults.of(old)
    except ValueError as exc:
        raise InputError(f"{path}: a tune result that cannot be read ({exc})", hint=_RESUME_HINT) from exc


def _given_calibration(o: TuneRequest, saved: TuneResults | None) -> ServedCalibration | None:
    """``--calibration``'s costs, else (--resume) the ones the stopped tune ranked with; None: this
    tune measures its own."""
    from kvstack.bench.replay.served_calibration import served_calibration_from
    from kvstack.tune.calibration import from_results

    if o.calibration is not None:
        return served_calibration_from(o.calibration)
    if saved is None:
        return None
    try:
        return from_results(saved.calibration)
    except ValueError as exc:
        raise InputError(
            f"--resume {o.resume}: the calibration it ranked with cannot be read ({exc})", hint=_RESUME_HINT
        ) from exc


def _previous(
    o: TuneRequest,
    doc: TuneResults,
    setup: CandidateReplay,
    old: TuneResults,
    capacity: CapacityRequest | None,
) -> Proof:
    """The proof of the stopped tune --resume continues, checked against this one."""
    measured = old.measured
    assert measured is not None  # _saved: a tune with candidates measured
    for key, now_, then in (
        ("source", doc.source.model_dump(mode="json"), old.source.model_dump(mode="json")),
        ("replay", _setup_info(setup).model_dump(mode="json"), measured.setup.model_dump(mode="json")),
        ("objective", doc.objective, old.objective),
        (
            "capacity sweep",
            capacity.setup().model_dump(mode="json") if capacity else None,
            measured.capacity.model_dump(mode="json") if measured.capacity else None,
        ),
    ):
        if now_ != then:
            raise InputError(
                f"--resume {o.resume}: that tune ran with another {key} ({then} , now {now_})",
                hint="resume with the options of the stopped tune, or start a new --out DIR",
            )
    proof = previous_proof(measured, o.budget_s)
    ranked = {c.label for c in doc.candidates}
    unknown = [m.label for m in proof.measured if m.label not in ranked]
    if unknown:
        raise InputError(
            f"--resume {o.resume}: {unknown[0]} was measured but is not a candidate of this ranking",
            hint="resume with the kvstack that started the tune, or start a new --out DIR",
        )
    return proof


def _measured_first(
    m: MeasuredCosts, result: TuneResult, setup: CandidateReplay, settings: ProofRequest
) -> tuple[Proof, list[CalibrationReplay]]:
    """The calibration's replays of ranked candidates (``none``; lmcache-mp where the ranking has its
    layout) as the proof's first measured candidates, and results.json's ``calibration_replays``."""
    from kvstack.tune.prove import measured_before

    assert result.costs is not None
    by_label = {p.candidate.label: p for p in result.ranked}
    measured, docs = [], []
    for r in m.replays:
        p = by_label.get(r.candidate.label) if r.candidate is not None else None
        if p is not None and p.candidate.not_settable:
            p = None
        if p is not None:
            context = (m.shared, m.engine, setup, settings)
            rank_ = result.ranked.index(p) + 1
            measured.append(
                measured_before(
                    p, rank_, r.replayed, r.wall_s, r.run_dir, context, result.costs, result.limits
                )
            )
        docs.append(r.document(p.candidate.label if p is not None else None))
    proof = Proof(budget_s=settings.budget_s, measured=measured, replay=shared_state(m.shared, m.engine))
    return proof, docs


def _replay_setup(o: TuneRequest, inputs: TuneBasis, serve: Any) -> CandidateReplay:
    """What every replay sends: the first ``--replay-requests`` of the trace, one at a time."""
    from kvstack.serving.request import demo_model_dir
    from kvstack.tune.predict import REPLAY_IN_FLIGHT

    args = ReplayRequest(
        path=o.trace_path, block_tokens=inputs.block_tokens, time_scale=o.time_scale,
        max_output_tokens=o.max_output_tokens, concurrency=REPLAY_IN_FLIGHT, seed=o.seed,
        check_correctness=o.check_correctness,
    )  # fmt: skip
    model = serve.model_spec() if serve is not None else (o.model or str(demo_model_dir()))
    api_key = o.api_key if o.api_key is not None else (serve.api_key if serve is not None else None)
    return CandidateReplay(inputs.requests[: o.replay_requests], args, model, api_key, o.timeout_s)


def _capacity(o: TuneRequest, setup: CandidateReplay) -> CapacityRequest | None:
    """--objective capacity: the sweep each proven candidate gets after its replay (its blocks from
    seeds after the replay's)."""
    from kvstack.tune.capacity import capacity_request

    if o.objective != "capacity":
        return None
    return capacity_request(o.multiples, o.slo, o.seed + 1, setup.rows, str(o.trace_path))


def run_tune(
    o: TuneRequest,
    traced: SizingTrace | None = None,
    *,
    start: StartCandidate | None = None,
    start_layout: StartLayout | None = None,
    serve: Any = None,
    view: View | None = None,
    events: Any = None,
    clock: Callable[[], float] = time.monotonic,
) -> TuneRun:
    """Rank ``traced`` (default: ``o.trace`` read), then (``o.budget_s`` > 0) measure with ``start``
    (tests: a stand-in engine) or by serving ``serve`` (a ServeRequest: kvstack's own serving path;
    ``events``: what its starts report, serve's ServeEvents). Without a calibration the costs are
    measured first, on layouts ``start_layout`` serves (default: ``serve``'s, as bench --compare
    serves them)."""
    from kvstack.bench.sweep.plots import SWEEP_THROUGHPUT, SWEEP_TTFT
    from kvstack.planning.tuned import TUNED_JSON
    from kvstack.rundir import default_runs_root
    from kvstack.tune.engines import serve_starter
    from kvstack.tune.plots import CANDIDATES, PREDICTED_VS_MEASURED
    from kvstack.tune.report import proof_document

    traced = traced if traced is not None else read_trace(o)
    saved = _saved(o)
    cal = _given_calibration(o, saved)  # before the probe: bad input fails at once
    inputs = read_basis(o, traced)
    out = o.directory
    if not o.measures:
        assert cal is not None  # TuneRequest: --budget 0 needs a calibration
        result, doc = rank(o, inputs, cal)
        written = write_ranking(out, result, doc) if out is not None else []
        return TuneRun(result, doc, out, None, written)
    if start is None and serve is None:
        raise InputError("tune measures on an engine kvstack serves", hint="pass --budget 0 to rank only")
    out = out or default_runs_root() / f"tune-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    setup = _replay_setup(o, inputs, serve)
    capacity = _capacity(o, setup)  # a slice with no rate is refused before anything is served
    measured: MeasuredCosts | None = None
    t0 = clock()
    if cal is None:  # measured here first, as bench --trace --compare none,lmcache-mp measures it
        measured = _measure_costs(o, inputs, setup, start_layout, serve, out, events, view, clock, t0)
        cal = measured.calibration
    result, doc = rank(o, inputs, cal)
    settings = ProofRequest(
        objective=o.ranking_objective,
        slo_s=result.slo_s,
        budget_s=o.budget_s,
        max_candidates=o.max_candidates,
        run_root=out / RUNS,
        capacity=capacity,
    )
    if start is None:
        start = serve_starter(serve, out / RUNS, events, result.ranked, o.objective)
    engine = EngineSize(result.limits.engine_block_tokens, result.limits.engine_pool_tokens)
    assert result.costs is not None
    replays = saved.calibration_replays if saved is not None else None  # a resumed tune keeps them
    previous: Proof | None = None
    if measured is not None:
        previous, replays = _measured_first(measured, result, setup, settings)
        if capacity is not None:  # none is measured again, with its sweep (on the same prompts)
            previous = Proof(budget_s=settings.budget_s, replay=previous.replay)
    else:
        previous = _previous(o, doc, setup, saved, capacity) if saved is not None else None
        # Before anything is written or served: a budget too small is refused.
        preflight(result.ranked, setup, settings, result.costs, result.limits, engine, previous)
    ranked = doc.ranked(
        result.winner.candidate.label,
        # kept until the next save
        measured=proof_document(previous, settings, _setup_info(setup)) if previous is not None else None,
        calibration_replays=replays,
    )
    keep = _Keeper(out, ranked, settings, _setup_info(setup), result, o.objective)
    written = write_ranking(out, result, keep.results, tuned=False)
    proof = prove(
        result.ranked, setup, start, settings, costs=result.costs,
        limits=result.limits, engine=engine, previous=previous, save=keep,
        view=view, clock=clock, spent_s=clock() - t0 if measured is not None else None,
    )  # fmt: skip
    if proof.verdict is not None:
        written += [out / TUNED_JSON, out / PREDICTED_VS_MEASURED, out / CANDIDATES]
        if capacity is not None:
            written += [out / SWEEP_TTFT, out / SWEEP_THROUGHPUT]
    return TuneRun(result, keep.results, out, proof, written)


def _measure_costs(
    o: TuneRequest,
    inputs: TuneBasis,
    setup: CandidateReplay,
    start_layout: StartLayout | None,
    serve: Any,
    out: Path,
    events: Any,
    view: View | None,
    clock: Callable[[], float],
    t0: float,
) -> MeasuredCosts:
    """The costs measured on ``none`` and ``lmcache-mp`` before anything is ranked (no
    --calibration), within the budget that started at ``t0``."""
    from kvstack.tune.calibration import measure_costs
    from kvstack.tune.engines import calibration_starter
    from kvstack.tune.ranking import check_ranking

    check_ranking(
        inputs.limits, objective=o.ranking_objective, connector=o.connector, knobs=o.knobs, slo_s=_slo_s(o)
    )
    if start_layout is None:
        if serve is None:
            raise InputError("tune measures its costs on engines kvstack serves", hint="pass --calibration")
        start_layout = calibration_starter(serve, out / RUNS, events)
    return measure_costs(
        setup, start_layout, trace=o.trace_path, run_root=out / RUNS, deadline=t0 + o.budget_s, view=view,
        clock=clock,
    )  # fmt: skip


class _Keeper:
    """What a measuring tune keeps after each candidate (the proof's ``save``): results.json
    (``results``, kept up to date), served-ttft.json from the refit model, and once the replays
    chose, tuned.json and the PNGs."""

    def __init__(
        self,
        out: Path,
        results: TuneResults,
        settings: ProofRequest,
        setup: Setup,
        result: TuneResult,
        objective: str,
    ) -> None:
        self.out, self.results, self.settings, self.setup = out, results, settings, setup
        self.by_label = {p.candidate.label: p for p in result.ranked}
        self.objective = objective

    def __call__(self, proof: Proof) -> None:
        from kvstack.bench.replay.served_calibration import SERVED_TTFT_JSON
        from kvstack.planning.tuned import TUNED_JSON
        from kvstack.tune.plots import write_plots
        from kvstack.tune.report import proof_document, refit_calibration, tuned_layout

        doc = self.results.with_measured(proof_document(proof, self.settings, self.setup))
        if proof.costs is not None:
            write_json(self.out / SERVED_TTFT_JSON, refit_calibration(proof, doc).to_dict())
        if proof.verdict is not None:
            doc = doc.with_winner(proof.verdict.winner)
            win = next(m for m in proof.measured if m.label == proof.verdict.winner)
            why = source_line(doc) + f"; measured: {proof.verdict.why}"
            tuned = tuned_layout(self.by_label[win.label], self.objective, why, measured=win, created=now())
            write_json(self.out / TUNED_JSON, tuned.model_dump(mode="json"))
        self.results = doc
        write_results(self.out, doc)
        if proof.verdict is not None:
            write_plots(doc, self.out)
