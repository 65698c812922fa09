"""KV-cache dtype by engine and GPU compute capability.

vLLM: ``fp8`` runs natively on CC 8.9 (Ada), 9.x (Hopper), 10.x and 12.x (Blackwell); ``nvfp4`` only on
CC 10.x (FlashInfer trtllm-gen, vllm PR #40177), not 12.x; Ampere keeps the model dtype (FP8 there only
through slower FlashInfer/Triton paths). SGLang: ``fp8_e4m3``; ``nvfp4`` on CC 10.x/12.0 in versions
that list it (``--kv-cache-dtype`` choices in sglang 0.5.20's --help include nvfp4; sglang PR #21601).
Values are each engine's own spelling: vLLM's CacheDType literal (vllm/config/cache.py) and SGLang's
``--kv-cache-dtype`` choices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvstack.connectors.engines import ENGINE_SPECS, SGLANG, EngineSpec, engine_spec
from kvstack.errors import InputError, UnsupportedError
from kvstack.hardware.gpu_specs import FP8_MIN_CC, fp8_native, nvfp4_native
from kvstack.model.geometry import ModelGeometry
from kvstack.releases import at_least

CC = tuple[int, int]

# nvfp4: 4-bit values plus one fp8 scale per 16 values = 4.5 bits.
_BYTES = {"bfloat16": 2.0, "bf16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}
_BYTES["nvfp4"] = 0.5625

ENGINE_KV_DTYPES: dict[str, tuple[str, ...]] = {s.name: s.kv_dtypes for s in ENGINE_SPECS.values()}
FP8_VALUES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2"})
SGLANG_NVFP4_MIN = SGLANG.nvfp4_min_version or ""
ACCURACY_WARNING = (
    "{kind} KV with default scales (1.0) can cost accuracy: compare against --kv-dtype auto on your own evals"
)


@dataclass(frozen=True)
class DtypeChoice:
    value: str  # the engine's own value for --kv-cache-dtype
    bytes_per_element: float
    reason: str
    warnings: tuple[str, ...] = ()


def dtype_bytes(value: str, model: ModelGeometry) -> float:
    """Bytes per KV element for an engine value; ``auto`` is the model's own dtype."""
    return float(model.dtype_bytes) if value == "auto" else _BYTES[value]


def _cc_text(cc: CC | None) -> str:
    return "no GPU" if cc is None else f"CC {cc[0]}.{cc[1]}"


def _warnings(value: str) -> tuple[str, ...]:
    if value in FP8_VALUES:
        return (ACCURACY_WARNING.format(kind="FP8"),)
    if value == "nvfp4":
        return (ACCURACY_WARNING.format(kind="FP4 (NVFP4)") + "; FP4 loses more than FP8",)
    return ()


def sglang_has_nvfp4(version: str | None) -> bool:
    return _has_nvfp4(SGLANG, version)


def _has_nvfp4(spec: EngineSpec, version: str | None) -> bool:
    return spec.nvfp4_min_version is None or at_least(version, spec.nvfp4_min_version)


