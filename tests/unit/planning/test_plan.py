"""make_plan decisions, table-driven over the recorded snapshots (profiles/hardware) and catalog models."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest

from kvstack.errors import InputError, UnsupportedError
from kvstack.hardware import gpu_specs
from kvstack.hardware.snapshot import RemoteInfo
from kvstack.planning import (
    assemble,
    connector,
    cpu_plan,
    cuda_plan,
    dtype,
    kv,
    layout,
    notes,
    offload_verdict,
    parallel,
    replicas,
    request,
    retention,
    tiers,
    trace_schema,
)
from kvstack.planning import plan as plan_module
from kvstack.planning.kv import footprint, plan_layout
from kvstack.planning.predict import breakeven, capacity, served_ttft, trace_sizing, trace_ttft, ttft

from .helpers import PlanFor, catalog_model, plan_for, snapshot

GIB = 1 << 30


@dataclass(frozen=True)
class Case:
    hw: str
    model: str
    workload: str | None = None
    request: dict[str, Any] = field(default_factory=dict)
    feasible: bool = True
    tp: int = 1
    dtype: str = "fp8"
    connector: str = "none"
    tiers: tuple[str, ...] = ("gpu",)
    error: str | None = None
    warning: str | None = None
    reason: tuple[str, str] | None = None  # (key, substring)


CASES = [
    Case("h100-sxm", "llama-3.1-8b", None, {"retain_factor": 1.0}, reason=("offload", "fits the GPU pool")),
    # The working set fits the GPU; the default retention target (10x) does not: a DRAM tier holds it.
    Case(
        "h100-sxm",
        "llama-3.1-8b",
        connector="lmcache-mp",
        tiers=("gpu", "cpu"),
        reason=("offload", "the retention target (80.0 GiB) exceeds the GPU pool"),
    ),
    Case(
        "h100-sxm",
        "llama-3.1-70b",
        feasible=False,
        error="use --tp 4 on 4 x NVIDIA H100 80GB HBM3 or an FP8 checkpoint",
    ),
    Case(
        "8x-h100",
        "llama-3.1-70b",
        "rag-long-doc",
        tp=8,
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
        reason=("tensor_parallel_size", "all 8 concurrent sessions fit"),
    ),
    Case(
        "8x-h100",
        "llama-3.1-70b",
        "rag-long-doc",
        {"users": 32},
        tp=8,
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
        warning="the GPU pool holds 21 of the 32",
        reason=("disk_tier", "/raid"),
    ),
    Case("8x-h100", "llama-3.1-405b-fp8", tp=8, connector="lmcache-mp", tiers=("gpu", "cpu")),
    Case("8x-h100", "llama-3.1-405b", feasible=False, tp=8, error="--tp 16 on 16 x"),
    Case("8x-h100", "deepseek-v3", feasible=False, tp=8, error="the weights (626.6 GiB)"),
    Case("8x-h100", "qwen3-235b-a22b", tp=8),
    Case(
        "b200",
        "llama-3.1-70b",
        "rag-long-doc",
        dtype="nvfp4",
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
        warning="FP4 (NVFP4) KV",
        reason=("kv_cache_dtype", "does not fit the GPU pool even at FP8"),
    ),
    Case("b200", "llama-3.1-8b", dtype="fp8"),
    Case(
        "a100-80gb",
        "llama-3.1-8b",
        "agent-multi-turn",
        dtype="auto",
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
        reason=("kv_cache_dtype", "CC 8.0"),
    ),
    Case(
        "l40s",
        "llama-3.1-8b",
        "agent-multi-turn",
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
        warning="LMCache is not installed",
    ),
    Case(
        "rtx-pro-6000",
        "qwen3-32b",
        "chatbot-shared-prompt",
        {"engine": "sglang"},
        dtype="nvfp4",
        connector="hicache",
        tiers=("gpu", "cpu", "disk"),
    ),
    Case(
        "rtx-pro-6000",
        "qwen3-32b",
        "chatbot-shared-prompt",
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
    ),
    Case(
        "rtx-pro-6000",
        "qwen3-32b",
        "chatbot-shared-prompt",
        {"disk_tier": False},
        connector="lmcache-mp",
        tiers=("gpu", "cpu"),
        reason=("disk_tier", "--no-disk"),
    ),
    Case(
        "sata-only",
        "llama-3.1-8b",
        "rag-long-doc",
        {"users": 64},
        connector="lmcache-mp",
        tiers=("gpu", "cpu"),
        warning="reads at 530 MB/s, below the 1.0 GB/s",
    ),
    Case(
        "sata-only",
        "llama-3.1-8b",
        "rag-long-doc",
        {"users": 64, "min_disk_bw": 0.5e9},
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
    ),
    Case(
        "tmpfs-only",
        "llama-3.1-8b",
        "rag-long-doc",
        {"users": 64},
        connector="lmcache-mp",
        tiers=("gpu", "cpu"),
        warning="/tmp is tmpfs",
    ),
    Case(
        "tight-cgroup",
        "llama-3.1-8b",
        "rag-long-doc",
        {"users": 64},
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
        reason=("cpu_tier", "staging buffer"),
    ),
    Case(
        "tight-cgroup",
        "llama-3.1-8b",
        "rag-long-doc",
        {"offload": "native"},
        warning="no DRAM for the staging buffer",
    ),
    Case(
        "nearly-full-disk",
        "llama-3.1-8b",
        "rag-long-doc",
        {"users": 64},
        connector="lmcache-mp",
        tiers=("gpu", "cpu"),
        warning="9.0 GiB free",
    ),
    # A sliding-window hybrid: --offload auto takes the connector that keeps vLLM's hybrid manager on.
    Case("h200", "gpt-oss-120b", "agent-multi-turn", connector="lmcache-mp", tiers=("gpu", "cpu", "disk")),
    # vLLM holds window + the tokens in flight (2 x 8192 on an H100) per sliding layer: a disk tier too.
    Case(
        "h100-sxm",
        "mistral-7b",
        "chatbot-shared-prompt",
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
    ),
    Case("h100-sxm", "mistral-7b", "chatbot-shared-prompt", {"retain_factor": 1.0}),
    Case(
        "h100-sxm",
        "llama-3.1-8b",
        "rag-long-doc",
        {"offload": "none"},
        warning="--offload none",
        reason=("offload", "--offload none"),
    ),
    Case(
        "h100-sxm",
        "llama-3.1-8b",
        "rag-long-doc",
        {"offload": "native"},
        connector="native",
        tiers=("gpu", "cpu", "disk"),
        reason=("per_rank", "TOTAL across TP ranks"),
    ),
    Case("h100-sxm", "llama-3.1-8b", None, {"offload": "lmcache"}, connector="lmcache", tiers=("gpu", "cpu")),
    Case(
        "h100-sxm",
        "llama-3.1-8b",
        None,
        {"cache_root": "/data/kvstack", "retain_factor": 1.0},
        reason=("offload", "fits"),
    ),
    Case(
        "8x-h100",
        "llama-3.1-70b",
        "rag-long-doc",
        {"users": 32, "cache_root": "/home/me/kv"},
        tp=8,
        connector="lmcache-mp",
        tiers=("gpu", "cpu"),
        # 80% of /'s free space is smaller than the DRAM tier: an inclusive disk tier would add nothing.
        reason=("disk_tier", "would hold no more than the 1.8 TiB above it"),
        warning="23.2 TiB short",
    ),
    Case(
        "8x-h100",
        "llama-3.1-70b",
        "rag-long-doc",
        {"users": 32, "cache_root": "/home/me/kv", "retain_bytes": 10 * 1024 * GIB},
        tp=8,
        connector="lmcache-mp",
        tiers=("gpu", "cpu"),
        reason=("retention", "10.0 TiB (--retain)"),
    ),
    Case(
        "h100-sxm",
        "llama-3.1-8b",
        None,
        {"kv_dtype": "auto"},
        dtype="auto",
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
        reason=("kv_cache_dtype", "as asked"),
    ),
    Case(
        "h100-sxm",
        "qwen3-32b",
        "rag-long-doc",
        connector="lmcache-mp",
        tiers=("gpu", "cpu", "disk"),
        warning="stops at 40K",
        reason=("context", "maximum"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.hw}-{c.model}-{c.workload}-{c.request}")
def test_decisions(case: Case) -> None:
    plan = plan_for(case.hw, case.model, case.workload, **case.request)
    assert plan.feasible is case.feasible, plan.errors
    assert plan.platform == "cuda"
    assert plan.parallel.tensor_parallel_size == case.tp
    assert plan.cache.kv_cache_dtype == case.dtype
    assert plan.transfer.connector == case.connector
    assert tuple(t.kind for t in plan.cache.tiers) == case.tiers
    if case.error:
        assert any(case.error in e for e in plan.errors), plan.errors
    else:
        assert plan.errors == []
    if case.warning:
        assert any(case.warning in w for w in plan.warnings), plan.warnings
    if case.reason:
        key, needle = case.reason
        assert needle in plan.reasons.get(key, ""), plan.reasons
    if case.dtype in ("fp8", "nvfp4"):
        assert any("can cost accuracy" in w for w in plan.warnings)


@pytest.mark.parametrize("case", [c for c in CASES if c.feasible], ids=lambda c: f"{c.hw}-{c.model}")
def test_every_feasible_plan_is_consistent(case: Case) -> None:
    plan = plan_for(case.hw, case.model, case.workload, **case.request)
    for key in ("context", "platform", "tensor_parallel_size", "gpu_memory_utilization", "weights"):
        assert plan.reasons[key]
    for key in (
        "kv_cache_dtype",
        "gpu_tier",
        "working_set",
        "connector",
        "chunk_size",
        "max_model_len",
        "breakeven",
    ):
        assert plan.reasons[key]
    assert "x 0.4" in plan.reasons["breakeven"]
    assert plan.model.max_model_len == plan.workload.context_tokens
    kinds = [t.kind for t in plan.cache.tiers]
    assert kinds == sorted(kinds, key=["gpu", "cpu", "disk", "remote"].index)
    assert (plan.transfer.connector == "none") == (kinds == ["gpu"])
    gpu = plan.cache.tiers[0]
    assert (
        gpu.breakeven_tokens == 0
        and gpu.size_bytes == gpu.size_bytes_per_rank * plan.parallel.tensor_parallel_size
    )
    for tier in plan.cache.tiers[1:]:
        assert tier.read_bw_bytes_per_s and tier.read_bw_bytes_per_s < gpu.read_bw_bytes_per_s  # type: ignore[operator]
        assert f"breakeven_{tier.kind}" in plan.reasons
        if tier.kind in ("cpu", "disk"):
            assert tier.size_bytes_per_rank * plan.parallel.tensor_parallel_size <= tier.size_bytes
    c = plan.concurrency
    assert c is not None
    session = footprint_for(plan).session_bytes
    assert c.sessions_gpu == gpu.size_bytes // session
    assert c.sessions_all_tiers == max(t.size_bytes for t in plan.cache.tiers) // session
    assert c.working_set_bytes == pytest.approx(plan.workload.users * plan.workload.reuse * session, abs=1)
    assert plan.prefill_tokens_per_s and plan.prefill_source == "estimate"


def footprint_for(plan: Any) -> Any:
    from kvstack.planning.dtype import dtype_bytes

    return footprint(
        plan.model.geometry,
        dtype_bytes(plan.cache.kv_cache_dtype, plan.model.geometry),
        plan.parallel.tensor_parallel_size,
        plan.workload.context_tokens,
        plan_layout(plan.platform, plan.cache.hybrid_manager, plan.cache.kv_in_flight_tokens),
    )


def test_reference_numbers_flow_into_the_plan(plan_for: PlanFor) -> None:
    plan = plan_for("a100-80gb", "llama-3.1-8b")
    assert (
        plan.cache.kv_cache_dtype,
        plan.cache.kv_bytes_per_token,
        plan.model.geometry.kv_bytes_per_token,
    ) == (
        "auto",
        131072,
        131072,
    )
    seventy = plan_for("8x-h100", "llama-3.1-70b", kv_dtype="bfloat16")
    assert seventy.cache.kv_bytes_per_token == 320 * 1024
    assert footprint_for(seventy).session_bytes == 40 * GIB  # 128K tokens at 320 KiB
    ds = plan_for("8x-h100", "deepseek-v3")
    assert ds.model.geometry.kv_bytes_per_token == 70272 and ds.cache.kv_bytes_per_token == 35136


def test_no_gpu_plans_for_the_cpu_backend(plan_for: PlanFor) -> None:
    from kvstack.model.source import resolve_model
    from kvstack.planning.plan import PlanRequest, make_plan
    from kvstack.planning.workload import default_workload
    from kvstack.profiles import profiles_dir

    found = resolve_model(str(profiles_dir() / "demo"))
    demo, path = found.geometry, found.path
    hw = snapshot("no-gpu")
    no_lmcache = hw.model_copy(update={"software": hw.software.model_copy(update={"lmcache": None})})
    plan = make_plan(no_lmcache, demo, path, PlanRequest(), default_workload(demo.max_context))
    assert (
        plan.platform,
        plan.transfer.connector,
        plan.cache.kv_cache_dtype,
        plan.parallel.tensor_parallel_size,
    ) == (
        "cpu",
        "none",
        "auto",
        1,
    )
    assert [t.kind for t in plan.cache.tiers] == ["cpu"] and plan.feasible
    assert plan.cache.tiers[0].size_bytes % GIB == 0 and plan.cache.tiers[0].size_bytes >= GIB
    assert any("no GPU visible" in w and "LMCache is not installed" in w for w in plan.warnings)
    too_big = plan_for("no-gpu", "llama-3.1-70b")
    assert not too_big.feasible and "host memory" in too_big.errors[0]
    with pytest.raises(UnsupportedError, match="needs a CUDA GPU"):
        plan_for("no-gpu", "llama-3.1-8b", kv_dtype="fp8")
    with pytest.raises(UnsupportedError, match="no GPU"):
        plan_for("no-gpu", "llama-3.1-8b", tp=2)
    assert plan.engine_pool is plan.cache.tiers[0] and plan.offload_tiers == [] and plan.tier("cpu") is None


def test_no_gpu_with_lmcache_plans_its_cache_server_tiers() -> None:
    """--offload auto on a CPU machine with LMCache: the cache server's DRAM (L1) and disk (fs L2)."""
    from kvstack.model.source import resolve_model
    from kvstack.planning.plan import PlanRequest, make_plan
    from kvstack.planning.workload import default_workload
    from kvstack.profiles import profiles_dir

    found = resolve_model(str(profiles_dir() / "demo"))
    demo, path = found.geometry, found.path
    hw = snapshot("no-gpu")  # LMCache 0.5.6 installed; /tmp marked rotational, fio-measured 1.5 GB/s
    plan = make_plan(hw, demo, path, PlanRequest(), default_workload(demo.max_context))
    assert (plan.platform, plan.transfer.connector) == ("cpu", "lmcache-mp") and plan.feasible
    assert [t.kind for t in plan.cache.tiers] == ["cpu", "cpu", "disk"]
    l1, disk = plan.tier("cpu"), plan.tier("disk")
    assert l1 is not None and l1.size_bytes >= GIB and "degraded" not in l1.reason
    assert disk is not None and disk.path == "/tmp" and "marked rotational, measured fast" in disk.reason
    assert "beats recompute" in plan.reasons["disk_tier"]
    assert not any("degraded" in w for w in plan.warnings)
    explicit = make_plan(
        hw, demo, path, PlanRequest(offload="lmcache-mp"), default_workload(demo.max_context)
    )
    assert (
        explicit.transfer.connector == "lmcache-mp" and "(--offload auto" not in explicit.reasons["connector"]
    )
    slow = hw.model_copy(
        update={"disks": [d.model_copy(update={"read_bw_bytes_per_s": 0.1e9}) for d in hw.disks]}
    )
    no_disk = make_plan(slow, demo, path, PlanRequest(), default_workload(demo.max_context))
    assert no_disk.tier("disk") is None and "rotational" in no_disk.reasons["disk_tier"]


