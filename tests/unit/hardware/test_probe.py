from __future__ import annotations

import json

import pytest

from kvstack.errors import SnapshotError
from kvstack.hardware import checks
from kvstack.hardware.probe import measure_disk
from kvstack.hardware.snapshot import DiskInfo, parse_snapshot

from .fixtures import NVML_DEVICES, PROC
from .snapshots import gpu_host

TREES = sorted(p.name for p in PROC.iterdir() if p.is_dir())


@pytest.mark.parametrize("device", NVML_DEVICES)
@pytest.mark.parametrize("tree", TREES)
def test_snapshot_round_trips_through_json(device: str, tree: str) -> None:
    snap = gpu_host(device, tree)
    again = parse_snapshot(snap.to_json(), "test")
    assert again == snap
    assert again.summary and again.checks
    assert all(d.unknown.get("read_bw_bytes_per_s") == checks.FIO_SKIPPED for d in again.disks)


def test_wrong_type_names_the_field() -> None:
    data = json.loads(gpu_host("b200").to_json())
    data["gpus"][3]["memory_total_bytes"] = "lots"
    with pytest.raises(SnapshotError) as exc:
        parse_snapshot(json.dumps(data), "hw.json")
    assert "gpus.3.memory_total_bytes" in exc.value.message and exc.value.exit_code == 2


@pytest.mark.parametrize(
    ("disk", "installed", "words"),
    [
        (DiskInfo(path="/dev/shm", tmpfs=True, writable=True), True, "tmpfs"),
        (DiskInfo(path="/ro", writable=False), True, "not writable"),
        (DiskInfo(path="/data", writable=True), False, "apt-get install fio"),
    ],
)
def test_disks_fio_cannot_measure_say_why(disk: DiskInfo, installed: bool, words: str) -> None:
    from pathlib import Path

    measure_disk(disk, Path(disk.path), 1.0, fio_installed=installed)
    assert disk.read_bw_bytes_per_s is None
    assert words in disk.unknown["read_bw_bytes_per_s"]
