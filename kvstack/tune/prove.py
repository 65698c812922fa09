"""The proof by measurement: ``none`` and the best-ranked candidates replayed in rank order, each on
a fresh engine, until the budget runs out; then the verdict (verdict.py).

After each candidate the ranking model is refit from every replay so far (refit.py): the next
candidate is predicted with it before it is measured, and the candidates still queued are put back
in the order the refit model gives on the slice.

Before each candidate the budget is checked against its estimated length (budget.py): the first
estimate before anything runs (a budget too small for ``none`` and one candidate is refused before
any engine starts), then the slowest candidate measured. After each candidate everything measured
is saved (``save``: results.json, atomically), so a stopped tune continues with ``--resume``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvstack.bench.replay.results import Costs as CostsDoc
from kvstack.bench.replay.trace_bench import ReplayOutcome, Shared
from kvstack.bench.schema import RequestRow
from kvstack.connectors import SPECS
from kvstack.errors import InputError, Interrupted, KvstackError
from kvstack.serving.served_layout import ServedLayout
from kvstack.traces.mooncake import TraceRow
from kvstack.tune import budget as bud
from kvstack.tune import results
from kvstack.tune.capacity import CapacityRequest, measure_capacity
from kvstack.tune.capacity_curve import CandidateCapacity
from kvstack.tune.capacity_verdict import decide_capacity
from kvstack.tune.knobs import BASELINE
from kvstack.tune.measure import CandidateReplay, EngineSize, engine_size, replay, restore, shared_state
from kvstack.tune.noise import Stat, measure
from kvstack.tune.predict import CandidatePrediction, Costs, Sent, SimTrace, on_engine, predict
from kvstack.tune.progress import RowClock, View
from kvstack.tune.refit import Replayed, refit
from kvstack.tune.space import Candidate, Limits
from kvstack.tune.verdict import MeasuredCandidate, Verdict, decide

# start(candidate, n): a context manager that serves ``candidate`` on a fresh engine (the n-th
# measured: its run dir) and stops it on exit.
StartCandidate = Callable[[Candidate, int], AbstractContextManager[ServedLayout]]


@dataclass
class Proof:
    budget_s: float
    measured: list[MeasuredCandidate] = field(default_factory=list)
    replay: results.ReplayState | None = None  # shared_state: what every candidate was sent
    skipped: dict[str, str] = field(default_factory=dict)  # ranked but not measurable as modelled
    stopped: str = ""  # why the loop ended
    elapsed_s: float = 0.0
    estimate: bud.Estimate | None = None
    verdict: Verdict | None = None
    refits: list[results.Refit] = field(default_factory=list)  # the model after each replay
    costs: Costs | None = None  # the last refit's

    def baseline(self) -> MeasuredCandidate | None:
        return next((m for m in self.measured if m.baseline), None)


@dataclass(frozen=True)
class ProofRequest:
    objective: Stat
    slo_s: float | None
    budget_s: float
    max_candidates: int | None = None  # besides none; None: as many as the budget holds
    run_root: Path | None = None  # each candidate's run dir is below it (candidate_run_dir)
    capacity: CapacityRequest | None = None  # --objective capacity: each candidate swept after its replay


def candidate_run_dir(root: Path, index: int) -> Path:
    """Where the ``index``-th candidate measured is served (its logs, plan.json, launch.json)."""
    return root / f"{index:02d}"


def queue(
    ranked: Sequence[CandidatePrediction], max_candidates: int | None
) -> tuple[list[CandidatePrediction], dict[str, str]]:
    """``none``, then the candidates the installed connectors can serve as modelled, in rank order
    (at most ``max_candidates`` of them); the others with why they are left out."""
    base = next(p for p in ranked if not p.candidate.offloads)
    out: list[CandidatePrediction] = [base]
    skipped: dict[str, str] = {}
    seen = {base.candidate.label}
    for p in ranked:
        c = p.candidate
        if c.not_settable or c.label in seen:
            continue  # modelled only (the ranking table says so), or served the same as one queued
        seen.add(c.label)
        spec = SPECS.get(c.connector)
        if spec is not None and c.dram_bytes < spec.sizing.min_dram_bytes:
            skipped[c.label] = spec.sizing.min_dram_why  # its launch cannot say so small a DRAM tier
            continue
        if max_candidates is not None and len(out) > max_candidates:
            break
        out.append(p)
    return out, skipped


def slice_trace(
    rows: Sequence[TraceRow], setup: CandidateReplay, limits: Limits, engine: EngineSize
) -> SimTrace:
    """``rows`` as the replay sends them, on the engine ``engine`` (the simulator's requests)."""
    a = setup.args
    return SimTrace(
        rows, block_tokens=a.block_tokens, limits=on_engine(limits, engine.block_tokens, engine.pool_tokens),
        sent=Sent(a.time_scale, a.max_output_tokens, a.concurrency),
    )  # fmt: skip


def _first_estimate(setup: CandidateReplay, costs: Costs, limits: Limits, engine: EngineSize) -> bud.Estimate:
    rows = setup.rows
    trace = slice_trace(rows, setup, limits, engine)
    lengths = trace.lengths.astype(np.float64)
    none = trace.simulate(Candidate(BASELINE), costs).ttft
    ttfts = np.where(np.isnan(none), costs.plain.fixed_s, none)
    t0 = min((r.timestamp_ms for r in rows), default=0.0)
    arrivals = [(r.timestamp_ms - t0) / 1000.0 * setup.args.time_scale for r in rows]
    outputs = [max(1, min(r.output_length, setup.args.max_output_tokens)) for r in rows]
    mean = int(lengths.mean()) if len(lengths) else 0
    return bud.first_estimate(
        ttfts.tolist(),
        outputs,
        arrivals,
        costs.plain.ttft(mean, 0, {}),
        setup.args.check_correctness,
        setup.args.max_output_tokens,
    )


def preflight(
    ranked: Sequence[CandidatePrediction],
    setup: CandidateReplay,
    settings: ProofRequest,
    costs: Costs,
    limits: Limits,
    engine: EngineSize,
    previous: Proof | None,
    refuse: bool = True,
) -> bud.Estimate:
    """The first estimate of one candidate's length; InputError when the budget cannot hold none
    and one candidate (or, resumed with none measured, one candidate), before any engine starts
    (``refuse``: once engines ran, the loop stops at the budget instead)."""
    todo, _ = queue(ranked, settings.max_candidates)
    measured = previous.measured if previous is not None else []
    done = {m.label for m in measured}
    first = _first_estimate(setup, costs, limits, engine)
    if settings.capacity is not None:  # each candidate is swept after its replay and check
        first = dataclasses.replace(first, check_s=first.check_s + settings.capacity.sweep_s)
    estimate = bud.measured_estimate([(m.label, m.wall_s) for m in measured]) or first
    pending = [p for p in todo if p.candidate.label not in done]
    if pending and refuse:
        needed = 1 if BASELINE in done or len(todo) == 1 else 2
        bud.check_budget(settings.budget_s, estimate, needed, len(setup.rows))
    return first


class _Slice:
    """The replayed requests as sent, on the served engine's pool: each candidate's predicted TTFT
    for exactly what was sent."""

    def __init__(
        self, shared: Shared, setup: CandidateReplay, engine: EngineSize, costs: Costs, limits: Limits
    ) -> None:
        self.trace = slice_trace([s.as_trace() for s in shared.sent], setup, limits, engine)
        self.costs = costs

    def predict(self, c: Candidate, slo_s: float | None) -> CandidatePrediction:
        return predict(self.trace, c, self.costs, slo_s)


def _engine_prompt_tokens(row: RequestRow) -> int:
    """The prompt's length as the engine counts it (BOS included), which is what a gate compares."""
    return row.server_prompt_tokens if row.server_prompt_tokens is not None else row.prompt_tokens


def _record(
    p: CandidatePrediction,
    rank: int,
    replayed: ReplayOutcome,
    predicted: CandidatePrediction | None,
    settings: ProofRequest,
    walls: dict[str, float],
    run_dir: str | None,
) -> MeasuredCandidate:
    """``p``'s record from its replay (the layout's result, its rows, what bench compared), with
    ``predicted`` for the requests it sent."""
    result, rows, compared = replayed
    c = p.candidate
    gate = c.prompt_gate
    lookups = result.cache.lmcache_mp_lookups
    by_index = {r.index: r.ttft_s if r.ok else None for r in rows}
    per_request = [by_index.get(i) for i in range(max(by_index, default=-1) + 1)]
    ttfts = [t for t in per_request if t is not None]
    return MeasuredCandidate(
        label=c.label,
        rank=rank,
        connector=c.connector,
        knobs=c.knobs(),
        predicted={}
        if predicted is None
        else {
            "p50_s": predicted.p50_s,
            "p90_s": predicted.p90_s,
            "mean_s": predicted.mean_s,
            "goodput": predicted.under_slo,
        },
        predicted_tokens=dict(predicted.tokens) if predicted is not None else {},
        stats=measure(ttfts, settings.slo_s) if ttfts else None,
        ttfts=per_request,
        requests=len(rows),
        ok=sum(r.ok for r in rows),
        measured_tokens={k: float(v) for k, v in compared.measured_tokens.items()},
        lookups=None if lookups is None else int(lookups),
        below_gate=None if gate is None else sum(_engine_prompt_tokens(r) < gate for r in rows),
        correctness=result.correctness,
        wall_s=walls,
        run_dir=run_dir,
    )


def prove(
    ranked: Sequence[CandidatePrediction],
    setup: CandidateReplay,
    start: StartCandidate,
    settings: ProofRequest,
    *,
    costs: Costs,
    limits: Limits,
    engine: EngineSize,
    previous: Proof | None = None,
    save: Callable[[Proof], None] = lambda _: None,
    view: View | None = None,
    clock: Callable[[], float] = time.monotonic,
    spent_s: float | None = None,
) -> Proof:
    """Measure ``none`` and the best-ranked candidates until ``settings.budget_s`` runs out.
    ``engine``: the pool the ranking assumed (the first estimate's; the slice is then predicted on
    the pool the served engine reports). ``previous``: a stopped tune's proof (--resume), or the
    candidates this tune replayed to measure its costs, which took ``spent_s`` of the budget (then
    no refusal up front: engines ran already, the loop stops at the budget)."""
    loop = _ProofLoop(ranked, setup, start, settings, costs, limits, view, clock, save)
    loop.t0 = clock() - (spent_s or 0.0)
    loop.resume(previous)
    loop.first = preflight(
        ranked, setup, settings, costs, limits, loop.served or engine, previous, refuse=spent_s is None
    )
    return loop.run()


class _ProofLoop:
    """The proof as it runs: what was measured (``proof``), what every candidate is sent
    (``shared``, decided by the first replay), the engine it was served on (``served``), the slice
    predicted on it (``sliced``), the replays the model is refit from, and the candidates still
    queued (``pending``, in the order the last refit predicts)."""

    def __init__(
        self,
        ranked: Sequence[CandidatePrediction],
        setup: CandidateReplay,
        start: StartCandidate,
        settings: ProofRequest,
        costs: Costs,
        limits: Limits,
        view: View | None,
        clock: Callable[[], float],
        save: Callable[[Proof], None],
    ) -> None:
        self.setup, self.start, self.settings = setup, start, settings
        self.costs, self.limits, self.view, self.clock, self.save = costs, limits, view, clock, save
        self.todo, skipped = queue(ranked, settings.max_candidates)
        self.ranks = {p.candidate.label: i + 1 for i, p in enumerate(ranked)}
        self.candidates = {p.candidate.label: p.candidate for p in ranked}
        self.proof = Proof(budget_s=settings.budget_s, skipped=skipped)
        self.shared = Shared()
        self.served: EngineSize | None = None
        self.sliced: _Slice | None = None
        self.replays: list[Replayed] = []
        self.pending: list[CandidatePrediction] = list(self.todo)
        self.t0 = 0.0  # the budget's start (prove sets it)
        self.first: bud.Estimate | None = None

    def resume(self, previous: Proof | None) -> None:
        """Continue ``previous``: its candidates measured, the prompts it sent (InputError when this
        slice does not send them)."""
        if previous is None:
            return
        self.proof.measured = list(previous.measured)
        self.proof.replay = previous.replay
        if previous.replay is not None:
            try:
                self.shared, self.served = restore(previous.replay, self.setup.rows)
            except ValueError as exc:
                raise InputError(
                    f"--resume: the saved replay does not match this trace slice ({exc})",
                    hint="resume with the options of the stopped tune, or start a new --out DIR",
                ) from exc
        done = {m.label for m in self.proof.measured}
        self.pending = [p for p in self.todo if p.candidate.label not in done]

    def run(self) -> Proof:
        proof = self.proof
        if self.served is not None and self.shared.sent:
            self.sliced = _Slice(self.shared, self.setup, self.served, self.costs, self.limits)
        self.replays = [
            Replayed(self.candidates[m.label], m.ttfts)
            for m in proof.measured
            if m.label in self.candidates and m.replayed
        ]
        if self.replays:
            self._refit()
        proof.stopped = "every candidate queued was measured"
        try:
            while self.pending:
                if not self._next(self.pending.pop(0)):
                    break
        except (KeyboardInterrupt, Interrupted) as exc:
            proof.stopped = "interrupted"
            proof.elapsed_s = self.clock() - self.t0
            self.save(proof)
            raise Interrupted(
                f"interrupted: the {len(proof.measured)} candidates measured are kept; --resume continues"
            ) from exc
        finally:
            if self.view is not None:
                self.view.end()
        proof.elapsed_s = self.clock() - self.t0
        if proof.baseline() is not None:
            proof.verdict = (
                decide_capacity(proof.measured)
                if self.settings.capacity is not None
                else decide(proof.measured, self.settings.objective, self.settings.slo_s)
            )
        self.save(proof)
        return proof

    def _next(self, p: CandidatePrediction) -> bool:
        """Measure ``p`` if the budget holds it (False: it does not, and the loop stops)."""
        proof, label = self.proof, p.candidate.label
        assert self.first is not None
        estimate = bud.measured_estimate([(m.label, m.wall_s) for m in proof.measured]) or self.first
        proof.estimate = estimate
        left = self.settings.budget_s - (self.clock() - self.t0)
        if estimate.total_s > left:
            proof.stopped = (
                f"budget: {len(proof.measured)} measured; the next, {label}, needs about "
                f"{bud.fmt_duration(estimate.total_s)} and {bud.fmt_duration(max(0.0, left))} is left"
            )
            return False
        index = len(proof.measured) + 1
        if self.view is not None:
            self.view.begin(
                label, index, len(self.todo), len(self.setup.rows), self.t0 + self.settings.budget_s
            )
        m = self._measure(p, index)
        if proof.replay is None and self.shared.sent and self.shared.blocks is not None:
            proof.replay = shared_state(self.shared, self.served)
        if self.view is not None:
            self.view.end()
        proof.measured.append(m)
        if m.replayed:
            self.replays.append(Replayed(p.candidate, m.ttfts))
            self._refit()
        proof.elapsed_s = self.clock() - self.t0
        self.save(proof)
        if m.baseline and not m.replayed:
            raise _baseline_failed(m)
        return True

    def _refit(self) -> None:
        """The model refit from the replays (recorded in ``proof.refits``), and the candidates still
        queued in the order it now predicts on the slice (unchanged without a slice to predict on)."""
        sliced, settings = self.sliced, self.settings
        if sliced is None:
            return
        sliced.costs = self.proof.costs = c = refit(self.costs, sliced.trace, self.replays)
        self.proof.refits.append(
            results.Refit(
                after=[r.candidate.label for r in self.replays],
                plain=CostsDoc.of(c.plain),
                by_connector={name: CostsDoc.of(costs) for name, costs in c.by_connector.items()},
            )
        )
        self.pending.sort(key=lambda q: sliced.predict(q.candidate, settings.slo_s).loss(settings.objective))

    def _measure(self, p: CandidatePrediction, index: int) -> MeasuredCandidate:
        """Serve ``p``'s candidate, replay, check; its record (an error recorded for a candidate that
        could not be served; the baseline's raises)."""
        c, view, clock, setup = p.candidate, self.view, self.clock, self.setup
        t_start = clock()
        walls: dict[str, float] = {}
        capacity: CandidateCapacity | None = None
        # the replay's last answer: the correctness check follows it
        then = "checking correctness" if setup.args.check_correctness else None
        on_row = RowClock(view, lambda: len(self.shared.sent), clock, then)
        root = self.settings.run_root
        run_dir = str(candidate_run_dir(root, index)) if root else None
        try:
            if view is not None:
                view.phase("starting the engine")
            with self.start(c, index) as layout:
                t_ready = clock()
                walls["start"] = t_ready - t_start
                layout = dataclasses.replace(layout, name=c.label)
                if view is not None:
                    view.phase("replaying the trace")
                replayed = replay(layout, setup, self.shared, on_row)
                t_done = clock()
                walls["replay"] = on_row.replay_s(t_ready, t_done)
                walls["check"] = t_done - t_ready - walls["replay"]
                if self.settings.capacity is not None:  # the same engine, swept after its replay
                    capacity = measure_capacity(layout, setup, self.shared, self.settings.capacity)
                    walls["sweep"] = clock() - t_done
                if self.served is None:
                    self.served = engine_size(replayed.compared)
                if self.sliced is None and self.served is not None:
                    self.sliced = _Slice(self.shared, setup, self.served, self.costs, self.limits)
        except Interrupted:
            # Ctrl-C during a replay (bench/replay/trace_bench.py says so): the tune stops, not the candidate
            raise
        except KvstackError as exc:
            if not c.offloads:
                raise
            walls["total"] = clock() - t_start
            return MeasuredCandidate(
                label=c.label, rank=self.ranks[c.label], connector=c.connector, knobs=c.knobs(),
                wall_s=walls, run_dir=run_dir, error=exc.message,
            )  # fmt: skip
        walls["total"] = clock() - t_start
        predicted = self.sliced.predict(c, self.settings.slo_s) if self.sliced is not None else None
        m = _record(p, self.ranks[c.label], replayed, predicted, self.settings, walls, run_dir)
        return dataclasses.replace(m, capacity=capacity)


def _baseline_failed(m: MeasuredCandidate) -> KvstackError:
    from kvstack.errors import EngineError

    why = m.error or "no request of its replay was answered"
    return EngineError(
        f"none (the baseline every candidate is compared with) could not be measured: {why}",
        hint="see its run dir's logs" if m.run_dir else "see the engine's log",
    )


def measured_before(
    p: CandidatePrediction,
    rank: int,
    replayed: ReplayOutcome,
    walls: dict[str, float],
    run_dir: str | None,
    context: tuple[Shared, EngineSize | None, CandidateReplay, ProofRequest],
    costs: Costs,
    limits: Limits,
) -> MeasuredCandidate:
    """``p``'s record from a replay made before the ranking (tune measuring its own costs), predicted
    for the requests sent as the proof predicts its first candidate: with the costs ranked with."""
    shared, served, setup, settings = context
    sliced = _Slice(shared, setup, served, costs, limits) if served is not None and shared.sent else None
    predicted = sliced.predict(p.candidate, settings.slo_s) if sliced is not None else None
    return _record(p, rank, replayed, predicted, settings, walls, run_dir)


def previous_proof(doc: results.Measured, budget_s: float) -> Proof:
    """A saved proof (results.json's ``measured``) back."""
    return Proof(
        budget_s=budget_s,
        measured=[MeasuredCandidate.of(m) for m in doc.candidates],
        replay=doc.replay,
    )