def test_no_gpu_keeps_no_connector_when_no_offload_tier_fits(plan_for: PlanFor) -> None:
    """The engine's pool takes what host memory spares: LMCache's DRAM tier (1 GiB at least) does
    not fit, and a connector with no tier below the pool would cost every request for nothing."""
    from .helpers import roomy_cpu_host

    for offload in ("auto", "lmcache-mp"):
        plan = plan_for(roomy_cpu_host(64), "llama-3.1-8b", context=131072, users=8, offload=offload)
        assert plan.platform == "cpu" and plan.feasible
        assert (plan.transfer.connector, [t.kind for t in plan.cache.tiers]) == ("none", ["cpu"])
        assert plan.reasons["connector"].startswith("none: no offload tier fits")
        assert "less than the 1 GiB LMCache's DRAM tier needs" in plan.reasons["cpu_offload_tier"]


def test_no_gpu_explicit_lmcache_is_wired_degraded_and_said(plan_for: PlanFor) -> None:
    """`--offload lmcache` on a CPU-only machine is honoured so that validation can show its failure."""
    plan = plan_for("no-gpu", "mistral-7b", offload="lmcache")
    assert plan.platform == "cpu" and plan.transfer.connector == "lmcache"
    pool, offload = plan.cache.tiers
    assert plan.engine_pool is pool and plan.offload_tiers == [offload]
    assert plan.tier("cpu") is offload and plan.tier("gpu") is None
    assert offload.size_bytes >= GIB and offload.size_bytes % GIB == 0
    assert any("degraded mode" in w for w in plan.warnings)
    for choice in ("native", "hicache"):
        with pytest.raises(UnsupportedError, match="needs an NVIDIA GPU"):
            plan_for("no-gpu", "mistral-7b", offload=choice)


