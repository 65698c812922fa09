"""A trace replay's part of bench's results.json (``trace``) as typed documents: what command.py
writes (the slice sent and, per layout, predicted vs measured) and what reads it back (rendering,
plots, and the calibrations plan and tune take from a bench --trace result: served_calibration.py,
offload_cost.py).

A reader takes what it finds: keys it does not know are ignored and a key missing has its default
(a file written by another kvstack still loads, as do the partial documents the tests write), and a
figure of the wrong type is refused (pydantic's ValidationError, a ValueError).
tests/unit/bench/replay checks that every document a replay writes comes back unchanged, so the writer
and these models cannot drift apart unnoticed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer
from pydantic_core.core_schema import SerializerFunctionWrapHandler

from kvstack.bench.schema import BenchResult
from kvstack.clients.token_sources import ENGINE_CACHE
from kvstack.errors import InputError
from kvstack.jsonvalue import JsonObject
from kvstack.planning.predict.served_ttft import ServedCosts


class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class Costs(_Doc):
    """planning.predict.served_ttft.ServedCosts.to_dict."""

    hit_s: float
    miss_s: float
    linear_s_per_token: float = 0.0
    quadratic_s_per_token2: float = 0.0
    fetch_s_per_token: dict[str, float] = Field(default_factory=dict)
    chunk_s: float = 0.0
    # A decode step's fixed part and its part per decoding sequence (None: not measured, as in a
    # calibration written before kvstack measured decode).
    decode_fixed_s: float | None = None
    decode_per_seq_s: float | None = None
    source: str = ""

    @model_serializer(mode="wrap")
    def _unmeasured(self, handler: SerializerFunctionWrapHandler) -> JsonObject:
        out: JsonObject = handler(self)
        for key in ("decode_fixed_s", "decode_per_seq_s"):
            if out.get(key) is None:
                out.pop(key, None)  # as a calibration without decode wrote it: no key
        return out

    @classmethod
    def of(cls, costs: ServedCosts) -> Costs:
        return cls.model_validate(costs.to_dict())

    def served(self) -> ServedCosts:
        """The costs back; ValueError on figures no calibration gives (negative, over an hour)."""
        return ServedCosts.from_dict(self.model_dump())


class Level(_Doc):
    """One cache level as simulated (sizes.Level)."""

    tier: str
    unit_tokens: int = 0
    nominal_blocks: int = 0
    blocks: int = 0
    tokens: int = 0
    source: str = ""


class Hierarchy(_Doc):
    """The levels a layout's replay was simulated on (sizes.Hierarchy)."""

    inclusive: bool = True
    readmit: bool = True
    levels: list[Level] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def offloads(self) -> bool:
        """Whether it has a tier below the engine's own cache."""
        return any(lv.tier != ENGINE_CACHE for lv in self.levels)


class TierShare(_Doc):
    """One tier's predicted and measured share of the prompt tokens sent (predict.TierRow)."""

    tier: str
    predicted: float | None
    measured: float | None
    gap_points: float | None


class Percentiles(_Doc):
    p50_s: float | None = None
    p90_s: float | None = None


class TtftCheck(_Doc):
    """The plan's TTFT model, with costs calibrated against the layout, next to what it measured."""

    calibration: Costs | None = None  # None: not calibrated (an empty object in a file)
    predicted: Percentiles = Percentiles()
    measured: Percentiles = Percentiles()
    measured_over_predicted: Percentiles = Percentiles()

    @field_validator("calibration", mode="before")
    @classmethod
    def _empty(cls, value: Any) -> Any:
        return None if value == {} else value


class LayoutComparison(_Doc):
    """Predicted vs measured prompt tokens per tier for one layout's replay (predict.comparison)."""

    layout: str
    hierarchy: Hierarchy = Hierarchy()
    prompt_tokens_sent: int = 0
    prompt_tokens_measured: float = 0.0
    predicted_tokens: dict[str, int] = Field(default_factory=dict)
    measured_tokens: dict[str, float] = Field(default_factory=dict)
    tiers: list[TierShare] = Field(default_factory=list)
    max_gap_points: float | None = None
    no_prediction: str | None = None  # why the simulation cannot stand for this layout (only then)
    measured_derived: dict[str, str] = Field(default_factory=dict)
    measured_from: str = ""
    ttft: TtftCheck | None = None  # bench calibrates each layout after its replay; tune does not

    @model_serializer(mode="wrap")
    def _absent(self, handler: SerializerFunctionWrapHandler) -> JsonObject:
        out: JsonObject = handler(self)
        for key in ("no_prediction", "ttft"):
            if out.get(key) is None:
                out.pop(key, None)
        return out

    def calibration(self) -> Costs | None:
        """The costs calibrated after the replay, if it was."""
        return self.ttft.calibration if self.ttft is not None else None


class TraceSlice(_Doc):
    """What was taken of the trace and how it is sent (command.load_slice)."""

    source: str = ""
    start: int = 0
    session_sample: float | None = None
    max_requests: int | None = None
    block_tokens: int = 0
    trace_block_tokens: int = 0
    time_scale: float = 1.0
    max_output_tokens: int = 0
    concurrency: int = 1
    rows_taken: int = 0


class TraceReplay(TraceSlice):
    """results.json's ``trace`` (and the trace workload's ``spec``): the slice, what was sent, and
    per layout predicted vs measured."""

    requests_sent: int = 0
    prompt_tokens: int = 0
    align_tokens: int | None = None
    notes: list[str] = Field(default_factory=list)
    unbounded_hit_ratio: float | None = None
    layouts: list[LayoutComparison] = Field(default_factory=list)

    @classmethod
    def of(cls, result: BenchResult) -> TraceReplay | None:
        """``result``'s replay, typed (None for a workload bench)."""
        return cls.model_validate(result.trace) if result.trace is not None else None

    def document(self) -> JsonObject:
        return self.model_dump(mode="json")


def layouts_of(result: BenchResult) -> list[LayoutComparison]:
    """The replay's predicted vs measured comparison, one per layout (none for a workload bench)."""
    replay = TraceReplay.of(result)
    return replay.layouts if replay is not None else []


def read_layouts(result: BenchResult, path: Path, hint: str) -> list[LayoutComparison]:
    """``layouts_of`` a result read from ``path``: InputError, in one line, on a damaged one."""
    try:
        return layouts_of(result)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InputError(
            f"{path}: the trace replay's {where} cannot be read ({first['msg']})", hint=hint
        ) from exc
