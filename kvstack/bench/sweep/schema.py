"""The shape of a sweep's result: results.json is a dump of ``SweepResult``; its tables, requests.csv
and plots are rendered from these models, never from the runner's state."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kvstack.bench.replay.results import Costs
from kvstack.bench.schema import RequestRow, Summary
from kvstack.bench.sweep.ladder import LoadKind
from kvstack.planning.predict.capacity_schema import CapacityStatus as PredictedStatus
from kvstack.planning.predict.capacity_schema import ResourceUse

# /2: each layout's bound at its knee and, where its plan is known, the predicted capacity beside it;
# since, each layout's calibration, then the step simulator's prediction per step and its source
# (fields added, readers of /2 unchanged).
SWEEP_SCHEMA = "kvstack.bench.sweep/2"

# bracketed: a step passed below the lowest failing one; above_ladder: no step failed;
# below_first_step: the lowest step already failed; not_measured: no step completed.
CapacityStatus = Literal["bracketed", "above_ladder", "below_first_step", "not_measured"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Slo(_Model):
    """What a request must meet (None: not asked), and the share of a step's requests that must."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    share: float = 0.9


class Capacity(_Model):
    """The highest load whose step met the SLO below the lowest load whose step did not."""

    status: CapacityStatus
    load: float | None = None  # the capacity (= highest_passing), None when no step passed below a failure
    highest_passing: float | None = None
    lowest_failing: float | None = None
    # Steps that passed above the lowest failing one (noise, or a server that recovered): not capacity.
    passing_above_failure: list[float] = Field(default_factory=list)


class StepPrediction(_Model):
    """The step-level simulator's figures for a step: its workload replayed at its load."""

    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    share_within_slo: float = 0.0
    busy_fraction: float = 0.0  # the simulated engine's time in steps


class SweepStep(_Model):
    """One load applied to one layout: the whole workload, sent at that load with its own seed."""

    step: int  # the order it ran in, within its layout
    origin: Literal["ladder", "bisect"]
    load: float
    seed: int  # the workload's seed: each step's prompts are fresh, so no step hits an earlier one's cache
    complete: bool
    aborted: str | None = None
    summary: Summary
    within_slo: int  # requests that succeeded within every SLO given
    share_within_slo: float  # within_slo / requests sent (a failed request is outside)
    meets_slo: bool  # share_within_slo >= slo.share
    token_hit_rate: float | None = None  # prompt tokens the server did not recompute (its counters)
    # Each tier's share of the step's prompt tokens (recomputed, engine_cache, dram, disk, ...).
    prompt_token_shares: dict[str, float] = Field(default_factory=dict)
    predicted: StepPrediction | None = None  # the simulator at this step's load (bench/sweep/predict.py)


class KneeBound(_Model):
    """What bounds the layout at its knee (bench/sweep/predict.py): each resource's share of the time
    in the simulator's own accounting, the step's workload replayed at the load of the step that
    failed (or the top step, when none did) and at the highest step that passed below it."""

    at_load: float  # the step the bound is read at
    passing_load: float | None = None  # the highest passing step below it (None: none below)
    bound: ResourceUse | None = None  # the resource nearest saturation at ``at_load``
    resources: list[ResourceUse] = Field(default_factory=list)  # at ``at_load``
    passing: list[ResourceUse] = Field(default_factory=list)  # at ``passing_load``
    figures: str = ""  # where the simulator's costs come from
    note: str = ""


class CapacityPrediction(_Model):
    """The step-level simulator's capacity for the workload as the sweep sent it (bench/sweep/
    predict.py), bisected under the sweep's SLO, beside the measured one. ``status``: slo (bracketed),
    above_range (the heaviest load searched meets it), slo_below_unloaded (the lightest does not),
    no_costs (nothing to predict with: ``note`` says why); saturation: an M/M/1 model's, in reports
    written before the simulator."""

    status: PredictedStatus
    load: float | None = None  # in the sweep's unit (requests in flight, requests/s, x trace rate)
    rate_per_s: float | None = None
    bound: ResourceUse | None = None
    measured_load: float | None = None
    ratio: float | None = None  # predicted / measured
    at_least: bool = False  # the measured capacity is above the ladder: it is at least measured_load
    note: str = ""
    source: str = ""  # what the simulator's costs and scheduler come from
    workload: str = ""  # what it replayed


class SweepCalibration(_Model):
    """The short calibration run on the layout before its steps (bench/sweep/calibration.py):
    the served engine's costs, TTFT's and decode's (planning/predict/served_ttft.py ServedCosts),
    for a predictor to read (``sweep_calibration``)."""

    costs: Costs | None = None  # None: it failed (``note`` says why)
    offload: bool | None = None  # whether the layout has an offload tier (None: its tiers are unknown)
    seconds: float = 0.0  # how long it took
    note: str = ""
    # The served engine's pool as its counters gave it (the simulator's, without a plan).
    pool_tokens: int | None = None
    block_tokens: int | None = None
    engine: str | None = None  # vllm, sglang: whose scheduler defaults the simulator takes


class LayoutSweep(_Model):
    name: str
    base_url: str
    steps: list[SweepStep] = Field(default_factory=list)
    capacity: Capacity
    bound: KneeBound | None = None
    predicted: CapacityPrediction | None = None
    # Run before the steps where nothing else gave the costs (the plan has no prefill figure).
    calibration: SweepCalibration | None = None


class SweepRow(RequestRow):
    """One request of a sweep: bench's row, with the step and load it was sent at."""

    step: int
    load: float


class SweepConfig(_Model):
    """What was asked, secrets redacted."""

    url: str | None
    model: str
    api_key: str | None  # "***" when one was given
    workload: str
    requests: int
    prompt_tokens: int
    output_tokens: int
    seed: int
    compare: list[str]
    ladder: list[float]
    bisect: int
    metrics_urls: list[str]
    timeout_s: float


class TraceLoad(_Model):
    """A trace sweep's unit: each step replays the same slice with its arrival times divided by the
    step's load, so load 1 is the trace's own rate (``rate_per_s``, its clock x --time-scale)."""

    source: str
    requests: int  # requests sent per step
    span_s: float  # first to last arrival at load 1
    rate_per_s: float  # requests / span at load 1
    time_scale: float
    unit: str = "x trace rate"
    # How no step is served from what an earlier step left in the caches.
    caches: str


class Environment(_Model):
    kvstack: str
    engines: dict[str, str | None]
    python: str
    platform: str
    cpu_count: int | None


class SweepResult(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default=SWEEP_SCHEMA, alias="schema")
    kind: LoadKind
    slo: Slo
    config: SweepConfig
    environment: Environment
    layouts: list[LayoutSweep]
    requests: list[SweepRow]
    trace: TraceLoad | None = None  # kind trace_rate: what load 1 is

    def rate_per_s(self, load: float) -> float | None:
        """A load as requests/s (None: a concurrency has no rate)."""
        if self.kind == "rate":
            return load
        if self.kind == "trace_rate" and self.trace is not None:
            return load * self.trace.rate_per_s
        return None