def test_no_gpu_remote_follows_explicit_lmcache(plan_for: PlanFor) -> None:
    """The remote tier is wired with LMCache (so an outage can be validated) and dropped without it."""
    url = "redis://:pw@127.0.0.1:6379/0"
    wired = plan_for("no-gpu", "mistral-7b", offload="lmcache", remote_url=url)
    remote = wired.tier("remote")
    assert remote is not None and [t.kind for t in wired.offload_tiers] == ["cpu", "remote"]
    assert wired.transfer.remote_url == remote.url == "redis://:***@127.0.0.1:6379/0"
    assert "degraded" in wired.reasons["remote_tier"]
    ignored = plan_for("no-gpu", "mistral-7b", offload="none", remote_url=url)
    assert ignored.transfer.remote_url is None and ignored.tier("remote") is None
    assert any("--remote is ignored" in w for w in ignored.warnings)


@pytest.mark.parametrize(
    ("hw", "model", "request_", "error", "needle"),
    [
        ("h100-sxm", "llama-3.1-8b", {"tp": 2}, UnsupportedError, "needs 2 GPUs; the snapshot has 1"),
        ("8x-h100", "qwen2.5-7b", {"tp": 8}, UnsupportedError, "28 attention"),
        ("h100-sxm", "llama-3.1-8b", {"context": 200_000}, InputError, "above llama-3.1-8b's maximum"),
        ("h100-sxm", "llama-3.1-8b", {"users": 0}, InputError, "--users must be at least 1"),
        ("h100-sxm", "llama-3.1-8b", {"context": 0}, InputError, "--context must be at least 1"),
        ("h100-sxm", "llama-3.1-8b", {"gpu_memory_utilization": 1.5}, InputError, "gpu-memory-utilization"),
        ("h100-sxm", "llama-3.1-8b", {"kv_dtype": "int2"}, InputError, "unknown --kv-dtype"),
        ("h100-sxm", "llama-3.1-8b", {"kv_dtype": "nvfp4"}, UnsupportedError, "only on CC 10.x"),
        (
            "h100-sxm",
            "llama-3.1-8b",
            {"engine": "sglang", "offload": "native"},
            UnsupportedError,
            "does not work",
        ),
        ("h100-sxm", "llama-3.1-8b", {"offload": "hicache"}, UnsupportedError, "does not work with vllm"),
        (
            "h100-sxm",
            "llama-3.1-8b",
            {"engine": "sglang", "offload": "hicache", "remote_url": "redis://h:1"},
            UnsupportedError,
            "LMCache",
        ),
        (
            "h100-sxm",
            "llama-3.1-8b",
            {"offload": "none", "remote_url": "redis://h:1"},
            UnsupportedError,
            "none",
        ),
    ],
)
def test_bad_requests_raise_exit_2(
    hw: str, model: str, request_: dict[str, Any], error: type, needle: str
) -> None:
    with pytest.raises(error, match=needle) as info:
        plan_for(hw, model, **request_)
    assert info.value.exit_code == 2 and info.value.hint


