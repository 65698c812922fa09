"""Which tier a tier step proves: per connector, how every copy above the tier is dropped.

A step called ``tier:disk`` must have served its prompt from disk: the GPU copy AND the DRAM copy
gone first. Each connector offers different means, read in the installed code; each one's spec
holds its step (``isolate`` in kvstack/connectors/<connector>.py), and an engine with a cache of its
own takes that one when no connector it runs is named (``EngineSpec.default_connector``):

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
- unknown (``kvstack validate --url`` without ``--offload``, no cache server): the same
  (``connectors.spec.isolate_unknown``).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstack.connectors import SPECS
from kvstack.connectors.engines import ENGINE_SPECS
from kvstack.connectors.spec import ABOVE, ConnectorSpec, Drop, StepPlan, isolate_unknown

__all__ = ["ABOVE", "UNKNOWN_CHUNK", "Drop", "StepPlan", "chunk_tokens", "covering_tokens", "step_plan"]

UNKNOWN_CHUNK = 256  # the chunk of a connector kvstack does not know (each spec has its own)


def _connector(connector: str | None, engine: str) -> ConnectorSpec | None:
    """The spec whose tier steps reach below ``engine`` through ``connector``: the one named, unless
    it moves nothing on this engine (none, unknown, or one the engine does not run) and the engine
    has a connector of its own (SGLang: HiCache); None: kvstack cannot tell."""
    named = SPECS.get(connector or "")
    own = ENGINE_SPECS.get(engine)
    default = own.default_connector if own is not None else ""
    if default and (named is None or not named.offloads or engine not in named.engines):
        return SPECS[default]
    return named


def step_plan(connector: str | None, engine: str, tier: str, tiers: Sequence[str]) -> StepPlan:
    """How to make the next request reach ``tier`` through ``connector``, and what it then proves.

    ``tiers`` are the offload tiers present (the step names only those it could not drop).
    """
    spec = _connector(connector, engine)
    isolate = spec.isolate if spec is not None else isolate_unknown
    return isolate(tier, frozenset(tiers))


def chunk_tokens(connector: str | None, planned: int | None) -> int:
    spec = SPECS.get(connector or "")
    return planned or (spec.default_chunk_tokens if spec is not None else UNKNOWN_CHUNK)


def covering_tokens(prompt_tokens: int, chunk: int) -> int:
    """Hit tokens that mean a tier served the prompt: its full chunks less one.

    A tier stores whole chunks (a partial last chunk is not saved by default) and the engine always
    recomputes at least the last token, so a prompt of N tokens can hit at most floor(N / chunk)
    chunks; one chunk of slack covers an engine that recomputes a whole last chunk.
    """
    return max(prompt_tokens // chunk - 1, 1) * chunk
