"""Property tests: whatever the machine, no tier is larger than what the snapshot says it has."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvstack.errors import InputError
from kvstack.hardware.snapshot import DiskInfo, GpuInfo, HardwareSnapshot, MemoryInfo
from kvstack.planning import tiers as tr
from kvstack.planning.schema import Workload

from .helpers import catalog_model, plan_for

GIB = 1 << 30
MODELS = ["llama-3.1-8b", "qwen2.5-7b", "gpt-oss-20b", "mistral-7b", "llama-3.1-70b", "deepseek-v3"]


@st.composite
def snapshots(draw: st.DrawFn) -> HardwareSnapshot:
    n = draw(st.sampled_from([0, 1, 2, 4, 8]))
    name, cc = draw(
        st.sampled_from(
            [("NVIDIA H100 80GB HBM3", (9, 0)), ("NVIDIA B200", (10, 0)), ("NVIDIA L40S", (8, 9))]
        )
    )
    total = draw(st.integers(8, 200)) * GIB
    free = draw(st.integers(total // 4, total))
    gpus = [
        GpuInfo(index=i, name=name, compute_capability=cc, memory_total_bytes=total, memory_free_bytes=free)
        for i in range(n)
    ]
    available = draw(st.integers(1, 64) | st.integers(64, 4096)) * GIB
    memory = MemoryInfo(
        total_bytes=available + GIB,
        available_bytes=available,
        cgroup_limit_bytes=draw(st.none() | st.integers(1, 4096).map(lambda g: g * GIB)),
        shm_free_bytes=draw(st.none() | st.integers(0, 2048).map(lambda g: g * GIB)),
    )
    disks = []
    if draw(st.booleans()):  # an NVMe that qualifies, so that the disk rules run often
        disks.append(
            DiskInfo(
                path="/nvme",
                mount="/nvme",
                fstype="xfs",
                nvme=True,
                rotational=False,
                writable=True,
                free_bytes=draw(st.integers(0, 20_000)) * GIB,
                read_bw_bytes_per_s=draw(st.floats(1e9, 3e10)),
            )
        )
    for i in range(draw(st.integers(0, 3))):
        fstype = draw(st.sampled_from(["ext4", "xfs", "ext4", "tmpfs"]))
        disks.append(
            DiskInfo(
                path=f"/d{i}",
                mount=f"/d{i}",
                fstype=fstype,
                tmpfs=fstype == "tmpfs",
                nvme=draw(st.booleans()),
                rotational=draw(st.sampled_from([False, False, True, None])),
                writable=draw(st.sampled_from([True, True, None, False])),
                free_bytes=draw(st.none() | st.integers(0, 20_000).map(lambda g: g * GIB)),
                read_bw_bytes_per_s=draw(st.none() | st.floats(1e7, 3e10)),
            )
        )
    return HardwareSnapshot(gpus=gpus, memory=memory, disks=disks)


# Mostly layouts the engine has; a few it lacks, which must be refused with a one-line error.
VALID_PAIRS = [
    (engine, offload)
    for engine, offloads in (
        ("vllm", ("auto", "none", "native", "lmcache")),
        ("sglang", ("auto", "none", "hicache")),
    )
    for offload in offloads
]
WRONG_ENGINE = [("vllm", "hicache"), ("sglang", "native"), ("sglang", "lmcache")]
ENGINE_OFFLOADS = st.sampled_from(VALID_PAIRS * 4 + WRONG_ENGINE)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    snap=snapshots(),
    model=st.sampled_from(MODELS),
    users=st.integers(1, 64),
    reuse=st.floats(1.0, 8.0),
    context=st.integers(1024, 128 * 1024),
    request=st.fixed_dictionaries(
        {
            "engine_offload": ENGINE_OFFLOADS,
            "min_disk_bw": st.sampled_from([0.0, 1e9, 5e9]),
            "cache_root": st.sampled_from([None, None, "/d0/kv", "/nvme/kv"]),
            "retain_factor": st.sampled_from([None, None, 1.0, 3.0, 40.0]),
            "disk_tier": st.sampled_from([True, True, False]),
        }
    ),
)
def test_tiers_never_exceed_the_snapshot(
    snap: HardwareSnapshot, model: str, users: int, reuse: float, context: int, request: dict[str, Any]
) -> None:
    geo = catalog_model(model)
    wl = Workload(name="prop", context_tokens=min(context, geo.max_context), users=users, reuse=reuse)
    engine, offload = request.pop("engine_offload")
    request.update(engine=engine, offload=offload)
    try:
        plan = plan_for_workload(snap, model, wl, request)
    except InputError as exc:
        # Refused, not planned: only a layout the engine lacks, or one that needs a GPU without one,
        # and the one-line error names it.
        # Or a connector forced onto a model it cannot carry (planning/carriage.py).
        assert (
            (engine, offload) in WRONG_ENGINE
            or (not snap.gpus and offload in ("native", "hicache"))
            or f"--offload {offload} cannot serve {geo.name}" in exc.message
        )
        assert f"--offload {offload}" in exc.message, exc.message
        return
    host = [v for v in (snap.memory.available_bytes, snap.memory.cgroup_limit_bytes) if v is not None]
    for tier in plan.cache.tiers:
        assert tier.size_bytes >= 0 and tier.tokens >= 0 and tier.size_bytes_per_rank >= 0
        if tier.kind == "gpu":
            used = snap.gpus[: plan.parallel.tensor_parallel_size]
            assert tier.size_bytes_per_rank <= min(g.memory_total_bytes or 0 for g in used)
            assert tier.size_bytes <= sum(g.memory_total_bytes or 0 for g in used)
        elif tier.kind == "cpu":
            # DRAM minus the reserve (and, on the CPU platform, the weights and the engine's pool).
            assert tier.size_bytes <= max(0, min(host) - tr.host_capacity(snap.memory, 0).reserve)
            if plan.transfer.connector == "native" and snap.memory.shm_free_bytes is not None:
                assert tier.size_bytes * tr.NATIVE_SHM_FACTOR <= snap.memory.shm_free_bytes
        elif tier.kind == "disk":
            # The tier sits at the cache root when one is given, on the disk that holds it.
            assert tier.path == (request["cache_root"] or tier.path)
            disk = max(snap.disks, key=lambda d: holds(d.path, tier.path or ""))
            assert holds(disk.path, tier.path or "") >= 0
            assert tier.size_bytes <= tr.DISK_FREE_FRACTION * (disk.free_bytes or 0)
            assert not disk.tmpfs
            # A disk marked rotational qualifies only when fio measured it fast (virtual disks);
            # the CPU platform's bar is lower (its prefill is far slower than such a disk).
            min_bw = request["min_disk_bw"]
            if plan.platform == "cpu":
                min_bw = min(min_bw, tr.CPU_PLATFORM_MIN_DISK_BW)
            assert (disk.read_bw_bytes_per_s or 0) >= min_bw
    if not request["disk_tier"]:
        assert all(t.kind != "disk" for t in plan.cache.tiers)
    if plan.platform == "cuda" and plan.feasible:
        assert (plan.transfer.connector == "none") == (len(plan.cache.tiers) == 1)
        # Inclusive tiers: a DRAM tier holds at least the GPU pool, a disk tier more than the DRAM tier.
        sizes = {t.kind: t.size_bytes for t in plan.cache.tiers}
        if "cpu" in sizes and "staging" not in plan.reasons["cpu_tier"]:
            assert sizes["cpu"] >= sizes["gpu"]
        if "disk" in sizes and "cpu" in sizes:
            assert sizes["disk"] > sizes["cpu"]
    c = plan.concurrency
    if plan.feasible and c is not None and c.retention_target_bytes is not None:
        # The retention target is met, or the plan says by how much it is not.
        assert c.retained_bytes is not None and c.retained_bytes <= c.retention_target_bytes
        unsized = any(t.kind == "remote" and t.size_bytes == 0 for t in plan.cache.tiers)
        if c.retained_bytes < c.retention_target_bytes and not unsized and plan.transfer.connector != "none":
            assert "short" in plan.reasons["retention"]
    if not snap.gpus:
        # On CPU only an explicit --offload lmcache may get a connector (it runs degraded there).
        allowed = {"none", request["offload"]} if request["offload"].startswith("lmcache") else {"none"}
        assert plan.platform == "cpu" and plan.transfer.connector in allowed


def holds(root: str, path: str) -> int:
    """Length of ``root`` when it is ``path`` or an ancestor of it, else -1."""
    root = root.rstrip("/")
    return len(root) if path == root or path.startswith(root + "/") or not root else -1


def plan_for_workload(snap: HardwareSnapshot, model: str, wl: Workload, request: dict[str, Any]) -> Any:
    from kvstack.planning.plan import PlanRequest, make_plan

    geo = catalog_model(model)
    return make_plan(snap, geo, geo.name, PlanRequest(**request), wl)


def test_helper_plans_match_direct_calls() -> None:
    assert (
        plan_for("h100-sxm", "llama-3.1-8b").model_dump() == plan_for("h100-sxm", "llama-3.1-8b").model_dump()
    )
