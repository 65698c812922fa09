"""planning/predict/sim_layouts.py: the plan's layouts as the simulator's, each figure from the plan
(its TTFT model's costs, its pool and tiers, the engine's scheduler defaults, the connector's
overlap)."""

from __future__ import annotations

import pytest

from kvstack.connectors import spec_of
from kvstack.connectors.engines import VLLM_SCHEDULER, engine_spec
from kvstack.planning.predict.capacity_schema import LayoutCosts
from kvstack.planning.predict.plan_capacity import plan_costs
from kvstack.planning.predict.sim_layouts import (
    FREE_BW_BYTES_PER_S,
    chunk_tokens,
    device_bytes_of,
    scheduler_limits,
    sim_layouts,
)
from kvstack.planning.schema import Plan
from tests.unit.planning.helpers import plan_for, roomy_cpu_host

GIB = 1 << 30


@pytest.fixture(scope="module")
def h100() -> Plan:
    return plan_for("h100-sxm", "llama-3.1-8b", context=8192, offload="lmcache-mp")


def _costs(plan: Plan) -> list[LayoutCosts]:
    costs = plan_costs(plan)
    assert costs is not None
    return costs


def test_each_step_cost_is_the_plans(h100: Plan) -> None:
    costs = _costs(h100)
    layouts, _ = sim_layouts(h100, costs, 80 * GIB)
    assert [lay.name for lay in layouts] == [c.name for c in costs]
    pool = h100.engine_pool
    assert pool is not None and pool.read_bw_bytes_per_s
    for lay, c in zip(layouts, costs, strict=True):
        assert lay.costs.fixed_s == c.step_s
        assert lay.costs.prefill_s_per_token == c.linear_s == lay.costs.decode_s_per_seq
        assert lay.costs.prefill_attn_s_per_token2 == c.quadratic_s
        # A decode reads its KV from HBM: bytes a token over the pool's read bandwidth (HBM x TP).
        assert lay.costs.decode_s_per_kv_token == pytest.approx(c.bytes_per_token / pool.read_bw_bytes_per_s)
        assert "roofline" in lay.costs.source
        assert lay.request_s == pytest.approx(c.fixed_s - c.step_s) and lay.outside_s == 0
    assert layouts[0].request_s == 0 and layouts[0].tiers == ()


def test_the_tiers_are_the_plans_in_chunks_with_the_connectors_overlap(h100: Plan) -> None:
    costs = _costs(h100)
    layouts, _ = sim_layouts(h100, costs, 80 * GIB)
    deepest, c = layouts[-1], costs[-1]
    chunk = chunk_tokens(h100, 16)
    assert chunk == h100.cache.chunk_size  # 256: whole 16-token blocks already
    spec = spec_of("lmcache-mp")
    assert deepest.readmit is spec.readmits_lower_hits is False
    assert [t.kind for t in deepest.tiers] == [f.kind for f in c.fetch]
    for tier, f, planned in zip(deepest.tiers, c.fetch, h100.offload_tiers, strict=True):
        assert tier.capacity_chunks == planned.tokens // chunk and tier.chunk_tokens == chunk
        assert tier.load_bw_bytes_per_s == f.bw_bytes_per_s == tier.store_bw_bytes_per_s
        assert tier.load_latency_s == f.latency_s and tier.bytes_per_token == c.bytes_per_token
        # LMCache's server loads and stores off the step.
        assert tier.overlapped and tier.stores_overlap


def test_lmcache_in_process_loads_inside_the_step() -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b", context=8192, offload="lmcache")
    layouts, _ = sim_layouts(plan, _costs(plan), 80 * GIB)
    overlap = spec_of("lmcache").overlap
    for tier in layouts[-1].tiers:
        assert not tier.overlapped  # retrieved before the forward
        assert tier.stores_overlap == (tier.kind in overlap.stores) == (tier.kind != "cpu")


def test_a_tier_without_a_path_is_served_free(h100: Plan) -> None:
    c = _costs(h100)[1]
    free = LayoutCosts(**{**c.__dict__, "fetch": ()})
    layouts, _ = sim_layouts(h100, [free], 80 * GIB)
    (tier,) = layouts[0].tiers
    assert tier.kind == "cpu" and tier.load_bw_bytes_per_s == FREE_BW_BYTES_PER_S


@pytest.mark.parametrize(
    ("memory", "name", "expected"),
    [
        (80 * GIB, "NVIDIA H100 80GB HBM3", (8192, 1024)),
        (80 * GIB, "NVIDIA A100-SXM4-80GB", (2048, 256)),  # vLLM keeps A100s at the small defaults
        (141 * GIB, "NVIDIA H200", (8192, 1024)),
        (180 * GIB, "NVIDIA B200", (16384, 1024)),
        (48 * GIB, "NVIDIA L40S", (2048, 256)),
        (None, "", (2048, 256)),
    ],
)
def test_vllms_scheduler_defaults_follow_the_gpu(
    memory: int | None, name: str, expected: tuple[int, int]
) -> None:
    assert VLLM_SCHEDULER.limits("cuda", memory, name, 1) == expected


def test_the_cpu_defaults_scale_with_the_world_size() -> None:
    assert VLLM_SCHEDULER.limits("cpu", None, None, 2) == (4096, 256)
    assert engine_spec("vllm").scheduler is VLLM_SCHEDULER
    assert engine_spec("sglang").scheduler.limits("cuda", 80 * GIB, "h100", 1) == (8192, 1024)


def test_the_limits_are_the_engines_and_the_pool_in_its_blocks(h100: Plan) -> None:
    limits, why = scheduler_limits(h100, 80 * GIB)
    pool = h100.engine_pool
    assert pool is not None
    assert (limits.max_num_batched_tokens, limits.max_num_seqs, limits.block_tokens) == (8192, 1024, 16)
    assert limits.pool_blocks == pool.tokens // 16
    assert limits.chunked_prefill and limits.prefix_caching == h100.cache.prefix_caching
    assert "arg_utils.py" in why and "80.0 GiB a GPU" in why
    # Without the snapshot's figure: at least the weights and the pool over the utilization.
    est, how = device_bytes_of(h100, None)
    expected = h100.model.weight_bytes / h100.parallel.tensor_parallel_size + pool.size_bytes_per_rank
    assert est == int(expected / h100.cache.gpu_memory_utilization) and how.startswith("at least")


def test_the_cpu_platform_reads_no_kv_from_hbm() -> None:
    plan = plan_for(roomy_cpu_host(), "llama-3.1-8b", context=8192, offload="lmcache-mp")
    limits, why = scheduler_limits(plan)
    assert (limits.max_num_batched_tokens, limits.block_tokens) == (
        2048 * plan.parallel.tensor_parallel_size,
        128,
    )
    assert "GPU" not in why
    assert chunk_tokens(plan, 128) % 128 == 0
