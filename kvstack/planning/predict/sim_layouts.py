"""The plan's layouts by depth (the engine's pool alone, then one offload tier more each) as the
step-level simulator's ``Layout``s (planning/predict/simulator), from each layout's ``LayoutCosts``
(the plan's TTFT model, or costs measured on the served engine). Pure.

The mapping:

- a step's ``fixed_s`` is the forward step (``LayoutCosts.step_s``: every weight read once);
- a prefill token costs ``linear_s``, its attention ``quadratic_s`` (per token^2);
- a decoding sequence costs ``decode_seq_s`` a step where a calibration measured decode, else
  ``linear_s`` (a decoded token's linear compute) and, on CUDA, ``bytes_per_token / the pool's read
  bandwidth`` for each token of KV it attends to (HBM x TP, planning/cuda_plan.py: a memory-bound
  decode reads its KV; a roofline estimate, not measured); none on the CPU platform;
- ``Layout.outside_s``, what a request spends outside the engine's steps (HTTP, tokenization,
  scheduling: a calibration's whole-prompt hit and miss intercept beyond the forward step), is the
  pool-alone layout's ``fixed_s - step_s`` (0 with the plan's TTFT model, whose fixed cost is the
  step), in every layout's TTFT; ``Layout.request_s``, the offload path's own cost for each request
  it admits (its lookup, transfer setup), the rest of an offload layout's ``fixed_s - step_s``;
- the scheduler: the engine's API-server defaults for the device (connectors/engines.py
  ``SchedulerDefaults``: vLLM's by GPU memory and world size), its KV block per platform, the pool's
  tokens in those blocks, chunked prefill on, prefix caching as the plan has it;
- each offload tier: its tokens in chunks of the plan's chunk size (rounded up to whole engine
  blocks), the KV's bytes per token, its fetch path's bandwidth and latency for loads and its
  bandwidth for stores (a tier measured at no cost a token, which has no path, at a bandwidth that
  makes it free); whether its loads and stores overlap the step, and whether a lower tier's
  hit is readmitted above, are the connector's (connectors/spec.py ``TransferOverlap``,
  ``readmits_lower_hits``).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstack.connectors import spec_of
from kvstack.connectors.engines import engine_spec
from kvstack.planning.predict.capacity_schema import FetchCost, LayoutCosts
from kvstack.planning.predict.served_ttft import ForwardStep, ServedCosts
from kvstack.planning.predict.simulator import Layout, SchedulerLimits, StepCosts, TierSpec
from kvstack.planning.schema import Plan
from kvstack.units import fmt_bytes


def device_bytes_of(plan: Plan, probed: int | None) -> tuple[int | None, str]:
    """(one GPU's memory, what it comes from): the snapshot's where given, else at least what the
    plan puts on it (its weights and pool over the memory utilization); None on the CPU platform."""
    if plan.platform != "cuda":
        return None, ""
    if probed:
        return probed, f"{fmt_bytes(probed)} a GPU"
    pool = plan.engine_pool
    util = plan.cache.gpu_memory_utilization
    if pool is None or util <= 0:
        return None, "GPU memory unknown"
    tp = max(1, plan.parallel.tensor_parallel_size)
    bytes_ = int((plan.model.weight_bytes / tp + pool.size_bytes_per_rank) / util)
    return bytes_, f"at least {fmt_bytes(bytes_)} a GPU (the plan's weights and pool over its utilization)"


def scheduler_limits(plan: Plan, device_bytes: int | None = None) -> tuple[SchedulerLimits, str]:
    """(the engine's scheduler and pool as the simulator takes them, the sentence saying where from)."""
    defaults = engine_spec(plan.engine).scheduler
    memory, memory_how = device_bytes_of(plan, device_bytes)
    world = max(1, plan.parallel.tensor_parallel_size)
    tokens, seqs = defaults.limits(plan.platform, memory, plan.gpu_name, world)
    block = defaults.block_tokens[plan.platform]
    pool = plan.engine_pool
    limits = SchedulerLimits.of_engine(
        batched_tokens=tokens,
        max_seqs=seqs,
        block_tokens=block,
        pool_tokens=pool.tokens if pool is not None else 0,
        chunked_prefill=defaults.chunked_prefill,
        prefix_caching=plan.cache.prefix_caching,
    )
    on = f" on {memory_how}" if memory_how else ""
    why = (
        f"{tokens:,} tokens a step, {seqs:,} sequences, {block}-token blocks, a pool of "
        f"{limits.pool_blocks:,} blocks{on}: {defaults.source}"
    )
    return limits, why


def chunk_tokens(plan: Plan, block_tokens: int) -> int:
    """The tiers' chunk: the plan's chunk size in whole engine blocks (at least one)."""
    chunk = max(plan.cache.chunk_size, block_tokens)
    return -(-chunk // block_tokens) * block_tokens


def step_costs(plan: Plan, costs: LayoutCosts) -> StepCosts:
    """A forward step's costs on ``costs``' layout (see the module's docstring)."""
    pool = plan.engine_pool
    kv_s = 0.0
    source = costs.prefill_source
    if plan.platform == "cuda" and pool is not None and pool.read_bw_bytes_per_s:
        kv_s = costs.bytes_per_token / pool.read_bw_bytes_per_s
        source += "; decode's KV read: estimate, roofline at the pool's read bandwidth"
    return _step(costs.step_s, costs.linear_s, costs.quadratic_s, costs.decode_seq_s, source, kv_s)


def served_step_costs(step: ForwardStep, costs: ServedCosts, source: str) -> StepCosts:
    """A forward step's costs from a served calibration with no plan's pool or bandwidths (bench
    --sweep --url, tune): ``step`` (``ServedCosts.forward_step``) and ``costs``' recompute."""
    return _step(step.fixed_s, costs.linear_s, costs.quadratic_s, step.per_seq_s, source)


def _step(
    fixed_s: float,
    linear_s: float,
    quadratic_s: float,
    per_seq_s: float | None,
    source: str,
    kv_s: float = 0.0,
) -> StepCosts:
    """A decoding sequence at the prefill token's cost where decode was not measured (``per_seq_s``
    None)."""
    return StepCosts(
        fixed_s=fixed_s,
        prefill_s_per_token=linear_s,
        prefill_attn_s_per_token2=quadratic_s,
        decode_s_per_seq=linear_s if per_seq_s is None else per_seq_s,
        decode_s_per_kv_token=kv_s,
        source=source,
    )


FREE_BW_BYTES_PER_S = 1e18  # a tier measured at no cost a token (served_capacity.py): its hits free


def tier_specs(plan: Plan, costs: LayoutCosts, chunk: int) -> tuple[TierSpec, ...]:
    """``costs``' offload tiers, fastest first, as the simulator's: each of its levels below the pool,
    at its fetch path (none: measured free, at ``FREE_BW_BYTES_PER_S``)."""
    overlap = spec_of(plan.transfer.connector).overlap
    sizes: dict[str, int] = {t.kind: t.tokens for t in plan.offload_tiers}
    paths = {f.kind: f for f in costs.fetch}
    out = []
    for kind in costs.levels[1:]:
        f = paths.get(kind, FetchCost(kind, FREE_BW_BYTES_PER_S))
        out.append(
            TierSpec(
                kind=kind,  # type: ignore[arg-type]  # an offload tier's kind: cpu, disk or remote
                capacity_chunks=sizes.get(kind, 0) // chunk,
                chunk_tokens=chunk,
                bytes_per_token=costs.bytes_per_token,
                load_bw_bytes_per_s=f.bw_bytes_per_s,
                load_latency_s=f.latency_s,
                store_bw_bytes_per_s=f.bw_bytes_per_s,
                overlapped=kind in overlap.loads,
                load_waits=overlap.load_waits and kind in overlap.loads,
                store_overlapped=kind in overlap.stores,
            )
        )
    return tuple(out)


def sim_layouts(
    plan: Plan, layouts: Sequence[LayoutCosts], device_bytes: int | None = None
) -> tuple[list[Layout], str]:
    """(``layouts`` as the simulator's, by depth; what their scheduler limits come from)."""
    limits, why = scheduler_limits(plan, device_bytes)
    chunk = chunk_tokens(plan, limits.block_tokens)
    readmit = spec_of(plan.transfer.connector).readmits_lower_hits
    outside = max(0.0, layouts[0].fixed_s - layouts[0].step_s) if layouts else 0.0
    out = [
        Layout(
            name=c.name,
            costs=step_costs(plan, c),
            limits=limits,
            tiers=tier_specs(plan, c, chunk),
            readmit=readmit,
            request_s=max(0.0, c.fixed_s - c.step_s - outside),
            outside_s=outside,
        )
        for c in layouts
    ]
    return out, why
