"""The one NVML seam: every GPU fact kvstack reads goes through an ``NvmlBackend``.

``pynvml`` (from nvidia-ml-py) is imported lazily and initialised once per process; a machine
without the driver answers fast with a reason instead of an exception. Tests pass a fake
backend that answers from given device facts (``StaticNvml``; the fixtures are assembled from
nvidia-smi figures and data sheets, not recorded from a driver), so everything above this module
runs the same with or without a GPU.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

# The per-device facts kvstack asks for; each maps to one NVML call (see ``PynvmlBackend``).
DeviceField = Literal[
    "name",
    "uuid",
    "memory",  # (total_bytes, free_bytes)
    "compute_capability",  # (major, minor)
    "pcie_gen_current",
    "pcie_gen_max",
    "pcie_width_current",
    "pcie_width_max",
    "nvlink_links",
    "mig_mode",  # current mode: 1 enabled, 0 disabled
]
DEVICE_FIELDS: tuple[DeviceField, ...] = (
    "name",
    "uuid",
    "memory",
    "compute_capability",
    "pcie_gen_current",
    "pcie_gen_max",
    "pcie_width_current",
    "pcie_width_max",
    "nvlink_links",
    "mig_mode",
)

NO_DRIVER = "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this machine"
NO_BINDINGS = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"

# NVML's own wording for NVML_ERROR_NOT_SUPPORTED (pynvml.NVMLError._errcode_to_string).
NOT_SUPPORTED = "Not Supported"

T = TypeVar("T")


class NvmlCallError(Exception):
    """One NVML call failed; ``reason`` is NVML's message (e.g. "Not Supported")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NvmlBackend(Protocol):
    """What the GPU probe needs from NVML. Methods raise ``NvmlCallError`` on failure."""

    def device_count(self) -> int: ...

    def driver_version(self) -> str: ...

    def device(self, index: int, field: DeviceField) -> object: ...


def query(call: Callable[..., T], *args: object) -> tuple[T | None, str | None]:
    """Run one backend call; an NVML failure becomes ``(None, reason)`` instead of raising."""
    try:
        return call(*args), None
    except NvmlCallError as exc:
        return None, exc.reason


class PynvmlBackend:
    """The real backend over ``pynvml``; values come back as plain Python types."""

    def __init__(self, pynvml: Any) -> None:
        self._nv = pynvml
        self._handles: dict[int, Any] = {}

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nv.NVMLError as exc:
            raise NvmlCallError(str(exc)) from exc

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._call(self._nv.nvmlDeviceGetHandleByIndex, index)
        return self._handles[index]

    def device_count(self) -> int:
        return int(self._call(self._nv.nvmlDeviceGetCount))

    def driver_version(self) -> str:
        return _text(self._call(self._nv.nvmlSystemGetDriverVersion))

    def device(self, index: int, field: DeviceField) -> object:
        nv, h = self._nv, self._handle(index)
        if field == "name":
            return _text(self._call(nv.nvmlDeviceGetName, h))
        if field == "uuid":
            return _text(self._call(nv.nvmlDeviceGetUUID, h))
        if field == "memory":
            mem = self._call(nv.nvmlDeviceGetMemoryInfo, h)
            return (int(mem.total), int(mem.free))
        if field == "compute_capability":
            major, minor = self._call(nv.nvmlDeviceGetCudaComputeCapability, h)
            return (int(major), int(minor))
        if field == "pcie_gen_current":
            return int(self._call(nv.nvmlDeviceGetCurrPcieLinkGeneration, h))
        if field == "pcie_gen_max":
            # Max of device AND system: a Gen5 GPU in a Gen4 slot reports 4 (NVML docs).
            return int(self._call(nv.nvmlDeviceGetMaxPcieLinkGeneration, h))
        if field == "pcie_width_current":
            return int(self._call(nv.nvmlDeviceGetCurrPcieLinkWidth, h))
        if field == "pcie_width_max":
            return int(self._call(nv.nvmlDeviceGetMaxPcieLinkWidth, h))
        if field == "nvlink_links":
            values = self._call(nv.nvmlDeviceGetFieldValues, h, [nv.NVML_FI_DEV_NVLINK_LINK_COUNT])
            if values[0].nvmlReturn != nv.NVML_SUCCESS:
                raise NvmlCallError(str(nv.NVMLError(values[0].nvmlReturn)))
            return int(values[0].value.uiVal)
        if field == "mig_mode":
            current, _pending = self._call(nv.nvmlDeviceGetMigMode, h)
            return int(current)
        raise ValueError(f"unknown NVML field {field!r}")


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class StaticNvml:
    """A backend answering from given device facts (tests, and machines without a GPU).

    Form: ``{"driver_version": "...", "devices": [{"name": ..., "memory": [total, free],
    ..., "errors": {"field": "Not Supported"}, "count": N}]}``; ``count`` repeats one device.
    """

    def __init__(self, facts: Mapping[str, Any]) -> None:
        self._driver = facts.get("driver_version")
        self._devices: list[Mapping[str, Any]] = []
        for dev in facts.get("devices", []):
            self._devices.extend([dev] * int(dev.get("count", 1)))
        self._init_error: str | None = facts.get("init_error")

    @classmethod
    def from_file(cls, path: Path) -> StaticNvml:
        return cls(json.loads(path.read_text(encoding="utf-8")))

    def _check(self) -> None:
        if self._init_error:
            raise NvmlCallError(self._init_error)

    def device_count(self) -> int:
        self._check()
        return len(self._devices)

    def driver_version(self) -> str:
        self._check()
        if self._driver is None:
            raise NvmlCallError(NOT_SUPPORTED)
        return str(self._driver)

    def device(self, index: int, field: DeviceField) -> object:
        self._check()
        dev = self._devices[index]
        errors: Mapping[str, str] = dev.get("errors", {})
        if field in errors:
            raise NvmlCallError(errors[field])
        if field not in dev:
            raise NvmlCallError(NOT_SUPPORTED)
        value = dev[field]
        return tuple(value) if isinstance(value, list) else value


# --- the process-wide real backend, initialised at most once ------------------------------

_opened: tuple[NvmlBackend | None, str | None] | None = None


def open_backend() -> tuple[NvmlBackend | None, str | None]:
    """The real NVML backend, or ``(None, reason)`` when NVML cannot start here."""
    global _opened
    if _opened is None:
        _opened = _open()
    return _opened


def _open() -> tuple[NvmlBackend | None, str | None]:
    try:
        import pynvml
    except ImportError:
        return None, NO_BINDINGS
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, _init_reason(pynvml, exc)
    except OSError as exc:  # a broken libnvidia-ml.so that dlopen finds but cannot load
        return None, f"cannot load the NVML library: {exc}"
    return PynvmlBackend(pynvml), None


def _init_reason(pynvml: Any, exc: Any) -> str:
    code = getattr(exc, "value", None)
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return NO_DRIVER
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded (is the kernel module installed? try nvidia-smi)"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return "no permission to open the NVIDIA devices (/dev/nvidia*)"
    return f"NVML failed to initialise: {exc}"


def is_absent(reason: str | None) -> bool:
    """True when the reason is that this machine has no NVIDIA stack at all (not a fault)."""
    return reason in (NO_DRIVER, NO_BINDINGS)