def test_chunk_size_grows_above_128k(plan_for: PlanFor) -> None:
    long_llama = catalog_model("llama-3.1-8b").model_copy(update={"max_context": 1024 * 1024})
    assert plan_for("h200", long_llama, context=131072).cache.chunk_size == 256
    assert plan_for("h200", long_llama, context=131073).cache.chunk_size == 512


def test_remote_url_password_never_enters_the_plan(plan_for: PlanFor) -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b", remote_url="redis://kv:s3cret-pass@cache.local:6379/0")
    assert plan.transfer.remote_url == "redis://kv:***@cache.local:6379/0"
    remote = plan.tier("remote")
    assert remote is not None and remote.url == plan.transfer.remote_url
    assert "s3cret-pass" not in plan.model_dump_json()
    assert plan.transfer.connector == "lmcache-mp" and plan.tier("cpu") is not None


def test_sglang_with_a_remote_store_plans_lmcaches_cache_server(plan_for: PlanFor) -> None:
    """HiCache has no remote tier: --offload auto takes LMCache's cache server, which has one."""
    plan = plan_for("h100-sxm", "llama-3.1-8b", engine="sglang", remote_url="redis://cache.local:6379")
    assert plan.transfer.connector == "lmcache-mp"
    assert [t.kind for t in plan.cache.tiers][-1] == "remote"
    without = plan_for("h100-sxm", "llama-3.1-8b", engine="sglang")
    assert without.transfer.connector == "hicache"


