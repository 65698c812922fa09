"""Predicted TTFT of each candidate on the trace, from costs measured on the served engine, and
the figures an objective reads (p50, p90, mean, or goodput: the share of requests whose TTFT meets
an SLO); tune/ranking.py orders the candidates by them. Pure.

Per request (planning/predict/served_ttft.py): the layout's fixed cost, the recompute of what no cache
held, and each tier's fetch. ``none`` is the plain layout's costs over the engine's hits; an
offload candidate its connector's costs over the engine's, DRAM's and disk's. A prompt gate sends
a request shorter than its threshold down the plain path (plain costs, the engine's hits only); a
load gate (in-process LMCache's ``min_retrieve_tokens``) recomputes a request's tier tokens when
fewer than its threshold, the lookup still paid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kvstack.planning.predict.served_ttft import FloatArray, ServedCosts, whole_chunks
from kvstack.tune.knobs import CONNECTORS, offloads
from kvstack.tune.options import Objective
from kvstack.tune.simulate import SimulatedSources, TraceSim
from kvstack.tune.space import Candidate


@dataclass(frozen=True)
class Costs:
    """The plain layout's costs, and each offload connector's (``default`` for one not measured)."""

    plain: ServedCosts
    default: ServedCosts
    by_connector: Mapping[str, ServedCosts] = field(default_factory=dict)

    def of(self, connector: str) -> ServedCosts:
        if not offloads(connector):
            return self.plain
        return self.by_connector.get(connector, self.default)


@dataclass(frozen=True)
class CandidatePrediction:
    """One candidate's predicted TTFT on the trace (and where its prompt tokens come from)."""

    candidate: Candidate
    p50_s: float
    p90_s: float
    mean_s: float
    tokens: dict[str, int]  # prompt tokens by source: recomputed, engine_cache, dram, disk
    gated: int  # requests the gate kept off the offload path
    under_slo: float | None = None  # share of requests whose TTFT meets the SLO (when one is given)

    def value(self, objective: Objective) -> float:
        """The objective's figure: seconds, or for goodput the share of requests within the SLO."""
        if objective == "goodput":
            return self.under_slo if self.under_slo is not None else 0.0
        return {"p50": self.p50_s, "p90": self.p90_s, "mean": self.mean_s}[objective]

    def loss(self, objective: Objective) -> float:
        """Lower is better: the latency, or for goodput the share of requests that miss the SLO."""
        return 1.0 - self.value(objective) if objective == "goodput" else self.value(objective)


def _ttft(
    costs: ServedCosts,
    lengths: FloatArray,
    s: SimulatedSources,
    mask: FloatArray | None,
    chunk_tokens: int = 0,
) -> FloatArray:
    dram, disk = s.dram.astype(np.float64), s.disk.astype(np.float64)
    if mask is not None:
        dram, disk = dram * mask, disk * mask
    fetch = dram * (costs.fetch_per_token("cpu") or 0.0) + disk * (costs.fetch_per_token("disk") or 0.0)
    held = s.engine.astype(np.float64) + dram + disk
    chunks = whole_chunks(lengths, chunk_tokens) if chunk_tokens else None
    ttft, _ = costs.predict(lengths, held, fetch, chunks)
    return ttft


def served(
    sim: TraceSim, candidate: Candidate, bytes_per_token: float
) -> tuple[SimulatedSources, npt.NDArray[np.bool_]]:
    """Where each request's prompt tokens come from on ``candidate`` (before its gate) and which
    requests its gate keeps off the offload path."""
    n = sim.requests
    if not candidate.offloads:
        return sim.engine_only(), np.zeros(n, dtype=np.bool_)
    dram_blocks, disk_blocks = candidate.blocks(bytes_per_token)
    readmit = CONNECTORS[candidate.connector].readmit
    s = sim.offload(candidate.chunk_tokens, dram_blocks, disk_blocks, readmit=readmit)
    gate = candidate.gate
    if gate is None:
        return s, np.zeros(n, dtype=np.bool_)
    if gate.kind == "prompt":
        return s, sim.lengths < gate.tokens
    return s, (s.dram + s.disk) < gate.tokens


def predict(
    sim: TraceSim, candidate: Candidate, costs: Costs, bytes_per_token: float, slo_s: float | None = None
) -> CandidatePrediction:
    """``candidate``'s predicted TTFT over the trace and its prompt tokens by source (and the share
    of requests within ``slo_s``, when given)."""
    lengths = sim.lengths.astype(np.float64)
    s, gated_mask = served(sim, candidate, bytes_per_token)
    if not candidate.offloads:
        ttft = _ttft(costs.plain, lengths, s, None)
    else:
        own = costs.of(candidate.connector)
        ttft = _ttft(own, lengths, s, (~gated_mask).astype(np.float64), candidate.chunk_tokens)
        if candidate.prompt_gate is not None:
            plain = _ttft(costs.plain, lengths, s, np.zeros(len(lengths)))
            ttft = np.where(gated_mask, plain, ttft)
        s = SimulatedSources(s.engine, np.where(gated_mask, 0, s.dram), np.where(gated_mask, 0, s.disk))
    engine, dram, disk = int(s.engine.sum()), int(s.dram.sum()), int(s.disk.sum())
    total = int(sim.lengths.sum())
    return CandidatePrediction(
        candidate=candidate,
        p50_s=float(np.percentile(ttft, 50)),
        p90_s=float(np.percentile(ttft, 90)),
        mean_s=float(ttft.mean()),
        tokens={
            "recomputed": total - engine - dram - disk,
            "engine_cache": engine,
            "dram": dram,
            "disk": disk,
        },
        gated=int(gated_mask.sum()),
        under_slo=float((ttft <= slo_s).mean()) if slo_s is not None and len(ttft) else None,
    )
