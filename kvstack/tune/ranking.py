"""One tune ranking, from inputs already read: the trace's requests, the machine's limits and the
served engine's costs in, the ranked candidates and the winner out. Each candidate's figures are
the step-level simulator's, serving the trace as the replay sends it (tune/predict.py); this orders
them by the objective (goodput: the trace's arrivals fix the offered rate, so the share of requests
within the SLO orders it). The capacity curve only sizes the candidates (space.py). Pure.

``--connector`` keeps one connector's candidates (and ``none``, the baseline); ``--knob NAME=VALUE``
fixes one of its knobs, checked against what the installed connector accepts (knobs.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from kvstack.errors import InputError
from kvstack.planning.predict.capacity import capacity_curve
from kvstack.planning.predict.served_ttft import ServedCalibration
from kvstack.planning.predict.trace_sizing import OFFLOAD_REQUEST_COST_S
from kvstack.traces.mooncake import TraceRow
from kvstack.tune.knobs import CONNECTORS, check_connector, check_knobs
from kvstack.tune.options import Objective
from kvstack.tune.predict import CandidatePrediction, Costs, Sent, SimTrace, predict
from kvstack.tune.space import Candidate, CurveSizes, Gate, Limits, candidate_space, curve_sizes
from kvstack.units import GIB

# Knob name -> the candidate field it sets (GB knobs in bytes).
_FIELDS: dict[str, str] = {
    "--chunk-size": "chunk_tokens",
    "chunk_size": "chunk_tokens",
    "--l1-size-gb": "dram_bytes",
    "max_local_cpu_size": "dram_bytes",
    "--kv-offloading-size": "dram_bytes",
    "max_capacity_gb": "disk_bytes",
}

LATENCIES: tuple[Objective, ...] = ("p50", "p90", "mean")
# Predictions within 1% of each other are a tie on the objective: far below what a replay on 2 busy
# cores can tell apart (README: fixed costs measured several ms apart run to run).
TIE_TOLERANCE = 0.01


@dataclass(frozen=True)
class TuneResult:
    ranked: list[CandidatePrediction]
    sizes: CurveSizes
    limits: Limits
    objective: Objective
    costs: Costs | None = None  # the costs it ranked with (the proof predicts the replay with them)
    slo_s: float | None = None  # goodput's TTFT SLO

    @property
    def winner(self) -> CandidatePrediction:
        """The best candidate the installed connector can run as modelled."""
        return next(p for p in self.ranked if not p.candidate.not_settable)

    @property
    def baseline(self) -> CandidatePrediction:
        return next(p for p in self.ranked if not p.candidate.offloads)


def with_knobs(candidate: Candidate, values: Mapping[str, float]) -> Candidate:
    """``candidate`` with the given knobs fixed (names as its connector spells them)."""
    out = candidate
    for name, value in values.items():
        spec = CONNECTORS[candidate.connector]
        if name == spec.gate and spec.gate_kind:
            out = replace(out, gate=Gate(spec.gate_kind, int(value), "--knob") if value > 0 else None)
            continue
        field = _FIELDS.get(name)
        if field == "chunk_tokens":
            out = replace(out, chunk_tokens=int(value))
        elif field == "dram_bytes":
            out = replace(out, dram_bytes=int(value * GIB))
        elif field == "disk_bytes":
            out = replace(out, disk_bytes=int(value * GIB))
        else:
            raise InputError(f"tune does not model {name} yet", hint="leave it at its default")
    return out


def check_ranking(
    limits: Limits,
    *,
    objective: Objective,
    connector: str | None,
    knobs: Mapping[str, float] | None,
    slo_s: float | None,
) -> None:
    """InputError for a ranking that cannot be asked for (before any cost is known: a tune that
    measures its own costs refuses it before any engine starts)."""
    if objective == "goodput" and slo_s is None:
        raise InputError("--objective goodput needs a TTFT SLO", hint="add --slo-ms, e.g. --slo-ms 200")
    if slo_s is not None and not slo_s > 0:
        raise InputError(f"--slo-ms must be positive, not {slo_s * 1000:g}", hint="e.g. --slo-ms 200")
    if knobs and connector is None:
        raise InputError("--knob needs --connector (whose knob it is)", hint="e.g. --connector lmcache-mp")
    if connector is not None:
        spec = check_connector(connector, limits.platform)
        check_knobs(spec, knobs or {}, limits.engine_block_tokens)
        for name in knobs or {}:
            if not (name == spec.gate and spec.gate_kind) and name not in _FIELDS:
                raise InputError(f"tune does not model {name} yet", hint="leave it at its default")


def tune(
    requests: Sequence[TraceRow],
    block_tokens: int,
    limits: Limits,
    calibration: ServedCalibration,
    *,
    objective: Objective = "p50",
    connector: str | None = None,
    knobs: Mapping[str, float] | None = None,
    slo_s: float | None = None,
    sent: Sent = Sent(),
) -> TuneResult:
    """Every candidate of the space (restricted as asked) ranked on ``requests``, served as ``sent``."""
    check_ranking(limits, objective=objective, connector=connector, knobs=knobs, slo_s=slo_s)
    offload = calibration.offload_costs(OFFLOAD_REQUEST_COST_S, {})
    curve = capacity_curve(requests, block_tokens)
    sizes = curve_sizes(curve, int(limits.bytes_per_token * block_tokens))
    lengths = [r.input_length for r in requests]
    space = candidate_space(limits, sizes, lengths, calibration.plain, offload)
    if connector is not None:
        space = [c for c in space if not c.offloads or c.connector == connector]
        fixed = [with_knobs(c, knobs or {}) if c.offloads else c for c in space]
        once: dict[str, Candidate] = {}
        for c in fixed:  # fixing a knob makes candidates equal (their label says all they serve): once each
            once.setdefault(c.label, c)
        space = list(once.values())
    trace = SimTrace(requests, block_tokens=block_tokens, limits=limits, sent=sent)
    costs = Costs(calibration.plain, offload)
    ranked = rank(trace, space, costs, objective, slo_s=slo_s)
    return TuneResult(ranked, sizes, limits, objective, costs, slo_s)


def rank(
    trace: SimTrace,
    candidates: Sequence[Candidate],
    costs: Costs,
    objective: Objective = "p50",
    tolerance: float = TIE_TOLERANCE,
    slo_s: float | None = None,
) -> list[CandidatePrediction]:
    """Every candidate predicted, best first by ``objective``. Candidates within ``tolerance`` (a
    fraction) of the best remaining one are tied on it: ``none`` first, then by the other figures,
    then the smaller layout (less memory, no gate): the model cannot tell a 0.1 ms difference apart."""
    left = [predict(trace, c, costs, slo_s) for c in candidates]
    others = [o for o in LATENCIES if o != objective]

    def key(p: CandidatePrediction) -> tuple[float, ...]:
        c = p.candidate
        # Tied with none, none first: the replays' rule too (tune/verdict.py: an offload candidate
        # must beat none beyond the noise), and the smaller layout.
        return (
            float(c.offloads),
            *(p.value(o) for o in others),
            float(c.dram_bytes + c.disk_bytes),
            float(c.gate is not None),
        )

    out: list[CandidatePrediction] = []
    while left:
        best = min(p.loss(objective) for p in left)
        tied = [p for p in left if p.loss(objective) <= best * (1 + tolerance)]
        out.extend(sorted(tied, key=key))
        left = [p for p in left if p.loss(objective) > best * (1 + tolerance)]
    return out
