"""One ``kvstack tune`` invocation: read the inputs, rank (run.py), prove by replay (prove.py) within
the budget, keep what was measured (results.json after each candidate, tuned.json, PNGs).

Every user mistake (an unreadable trace or calibration, a bad knob, a budget too small for one
candidate, a --resume DIR of another tune) is raised before any engine starts.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvstack.errors import InputError, PathError
from kvstack.fsutil import atomic_write, ensure_private_dir
from kvstack.planning.trace_sizing import TraceInput
from kvstack.replay.command import TraceArgs
from kvstack.serving.served_layout import Layout
from kvstack.tune.measure import DEFAULT_CHECKS, EngineSize, ReplaySetup
from kvstack.tune.prove import (
    Proof,
    Settings,
    StartCandidate,
    View,
    candidate_run_dir,
    preflight,
    previous_proof,
    prove,
)
from kvstack.tune.rank import Objective, Prediction
from kvstack.tune.run import TuneResult
from kvstack.tune.space import Candidate

DEFAULT_REPLAY_REQUESTS = 400
RUNS = "runs"  # under --out: each measured candidate's run dir (NN/) with the tuned.json it served


@dataclass(frozen=True)
class TuneOptions:
    trace: Path
    calibration: Path
    sample: str | None = None
    start: int = 0
    max_requests: int | None = None
    block_tokens: int | None = None
    model: str | None = None
    revision: str | None = None
    hardware: Path | None = None
    engine_pool_tokens: int | None = None
    connector: str | None = None
    knobs: dict[str, float] = field(default_factory=dict)
    objective: Objective = "p50"
    slo_ms: float | None = None
    out: Path | None = None
    resume: Path | None = None
    budget_s: float = 1800.0
    replay_requests: int = DEFAULT_REPLAY_REQUESTS
    max_candidates: int | None = None
    max_output_tokens: int = 16
    time_scale: float = 0.0
    seed: int = 0
    check_k: int = DEFAULT_CHECKS
    api_key: str | None = None
    timeout_s: float = 300.0

    @property
    def directory(self) -> Path | None:
        return self.resume or self.out

    def check(self) -> None:
        for name, value in (
            ("--block-tokens", self.block_tokens),
            ("--engine-pool-tokens", self.engine_pool_tokens),
            ("--replay-requests", self.replay_requests),
            ("--candidates", self.max_candidates),
            ("--max-output-tokens", self.max_output_tokens),
            ("--check-correctness", self.check_k),
        ):
            if value is not None and value < 1:
                raise InputError(f"{name} must be at least 1, not {value}", hint=f"e.g. {name} 4")
        if self.budget_s < 0:
            raise InputError(
                "--budget must be 0 or more", hint="e.g. --budget 30m (0: rank without measuring)"
            )
        if self.time_scale < 0:
            raise InputError(f"--time-scale must be 0 or more, not {self.time_scale:g}", hint="e.g. 0")
        if self.out is not None and self.resume is not None and self.out != self.resume:
            raise InputError("--out and --resume name different directories", hint="--resume DIR alone")
        if self.resume is not None and self.budget_s == 0:
            raise InputError(
                "--resume continues measuring: --budget 0 measures nothing", hint="e.g. --budget 30m"
            )
        d = self.directory
        if d is not None and d.exists() and not d.is_dir():
            raise InputError(
                f"{d} exists and is not a directory", hint="choose a directory for tune's results"
            )


@dataclass
class TuneRun:
    result: TuneResult
    doc: dict[str, Any]
    out: Path | None
    proof: Proof | None = None
    written: list[Path] = field(default_factory=list)


def rank_inputs(o: TuneOptions, traced: TraceInput) -> tuple[TuneResult, dict[str, Any], list[Any], int]:
    """The ranking of ``traced`` (``o.trace`` as the CLI read it: its sample, start and first
    requests): (result, results.json document, the trace's requests as ranked, their block)."""
    from kvstack.model.source import resolve_model
    from kvstack.planning.plan import PlanRequest
    from kvstack.planning.workload import default_workload
    from kvstack.replay.served_calibration import served_calibration_from
    from kvstack.serving.plan_inputs import load_or_probe
    from kvstack.serving.request import demo_model_dir
    from kvstack.traces.sample import scale_request
    from kvstack.tune.limits import limits_of, most_plan
    from kvstack.tune.report import results_document
    from kvstack.tune.run import tune

    cal = served_calibration_from(o.calibration)  # before the probe: bad input fails at once
    source = resolve_model(o.model or str(demo_model_dir()), o.revision)
    snapshot = load_or_probe(o.hardware, None)
    requests, bt = list(traced.requests), traced.block_tokens
    if o.block_tokens is not None:
        requests, bt = [scale_request(r, o.block_tokens, bt) for r in requests], o.block_tokens
    workload = default_workload(source.geometry.max_context)
    plan = most_plan(snapshot, source.geometry, source.path, PlanRequest(), workload)
    limits = limits_of(plan, o.engine_pool_tokens)
    slo_s = o.slo_ms / 1000 if o.slo_ms is not None else None
    t0 = time.perf_counter()
    result = tune(
        requests, bt, limits, cal, objective=o.objective, connector=o.connector, knobs=o.knobs, slo_s=slo_s
    )
    rank_s = time.perf_counter() - t0
    doc = results_document(
        result,
        {
            "trace": str(o.trace),
            "sample": traced.sample,
            "block_tokens": bt,
            "requests": len(requests),
            "model": source.geometry.name,
            "calibration": cal.source,
            "connector": o.connector,
            "knobs": o.knobs,
        },
    )
    doc["calibration"] = cal.to_dict()
    doc["rank_s"] = rank_s  # simulating and predicting every candidate (scripts/bench-tune prints it)
    return result, doc, requests, bt


def _setup_info(setup: ReplaySetup) -> dict[str, Any]:
    a = setup.args
    return {
        "requests": len(setup.rows),
        "block_tokens": a.block_tokens,
        "time_scale": a.time_scale,
        "max_output_tokens": a.max_output_tokens,
        "seed": a.seed,
        "check_correctness": a.check_correctness,
    }


def _previous(o: TuneOptions, doc: dict[str, Any], setup: ReplaySetup) -> Proof | None:
    """The stopped tune --resume continues (None for a fresh one)."""
    from kvstack.tune.report import RESULTS_JSON
    from kvstack.userfile import read_json_object

    if o.resume is None:
        return None
    path = o.resume / RESULTS_JSON
    hint = "pass the --out DIR of a kvstack tune that measured candidates"
    if not path.is_file():
        raise InputError(f"--resume {o.resume} has no {RESULTS_JSON}", hint=hint)
    old = read_json_object(path, InputError, hint, what="--resume")
    measured = old.get("measured")
    if old.get("kind") != "kvstack-tune" or not isinstance(measured, dict):
        raise InputError(f"{path} is not a kvstack tune result with candidates measured", hint=hint)
    for key, now, then in (
        ("source", doc["source"], old.get("source")),
        ("replay", _setup_info(setup), measured.get("setup")),
        ("objective", doc["objective"], old.get("objective")),
    ):
        if now != then:
            raise InputError(
                f"--resume {o.resume}: that tune ran with another {key} ({then} , now {now})",
                hint="resume with the options of the stopped tune, or start a new --out DIR",
            )
    try:
        proof = previous_proof(measured, o.budget_s)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: the candidates measured cannot be read ({exc})", hint=hint) from exc
    ranked = {c["label"] for c in doc["candidates"]}
    unknown = [m.label for m in proof.measured if m.label not in ranked]
    if unknown:
        raise InputError(
            f"--resume {o.resume}: {unknown[0]} was measured but is not a candidate of this ranking",
            hint="resume with the kvstack that started the tune, or start a new --out DIR",
        )
    return proof


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_json(path: Path, doc: Any) -> Path:
    try:
        atomic_write(path, json.dumps(doc, indent=2) + "\n", mode=0o644)
    except OSError as exc:
        raise InputError(
            f"cannot write {path}: {exc.strerror or exc}", hint="choose a writable directory for --out"
        ) from exc
    return path


def _source_line(doc: dict[str, Any]) -> str:
    src = doc["source"]
    return f"trace {src['trace']} ({src['requests']} requests), calibration {src['calibration']}"


def write_ranking(out: Path, result: TuneResult, doc: dict[str, Any], tuned: bool = True) -> list[Path]:
    """results.json, tuned.json (the model's best; not when measuring: the measured winner's is
    written once the replays chose it), served-ttft.json (the calibration it ranked with, replaced by
    the model refit from the replays once one is measured: `plan --calibration DIR` and `tune
    --calibration DIR` read it back)."""
    from kvstack.planning.tuned import TUNED_JSON
    from kvstack.replay.served_calibration import SERVED_TTFT_JSON
    from kvstack.tune.report import RESULTS_JSON, tuned_layout

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"cannot write --out {out}: {exc.strerror or exc}", hint="choose a writable directory"
        ) from exc
    written = [write_json(out / RESULTS_JSON, doc)]
    if tuned:
        layout = tuned_layout(result.winner, result.objective, _source_line(doc), created=_now())
        written.append(write_json(out / TUNED_JSON, layout.model_dump(mode="json")))
    return [*written, write_json(out / SERVED_TTFT_JSON, doc["calibration"])]


