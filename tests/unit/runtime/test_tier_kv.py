"""TierKv: the fields two writers of a shared tier must agree on; who set them does not count."""

from __future__ import annotations

from kvstack.runtime.tier_kv import ENVIRONMENT, FIELDS
from tests.support.tier_kv import SAMPLE_KV

BASE = SAMPLE_KV


def test_the_fingerprint_is_stable_and_ignores_who_set_a_field() -> None:
    again = BASE.model_copy(update={"set_by": {"chunk_tokens": "engine arguments after --"}})
    assert BASE.fingerprint() == again.fingerprint() and len(BASE.fingerprint()) == 12
    assert BASE.differences(again) == []


def test_every_compared_field_moves_the_fingerprint_and_is_named() -> None:
    changed = {
        "model": "/models/other",
        "revision": "000000000000",
        "weights": "dummy",
        "kv_cache_dtype": "fp8",
        "chunk_tokens": 512,
        "block_tokens": 32,
        "hash_algorithm": "xxhash",
        "hash_seed": "7",
        "tensor_parallel_size": 2,
        "connector": "lmcache",
        "connector_version": "0.5.7",
    }
    assert set(changed) == set(FIELDS)
    for name, value in changed.items():
        other = BASE.model_copy(update={name: value})
        assert other.fingerprint() != BASE.fingerprint(), name
        assert BASE.differences(other) == [name]


def test_a_value_is_shown_with_who_set_it() -> None:
    seeded = BASE.model_copy(update={"hash_seed": "7", "set_by": {"hash_seed": ENVIRONMENT}})
    assert seeded.shown("hash_seed") == "7 (environment)"
    assert BASE.shown("hash_seed") == "unset (kvstack)"
    assert BASE.shown("chunk_tokens") == "256 (kvstack)"
