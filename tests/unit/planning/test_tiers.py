"""Tier sizing rules (kvstack/planning/tiers.py), over the recorded snapshots."""

from __future__ import annotations

import pytest

from kvstack import units
from kvstack.hardware.snapshot import DiskInfo, MemoryInfo, RemoteInfo
from kvstack.planning import tiers as tr
from kvstack.planning.kv import footprint

from .helpers import catalog_model, snapshot

GIB = units.GIB
KV_8B = footprint(catalog_model("llama-3.1-8b"), 1.0, 1, 131072)  # 8 GiB sessions at fp8


def test_gpu_budget_subtracts_weights_and_a_reserve() -> None:
    gpus = snapshot("h100-sxm").gpus
    b = tr.gpu_budget(gpus, 1, 0.92, 16 * 10**9)
    assert b.memory_per_rank == 81559 * 1024 * 1024
    assert b.reserve_per_rank == int(b.memory_per_rank * 0.92 * 0.04)
    assert b.pool_per_rank == int(b.memory_per_rank * 0.92 - 16 * 10**9 - b.reserve_per_rank)
    assert b.weights_fit and b.pool_total == b.pool_per_rank


def test_gpu_budget_splits_weights_over_tp() -> None:
    gpus = snapshot("8x-h100").gpus
    one, four = tr.gpu_budget(gpus, 1, 0.92, 141 * 10**9), tr.gpu_budget(gpus, 4, 0.92, 141 * 10**9)
    assert not one.weights_fit and one.pool_total == 0
    assert four.weights_fit and four.weights_per_rank == 141 * 10**9 // 4
    assert four.pool_total == 4 * four.pool_per_rank


def test_host_capacity_respects_the_cgroup_limit() -> None:
    free_host = tr.host_capacity(snapshot("h100-sxm").memory, 1)
    assert free_host.ceiling == 224 * GIB
    assert free_host.usable == 224 * GIB - (3 * GIB + int(224 * GIB * 0.05) + 2 * GIB)
    assert "3 GiB + 5% + 2 GiB x 1 GPU rank(s)" in free_host.reason
    tight = tr.host_capacity(snapshot("tight-cgroup").memory, 1)
    assert tight.ceiling == 32 * GIB  # not the host's 1.8 TiB
    assert "cgroup" in tight.reason
    assert tr.host_capacity(MemoryInfo(), 1).usable == 0


@pytest.mark.parametrize(
    ("profile", "problem"),
    [
        ("h100-sxm", None),
        ("8x-h100", None),
        ("sata-only", "below the 1.0 GB/s"),
        ("tmpfs-only", "tmpfs"),
        ("no-gpu", None),  # marked rotational (a virtual disk), fio measured 1.5 GB/s
    ],
)
def test_disk_rules_on_recorded_disks(profile: str, problem: str | None) -> None:
    disk = snapshot(profile).disks[-1]
    found = tr.disk_problem(disk, 1e9)
    assert (found is None) if problem is None else (problem in (found or ""))


def test_a_rotational_disk_qualifies_only_when_measured_fast() -> None:
    disk = snapshot("no-gpu").disks[-1]
    assert disk.rotational and tr.disk_problem(disk, 1e9) is None
    slow = tr.disk_problem(disk, 2e9)
    assert slow is not None and "marks rotational (measured 1.5 GB/s" in slow
    unmeasured = tr.disk_problem(disk.model_copy(update={"read_bw_bytes_per_s": None}), 1e9)
    assert unmeasured is not None and "rotational" in unmeasured
    why = "writing a 64 MiB test file took over 3.0 s"
    failed = disk.model_copy(update={"read_bw_bytes_per_s": None, "unknown": {"read_bw_bytes_per_s": why}})
    assert f"read bandwidth unknown: {why}" in (tr.disk_problem(failed, 1e9) or "")


def test_disk_rules_on_unknowns() -> None:
    unknown_bw = DiskInfo(path="/x", nvme=True, rotational=False, free_bytes=10**12)
    assert "bandwidth unknown" in (tr.disk_problem(unknown_bw, 1e9) or "")
    unknown_kind = DiskInfo(path="/y", free_bytes=10**12, read_bw_bytes_per_s=5e9)
    assert "SSD from HDD" in (tr.disk_problem(unknown_kind, 1e9) or "")
    assert tr.disk_problem(unknown_bw.model_copy(update={"read_bw_bytes_per_s": 2e9}), 1e9) is None
    assert "below" in (tr.disk_problem(unknown_bw.model_copy(update={"read_bw_bytes_per_s": 2e9}), 3e9) or "")


