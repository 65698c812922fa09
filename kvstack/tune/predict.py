"""Each candidate's predicted TTFT on the trace, from the step-level simulator of the served engine
(planning/predict/simulator) with costs measured on it, and the figures an objective reads (p50,
p90, mean, or goodput: the share of requests whose TTFT meets an SLO); tune/ranking.py orders the
candidates by them, tune/prove.py predicts each replay with them. Pure.

The trace's rows are served as tune's replay sends them (``Sent``; tune.py ``_replay_setup``):
outputs cut to ``--max-output-tokens``, in trace order, at most ``in_flight`` at a time (the
replay's concurrency, 1): the simulator's closed loop of that many clients, each sending its next
request when its last is done, each TTFT timed from when it is sent, as the replay's client times
it. One in flight, that is what the replay sends whatever its ``--time-scale`` (its idle gaps change
no request's TTFT); ``in_flight`` None: an open loop, every row on its timestamp x ``time_scale``. A
candidate is a simulator ``Layout``:

- the scheduler: the engine's defaults for the device (``Limits.batched_tokens``, ``max_seqs``), its
  KV block and pool (at least the longest request's blocks), chunked prefill and prefix caching on;
- a step's fixed cost: the calibration's decode step (``decode_fixed_s``, the forward step), else
  the whole-prompt hit (``hit_s``: an upper bound); what a request pays beyond it on the plain path
  (``hit_s + miss_s`` less the step: HTTP, scheduling) is its time outside the engine's steps
  (``Layout.outside_s``); a decoding sequence costs ``decode_per_seq_s`` (else ``linear_s``);
- a prefill token ``linear_s``, its attention ``quadratic_s``: the plain layout's for every candidate
  (the engine computes a token alike whichever connector serves the rest; an offload layout's fit,
  over fewer recomputed tokens, is the noisier: 0 a token and 65% of the plain one's attention term in
  a 2026-12-02 calibration, which ranked every offload candidate above ``none``);
- an offload candidate's tiers, DRAM then disk, its sizes in chunks (``Candidate.blocks``), each
  load at the connector's measured seconds per token (as a bandwidth: free with no figure), not
  overlapped with the step: the figure is what a request's TTFT paid beyond its recompute, overlap
  included; stores free (the calibrated path's per-request cost holds them); a lower tier's hit
  copied up as the connector does (``readmit``);
- the offload path's per-request cost (``Layout.request_s``): its fixed cost over the plain one's,
  plus ``chunk_s`` x the trace's mean whole chunks a prompt at the candidate's chunk;
- its gate: a prompt gate sends shorter prompts down the plain path, a load gate recomputes a
  request's tier tokens when fewer than it (the lookup still paid): ``Layout.gate_*``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from kvstack.planning.predict.served_ttft import FloatArray, ServedCosts
from kvstack.planning.predict.sim_layouts import FREE_BW_BYTES_PER_S, served_step_costs
from kvstack.planning.predict.simulator import (
    Layout,
    SchedulerLimits,
    SimResult,
    TierSpec,
    from_trace,
    simulate,
)
from kvstack.traces.mooncake import TraceRow
from kvstack.tune.knobs import CONNECTORS, offloads
from kvstack.tune.options import Objective
from kvstack.tune.space import Candidate, Limits

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
REPLAY_IN_FLIGHT = 1  # tune's replays send one request at a time (tune.py _replay_setup)


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


@dataclass(frozen=True)
class Sent:
    """How tune's replay sends the trace (see the module's docstring); ``in_flight`` None: every
    request on its timestamp, as many in flight as the engine runs."""

    time_scale: float = 0.0
    max_output_tokens: int | None = None
    in_flight: int | None = REPLAY_IN_FLIGHT


@dataclass(frozen=True)
class Simulated:
    """One candidate's requests as the simulator served them, arrays over the trace's rows."""

    ttft: FloatArray  # timed from when each was sent; NaN: the engine could never serve it
    engine: IntArray  # prompt tokens the engine's pool held
    dram: IntArray
    disk: IntArray
    gated: BoolArray  # its gate kept the request off the offload path


class SimTrace:
    """One trace's rows as the simulator's requests, on one engine (``limits``: its block, pool and
    scheduler); each candidate simulated on demand, once per distinct layout."""

    def __init__(
        self, rows: Sequence[TraceRow], *, block_tokens: int, limits: Limits, sent: Sent = Sent()
    ) -> None:
        self.limits, self.sent = limits, sent
        self.requests = from_trace(
            rows, trace_block_tokens=block_tokens, max_output_tokens=sent.max_output_tokens,
            time_scale=sent.time_scale,
        )  # fmt: skip
        if len(self.requests) != len(rows):
            raise ValueError("every row needs a prompt token in a listed block")
        self.lengths: IntArray = np.array([r.prompt_tokens for r in self.requests], dtype=np.int64)
        # A served engine holds any request it accepts (vLLM refuses to start with fewer blocks than
        # its longest one needs): a pool given smaller (a stand-in's) is taken at least that large.
        longest = max((r.prompt_tokens + r.output_tokens for r in self.requests), default=1)
        self.longest_blocks = -(-longest // limits.engine_block_tokens)
        self._done: dict[Layout, Simulated] = {}

    @property
    def n(self) -> int:
        return len(self.requests)

    def mean_chunks(self, chunk: int) -> float:
        """A prompt's whole chunks, on average over the trace (the offload path's lookups)."""
        return float((self.lengths // max(1, chunk)).mean()) if self.n else 0.0

    def layout(self, c: Candidate, costs: Costs) -> Layout:
        """``c`` as the simulator's layout (see the module's docstring)."""
        lim, plain, own = self.limits, costs.plain, costs.of(c.connector)
        step = plain.forward_step()
        scheduler = SchedulerLimits.of_engine(
            batched_tokens=lim.batched_tokens,
            max_seqs=lim.max_seqs,
            block_tokens=lim.engine_block_tokens,
            pool_tokens=lim.engine_pool_tokens,
            min_pool_blocks=self.longest_blocks,
        )
        # The engine's recompute, whatever the connector (the module's docstring).
        step_costs = served_step_costs(step, plain, own.source)
        outside_s = step.outside_s
        if not c.offloads:
            return Layout(name=c.label, costs=step_costs, limits=scheduler, outside_s=outside_s)
        dram, disk = c.blocks(lim.bytes_per_token)
        tiers = [self._tier("cpu", dram, c.chunk_tokens, own)]
        if c.disk_bytes:
            tiers.append(self._tier("disk", disk, c.chunk_tokens, own))
        gate = c.gate
        layout = Layout(
            name=c.label,
            costs=step_costs,
            limits=scheduler,
            tiers=tuple(tiers),
            readmit=CONNECTORS[c.connector].readmit,
            request_s=max(0.0, own.fixed_s - plain.fixed_s) + own.chunk_s * self.mean_chunks(c.chunk_tokens),
            gate_prompt_tokens=gate.tokens if gate is not None and gate.kind == "prompt" else 0,
            gate_load_tokens=gate.tokens if gate is not None and gate.kind == "load" else 0,
            outside_s=outside_s,
        )
        return layout

    def _tier(self, kind: str, chunks: int, chunk: int, costs: ServedCosts) -> TierSpec:
        bpt = self.limits.bytes_per_token
        per_token = costs.fetch_per_token(kind) or 0.0
        return TierSpec(
            kind=kind,  # type: ignore[arg-type]  # an offload tier's kind: cpu or disk
            capacity_chunks=chunks,
            chunk_tokens=chunk,
            bytes_per_token=bpt,
            load_bw_bytes_per_s=bpt / per_token if per_token > 0 else FREE_BW_BYTES_PER_S,
            store_bw_bytes_per_s=FREE_BW_BYTES_PER_S,
        )

    def simulate(self, c: Candidate, costs: Costs) -> Simulated:
        """``c`` served the trace as the replay sends it."""
        layout = self.layout(c, costs)
        found = self._done.get(layout)
        if found is None:
            found = self._done[layout] = _simulated(
                simulate(self.requests, layout, clients=self.sent.in_flight)
            )
        return found


def _simulated(result: SimResult) -> Simulated:
    """Per request: its TTFT (NaN: rejected) and where its prompt came from."""
    rs = result.requests
    ttft = np.array([np.nan if r.ttft_s is None else r.ttft_s for r in rs], dtype=np.float64)
    kinds = result.tier_kinds

    def tier(kind: str) -> IntArray:
        if kind not in kinds:
            return np.zeros(len(rs), dtype=np.int64)
        k = kinds.index(kind)
        return np.array([r.tier_hit_tokens[k] for r in rs], dtype=np.int64)

    return Simulated(
        ttft=ttft,
        engine=np.array([r.pool_hit_tokens for r in rs], dtype=np.int64),
        dram=tier("cpu"),
        disk=tier("disk"),
        gated=np.array([r.gated for r in rs], dtype=np.bool_),
    )


def predict(
    trace: SimTrace, candidate: Candidate, costs: Costs, slo_s: float | None = None
) -> CandidatePrediction:
    """``candidate``'s predicted TTFT over the trace and its prompt tokens by source (and the share
    of requests within ``slo_s``, when given: a request the engine could not serve misses it)."""
    s = trace.simulate(candidate, costs)
    ok = s.ttft[~np.isnan(s.ttft)]
    engine, dram, disk = int(s.engine.sum()), int(s.dram.sum()), int(s.disk.sum())
    total = int(trace.lengths.sum())

    def pct(q: float) -> float:
        return float(np.percentile(ok, q)) if len(ok) else float("inf")

    return CandidatePrediction(
        candidate=candidate,
        p50_s=pct(50),
        p90_s=pct(90),
        mean_s=float(ok.mean()) if len(ok) else float("inf"),
        tokens={
            "recomputed": total - engine - dram - disk,
            "engine_cache": engine,
            "dram": dram,
            "disk": disk,
        },
        gated=int(s.gated.sum()),
        under_slo=float((np.nan_to_num(s.ttft, nan=np.inf) <= slo_s).mean())
        if slo_s is not None and trace.n
        else None,
    )


def on_engine(limits: Limits, block_tokens: int, pool_tokens: int) -> Limits:
    """``limits`` on the engine as served (its block and pool, as the replay reports them)."""
    return replace(limits, engine_block_tokens=block_tokens, engine_pool_tokens=pool_tokens)
