"""results.json of a tune as a typed document: what report.py and command.py build (the ranking,
``measured``: the proof, ``calibration``: the costs it ranked with), what files.py writes
(``TuneResults.document``: a key left unset, as ``predicted_winner`` of a ranking, stays out) and
what reads it back (--resume, the plots, the terminal report: rendering/tune.py). Extra keys are
refused; tests/unit/tune/test_results.py checks that every document a tune writes, and one an
earlier kvstack wrote, comes back unchanged.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from kvstack.bench.replay.results import Costs
from kvstack.bench.schema import CorrectnessResult
from kvstack.bench.sweep.schema import LayoutSweep, Slo


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _as_json(value: object) -> object:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


# A model given whole, taken as JSON so that every key of it counts as set: results.json is dumped
# with exclude_unset (for the keys only some tunes write), which would drop a default the code did not
# set (a judgement's) and a list it appended to rather than assigned (a sweep's steps).
_WHOLE = BeforeValidator(_as_json)


class Interval(_Doc):
    """A measured figure and its bootstrap interval (noise.Interval.document)."""

    value: float
    low: float
    high: float
    noise: float


class MeasuredStats(_Doc):
    n: int
    block: int
    p50: Interval
    p90: Interval
    mean: Interval
    goodput: Interval | None = None


class Predicted(_Doc):
    """The model's figures for the requests a candidate was sent (none before any prediction)."""

    p50_s: float | None = None
    p90_s: float | None = None
    mean_s: float | None = None
    goodput: float | None = None


class CapacityRow(_Doc):
    """--objective capacity: the candidate swept on the trace at multiples of its rate
    (capacity_curve.CandidateCapacity.document): bench --sweep's steps and capacity, and each step's
    TTFT per request sent (aligned with ``sweep.steps``; None: failed), which the verdict pairs."""

    sweep: Annotated[LayoutSweep, _WHOLE]
    step_ttft_s: list[list[float | None]]


class CapacitySetup(_Doc):
    """--objective capacity: the SLO a step is judged by and the loads (x trace rate) swept."""

    slo: Slo
    multiples: list[float]
    seed: int  # step i's blocks are drawn from seed + i
    unit: str = "x trace rate"
    trace_rate_per_s: float | None = None  # load 1 as requests/s (the replayed slice's own rate)


class MeasuredRow(_Doc):
    """One candidate replayed (verdict.MeasuredCandidate.document)."""

    label: str
    rank: int
    connector: str
    knobs: dict[str, float]
    predicted: Predicted
    predicted_tokens: dict[str, int]
    measured: MeasuredStats | None
    measured_over_predicted_p50: float | None
    ttft_s: list[float | None]
    requests: int
    ok: int
    measured_tokens: dict[str, float]
    lookups: int | None
    below_gate: int | None
    correctness: Annotated[CorrectnessResult | None, _WHOLE]
    correct: bool
    wall_s: dict[str, float]
    run_dir: str | None
    error: str | None
    capacity: CapacityRow | None = None  # --objective capacity only


class Inversion(_Doc):
    model_ranked_higher: str
    measured_better: str
    beyond_noise: bool


class Verdict(_Doc):
    winner: str
    why: str
    excluded: dict[str, str]
    inversions: list[Inversion]
    versus_none: dict[str, dict[str, Interval]]


class Refit(_Doc):
    after: list[str]
    plain: Costs
    by_connector: dict[str, Costs]


class Estimate(_Doc):
    start_s: float
    replay_s: float
    check_s: float
    from_: str = Field(alias="from")


class Setup(_Doc):
    """How the slice was replayed (a resumed tune must match it)."""

    requests: int
    block_tokens: int
    time_scale: float
    max_output_tokens: int
    seed: int
    check_correctness: int


class Shape(_Doc):
    block_tokens: int
    align: int
    max_prompt_tokens: int
    max_output_tokens: int
    time_scale: float


class EngineSize(_Doc):
    block_tokens: int
    pool_tokens: int


class ReplayState(_Doc):
    """What the first layout replayed decided for every candidate (measure.shared_state)."""

    shape: Shape
    pool: list[int]
    seed: int
    notes: list[str]
    engine: EngineSize | None
    requests_sent: int
    prompt_tokens: int