def candidate_request(base: Any, root: Path, p: Prediction, index: int, objective: str) -> Any:
    """``base`` (a ServeRequest) with ``p``'s candidate as its tuned layout: the candidate's
    tuned.json written in the ``index``-th run dir, which the request serves from (and records in
    its launch.json), exactly as `serve --tuned` serves a winner. Its disk tier lives in a fresh
    private directory of its own under the cache root (``serve_starter`` removes it afterwards):
    a candidate must start from cold caches, not from the files an earlier one wrote."""
    from kvstack.planning.tuned import TUNED_JSON
    from kvstack.tune.report import tuned_layout

    # Private, as serve keeps its run and cache directories (fsutil.ensure_private_dir).
    run_dir = ensure_private_dir(candidate_run_dir(root, index), "--out")
    cache_root = ensure_private_dir(base.resolved_cache_root(), "--cache-dir")
    try:
        cache_dir = Path(tempfile.mkdtemp(prefix=f"tune-{index:02d}-", dir=cache_root))  # mode 0700
    except OSError as exc:
        raise PathError(
            f"cannot create a directory in {cache_root}: {exc.strerror}", hint="choose a writable --cache-dir"
        ) from exc
    why = f"kvstack tune {root.parent}: candidate {index}, measured"
    write_json(run_dir / TUNED_JSON, tuned_layout(p, objective, why, created=_now()).model_dump(mode="json"))
    return base.model_copy(update={"tuned": run_dir / TUNED_JSON, "run_dir": run_dir, "cache_dir": cache_dir})


