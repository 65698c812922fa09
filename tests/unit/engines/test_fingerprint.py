"""The KV fingerprint changes with everything that changes stored KV bytes, and nothing else."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvstack.engines.fingerprint import KvIdentity, fingerprint, namespace

BASE = KvIdentity(
    model="/models/demo",
    weights="real",
    config_sha256="ab" * 32,
    model_dtype="bfloat16",
    kv_cache_dtype="auto",
    engine="vllm",
    engine_version="0.32.0",
    connector="lmcache",
    connector_version="0.5.6",
    tensor_parallel_size=1,
    block_tokens=256,
)


def test_fingerprint_is_stable_and_short() -> None:
    fp = fingerprint(BASE)
    assert fp == fingerprint(replace(BASE))
    assert len(fp) == 12 and all(c in "0123456789abcdef" for c in fp)


@pytest.mark.parametrize(
    "change",
    [
        {"model": "/models/other"},
        {"weights": "dummy"},
        {"config_sha256": "cd" * 32},
        {"model_dtype": "float16"},
        {"kv_cache_dtype": "fp8"},
        {"engine": "sglang"},
        {"engine_version": "0.33.0"},
        {"connector": "lmcache-mp"},
        {"connector_version": "0.5.7"},
        {"tensor_parallel_size": 2},
        {"block_tokens": 64},
    ],
)
def test_every_field_that_changes_kv_changes_the_fingerprint(change: dict[str, object]) -> None:
    assert fingerprint(replace(BASE, **change)) != fingerprint(BASE)  # type: ignore[arg-type]


def test_namespace_is_a_safe_readable_directory_name() -> None:
    assert namespace("meta-llama/Llama 3.1:8B", "0123456789ab") == "Llama-3.1-8B-0123456789ab"
    assert namespace("../..", "0123456789ab") == "model-0123456789ab"
    assert "/" not in namespace("/abs/path/model", "0123456789ab")
