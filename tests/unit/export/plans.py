"""Plans for the exporter tests, built directly from the fixed Plan schema (planning/schema.py).

Geometry of Llama-3.1-8B (config.json: 32 layers, 8 KV heads, head_dim 128, bf16 -> 128 KiB/token;
shared/REFERENCE.md); tier sizes are arbitrary but distinct so a test can tell them apart.
"""

from __future__ import annotations

from kvstack.planning.schema import Plan, Tier, Workload
from tests.support.models import GIB, LLAMA_8B


def make_plan(
    *,
    engine: str = "vllm",
    connector: str = "lmcache",
    tp: int = 2,
    cpu_gib_per_rank: int | None = 96,
    disk_gib_per_rank: int | None = 700,
    remote_gib: int | None = None,
    remote_url: str | None = None,
    model_path: str = "meta-llama/Llama-3.1-8B-Instruct",
    platform: str = "cuda",
    kv_dtype: str = "fp8",
) -> Plan:
    kv_bytes = LLAMA_8B.kv_bytes_per_token // 2
    tiers = [
        Tier(
            kind="gpu",
            size_bytes=50 * GIB * tp,
            size_bytes_per_rank=50 * GIB,
            tokens=50 * GIB * tp // kv_bytes,
        )
    ]
    if cpu_gib_per_rank is not None:
        size = cpu_gib_per_rank * GIB
        tiers.append(
            Tier(kind="cpu", size_bytes=size * tp, size_bytes_per_rank=size, tokens=size * tp // kv_bytes)
        )
    if disk_gib_per_rank is not None:
        size = disk_gib_per_rank * GIB
        tiers.append(
            Tier(
                kind="disk",
                size_bytes=size * tp,
                size_bytes_per_rank=size,
                tokens=size * tp // kv_bytes,
                path="/nvme/kvstack/kv",
            )
        )
    if remote_gib is not None:
        size = remote_gib * GIB
        tiers.append(
            Tier(
                kind="remote",
                size_bytes=size,
                size_bytes_per_rank=size,
                tokens=size // kv_bytes,
                url=remote_url,
            )
        )
    return Plan.model_validate(
        {
            "engine": engine,
            "platform": platform,
            "model": LLAMA_8B,
            "model_path": model_path,
            "kv_cache_dtype": kv_dtype,
            "kv_bytes_per_token": kv_bytes,
            "tiers": tiers,
            "connector": connector,
            "chunk_size": 256,
            "max_model_len": 131072,
            "tensor_parallel_size": tp,
            "gpu_memory_utilization": 0.9,
            "weight_bytes": 16_060_000_000,
            "workload": Workload(name="rag-long-doc", context_tokens=131072, users=8),
            "remote_url": remote_url,
        }
    )