def check_override(
    engine: str, value: str, cc: CC | None, model: ModelGeometry, sglang_version: str | None
) -> DtypeChoice:
    """Validate ``--kv-dtype``: an unknown value is bad input; one this GPU cannot run is unsupported."""
    spec = engine_spec(engine)
    choices = spec.kv_dtypes
    if value not in choices:
        hint = f"{spec.title} spells it {spec.fp8_kv}" if value == "fp8" else None
        raise InputError(
            f"unknown --kv-dtype {value!r} for {engine}; choose one of: {', '.join(choices)}",
            hint=hint or f"e.g. --kv-dtype {choices[0]}",
        )
    if value in FP8_VALUES:
        if cc is None:
            raise UnsupportedError(
                f"--kv-dtype {value} needs a CUDA GPU; no GPU is visible", hint="use --kv-dtype auto"
            )
        if cc < FP8_MIN_CC:
            raise UnsupportedError(
                f"--kv-dtype {value} needs CC 8.0 or newer; this GPU is {_cc_text(cc)}",
                hint="use --kv-dtype auto",
            )
        slow = not fp8_native(cc)
        reason = f"--kv-dtype {value} as asked ({_cc_text(cc)})"
        extra = (
            (f"{_cc_text(cc)} has no FP8 tensor cores: FP8 KV runs through slower backends",) if slow else ()
        )
        return DtypeChoice(value, _BYTES[value], reason, _warnings(value) + extra)
    if value == "nvfp4":
        if not nvfp4_native(engine, cc):
            raise UnsupportedError(
                f"{engine} runs NVFP4 KV only on {spec.nvfp4_where}; this machine has {_cc_text(cc)}",
                hint=f"use --kv-dtype {spec.fp8_kv}",
            )
        if model.attention == "mla":
            raise UnsupportedError(
                f"NVFP4 KV does not cover MLA models like {model.name} in {engine}",
                hint="use FP8 KV for MLA models",
            )
        if not _has_nvfp4(spec, sglang_version):
            need = spec.nvfp4_min_version
            raise UnsupportedError(
                f"{spec.title} {sglang_version or '(not installed)'} has no nvfp4 KV cache (needs >= {need})",
                hint=f"pip install '{spec.name}>={need}' or use --kv-dtype {spec.fp8_kv}",
            )
        return DtypeChoice(
            value, _BYTES[value], f"--kv-dtype nvfp4 as asked ({_cc_text(cc)})", _warnings(value)
        )
    reason = f"--kv-dtype {value} as asked: KV at {'the model dtype' if value == 'auto' else value}"
    return DtypeChoice(value, dtype_bytes(value, model), reason)


def choose_kv_dtype(
    engine: str,
    cc: CC | None,
    model: ModelGeometry,
    override: str | None,
    fits_gpu: Callable[[float], bool],
    sglang_version: str | None = None,
) -> DtypeChoice:
    """The KV dtype for this engine and GPU. ``fits_gpu(bytes_per_element)`` says whether the
    working set fits the GPU pool at that element size (NVFP4 is chosen only when FP8 does not)."""
    if override is not None:
        return check_override(engine, override, cc, model, sglang_version)
    own = f"KV at the model dtype ({model.dtype})"
    if cc is None:
        return DtypeChoice("auto", dtype_bytes("auto", model), f"no GPU: {own}")
    if not fp8_native(cc):
        why = (
            "no FP8 tensor cores, FP8 KV would take slower paths" if cc >= FP8_MIN_CC else "no FP8 KV support"
        )
        return DtypeChoice("auto", dtype_bytes("auto", model), f"{_cc_text(cc)}: {why}; {own}")
    spec = engine_spec(engine)
    fp8 = spec.fp8_kv
    if nvfp4_native(engine, cc) and not fits_gpu(_BYTES[fp8]) and model.attention != "mla":
        if _has_nvfp4(spec, sglang_version):
            reason = (
                f"{_cc_text(cc)} runs NVFP4 KV natively and the working set does not fit the GPU pool "
                f"even at FP8: NVFP4 (0.5625 B/element) holds 1.78x the tokens of FP8"
            )
            return DtypeChoice("nvfp4", _BYTES["nvfp4"], reason, _warnings("nvfp4"))
        reason = (
            f"{_cc_text(cc)} could hold more at NVFP4 but {spec.title} {sglang_version or '(not installed)'} "
            f"predates it; {fp8} halves KV bytes against {model.dtype}"
        )
        return DtypeChoice(fp8, _BYTES[fp8], reason, _warnings(fp8))
    reason = f"{_cc_text(cc)} runs FP8 KV natively: {fp8} halves KV bytes against {model.dtype}"
    return DtypeChoice(fp8, _BYTES[fp8], reason, _warnings(fp8))
