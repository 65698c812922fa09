"""Probe this machine into a ``HardwareSnapshot``: the one entry point ``kvstack doctor`` calls."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from kvstack.hardware import checks, cpu, disk, fio, gpu, memory, software, summary
from kvstack.hardware.snapshot import (
    CpuInfo,
    DiskInfo,
    GpuInfo,
    HardwareSnapshot,
    MemoryInfo,
    SoftwareInfo,
)


def probe(paths: Sequence[Path] | None = None, fio_seconds: float | None = 10.0) -> HardwareSnapshot:
    """Probe GPUs, the CPU, memory, disks (fio bounded by ``fio_seconds`` per path; None skips it)
    and software. Probes fail soft; only a bad ``--path`` raises (``PathError``)."""
    disks, dirs = disk.probe_disks(paths)
    sw = software.probe_software()
    if fio_seconds is None:
        for d in disks:
            d.unknown.setdefault("read_bw_bytes_per_s", checks.FIO_SKIPPED)
    else:
        for d, where in zip(disks, dirs, strict=True):
            measure_disk(d, where, fio_seconds, fio_installed=sw.fio is not None)
    gpus, reason = gpu.probe_gpus()
    return assemble(gpus, reason, memory.probe_memory(), disks, sw, cpu.probe_cpu())


def measure_disk(d: DiskInfo, where: Path, seconds: float, fio_installed: bool = True) -> None:
    """Fill ``d``'s read bandwidth with fio run in ``where``, or say why it has none."""
    if d.tmpfs:
        d.unknown["read_bw_bytes_per_s"] = "tmpfs is memory: not measured as a disk"
        return
    if not d.writable:
        d.unknown["read_bw_bytes_per_s"] = "not writable: fio needs a test file there"
        return
    if not fio_installed:
        d.unknown["read_bw_bytes_per_s"] = f"fio is not installed ({fio.INSTALL_HINT})"
        return
    result = fio.measure_read_bw(where, seconds, d.free_bytes)
    d.read_bw_bytes_per_s = result.bw_bytes_per_s
    d.read_bw_method = result.method
    if result.reason:
        d.unknown["read_bw_bytes_per_s"] = result.reason
    if result.notes:
        d.read_bw_notes = list(result.notes)


def assemble(
    gpus: list[GpuInfo],
    gpu_reason: str | None,
    mem: MemoryInfo,
    disks: list[DiskInfo],
    sw: SoftwareInfo,
    cpu_info: CpuInfo | None = None,
) -> HardwareSnapshot:
    snap = HardwareSnapshot(
        hostname=socket.gethostname(),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        gpus=gpus,
        gpu_reason=gpu_reason,
        memory=mem,
        cpu=cpu_info,
        disks=disks,
        software=sw,
    )
    snap.checks = checks.evaluate(snap)
    snap.summary = summary.summarize(snap)
    return snap