def serve_starter(
    base: Any, root: Path, events: Any, ranked: Sequence[Prediction], objective: str
) -> StartCandidate:
    """``start(candidate, n)``: ``candidate_request`` served, one engine, through bench's layout
    starter (as bench --compare serves its layouts)."""
    from kvstack.serving.start_layout import TierOverrides, sized_layout_starter

    by_label = {p.candidate.label: p for p in ranked}

    @contextmanager
    def start(candidate: Candidate, index: int) -> Iterator[Layout]:
        request = candidate_request(base, root, by_label[candidate.label], index, objective)
        try:
            with sized_layout_starter(request, TierOverrides(), events)(candidate.connector) as layout:
                yield layout
        finally:
            shutil.rmtree(request.cache_dir, ignore_errors=True)  # its disk tier: space back, none reused

    return start


def run_tune(
    o: TuneOptions,
    traced: TraceInput,
    *,
    start: StartCandidate | None = None,
    serve: Any = None,
    view: View | None = None,
    events: Any = None,
    clock: Callable[[], float] = time.monotonic,
) -> TuneRun:
    """Rank ``traced``, then (``o.budget_s`` > 0) measure with ``start`` (tests: a stand-in engine)
    or by serving ``serve`` (a ServeRequest: kvstack's own serving path; ``events``: what its starts
    report, serve's ServeEvents)."""
    from kvstack.planning.tuned import TUNED_JSON
    from kvstack.replay.served_calibration import SERVED_TTFT_JSON
    from kvstack.rundir import default_runs_root
    from kvstack.serving.request import demo_model_dir
    from kvstack.tune.plots import CANDIDATES, PREDICTED_VS_MEASURED, write_plots
    from kvstack.tune.report import RESULTS_JSON, proof_document, refit_calibration, tuned_layout

    o.check()
    result, doc, requests, bt = rank_inputs(o, traced)
    out = o.directory
    if o.budget_s == 0:
        written = write_ranking(out, result, doc) if out is not None else []
        return TuneRun(result, doc, out, None, written)
    out = out or default_runs_root() / f"tune-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    rows = requests[: o.replay_requests]
    args = TraceArgs(
        path=o.trace, block_tokens=bt, time_scale=o.time_scale, max_output_tokens=o.max_output_tokens,
        concurrency=1, seed=o.seed, check_correctness=o.check_k,
    )  # fmt: skip
    model = serve.model_spec() if serve is not None else (o.model or str(demo_model_dir()))
    setup = ReplaySetup(rows, args, model, o.api_key, o.timeout_s)
    previous = _previous(o, doc, setup)
    settings = Settings(
        objective=o.objective,
        slo_s=result.slo_s,
        budget_s=o.budget_s,
        max_candidates=o.max_candidates,
        run_root=out / RUNS,
    )
    if start is None:
        if serve is None:
            raise InputError("tune measures on an engine kvstack serves", hint="pass --budget 0 to rank only")
        start = serve_starter(serve, out / RUNS, events, result.ranked, o.objective)
    engine = EngineSize(result.limits.engine_block_tokens, result.limits.engine_pool_tokens)
    assert result.costs is not None
    preflight(result.ranked, setup, settings, result.costs, engine, previous)  # before anything is written
    if previous is not None:
        doc["measured"] = proof_document(previous, settings, _setup_info(setup))  # kept until the next save
    doc["predicted_winner"], doc["winner"] = result.winner.candidate.label, None  # until the replays choose
    written = write_ranking(out, result, doc, tuned=False)
    by_label = {p.candidate.label: p for p in result.ranked}

    def save(proof: Proof) -> None:
        doc["measured"] = proof_document(proof, settings, _setup_info(setup))
        if proof.costs is not None:
            write_json(out / SERVED_TTFT_JSON, refit_calibration(proof, doc))
        if proof.verdict is not None:
            doc["winner"] = proof.verdict.winner
            win = next(m for m in proof.measured if m.label == proof.verdict.winner)
            tuned = tuned_layout(
                by_label[win.label], o.objective, _source_line(doc) + f"; measured: {proof.verdict.why}",
                measured=win, created=_now(),
            )  # fmt: skip
            write_json(out / TUNED_JSON, tuned.model_dump(mode="json"))
        write_json(out / RESULTS_JSON, doc)
        if proof.verdict is not None:
            write_plots(doc, out)

    proof = prove(
        result.ranked, setup, start, settings, costs=result.costs,
        bytes_per_token=result.limits.bytes_per_token, engine=engine, previous=previous, save=save,
        view=view, clock=clock,
    )  # fmt: skip
    if proof.verdict is not None:
        written += [out / TUNED_JSON, out / PREDICTED_VS_MEASURED, out / CANDIDATES]
    return TuneRun(result, doc, out, proof, written)