def test_pick_disk_takes_the_fastest_or_the_one_holding_cache_root() -> None:
    disks = snapshot("8x-h100").disks
    best, rejected = tr.pick_disk(disks, 1e9, None)
    assert best is not None and best.path == "/raid" and rejected == []
    chosen, _ = tr.pick_disk(disks, 1e9, "/home/me/kv")
    assert chosen is not None and chosen.path == "/"
    chosen, _ = tr.pick_disk(disks, 1e9, "/raid/kv")
    assert chosen is not None and chosen.path == "/raid"
    none, why = tr.pick_disk(snapshot("tmpfs-only").disks, 1e9, "/tmp/kv")
    assert none is None and "tmpfs" in why[0]


def test_disk_tier_is_the_target_within_80_percent_of_free_and_never_tiny() -> None:
    disks = snapshot("h100-sxm").disks
    sized, why = tr.disk_tier(disks, KV_8B, 1e9, None, 640 * GIB)
    assert sized is not None and sized.size_bytes == 640 * GIB and "to the retention target" in why
    assert sized.path == "/data" and sized.read_bw_bytes_per_s == 3.2e9 and sized.latency_s == tr.DISK_LATENCY
    capped, why = tr.disk_tier(disks, KV_8B, 1e9, None, 100 * 1024 * GIB)
    assert capped is not None and capped.size_bytes <= 0.8 * 3500 * 10**9
    assert capped.size_bytes > 0.8 * 3500 * 10**9 - GIB and "short of the target" in why
    small, _ = tr.disk_tier(disks, KV_8B, 1e9, None, GIB)
    assert small is not None and small.size_bytes == tr.PREFERRED_DISK_TIER  # 10 GiB where there is room
    full, why = tr.disk_tier(snapshot("nearly-full-disk").disks, KV_8B, 1e9, None, 640 * GIB)
    assert full is None and "9.0 GiB free" in why and "-token session" in why  # 80% holds no session


def test_a_disk_with_little_room_still_holds_a_small_target_and_drops_below_one_gib() -> None:
    disk = snapshot("h100-sxm").disks[0].model_copy(update={"free_bytes": 12 * GIB})
    tier, why = tr.disk_tier([disk], KV_8B, 1e9, None, 160 * 2**20)
    assert tier is not None and tier.size_bytes == 9 * GIB, why
    # the 8B model's 128K-token session is what the small target needs
    assert "holds the 8.0 GiB the target needs" in why and "below the 10.0 GiB kvstack prefers" in why
    full = disk.model_copy(update={"free_bytes": GIB})
    none, why = tr.disk_tier([full], KV_8B, 1e9, None, 160 * 2**20)
    assert none is None and "less than" in why


def test_a_50_gib_free_disk_gets_at_most_40_gib() -> None:
    disk = snapshot("h100-sxm").disks[0].model_copy(update={"free_bytes": 50 * GIB})
    tier, _ = tr.disk_tier([disk], KV_8B, 1e9, None, 640 * GIB)
    assert tier is not None and tier.size_bytes == 40 * GIB


def test_cpu_tier_sizes_to_the_working_set_and_drops_when_small() -> None:
    mem = snapshot("h100-sxm").memory
    host = tr.host_capacity(mem, 1)
    tier, _ = tr.cpu_tier(host, mem, KV_8B, 50 * GIB, 100 * GIB, 100 * GIB, "lmcache")
    assert tier is not None and tier.size_bytes == 120 * GIB  # working set + 20%, whole GiB
    huge, _ = tr.cpu_tier(host, mem, KV_8B, 50 * GIB, 10_000 * GIB, 10_000 * GIB, "lmcache")
    assert huge is not None and huge.size_bytes <= host.usable
    small, _ = tr.cpu_tier(host, mem, KV_8B, 50 * GIB, GIB, GIB, "lmcache")
    assert small is not None and small.size_bytes == 50 * GIB  # never below the GPU pool
    tight_mem = snapshot("tight-cgroup").memory
    dropped, why = tr.cpu_tier(
        tr.host_capacity(tight_mem, 1), tight_mem, KV_8B, 50 * GIB, 100 * GIB, 100 * GIB, "lmcache"
    )
    assert dropped is None and "bring little" in why


