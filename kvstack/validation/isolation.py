"""Which tier a tier step proves: per connector, how every copy above the tier is dropped.

A step called ``tier:disk`` must have served its prompt from disk: the GPU copy AND the DRAM copy
gone first. Each connector offers different means, read in the installed code:

- ``lmcache-mp`` (LMCache's cache server, lmcache 0.5.6): ``POST /cache/clear`` on its HTTP port
  empties L1 (DRAM) and keeps the L2 adapters; the server loads a chunk from the first adapter
  that holds it, so for the remote tier the prompt's files in the disk tier are moved aside.
- ``native`` (vLLM's OffloadingConnector, vLLM 0.32): ``POST /reset_prefix_cache?reset_external=true``
  also resets the connector's primary (CPU) tier; TieringOffloadingSpec's secondary tiers (fs)
  "are intentionally not reset" (vllm/v1/kv_offload/tiering/manager.py ``reset_cache``).
- ``hicache`` (SGLang 0.5.23): ``POST /flush_cache`` resets the radix tree, and HiRadixCache's reset
  empties the host pool too, while the storage backend (``/hicache/storage-backend/clear`` is a
  separate route) keeps its pages: flush proves the storage (disk) tier. The DRAM tier is proven
  by overflowing the GPU pool instead, which keeps the host pool.
- ``lmcache`` in-process (LMCacheConnectorV1): only LMCache's internal API server can clear one
  backend (``DELETE /cache/clear?locations=LocalCPUBackend``), and that server also serves
  ``POST /run_script`` without authentication: kvstack does not enable it. So its disk and remote
  steps cannot drop DRAM, and are named for what they prove (``tier:cpu+disk``).
- unknown (``kvstack validate --url`` without ``--offload``, no cache server): the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Drop = Literal[
    "gpu",  # the engine's prefix cache: reset endpoint, or overflow the pool
    "gpu_and_external",  # vLLM reset with reset_external=true: GPU + the connector's CPU tier
    "flush_all_but_storage",  # SGLang /flush_cache: GPU + HiCache host pool
    "gpu_overflow",  # overflow the GPU pool (keeps SGLang's host pool)
    "cache_server_l1",  # LMCache cache server POST /cache/clear
    "hide_disk_files",  # move the prompt's files in the disk tier aside for one request
]
ABOVE = {"cpu": (), "disk": ("cpu",), "remote": ("cpu", "disk")}
# Default chunk (the unit a tier stores and hits in) per connector, when the plan does not say.
DEFAULT_CHUNK = {"lmcache": 256, "lmcache-mp": 256, "native": 16, "hicache": 64}
UNKNOWN_CHUNK = 256


@dataclass(frozen=True)
class StepPlan:
    tier: str  # the tier the step is for: cpu, disk, remote
    name: str  # what the step proves: tier:disk, or tier:cpu+disk when DRAM could not be dropped
    drops: tuple[Drop, ...]
    not_isolated: tuple[str, ...] = ()  # tiers above that may still have served the prompt
    why: str = ""

    @property
    def isolated(self) -> bool:
        return not self.not_isolated


def _combined(tier: str, drops: tuple[Drop, ...], why: str, present: set[str]) -> StepPlan:
    above = tuple(t for t in ABOVE[tier] if t in present)
    if not above:
        return StepPlan(tier, f"tier:{tier}", drops)
    return StepPlan(tier, "tier:" + "+".join([*above, tier]), drops, above, why)


def step_plan(connector: str | None, engine: str, tier: str, tiers: Sequence[str]) -> StepPlan:
    """How to make the next request reach ``tier`` through ``connector``, and what it then proves.

    ``tiers`` are the offload tiers present (the step names only those it could not drop).
    """
    present = set(tiers)
    if connector == "lmcache-mp":
        if tier == "cpu":
            return StepPlan(tier, "tier:cpu", ("gpu",))
        hide: tuple[Drop, ...] = ("hide_disk_files",) if tier == "remote" and "disk" in present else ()
        return StepPlan(tier, f"tier:{tier}", ("cache_server_l1", "gpu", *hide))
    if engine == "sglang" or connector == "hicache":
        if tier == "cpu":
            return StepPlan(tier, "tier:cpu", ("gpu_overflow",))
        if tier == "disk":
            return StepPlan(tier, "tier:disk", ("flush_all_but_storage",))
        why = "HiCache has no remote tier kvstack can isolate from its storage backend"
        return _combined(tier, ("flush_all_but_storage",), why, present - {"cpu"})
    if connector == "native":
        if tier == "cpu":
            return StepPlan(tier, "tier:cpu", ("gpu",))
        if tier == "disk":
            return StepPlan(tier, "tier:disk", ("gpu_and_external",))
        why = "vLLM's native offload has no remote tier"
        return _combined(tier, ("gpu_and_external",), why, present - {"cpu"})
    if tier == "cpu":
        return StepPlan(tier, "tier:cpu", ("gpu",))
    if connector == "lmcache":
        why = (
            "in-process LMCache can empty its DRAM tier only through its internal API server, which "
            "kvstack does not enable (it serves POST /run_script without authentication)"
        )
    else:
        why = "the connector is not known (kvstack validate --offload names it), so DRAM was not emptied"
    return _combined(tier, ("gpu",), why, present)


def chunk_tokens(connector: str | None, planned: int | None) -> int:
    return planned or DEFAULT_CHUNK.get(connector or "", UNKNOWN_CHUNK)


def covering_tokens(prompt_tokens: int, chunk: int) -> int:
    """Hit tokens that mean a tier served the prompt: its full chunks less one.

    A tier stores whole chunks (a partial last chunk is not saved by default) and the engine always
    recomputes at least the last token, so a prompt of N tokens can hit at most floor(N / chunk)
    chunks; one chunk of slack covers an engine that recomputes a whole last chunk.
    """
    return max(prompt_tokens // chunk - 1, 1) * chunk
