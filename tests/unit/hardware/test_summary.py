from __future__ import annotations

import pytest

from kvstack.hardware import nvml
from kvstack.hardware.snapshot import DiskInfo, HardwareSnapshot, MemoryInfo
from kvstack.hardware.summary import best_disk, short_name, summarize
from kvstack.units import GIB as GiB
from kvstack.units import fmt_bytes

from .snapshots import gpu_host

NVME = DiskInfo(
    path="/data", mount="/data", nvme=True, rotational=False, writable=True, read_bw_bytes_per_s=6.5e9
)


def _with_disk(snap: HardwareSnapshot, disk: DiskInfo) -> HardwareSnapshot:
    snap.disks = [disk]
    return snap


def test_h100_host_line() -> None:
    snap = _with_disk(gpu_host("h100_sxm_80gb"), NVME)
    ram = fmt_bytes(snap.memory.total_bytes)
    assert (
        summarize(snap)
        == f"8x H100 80GB HBM3 (Hopper, FP8 KV), {ram} RAM, NVMe at 6.5 GB/s: GPU+CPU+disk tiers possible"
    )


@pytest.mark.parametrize(
    ("device", "words"),
    [
        ("b200", "8x B200 (Blackwell, FP8+NVFP4 KV)"),
        ("a100_sxm4_80gb", "1x A100-SXM4-80GB (Ampere)"),
        ("l40s", "2x L40S (Ada, FP8 KV)"),
        ("h200_141gb", "8x H200 (Hopper, FP8 KV)"),
        ("rtx_pro_6000_blackwell", "1x RTX PRO 6000 Blackwell Workstation Edition (Blackwell, FP8 KV)"),
    ],
)
def test_gpu_part_per_device(device: str, words: str) -> None:
    assert summarize(gpu_host(device)).startswith(words + ", ")


def test_slow_disk_and_small_container_drop_tiers() -> None:
    slow = NVME.model_copy(update={"nvme": False, "read_bw_bytes_per_s": 0.5e9})
    snap = _with_disk(gpu_host("l40s", tree="container_v1"), slow)
    line = summarize(snap)
    limit = snap.memory.cgroup_limit_bytes
    assert f"{fmt_bytes(limit)} RAM (cgroup limit)" in line
    assert line.endswith("disk at 500 MB/s: GPU+CPU tiers possible")
    snap.memory = MemoryInfo(total_bytes=4 * GiB)
    assert summarize(snap).endswith(": GPU tier only")


def test_cpu_machine_line() -> None:
    snap = HardwareSnapshot(gpu_reason=nvml.NO_DRIVER, memory=MemoryInfo(total_bytes=24 * GiB), disks=[NVME])
    assert summarize(snap) == (
        "no GPU (no NVIDIA driver), 24.0 GiB RAM, NVMe at 6.5 GB/s: CPU platform, demo-sized models only"
    )
    snap.gpu_reason = "NVML failed to initialise: Unknown Error"
    assert summarize(snap).startswith("no GPU (NVML failed to initialise: Unknown Error)")


def test_best_disk_prefers_measured_then_nvme() -> None:
    hdd = DiskInfo(path="/hdd", rotational=True, writable=True, read_bw_bytes_per_s=0.2e9)
    unmeasured = DiskInfo(path="/nv", nvme=True, rotational=False, writable=True)
    tmp = DiskInfo(path="/dev/shm", tmpfs=True, writable=True, read_bw_bytes_per_s=9e9)
    assert best_disk([hdd, unmeasured, tmp]) is hdd
    assert best_disk([unmeasured, DiskInfo(path="/x", writable=True)]) is unmeasured
    assert best_disk([tmp]) is None
    assert short_name("NVIDIA H100 80GB HBM3") == "H100 80GB HBM3"
