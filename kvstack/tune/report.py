"""What a tune run keeps: results.json (every candidate, predicted; the candidates measured, their
verdict) and tuned.json (the winner, as `serve --tuned` and `export --tuned` read it:
planning/tuned.py). Pure: documents, no files."""

from __future__ import annotations

from kvstack.planning.predict.served_ttft import ServedCalibration
from kvstack.planning.tuned import TunedLayout
from kvstack.tune import results
from kvstack.tune.knobs import CALIBRATED
from kvstack.tune.noise import METHOD
from kvstack.tune.predict import CandidatePrediction
from kvstack.tune.prove import Proof, ProofRequest
from kvstack.tune.ranking import TuneResult
from kvstack.tune.verdict import MeasuredCandidate

RESULTS_JSON = "results.json"


def tuned_layout(
    p: CandidatePrediction,
    objective: str,
    source: str,
    measured: MeasuredCandidate | None = None,
    created: str = "",
) -> TunedLayout:
    """``p``'s layout; ``measured``: its replay, when the replays chose it."""
    c = p.candidate
    figures: dict[str, float] = {}
    if measured is not None and measured.stats is not None:
        st = measured.stats
        figures = {
            "p50_s": st.p50.value,
            "p50_noise_s": st.p50.noise,
            "p90_s": st.p90.value,
            "p90_noise_s": st.p90.noise,
            "mean_s": st.mean.value,
        }
        if st.goodput is not None:
            figures["goodput"] = st.goodput.value
    return TunedLayout(
        connector=c.connector,  # type: ignore[arg-type]  # a connector knobs.CONNECTORS names
        chunk_tokens=c.chunk_tokens,
        dram_bytes=c.dram_bytes,
        disk_bytes=c.disk_bytes,
        knobs=c.knobs(),
        gate_tokens=c.prompt_gate,
        not_settable=c.not_settable,
        objective=objective,
        predicted={"p50_s": p.p50_s, "p90_s": p.p90_s, "mean_s": p.mean_s},
        source=source,
        chosen_by="measured" if measured is not None else "predicted",
        measured=figures,
        created=created,
    )


def _row(rank: int, p: CandidatePrediction) -> results.CandidateRow:
    c = p.candidate
    return results.CandidateRow(
        rank=rank,
        label=c.label,
        connector=c.connector,
        knobs=c.knobs(),
        sizes_from=c.sizes,
        gate=None
        if c.gate is None
        else results.Gate.model_validate({"kind": c.gate.kind, "tokens": c.gate.tokens, "from": c.gate.why}),
        not_settable=c.not_settable,
        predicted=results.PredictedFigures(
            p50_s=p.p50_s, p90_s=p.p90_s, mean_s=p.mean_s, goodput=p.under_slo
        ),
        prompt_tokens=p.tokens,
        gated_requests=p.gated,
    )


def results_document(
    result: TuneResult, source: results.Source, calibration: ServedCalibration, rank_s: float
) -> results.TuneResults:
    """results.json of a ranking (``measured`` none until a candidate is replayed)."""
    s, lim = result.sizes, result.limits
    return results.TuneResults(
        kind="kvstack-tune",
        objective=result.objective,
        source=source,
        limits=results.Limits(
            platform=lim.platform,
            engine_block_tokens=lim.engine_block_tokens,
            engine_pool_tokens=lim.engine_pool_tokens,
            bytes_per_token=lim.bytes_per_token,
            dram_max_bytes=lim.dram_max_bytes,
            disk_max_bytes=lim.disk_max_bytes,
        ),
        curve_sizes=results.CurveSizes(knee_bytes=s.knee, p95_bytes=s.p95, max_bytes=s.max),
        winner=result.winner.candidate.label,
        baseline=_row(result.ranked.index(result.baseline) + 1, result.baseline),
        candidates=[_row(i + 1, p) for i, p in enumerate(result.ranked)],
        measured=None,
        calibration=results.Calibration.model_validate(calibration.to_dict()),
        rank_s=rank_s,  # simulating and predicting every candidate (scripts/bench-tune prints it)
    )


def refit_calibration(proof: Proof, doc: results.TuneResults) -> ServedCalibration:
    """served-ttft.json from the model as the replays refit it: the plain path, and the first
    offload connector measured (else the calibration's offload layout over the refit plain path)."""
    assert proof.costs is not None
    layouts = doc.calibration.layouts
    calibrated = next((name for name, entry in layouts.items() if entry.offload), CALIBRATED)
    fitted = [m.connector for m in proof.measured if m.connector in proof.costs.by_connector]
    name = fitted[0] if fitted else calibrated
    return ServedCalibration(
        plain=proof.costs.plain,
        offload=proof.costs.of(name),
        offload_layout=name,
        source=f"kvstack tune's replays of {doc.source.trace} ({len(proof.measured)} candidates measured)",
    )


def proof_document(proof: Proof, settings: ProofRequest, setup: results.Setup) -> results.Measured:
    """results.json's ``measured``: every candidate replayed, in the order measured, and the
    verdict; ``setup`` says how the slice was replayed (a resumed tune must match it)."""
    est = proof.estimate
    capacity = settings.capacity
    extra = {} if capacity is None else {"capacity": capacity.setup()}
    return results.Measured(
        **extra,
        objective="capacity" if capacity is not None else settings.objective,
        slo_ms=settings.slo_s * 1000 if settings.slo_s is not None else None,
        budget_s=settings.budget_s,
        elapsed_s=proof.elapsed_s,
        stopped=proof.stopped,
        noise=METHOD,
        setup=setup,
        estimate=None
        if est is None
        else results.Estimate.model_validate(
            {"start_s": est.start_s, "replay_s": est.replay_s, "check_s": est.check_s, "from": est.source}
        ),
        replay=proof.replay,
        candidates=[m.document() for m in proof.measured],
        skipped=proof.skipped,
        refits=proof.refits,
        verdict=proof.verdict.document() if proof.verdict is not None else None,
    )