def test_cuda_auto_plans_the_cache_server_and_says_why_not_in_process(plan_for: PlanFor) -> None:
    plan = plan_for("h100-sxm", "llama-3.1-8b")
    assert plan.transfer.connector == "lmcache-mp"
    assert "LMCache#3927" in plan.reasons["connector"] and "--offload lmcache" in plan.reasons["connector"]
    asked = plan_for("h100-sxm", "llama-3.1-8b", offload="lmcache")
    assert asked.transfer.connector == "lmcache"
    assert "deprecating" in asked.reasons["connector"]


def test_probed_remote_store_sizes_the_tier(plan_for: PlanFor) -> None:
    url = "redis://cache.local:6379"
    info = RemoteInfo(url=url, reachable=False, error="connection refused", maxmemory_bytes=100 * GIB)
    snap = snapshot("h100-sxm").model_copy(update={"remote": info})
    plan = plan_for(snap, "llama-3.1-8b", remote_url=url)
    remote = plan.tier("remote")
    assert remote is not None and remote.size_bytes == 100 * GIB
    assert any("unreachable" in w for w in plan.warnings)


def test_busy_gpu_lowers_utilization(plan_for: PlanFor) -> None:
    snap = snapshot("h100-sxm")
    gpu = snap.gpus[0]
    busy = gpu.model_copy(update={"memory_free_bytes": int(gpu.memory_total_bytes * 0.5)})  # type: ignore[operator]
    plan = plan_for(snap.model_copy(update={"gpus": [busy]}), "llama-3.1-8b")
    assert plan.cache.gpu_memory_utilization == 0.48
    assert "only 50%" in plan.reasons["gpu_memory_utilization"]


