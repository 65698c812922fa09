"""What a writer of a shared KV tier stores its KV as: the fields two writers must agree on to read
each other's keys.

LMCache names a chunk on its remote tier by the model name, the world size and the worker, the
rolling hash of the chunk's tokens and its format (lmcache 0.5.6: ``CacheEngineKey``, the MP
server's ``ObjectKey``); the hash depends on the algorithm, its seed (vLLM's NONE_HASH, taken from
PYTHONHASHSEED when it is set: vllm/v1/core/kv_cache_utils.py ``resolve_none_hash_seed``) and the
chunk size; the bytes on the KV dtype and the tensor-parallel split. Writers that differ in any of
them store keys the others never look up: the shared tier's hit rate is 0 and nothing fails
(LMCache#2581, LMCache#2903). Rendering fills one of these per engine on a remote tier
(engines/tier_kv.py); serving records it on the tier and compares (serving/shared_tier_kv.py).
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field

# Field -> how a person names it (the refusal names the field that differs).
FIELDS: dict[str, str] = {
    "model": "model",
    "revision": "model revision",
    "weights": "weights",
    "kv_cache_dtype": "KV dtype",
    "chunk_tokens": "chunk size",
    "block_tokens": "block size",
    "hash_algorithm": "hash algorithm",
    "hash_seed": "hash seed (PYTHONHASHSEED)",
    "tensor_parallel_size": "tensor-parallel size",
    "connector": "connector",
    "connector_version": "connector version",
}
KVSTACK = "kvstack"
ENGINE_ARGS = "engine arguments after --"
ENVIRONMENT = "environment"


class TierKv(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str  # as the engine is given it (LMCache's keys hold it), @commit for a hub snapshot
    revision: str | None = None  # config.json's sha256 (12 hex) when the model is local
    weights: str = "real"  # "dummy": random weights write other bytes
    kv_cache_dtype: str
    chunk_tokens: int | None = None  # LMCache's chunk_size: the hashed unit
    block_tokens: int | None = None  # the engine's --block-size; None: its default
    hash_algorithm: str
    hash_seed: str | None = None  # PYTHONHASHSEED as the processes see it; None: unset
    tensor_parallel_size: int = 1
    connector: str
    connector_version: str | None = None
    # Field -> who set it: kvstack, the engine arguments after --, the environment.
    set_by: dict[str, str] = Field(default_factory=dict)

    def compared(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in FIELDS}

    def fingerprint(self) -> str:
        """12 hex digits of sha256 over the compared fields (who set them does not count)."""
        canonical = json.dumps(self.compared(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]

    def differences(self, other: TierKv) -> list[str]:
        """The fields (by name) where ``other`` stores its KV otherwise."""
        mine, theirs = self.compared(), other.compared()
        return [name for name in FIELDS if mine[name] != theirs[name]]

    def shown(self, name: str) -> str:
        """``256 (kvstack)``: one field's value and who set it."""
        value = getattr(self, name)
        return f"{'unset' if value is None else value} ({self.set_by.get(name, KVSTACK)})"

    def summary(self) -> str:
        """Every compared field in one line, for listings."""
        return ", ".join(
            f"{FIELDS[name]} {'unset' if v is None else v}" for name, v in self.compared().items()
        )
