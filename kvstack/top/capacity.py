"""The capacity `kvstack top` sets the live load against: what a load sweep measured for the served
layout under its SLO.

Where from: ``--capacity PATH`` (a ``bench --sweep --out DIR`` or its results.json, or a ``tune
--objective capacity --out DIR``), else, for a run ``serve --tuned DIR`` started, that tune's
results.json when it measured capacity (launch.json's ``tuned.path`` names its tuned.json). A sweep
of several layouts needs the one served: ``PATH#LAYOUT``, else the layout named as the run's
connector. Read here through a small typed view of the documents (``top`` sits below bench and
tune, whose own models wrote them): only the fields this needs, the rest ignored.

A rate capacity (``rate``: requests/s; ``trace_rate``: x the trace's rate, as requests/s through
the trace's own rate) is set against the requests served per second in the window (first tokens,
every server together); a concurrency one against the requests running."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvstack.errors import InputError
from kvstack.userfile import read_json_object

RESULTS_JSON = "results.json"  # what bench --sweep and tune write (bench/report.py, tune/report.py)
SWEEP_SCHEMAS = ("kvstack.bench.sweep/1", "kvstack.bench.sweep/2")  # /2 adds fields only
HINT = "give the --out DIR of kvstack bench --sweep or of kvstack tune --objective capacity"


class _View(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _Capacity(_View):
    status: str
    load: float | None = None


class _Slo(_View):
    ttft_s: float | None = None
    tpot_s: float | None = None
    share: float = 0.9


class _Layout(_View):
    name: str
    capacity: _Capacity


class _Trace(_View):
    rate_per_s: float


class _Sweep(_View):
    schema_: str = Field(alias="schema")
    kind: str
    slo: _Slo
    layouts: list[_Layout]
    trace: _Trace | None = None


class _CandidateCapacity(_View):
    sweep: _Layout


class _Candidate(_View):
    label: str
    capacity: _CandidateCapacity | None = None


class _CapacitySetup(_View):
    slo: _Slo
    trace_rate_per_s: float | None = None


class _Measured(_View):
    capacity: _CapacitySetup | None = None
    candidates: list[_Candidate] = Field(default_factory=list)


class _Tune(_View):
    kind: str
    winner: str | None = None
    measured: _Measured | None = None


@dataclass(frozen=True)
class MeasuredCapacity:
    """One layout's capacity as a sweep measured it."""

    source: str  # the file read
    layout: str
    kind: str  # concurrency | rate | trace_rate
    status: str  # bracketed | above_ladder | below_first_step | not_measured
    load: float | None  # in the sweep's unit (None: no step passed below a failing one)
    rate_per_s: float | None  # the capacity in requests/s (a rate sweep's)
    slo: str  # the SLO in words

    @property
    def label(self) -> str:
        if self.load is None:
            return (
                "none (its lowest step already failed)"
                if self.status == "below_first_step"
                else "not measured"
            )
        unit = {"concurrency": f"c={self.load:g}", "trace_rate": f"{self.load:g}x the trace's rate"}
        text = unit.get(self.kind, f"{self.load:g} requests/s")
        if self.kind == "trace_rate" and self.rate_per_s is not None:
            text += f" = {self.rate_per_s:.3g} requests/s"
        return ("at least " if self.status == "above_ladder" else "") + text


def slo_text(slo: _Slo) -> str:
    parts = [f"{what} <= {s * 1000:g} ms" for what, s in (("TTFT", slo.ttft_s), ("TPOT", slo.tpot_s)) if s]
    return f"{slo.share * 100:g}% of requests within {' and '.join(parts)}"


def _path(given: Path) -> Path:
    if given.is_dir():
        return given / RESULTS_JSON
    return given.parent / RESULTS_JSON if given.name == "tuned.json" else given


def _of_sweep(doc: _Sweep, source: str, layout: str | None, connector: str | None) -> MeasuredCapacity:
    names = [lay.name for lay in doc.layouts]
    wanted = layout or (names[0] if len(names) == 1 else connector if connector in names else None)
    lay = next((x for x in doc.layouts if x.name == wanted), None)
    if lay is None:
        raise InputError(
            f"--capacity {source}: {'no layout ' + repr(wanted) if wanted else 'which layout is served?'} "
            f"(it measured {', '.join(names) or 'none'})",
            hint=f"name it: --capacity {source}#{names[0] if names else 'LAYOUT'}",
        )
    load = lay.capacity.load
    rate = None
    if load is not None and doc.kind == "rate":
        rate = load
    elif load is not None and doc.kind == "trace_rate" and doc.trace is not None:
        rate = load * doc.trace.rate_per_s
    return MeasuredCapacity(source, lay.name, doc.kind, lay.capacity.status, load, rate, slo_text(doc.slo))


def _of_tune(doc: _Tune, source: str) -> MeasuredCapacity:
    m = doc.measured
    if m is None or m.capacity is None:
        raise InputError(f"--capacity {source}: that tune did not measure capacity", hint=HINT)
    win = next((c for c in m.candidates if c.label == doc.winner and c.capacity is not None), None)
    if win is None or win.capacity is None:
        raise InputError(f"--capacity {source}: the tune has no winner with a measured capacity", hint=HINT)
    cap = win.capacity.sweep.capacity
    rate = m.capacity.trace_rate_per_s
    per_s = cap.load * rate if cap.load is not None and rate is not None else None
    return MeasuredCapacity(
        source, win.label, "trace_rate", cap.status, cap.load, per_s, slo_text(m.capacity.slo)
    )


def read_capacity(given: str, connector: str | None = None) -> MeasuredCapacity:
    """``--capacity PATH[#LAYOUT]``: the capacity measured for the served layout (``connector``: the
    run's, which picks a layout of a sweep that compared several)."""
    text, _, layout = given.partition("#") if not Path(given).exists() else (given, "", "")
    path = _path(Path(text))
    doc = read_json_object(path, InputError, HINT, what="--capacity")
    try:
        if doc.get("schema") in SWEEP_SCHEMAS:
            return _of_sweep(_Sweep.model_validate(doc), str(path), layout or None, connector)
        if doc.get("kind") == "kvstack-tune":
            return _of_tune(_Tune.model_validate(doc), str(path))
    except ValidationError as exc:
        raise InputError(
            f"--capacity {path}: a result that cannot be read ({exc.errors()[0]['msg']})", hint=HINT
        ) from exc
    raise InputError(f"--capacity {path} is neither a bench --sweep nor a tune result", hint=HINT)


def tuned_capacity(tuned_json: str) -> MeasuredCapacity | None:
    """The capacity the tune behind ``serve --tuned`` measured (None: it measured none, or its
    results are gone)."""
    try:
        return read_capacity(str(Path(tuned_json).parent))
    except InputError:
        return None
