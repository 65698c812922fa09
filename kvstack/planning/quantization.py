"""Whether the target GPU runs the checkpoint's quantized weights, by vLLM's own capability checks.

Each of vLLM's quantization configs says the oldest GPU it runs on (``get_min_capability``, read in
vllm 0.32's vllm/model_executor/layers/quantization/ and checked against the installed vLLM by
tests/integration/test_quant_capability.py). Below it vLLM refuses the checkpoint at start
(vllm/model_executor/model_loader/utils.py: "The quantization method ... is not supported for the
current GPU"), so kvstack refuses the plan first, naming the GPUs that can.
"""

from __future__ import annotations

from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import GpuInfo
from kvstack.model.geometry import ModelGeometry

CC = tuple[int, int]

# vLLM's method name -> (minimum compute capability, where vLLM says so).
VLLM_MIN_CC: dict[str, tuple[CC, str]] = {
    "fp8": ((7, 5), "fp8.py Fp8Config"),
    "mxfp4": ((8, 0), "mxfp4.py Mxfp4Config"),
    "gpt_oss_mxfp4": ((8, 0), "mxfp4.py GptOssMxfp4Config"),
    "modelopt": ((8, 0), "modelopt.py ModelOptFp8Config"),
    "modelopt_fp4": ((7, 5), "modelopt.py ModelOptNvFp4Config"),
    "modelopt_mxfp8": ((8, 0), "modelopt.py ModelOptMxFp8Config"),
    "modelopt_mixed": ((7, 5), "modelopt.py ModelOptMixedPrecisionConfig"),
    "compressed-tensors": ((7, 0), "compressed_tensors/compressed_tensors.py CompressedTensorsConfig"),
    "awq": ((7, 5), "auto_awq.py AutoAWQConfig"),
    "gptq": ((6, 0), "auto_gptq.py AutoGPTQConfig"),
}

# The data-center and workstation GPUs of each capability, oldest first (NVIDIA's CUDA GPU list).
GPUS_BY_CC: tuple[tuple[CC, str], ...] = (
    ((6, 0), "P100"),
    ((7, 0), "V100"),
    ((7, 5), "T4"),
    ((8, 0), "A100"),
    ((8, 6), "A10, A40"),
    ((8, 9), "L4, L40S"),
    ((9, 0), "H100, H200"),
    ((10, 0), "B200, B300"),
    ((12, 0), "RTX PRO 6000"),
)


def gpus_from(cc: CC) -> str:
    """The GPUs of capability ``cc`` or newer, in words."""
    return ", ".join(names for at, names in GPUS_BY_CC if at >= cc)


def weights_note(model: ModelGeometry, gpu: GpuInfo) -> str | None:
    """Why ``gpu`` runs ``model``'s quantized weights (a reason for the plan); None: unquantized, or a
    method kvstack has no capability for. Raises UnsupportedError where vLLM would refuse them."""
    method = model.quant_method
    if method is None or method not in VLLM_MIN_CC:
        return None
    need, where = VLLM_MIN_CC[method]
    cc = gpu.compute_capability
    if cc is not None and cc < need:
        raise UnsupportedError(
            f"vLLM runs {method} weights ({model.weight_dtype}) on CC {need[0]}.{need[1]} or newer "
            f"({where}); {gpu.name} is CC {cc[0]}.{cc[1]}",
            hint=f"plan for a GPU that runs them ({gpus_from(need)}) or use an unquantized checkpoint",
        )
    return f"{method} ({model.weight_dtype}): vLLM runs it from CC {need[0]}.{need[1]} ({where})"