def test_mig_and_mixed_gpus_warn(plan_for: PlanFor) -> None:
    snap = snapshot("8x-h100")
    gpus = list(snap.gpus)
    gpus[1] = gpus[1].model_copy(update={"mig_enabled": True, "name": "NVIDIA H100 PCIe"})
    plan = plan_for(snap.model_copy(update={"gpus": gpus}), "llama-3.1-8b", tp=2)
    assert any("MIG" in w for w in plan.warnings) and any("differ" in w for w in plan.warnings)


def test_engine_versions_override_the_snapshot(plan_for: PlanFor) -> None:
    plan = plan_for("l40s", "llama-3.1-8b", "agent-multi-turn", engine_versions={"lmcache": "0.5.6"})
    assert not any("LMCache is not installed" in w for w in plan.warnings)


def test_gqa_heads_replicate_beyond_kv_heads(plan_for: PlanFor) -> None:
    one = plan_for("8x-h100", "qwen2.5-7b", tp=1)
    four = plan_for("8x-h100", "qwen2.5-7b", tp=4)
    assert footprint_for(four).session_bytes == footprint_for(one).session_bytes
    assert four.cache.tiers[0].size_bytes > 3 * one.cache.tiers[0].size_bytes


def test_json_has_the_documented_keys(plan_for: PlanFor) -> None:
    data = plan_for("8x-h100", "llama-3.1-70b", "rag-long-doc", users=32).model_dump(mode="json")
    for key in (
        "engine",
        "kv_cache_dtype",
        "kv_bytes_per_token",
        "model",
        "tiers",
        "connector",
        "chunk_size",
        "max_model_len",
        "tensor_parallel_size",
        "gpu_memory_utilization",
        "concurrency",
        "warnings",
        "reasons",
        "feasible",
        "errors",
    ):
        assert key in data
    for key in (
        "name",
        "kv_bytes_per_token",
        "layers",
        "kv_heads",
        "head_dim",
        "attention",
        "max_context",
        "params",
    ):
        assert key in data["model"]
    for tier in data["tiers"]:
        for key in ("kind", "size_bytes", "tokens", "read_bw_bytes_per_s", "breakeven_tokens"):
            assert key in tier
    assert data["tiers"][2]["path"] == "/raid"


PURE = [
    plan_module,
    assemble,
    tiers,
    layout,
    parallel,
    cuda_plan,
    cpu_plan,
    kv,
    dtype,
    breakeven,
    connector,
    request,
    notes,
    gpu_specs,
    retention,
    ttft,
    replicas,
    # the trace's
    capacity,
    trace_sizing,
    offload_verdict,
    trace_schema,
    trace_ttft,
    served_ttft,
]


@pytest.mark.parametrize("module", PURE, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_planning_core_is_pure(module: object) -> None:
    """No I/O, clock, environment or subprocess in the planning modules (resolve.py is the one that reads)."""
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert not imported & {"os", "pathlib", "subprocess", "time", "datetime", "socket", "random", "shutil"}
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "open" not in calls and "print" not in calls
