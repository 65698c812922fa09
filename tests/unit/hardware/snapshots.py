"""Snapshots from fixtures (NVML device facts + sample /proc and /sys trees), through the real probe
(``kvstack doctor``'s ``probe``) with its sources pointed at them and fio skipped."""

from __future__ import annotations

from unittest import mock

from kvstack.hardware import disk, gpu, memory, software
from kvstack.hardware.probe import probe
from kvstack.hardware.snapshot import HardwareSnapshot, SoftwareInfo

from .fixtures import PROC, nvml_fixture

GPU_SOFTWARE = SoftwareInfo(
    python="3.11.7", vllm="0.33.0", vllm_distribution="vllm", lmcache="0.5.6", fio="3.33"
)


def gpu_host(
    device: str, tree: str = "gpu_host_v2", software_info: SoftwareInfo | None = None
) -> HardwareSnapshot:
    backend, root = nvml_fixture(device), PROC / tree
    probe_gpus, probe_disks, probe_memory = gpu.probe_gpus, disk.probe_disks, memory.probe_memory
    sw = software_info or GPU_SOFTWARE.model_copy()
    with (
        mock.patch.object(gpu, "probe_gpus", lambda: probe_gpus(backend)),
        mock.patch.object(disk, "probe_disks", lambda paths: probe_disks(paths, root)),
        mock.patch.object(memory, "probe_memory", lambda: probe_memory(root)),
        mock.patch.object(software, "probe_software", lambda: sw),
    ):
        return probe(fio_seconds=None)
