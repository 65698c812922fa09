"""A step-level simulator of the served engine, offload tiers included (issue 61). Pure.

Requests arrive on a trace's timestamps or from a synthetic workload (workload); the engine
schedules them as vLLM v1's scheduler does, one forward step at a time: continuous batching under a
per-step token budget, chunked prefill, ``max_num_seqs``, recompute preemption when the pool is full
(engine); its pool is an LRU of blocks with prefix hits and each offload tier an LRU of chunks
(caches); a step costs a fixed part, its prefill tokens (with attention), its decoding sequences and
its tiers' transfers (inputs). Out come each request's TTFT and TPOT, each source's share of the
prompt tokens (results), and a layout's capacity under an SLO, bisected on it (capacity).

The modules, lowest first: inputs (the typed inputs), caches (the pool, a tier), results, workload
(synthetic, a trace's rows), state (a request as served), group (the decoding requests), engine (the
schedule, step by step), capacity (bisected under an SLO).
"""

from kvstack.planning.predict.simulator.capacity import (
    CapacitySearch,
    Probe,
    Slo,
    capacity,
    kept_up,
    probe,
    run_at,
    share_within,
    within,
)
from kvstack.planning.predict.simulator.engine import simulate
from kvstack.planning.predict.simulator.inputs import (
    Layout,
    SchedulerLimits,
    SimRequest,
    StepCosts,
    TierSpec,
    unit_keys,
)
from kvstack.planning.predict.simulator.results import RequestResult, SimResult, SimSummary
from kvstack.planning.predict.simulator.workload import at_multiplier, from_trace, rate_per_s, synthetic

__all__ = [
    "CapacitySearch",
    "Layout",
    "Probe",
    "RequestResult",
    "SchedulerLimits",
    "SimRequest",
    "SimResult",
    "SimSummary",
    "Slo",
    "StepCosts",
    "TierSpec",
    "at_multiplier",
    "capacity",
    "from_trace",
    "kept_up",
    "probe",
    "rate_per_s",
    "run_at",
    "share_within",
    "simulate",
    "synthetic",
    "unit_keys",
    "within",
]
