"""Snapshots assembled from recorded parts (NVML answers + sample /proc and /sys trees)."""

from __future__ import annotations

from kvstack.hardware.probe import probe_with
from kvstack.hardware.snapshot import HardwareSnapshot, SoftwareInfo

from .fixtures import PROC, recorded

GPU_SOFTWARE = SoftwareInfo(
    python="3.11.7", vllm="0.33.0", vllm_distribution="vllm", lmcache="0.5.6", fio="3.33"
)


def gpu_host(
    device: str, tree: str = "gpu_host_v2", software: SoftwareInfo | None = None
) -> HardwareSnapshot:
    return probe_with(recorded(device), PROC / tree, software or GPU_SOFTWARE.model_copy())