def test_cpu_tier_per_rank_and_connector_caps() -> None:
    mem = snapshot("8x-h100").memory
    kv4 = footprint(catalog_model("llama-3.1-70b"), 1.0, 4, 131072)
    tier, _ = tr.cpu_tier(tr.host_capacity(mem, 4), mem, kv4, 150 * GIB, 400 * GIB, 400 * GIB, "lmcache")
    assert tier is not None and tier.size_bytes == 4 * tier.size_bytes_per_rank
    assert tier.size_bytes_per_rank % GIB == 0
    tight = snapshot("tight-cgroup").memory.model_copy(update={"cgroup_limit_bytes": None})
    native, why = tr.cpu_tier(
        tr.host_capacity(tight, 1), tight, KV_8B, 50 * GIB, 100 * GIB, 100 * GIB, "native"
    )
    assert native is None and "/dev/shm" in why  # Docker's 64 MiB /dev/shm cannot hold vLLM's CPU tier
    hicache, _ = tr.cpu_tier(tr.host_capacity(mem, 1), mem, KV_8B, 50 * GIB, GIB, GIB, "hicache")
    assert hicache is not None and hicache.size_bytes > 50 * GIB  # host pool must exceed the device pool


def test_cpu_tier_takes_the_retention_target_only_up_to_the_pinned_share() -> None:
    mem = snapshot("h100-sxm").memory
    host = tr.host_capacity(mem, 1)
    pinned = int(host.usable * tr.PINNED_FRACTION) // GIB * GIB
    # Beyond the working set the retention target is held up to half the usable DRAM...
    tier, why = tr.cpu_tier(host, mem, KV_8B, 50 * GIB, 64 * GIB, 640 * GIB, "lmcache")
    assert tier is not None and tier.size_bytes == pinned and "pinned" in why
    # ... a smaller target entirely ...
    fits, why = tr.cpu_tier(host, mem, KV_8B, 50 * GIB, 8 * GIB, 80 * GIB, "lmcache")
    assert fits is not None and fits.size_bytes == 80 * GIB and "holds the retention target" in why
    # ... while the working set itself may take all of the usable DRAM.
    hot, _ = tr.cpu_tier(host, mem, KV_8B, 50 * GIB, 150 * GIB, 150 * GIB, "lmcache")
    assert hot is not None and hot.size_bytes == 180 * GIB > pinned


def test_native_tier_leaves_room_for_its_shared_memory_overhead() -> None:
    mem = snapshot("h100-sxm").memory  # 117.5 GiB of /dev/shm, 224 GiB available
    host = tr.host_capacity(mem, 1)
    tier, why = tr.cpu_tier(host, mem, KV_8B, 50 * GIB, 150 * GIB, 150 * GIB, "native")
    assert tier is not None
    assert tier.size_bytes * tr.NATIVE_SHM_FACTOR <= (mem.shm_free_bytes or 0) - GIB
    assert "1.92x" in why and "/dev/shm" in why


def test_host_reserve_scales_with_the_machine() -> None:
    small = tr.host_capacity(snapshot("no-gpu").memory, 0, also_needed=16 * 10**9)
    # 20.6 GiB available: a 3 GiB floor + 5%, not the 10 GiB the fixed reserve took.
    assert 4 * GIB < small.reserve < 4.2 * GIB
    assert small.usable > GIB  # an 8B bf16 model's weights leave room for 1 GiB of KV
    big = tr.host_capacity(snapshot("8x-h100").memory, 8)
    assert big.reserve == 3 * GIB + int(1930 * GIB * 0.05) + 8 * 2 * GIB


def test_staging_tier() -> None:
    mem = snapshot("tight-cgroup").memory
    host = tr.host_capacity(mem, 1)
    staging = tr.staging_cpu_tier(host, mem, KV_8B, "lmcache")
    assert staging is not None and staging.size_bytes == 4 * GIB
    assert tr.staging_cpu_tier(host, mem, KV_8B, "hicache") is None
    assert tr.staging_cpu_tier(host, mem, KV_8B, "native") is None  # /dev/shm is 64 MiB


def test_remote_tier_uses_probed_facts_for_the_same_url() -> None:
    url = "redis://cache:6379/0"
    probed = RemoteInfo(
        url=url,
        reachable=True,
        maxmemory_bytes=64 * GIB,
        maxmemory_policy="noeviction",
        read_bw_bytes_per_s=2e9,
    )
    snap = snapshot("h100-sxm").model_copy(update={"remote": probed})
    tier, warnings = tr.remote_tier(snap, url, KV_8B)
    assert (tier.size_bytes, tier.read_bw_bytes_per_s, tier.url) == (64 * GIB, 2e9, url)
    assert any("noeviction" in w for w in warnings)
    other, _ = tr.remote_tier(snap, "redis://elsewhere:6379", KV_8B)
    assert other.size_bytes == 0 and other.read_bw_bytes_per_s == tr.ASSUMED_REMOTE_BW
    assert "assumed" in other.reason and other.latency_s == tr.ASSUMED_REMOTE_LATENCY