class Measured(_Doc):
    """results.json's ``measured``: report.proof_document."""

    objective: str
    slo_ms: float | None
    budget_s: float
    elapsed_s: float
    stopped: str
    noise: str
    setup: Setup
    estimate: Estimate | None
    replay: ReplayState | None
    candidates: list[MeasuredRow]
    skipped: dict[str, str]
    refits: list[Refit]
    verdict: Verdict | None
    capacity: CapacitySetup | None = None  # --objective capacity only


class Gate(_Doc):
    kind: str
    tokens: int
    from_: str = Field(alias="from")


class PredictedFigures(_Doc):
    p50_s: float
    p90_s: float
    mean_s: float
    goodput: float | None


class CandidateRow(_Doc):
    """One candidate ranked (report._row)."""

    rank: int
    label: str
    connector: str
    knobs: dict[str, float]
    sizes_from: str
    gate: Gate | None
    not_settable: str
    predicted: PredictedFigures
    prompt_tokens: dict[str, int]
    gated_requests: int


class Source(_Doc):
    trace: str
    sample: str
    block_tokens: int
    requests: int
    model: str
    calibration: str  # where the costs it ranked with come from
    connector: str | None
    knobs: dict[str, float]


class Limits(_Doc):
    platform: str
    engine_block_tokens: int
    engine_pool_tokens: int
    bytes_per_token: float
    dram_max_bytes: int
    disk_max_bytes: int


class CurveSizes(_Doc):
    knee_bytes: int
    p95_bytes: int
    max_bytes: int


class CalibrationLayout(_Doc):
    offload: bool
    calibration: Costs


class Calibration(_Doc):
    """planning.predict.served_ttft.ServedCalibration.to_dict: the served-ttft.json form."""

    source: str
    layouts: dict[str, CalibrationLayout]


class CalibrationReplay(_Doc):
    """A layout this tune replayed and calibrated to measure its costs (no --calibration)."""

    layout: str
    candidate: str | None  # the ranked candidate it counts as, if it is one
    run_dir: str | None
    requests: int
    ok: int
    wall_s: dict[str, float]
    calibration: Costs | None


class TuneResults(_Doc):
    # Not frozen, unlike the documents it holds: its copies below assign their changes (attributes
    # mypy checks), and an assignment counts as set for ``document`` (exclude_unset).
    model_config = ConfigDict(extra="forbid", frozen=False, populate_by_name=True)

    kind: Literal["kvstack-tune"]
    objective: str
    source: Source
    limits: Limits
    curve_sizes: CurveSizes
    winner: str | None  # None while the replays have not chosen one
    baseline: CandidateRow
    candidates: list[CandidateRow]
    measured: Measured | None
    calibration: Calibration
    rank_s: float
    predicted_winner: str | None = None  # measuring: the model's best, before the replays chose
    calibration_replays: list[CalibrationReplay] | None = None  # only when this tune measured its costs

    @classmethod
    def of(cls, doc: object) -> TuneResults:
        """A results.json document, typed; ValidationError (a ValueError) on anything else."""
        return cls.model_validate(doc)

    def document(self) -> dict[str, object]:
        """The JSON results.json holds (a key left unset stays out, as an earlier tune wrote it)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def ranked(
        self,
        predicted_winner: str,
        *,
        measured: Measured | None = None,
        calibration_replays: list[CalibrationReplay] | None = None,
    ) -> TuneResults:
        """A shallow copy ranked afresh: the model's best, no winner chosen yet; ``measured`` and
        ``calibration_replays`` where given (None leaves this one's, unset where it was)."""
        out = self.model_copy()
        out.predicted_winner, out.winner = predicted_winner, None
        if measured is not None:
            out.measured = measured
        if calibration_replays is not None:
            out.calibration_replays = calibration_replays
        return out

    def with_measured(self, measured: Measured) -> TuneResults:
        """A shallow copy with ``measured`` as its measured candidates."""
        out = self.model_copy()
        out.measured = measured
        return out

    def with_winner(self, winner: str) -> TuneResults:
        """A shallow copy with ``winner`` chosen."""
        out = self.model_copy()
        out.winner = winner
        return out
