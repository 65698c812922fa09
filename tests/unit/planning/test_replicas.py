"""One machine split among N replicas (kvstack/planning/replicas.py)."""

from __future__ import annotations

import pytest

from kvstack.hardware.snapshot import load_snapshot
from kvstack.planning.replicas import replica_snapshot, share_memory
from kvstack.planning.tiers import host_capacity
from kvstack.profiles import profiles_dir

HW = profiles_dir() / "hardware"


@pytest.mark.parametrize("name", ["no-gpu.json", "8x-h100.json", "tight-cgroup.json"])
@pytest.mark.parametrize("n", [2, 3])
def test_replica_memory_is_a_share_of_what_the_planner_leaves_the_machine(name: str, n: int) -> None:
    snap = load_snapshot(HW / name)
    view = share_memory(snap.memory, n)
    whole, part = host_capacity(snap.memory, 0).usable, host_capacity(view, 0).usable
    # The OS's reserve is kept once, not once per replica: the N shares add up to the machine's.
    assert whole // n <= part <= whole // n + 1
    assert host_capacity(share_memory(snap.memory, 1), 0).usable == whole
    assert (view.cgroup_limit_bytes is None) == (snap.memory.cgroup_limit_bytes is None)
    assert view.memlock_unlimited == snap.memory.memlock_unlimited  # a per-process limit


def test_replica_snapshot_gives_gpus_and_free_disk_shares() -> None:
    snap = load_snapshot(HW / "8x-h100.json")
    view = replica_snapshot(snap, 4, 2)
    assert [g.index for g in view.gpus] == [0, 1]
    assert [d.free_bytes for d in view.disks] == [d.free_bytes // 4 for d in snap.disks]  # type: ignore[operator]
    assert [d.total_bytes for d in view.disks] == [d.total_bytes for d in snap.disks]
    assert view.memory.shm_free_bytes == snap.memory.shm_free_bytes // 4  # type: ignore[operator]
    assert len(snap.gpus) == 8 and snap.memory.available_bytes == 2072321720320  # input left alone
