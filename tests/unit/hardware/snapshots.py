"""Snapshots assembled from fixtures (NVML device facts + sample /proc and /sys trees)."""

from __future__ import annotations

from kvstack.hardware.probe import probe_with
from kvstack.hardware.snapshot import HardwareSnapshot, SoftwareInfo

from .fixtures import PROC, nvml_fixture

GPU_SOFTWARE = SoftwareInfo(
    python="3.11.7", vllm="0.33.0", vllm_distribution="vllm", lmcache="0.5.6", fio="3.33"
)


def gpu_host(
    device: str, tree: str = "gpu_host_v2", software: SoftwareInfo | None = None
) -> HardwareSnapshot:
    return probe_with(nvml_fixture(device), PROC / tree, software or GPU_SOFTWARE.model_copy())
