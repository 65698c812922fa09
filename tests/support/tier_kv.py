"""One engine's KV layout on a shared tier (runtime/tier_kv.py), for the tests that compare layouts."""

from __future__ import annotations

from kvstack.runtime.tier_kv import TierKv

SAMPLE_KV = TierKv(
    model="/models/smollm2",
    revision="abcdef012345",
    kv_cache_dtype="auto",
    chunk_tokens=256,
    hash_algorithm="sha256_cbor",
    connector="lmcache-mp",
    connector_version="0.5.6",
)
