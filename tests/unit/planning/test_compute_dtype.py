"""The compute dtype on each kind of CPU host (tests/fixtures/cpu) and on a GPU: bf16 where the CPU
computes it, float32 where it would emulate it, and the KV, its bytes and the engine's --dtype
following from it."""

from __future__ import annotations

import pytest

from kvstack.errors import InputError
from kvstack.hardware.cpu import probe_cpu
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.planning.compute_dtype import choose_compute_dtype
from tests.unit.hardware.fixtures import FIXTURES

from .helpers import catalog_model, plan_for, roomy_cpu_host


def cpu_host(tree: str) -> HardwareSnapshot:
    snap = roomy_cpu_host(128)
    snap.cpu = probe_cpu(FIXTURES / "cpu" / tree, measure=False)
    return snap


@pytest.mark.parametrize(
    ("tree", "bf16", "fp16"),
    [
        ("epyc-avx512-bf16", "bfloat16", "float32"),  # recorded here: BF16, no FP16 arithmetic
        ("epyc-avx2", "float32", "float32"),
        ("xeon-avx512", "float32", "float32"),  # AVX-512F alone: bf16 still emulated
        ("xeon-amx", "bfloat16", "float16"),
    ],
)
def test_a_16_bit_model_computes_in_its_dtype_only_where_the_cpu_has_that_arithmetic(
    tree: str, bf16: str, fp16: str
) -> None:
    host = cpu_host(tree)
    llama = catalog_model("llama-3.1-8b")
    assert llama.dtype == "bfloat16"
    as_fp16 = llama.model_copy(update={"dtype": "float16"})
    chosen = choose_compute_dtype(host, llama, None)
    assert (chosen.value, choose_compute_dtype(host, as_fp16, None).value) == (bf16, fp16)
    assert host.cpu is not None and host.cpu.model is not None and host.cpu.model in chosen.reason


def test_an_avx2_plan_holds_float32_kv_and_starts_the_engine_in_it() -> None:
    host, bf16_host = cpu_host("epyc-avx2"), cpu_host("epyc-avx512-bf16")
    plan, same = (
        plan_for(host, "llama-3.1-8b", context=4096),
        plan_for(bf16_host, "llama-3.1-8b", context=4096),
    )
    assert plan.model.geometry.dtype == "float32" and plan.model.geometry.checkpoint_dtype == "bfloat16"
    assert (
        plan.cache.kv_cache_dtype == "auto"
        and plan.cache.kv_bytes_per_token == 2 * same.cache.kv_bytes_per_token
    )
    assert plan.model.weight_bytes == 2 * same.model.weight_bytes  # unquantized weights are cast too
    assert plan.dtype_args() == ["--dtype", "float32"] and same.dtype_args() == []
    assert "AMD EPYC 7B12" in plan.reasons["dtype"] and "float32" in plan.reasons["dtype"]
    assert list(plan.reasons).index("dtype") == list(plan.reasons).index("platform") + 1
    assert same.model.geometry.dtype == "bfloat16" and "natively" in same.reasons["dtype"]


def test_a_gpu_plan_keeps_the_models_dtype_without_a_reason_for_it() -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b")
    assert plan.model.geometry.dtype == "bfloat16" and plan.dtype_args() == [] and "dtype" not in plan.reasons


def test_dtype_among_the_engine_arguments_is_the_plans() -> None:
    plan = plan_for(cpu_host("epyc-avx512-bf16"), "llama-3.1-8b", context=4096, dtype="float32")
    assert (
        plan.model.geometry.dtype == "float32"
        and "--dtype float32 among the engine arguments" in plan.reasons["dtype"]
    )
    gpu = plan_for("h100-sxm", "llama-3.1-8b", dtype="half")
    assert gpu.model.geometry.dtype == "float16" and gpu.dtype_args() == ["--dtype", "float16"]
    auto = plan_for(cpu_host("epyc-avx2"), "llama-3.1-8b", context=4096, dtype="auto")
    # auto: the checkpoint's, as asked
    assert auto.model.geometry.dtype == "bfloat16" and auto.dtype_args() == []
    with pytest.raises(InputError, match="--dtype 'int8'"):
        plan_for("no-gpu", "llama-3.1-8b", dtype="int8")


def test_a_snapshot_without_the_cpu_keeps_the_models_dtype_and_says_why() -> None:
    plan = plan_for("no-gpu", "llama-3.1-8b", context=4096)
    assert plan.model.geometry.dtype == "bfloat16" and "records no CPU" in plan.reasons["dtype"]


def test_computed_in_scales_the_kv_and_is_undone_by_the_checkpoints_dtype() -> None:
    gemma = catalog_model("gpt-oss-20b")
    f32 = gemma.computed_in("float32")
    assert f32.kv_bytes_per_token == 2 * gemma.kv_bytes_per_token
    assert f32.sliding_kv_bytes_per_sequence == 2 * gemma.sliding_kv_bytes_per_sequence
    assert f32.computed_in("float32") is f32
    back = f32.computed_in("bfloat16")
    assert back.kv_bytes_per_token == gemma.kv_bytes_per_token and back.checkpoint_dtype is None
    assert "checkpoint_dtype" not in gemma.model_dump() and f32.model_dump()["checkpoint_dtype"] == "bfloat16"


def test_computed_in_float32_keeps_the_checkpoints_size_and_doubles_the_weights_held() -> None:
    stored = catalog_model("llama-3.1-8b").with_checkpoint_bytes(16_060_522_496)
    f32 = stored.computed_in("float32")
    # The plan reports the files as stored (serve's offline check compares it with them); the engine
    # holds the weights cast to float32, twice the bytes.
    assert f32.checkpoint_bytes == 16_060_522_496
    assert f32.weight_bytes == 2 * stored.weight_bytes == 2 * 16_060_522_496
    assert f32.computed_in("bfloat16").weight_bytes == 16_060_522_496
