"""``hicache``: SGLang's HiCache (``--enable-hierarchical-cache``): a host-memory pool per rank and a
storage backend (file) for the disk tier.

Read in the installed SGLang (0.5.23):
- tiers: the host pool (``--hicache-size``, decimal GB per rank: memory_pool_host.py), which must
  exceed the device pool (HostKVCache: "host memory should be larger"), and the file storage
  backend; no remote tier kvstack wires;
- carriage: SWA, MLA and Mamba hybrids (sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py),
  but a model whose every layer slides gets a PureSWARadixCache and no host tier at all
  (sglang/srt/mem_cache/registry.py);
- validation: ``POST /flush_cache`` resets the radix tree and the host pool while the storage
  backend keeps its pages, so flush proves the disk tier; the DRAM tier is proven by overflowing the
  GPU pool, which keeps the host pool.
"""

from __future__ import annotations

from kvstack.connectors.spec import ConnectorSpec, Reach, Sizing, StepPlan, TransferOverlap, combined


def _isolate(tier: str, present: frozenset[str]) -> StepPlan:
    if tier == "cpu":
        return StepPlan(tier, "tier:cpu", ("gpu_overflow",))
    if tier == "disk":
        return StepPlan(tier, "tier:disk", ("flush_all_but_storage",))
    why = "HiCache has no remote tier kvstack can isolate from its storage backend"
    return combined(tier, ("flush_all_but_storage",), why, present - {"cpu"})


SPEC = ConnectorSpec(
    name="hicache",
    title="SGLang HiCache",
    engines=("sglang",),
    platforms=frozenset({"cuda"}),
    tiers=frozenset({"cpu", "disk"}),
    # Loads: the host pool's pages are loaded layer by layer on a side stream, each attention layer
    # waiting for its own (memory_pool.py wait_layer_transfer / layer_transfer_counter); stores:
    # write-through backups on a side stream (HiRadixCache, --hicache-write-policy write_through).
    # From SGLang's code as stored here, not an installed copy.
    overlap=TransferOverlap(
        loads=frozenset({"cpu", "disk"}),
        stores=frozenset({"cpu", "disk"}),
        source="sglang/srt/mem_cache (hiradix_cache.py write-through backup, memory_pool.py "
        "wait_layer_transfer: layer-wise loads), read in the stored sglang code",
    ),
    reason="SGLang HiCache: host-memory pool per rank, file storage backend for the disk tier",
    exports=frozenset({"compose", "systemd"}),  # the Kubernetes formats run vLLM only
    builtin_flags=("--enable-hierarchical-cache",),  # sglang/srt/server_args.py
    reach={
        "cuda": Reach(
            groups=True,
            state=True,
            mla=True,
            why_groups="",
            why_state="",
            sliding_only=False,
            why_sliding_only="SGLang gives a model whose every attention layer slides a "
            "PureSWARadixCache, which never attaches HiCache's host tier (sglang/srt/mem_cache/registry.py)",
        )
    },
    auto_rank={("sglang", "cuda"): 0},
    sizing=Sizing(exceeds_gpu_pool=True, staging=False),
    default_chunk_tokens=64,
    isolate=_isolate,
)
