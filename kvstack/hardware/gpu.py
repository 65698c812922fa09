"""GPUs through NVML: one ``GpuInfo`` per device, each unknown fact with its reason."""

from __future__ import annotations

from kvstack.hardware import nvml
from kvstack.hardware.gpu_specs import fp8_native, nvfp4_native
from kvstack.hardware.nvml import NOT_SUPPORTED, DeviceField, NvmlBackend, query
from kvstack.hardware.snapshot import GpuInfo

# Marketing architecture by compute capability major (minor where it splits a family).
_ARCH_BY_CC: dict[tuple[int, int], str] = {
    (7, 0): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere",
    (8, 6): "Ampere",
    (8, 7): "Ampere",
    (8, 9): "Ada",
    (9, 0): "Hopper",
    (10, 0): "Blackwell",
    (10, 3): "Blackwell",
    (11, 0): "Blackwell",
    (12, 0): "Blackwell",
    (12, 1): "Blackwell",
}


def architecture(cc: tuple[int, int] | None) -> str | None:
    if cc is None:
        return None
    return _ARCH_BY_CC.get(cc) or _ARCH_BY_CC.get((cc[0], 0))


def kv_dtypes(cc: tuple[int, int] | None) -> list[str]:
    """Reduced-precision KV dtypes vLLM runs natively on this CC (hardware/gpu_specs.py's rule)."""
    out = ["FP8"] if fp8_native(cc) else []
    if nvfp4_native("vllm", cc):
        out.append("NVFP4")
    return out


def probe_gpus(backend: NvmlBackend | None = None) -> tuple[list[GpuInfo], str | None]:
    """All visible GPUs, or ``([], reason)`` when NVML is unavailable or sees none."""
    if backend is None:
        backend, reason = nvml.open_backend()
        if backend is None:
            return [], reason
    count, reason = query(backend.device_count)
    if count is None:
        return [], f"NVML cannot count devices: {reason}"
    if count == 0:
        return [], "NVML is running but sees no GPU (check CUDA_VISIBLE_DEVICES / container GPU access)"
    driver, driver_reason = query(backend.driver_version)
    gpus = [_device(backend, i, driver, driver_reason) for i in range(count)]
    return gpus, None


def _device(backend: NvmlBackend, index: int, driver: str | None, driver_reason: str | None) -> GpuInfo:
    unknown: dict[str, str] = {}

    def get(field: DeviceField) -> object:
        value, why = query(backend.device, index, field)
        if why is not None:
            unknown[field] = why
        return value

    name = get("name")
    memory = get("memory")
    cc = get("compute_capability")
    nvlink = get("nvlink_links")
    mig = get("mig_mode")
    # GPUs without NVLink or MIG answer "Not Supported": that is a fact (0 links, MIG off).
    if nvlink is None and unknown.get("nvlink_links") == NOT_SUPPORTED:
        nvlink = 0
        del unknown["nvlink_links"]
    if mig is None and unknown.get("mig_mode") == NOT_SUPPORTED:
        mig = 0
        del unknown["mig_mode"]
    if driver is None and driver_reason is not None:
        unknown["driver_version"] = driver_reason
    total, free = _pair(memory)
    if memory is not None and total is None:
        unknown["memory"] = f"unexpected NVML memory answer {memory!r}"
    return GpuInfo(
        index=index,
        name=name if isinstance(name, str) else "unknown GPU",
        uuid=_str(get("uuid")),
        compute_capability=_cc(cc),
        memory_total_bytes=total,
        memory_free_bytes=free,
        pcie_gen_current=_int(get("pcie_gen_current")),
        pcie_gen_max=_int(get("pcie_gen_max")),
        pcie_width_current=_int(get("pcie_width_current")),
        pcie_width_max=_int(get("pcie_width_max")),
        nvlink_links=_int(nvlink),
        mig_enabled=None if mig is None else bool(mig),
        driver_version=driver,
        unknown=unknown,
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _pair(value: object) -> tuple[int | None, int | None]:
    if isinstance(value, tuple) and len(value) == 2:
        return _int(value[0]), _int(value[1])
    return None, None


def _cc(value: object) -> tuple[int, int] | None:
    major, minor = _pair(value)
    return None if major is None or minor is None else (major, minor)
