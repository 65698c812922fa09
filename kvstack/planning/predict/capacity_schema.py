"""What ``plan --slo-ttft`` predicts and from what: the SLO asked (CapacityAsk), a layout's costs
(LayoutCosts, FetchCost: the plan's TTFT model or costs measured on the served engine), and the
predicted capacity per layout (PlanCapacity, LayoutCapacity, ResourceUse). Pure data.

planning/predict/plan_capacity.py fills them from the step-level simulator (planning/predict/
simulator), and bench --sweep's prediction (bench/sweep/predict.py) reads its bound the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RESOURCE_LABELS: dict[str, str] = {
    "prefill": "prefill compute",
    "decode": "decode",
    "step": "forward steps' fixed cost",
    "pool": "KV pool",
    "cpu": "DRAM copies",
    "disk": "disk read",
    "remote": "Redis link",
}

# slo: the SLO bounds it (the simulator: the bracket's upper end fails it); saturation: the bound
# resource saturates first (an M/M/1 model's, kept to read plans written before the simulator);
# slo_below_unloaded: the lightest load searched fails it;
# above_range: the heaviest load searched meets it (the simulator); no_costs: nothing to predict with.
CapacityStatus = Literal["slo", "saturation", "slo_below_unloaded", "above_range", "no_costs"]


class ResourceUse(BaseModel):
    """One resource at a load: what the load asks of it against what it gives."""

    model_config = ConfigDict(extra="forbid")

    resource: str  # "prefill", "decode", "step", "pool", or an offload tier's kind ("cpu", "disk", "remote")
    label: str  # as the tables name it: "disk read", "prefill compute", "KV pool"
    utilisation: float  # demand / capacity (1: saturated); the simulator: its share of the run's time
    demand: float  # in ``unit``
    capacity: float  # in ``unit``: the tier's bandwidth, the prefill rate, the pool's tokens
    unit: Literal["B/s", "tokens/s", "tokens"]
    # the engine's parts: the engine's compute busy with all of them (it saturates at 1, whichever part)
    engine_busy: float | None = None
    source: str = ""

    @property
    def pressure(self) -> float:
        """How near saturation the resource is: the engine's whole busy share for its parts."""
        return self.engine_busy if self.engine_busy is not None else self.utilisation

    def with_engine_busy(self, engine_busy: float | None) -> ResourceUse:
        """This resource, counted as a part of an engine busy ``engine_busy`` of the time."""
        out = self.model_copy()
        out.engine_busy = engine_busy
        return out


class TtftAt(BaseModel):
    """The simulated TTFT at a share of the predicted capacity."""

    model_config = ConfigDict(extra="forbid")

    of_capacity: float  # 0.5: half the capacity
    rate_per_s: float
    ttft_p50_s: float | None
    ttft_p90_s: float | None


class LayoutCapacity(BaseModel):
    """A layout's predicted capacity under a TTFT SLO, with the resource that bounds it."""

    model_config = ConfigDict(extra="forbid")

    layout: str  # "engine", "engine+cpu", ... (the levels serving), or the layout's name
    status: CapacityStatus
    rate_per_s: float | None = None  # the capacity (requests/s); None: no costs to predict with
    saturation_rate_per_s: float | None = None  # an M/M/1 model's (plans written before the simulator)
    failing_rate_per_s: float | None = None  # the simulator: the bracket's upper end, which fails
    in_flight: float | None = None  # requests in flight at the capacity (Little's law)
    unloaded_ttft_s: float | None = None
    ttft_at_capacity_s: float | None = None  # the predicted TTFT at the SLO's quantile
    ttft_at: list[TtftAt] = Field(default_factory=list)  # the simulator: at half and 0.9 of capacity
    busy_fraction: float | None = None  # the simulator: the engine's time in steps at the capacity
    preemptions: int | None = None  # the simulator: recompute preemptions at the capacity
    bound: ResourceUse | None = None  # the resource nearest saturation at the capacity
    resources: list[ResourceUse] = Field(default_factory=list)
    shares: dict[str, float] = Field(default_factory=dict)  # prompt tokens by level; the rest recomputed
    note: str = ""


@dataclass(frozen=True)
class FetchCost:
    kind: str  # the offload tier's kind
    bw_bytes_per_s: float
    latency_s: float = 0.0
    source: str = ""


@dataclass(frozen=True)
class LayoutCosts:
    """What a request costs one layout, in seconds (the plan's TTFT model)."""

    name: str
    fixed_s: float  # the forward step, plus the offload path's per-request cost on an offload layout
    linear_s: float  # seconds per recomputed token
    quadratic_s: float  # seconds per token^2 of attention over the prefix
    bytes_per_token: float
    step_s: float  # one forward step: the decode time per token
    pool_tokens: int  # the engine's KV pool
    fetch: tuple[FetchCost, ...] = ()
    prefill_source: str = ""
    levels: tuple[str, ...] = ("engine",)  # what serves its prompts: the pool, then its tiers' kinds
    # a decoding sequence's part of a step, measured (a calibration's decode); None: ``linear_s``
    decode_seq_s: float | None = None


class CapacityAsk(BaseModel):
    """What ``plan --slo-ttft`` predicts capacity against: the SLO and the request it sizes."""

    model_config = ConfigDict(extra="forbid")

    slo_ttft_s: float = Field(gt=0)
    share: float = Field(default=0.9, gt=0, le=1)  # the quantile the TTFT must meet it at
    output_tokens: int = Field(default=128, ge=0)


class PlanCapacity(BaseModel):
    """The plan's predicted capacity per layout: the engine's pool alone, then one tier more each."""

    model_config = ConfigDict(extra="forbid")

    ask: CapacityAsk
    prompt_tokens: int  # a request of the plan's workload: its context (a trace's mean prompt)
    shares_from: str  # the workload simulated (a trace's requests, or the synthetic warm set)
    # what the layouts' costs come from: costs measured on the served engine (--calibration), or the
    # plan's TTFT model ("" with no layout predicted)
    costs_from: str = ""
    limits_from: str = ""  # the simulated scheduler's limits and where they come from
    requests: int = 0  # the requests simulated at each load
    traced: bool = False  # the workload is a trace's requests (else the synthetic warm set)
    base_rate_per_s: float | None = None  # the workload's own rate (a trace's; load 1)
    layouts: list[LayoutCapacity] = Field(default_factory=list)
    note: str = ""  # why no layout has a prediction, when none has
