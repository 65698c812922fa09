"""``native``: vLLM's own offloading (OffloadingConnector, ``--kv-offloading-backend native``).

Read in the installed vLLM (0.32):
- tiers: a CPU tier (``--kv-offloading-size``, the TOTAL across TP ranks: vllm/config/vllm.py) in
  /dev/shm, which maps ~1.92x its size (vllm#53042), and a file-system tier through
  TieringOffloadingSpec (vllm/v1/kv_offload/tiering/spec.py); no remote tier;
- carriage: OffloadingConnector declares SupportsHMA: several groups, sliding windows, MLA and
  state-space state go as allocated; CUDA only;
- validation: ``POST /reset_prefix_cache?reset_external=true`` also resets the connector's primary
  (CPU) tier; secondary tiers (fs) "are intentionally not reset" (vllm/v1/kv_offload/tiering/
  manager.py ``reset_cache``), so the disk step proves the disk tier;
- knobs (tune): ``--kv-offloading-size`` (vllm/config/cache.py:266) and ``store_threshold`` in
  ``kv_connector_extra_config`` (vllm/v1/kv_offload/cpu/spec.py:142-156); its chunk is vLLM's block.
"""

from __future__ import annotations

from kvstack.connectors.spec import ConnectorSpec, Knob, Sizing, StepPlan, TransferOverlap, combined, gib

SHM_FACTOR = 1.92  # vllm#53042: the /dev/shm mmap takes this much per byte of tier


def _isolate(tier: str, present: frozenset[str]) -> StepPlan:
    if tier == "cpu":
        return StepPlan(tier, "tier:cpu", ("gpu",))
    if tier == "disk":
        return StepPlan(tier, "tier:disk", ("gpu_and_external",))
    return combined(
        tier, ("gpu_and_external",), "vLLM's native offload has no remote tier", present - {"cpu"}
    )


def _knob_values(chunk_tokens: int, dram_bytes: int, disk_bytes: int) -> dict[str, float]:
    del chunk_tokens, disk_bytes
    return {"--kv-offloading-size": gib(dram_bytes)}


SPEC = ConnectorSpec(
    name="native",
    title="vLLM native offloading (OffloadingConnector)",
    engines=("vllm",),
    platforms=frozenset({"cuda"}),
    tiers=frozenset({"cpu", "disk"}),
    # Loads: the scheduler's load jobs run beside other requests' steps (the request waits for them:
    # get_num_new_matched_tokens returns (hits, True), offloading/scheduler.py); stores are deferred
    # to the next step's start and run on their own streams (offloading_connector.py wait_for_save,
    # offloading/worker.py prepare_store_kv).
    overlap=TransferOverlap(
        loads=frozenset({"cpu", "disk"}),
        stores=frozenset({"cpu", "disk"}),
        source="vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py "
        "get_num_new_matched_tokens (async loads), offloading/worker.py prepare_store_kv (deferred stores)",
        load_waits=True,
    ),
    reason="vLLM native offloading (OffloadingConnector): DRAM tier in /dev/shm",
    exports=frozenset({"helm", "compose", "systemd", "kserve", "llm-d"}),
    builtin_flags=("--kv-offloading-backend", "native"),  # vllm/config/cache.py
    auto_rank={("vllm", "cuda"): 1},
    sizing=Sizing(dram_figure="total", shm_factor=SHM_FACTOR),
    default_chunk_tokens=16,
    isolate=_isolate,
    knobs=(
        Knob("--kv-offloading-size", None, 0, False, "vllm/config/cache.py:266"),
        Knob("store_threshold", 0, 0, True, "vllm/v1/kv_offload/cpu/spec.py:146"),
    ),
    knob_values=_knob_values,
    tune_platforms=frozenset({"cuda"}),
    tune_chunk_is_block=True,
    # CPU memory only: its knobs size no fs tier (--kv-offloading-size is the CPU tier's), so tune
    # models it without the disk tier its spec can serve.
    tune_disk=False,
    tune_order=3,
)
