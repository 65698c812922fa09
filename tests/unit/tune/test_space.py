"""The candidate space: connectors that run on the platform x the installed knobs, sizes off the curve."""

from __future__ import annotations

import pytest

from kvstack.errors import InputError
from kvstack.planning.predict.capacity import capacity_curve
from kvstack.tune import knobs
from kvstack.tune.space import Candidate, Limits, break_even_tokens, candidate_space, curve_sizes, knee_blocks

from .helpers import KIB, PLAIN, offload, sample

GIB = 1 << 30


def _space(platform: knobs.Platform, block: int, dram_max: int, disk_max: int) -> list[Candidate]:
    trace = sample(64)
    curve = capacity_curve(trace.requests, 64)
    limits = Limits(platform, block, 17408, KIB, dram_max, disk_max)
    lengths = [r.input_length for r in trace.requests]
    return candidate_space(limits, curve_sizes(curve, int(64 * KIB)), lengths, PLAIN, offload(0.015))


def test_the_curve_gives_knee_95_percent_and_max_in_that_order() -> None:
    curve = capacity_curve(sample().requests)
    sizes = curve_sizes(curve, 512)
    assert 0 < sizes.knee <= sizes.p95 <= sizes.max
    knee = knee_blocks(curve)
    # Past the knee the curve rises more slowly (per doubling of the size) than before it.
    assert curve.ratio_at(knee) - curve.ratio_at(knee // 2) > curve.ratio_at(knee * 2) - curve.ratio_at(knee)


def test_cpu_candidates_are_none_and_lmcache_mp_at_block_multiples() -> None:
    space = _space("cpu", 128, GIB, 10 * GIB)
    assert space[0] == Candidate("none")
    assert {c.connector for c in space} == {"none", "lmcache-mp"}
    offload_ = [c for c in space if c.offloads]
    assert {c.chunk_tokens for c in offload_} == {128, 256, 512, 1024}
    assert all(c.dram_bytes <= GIB and c.disk_bytes <= 10 * GIB for c in offload_)
    assert all(c.disk_bytes == 0 or c.disk_bytes > c.dram_bytes for c in offload_)
    assert {c.dram_bytes for c in offload_} >= {GIB}  # the hardware's most
    # Every gate on LMCache's server is a prompt gate kvstack's gated connector serves (its knob).
    gated = [c for c in offload_ if c.gate is not None]
    assert gated and all(c.gate.kind == "prompt" for c in gated)  # type: ignore[union-attr]
    assert all(c.knobs()["kvstack.gate_prompt_tokens"] == c.gate.tokens for c in gated)  # type: ignore[union-attr]
    assert all(c.not_settable == "" for c in offload_)
    # Unique, and no gate that gates nothing (a threshold at or below the shortest prompt).
    assert len(set(space)) == len(space)
    shortest = min(r.input_length for r in sample(64).requests)
    assert all(c.gate.tokens > shortest for c in gated)  # type: ignore[union-attr]


def test_cuda_adds_in_process_lmcache_with_its_retrieve_gate_and_native() -> None:
    space = _space("cuda", 16, GIB, 0)
    assert {c.connector for c in space} == {"none", "lmcache-mp", "lmcache", "native"}
    inproc = [c for c in space if c.connector == "lmcache" and c.gate is not None]
    assert inproc and all(c.gate.kind == "load" and c.not_settable == "" for c in inproc)  # type: ignore[union-attr]
    assert all(c.knobs()["min_retrieve_tokens"] == c.gate.tokens for c in inproc)  # type: ignore[union-attr]
    assert all(c.disk_bytes == 0 for c in space)  # no disk qualifies


def test_knobs_carry_the_connectors_own_names() -> None:
    c = Candidate("lmcache-mp", 256, 3 * GIB // 2, 10 * GIB)
    assert c.knobs() == {"--chunk-size": 256.0, "--l1-size-gb": 1.5, "max_capacity_gb": 10.0}
    assert Candidate("native", 16, 4 * GIB).knobs() == {"--kv-offloading-size": 4.0}
    # LMCache's server holds the middle of its 80% / 20% eviction band.
    assert c.blocks(KIB) == (int(1.5 * GIB * 0.72 // (256 * KIB)), int(10 * GIB * 0.72 // (256 * KIB)))


def test_break_even_is_the_cost_over_what_a_tier_token_saves() -> None:
    assert break_even_tokens(PLAIN, offload(0.015)) == -(-0.015 // (1.03e-4 - 3.8e-6))
    assert break_even_tokens(PLAIN, offload(0.0)) is None


@pytest.mark.parametrize(
    ("connector", "values", "needle"),
    [
        ("lmcache-mp", {"--chunk-size": 200}, "not a multiple of the engine's 128-token KV block"),
        ("lmcache-mp", {"--chunk-size": 256.5}, "must be a whole number"),
        ("lmcache-mp", {"max_capacity_gb": -1}, "must be at least 0"),
        ("lmcache-mp", {"min_retrieve_tokens": 512}, "has no knob 'min_retrieve_tokens'"),
        ("lmcache-mp", {"kvstack.gate_prompt_tokens": 100.5}, "gate_prompt_tokens must be a whole number"),
    ],
)
def test_knob_values_the_installed_connector_rejects_are_bad_input(
    connector: str, values: dict[str, float], needle: str
) -> None:
    with pytest.raises(InputError, match=needle):
        knobs.check_knobs(knobs.check_connector(connector, "cpu"), values, 128)


def test_a_connector_the_platform_cannot_run_is_bad_input() -> None:
    with pytest.raises(InputError, match="connector native does not run on the cpu platform") as err:
        knobs.check_connector("native", "cpu")
    assert err.value.hint == "choose from: none, lmcache-mp"
    with pytest.raises(InputError, match="unknown connector 'redis'"):
        knobs.check_connector("redis", "cuda")
    knobs.check_knobs(
        knobs.check_connector("lmcache-mp", "cpu"), {"--chunk-size": 256, "--l1-size-gb": 1.5}, 128
    )


def test_tunes_connectors_are_the_specs_it_may_choose_in_its_order() -> None:
    from kvstack.connectors import SPECS

    tuned = [s for s in SPECS.values() if s.tune_platforms]
    assert list(knobs.CONNECTORS) == ["none", "lmcache-mp", "lmcache", "native"]
    for spec in tuned:
        c = knobs.CONNECTORS[spec.name]
        assert (c.platforms, c.readmit, c.knobs, c.gate) == (
            spec.tune_platforms,
            spec.readmits_lower_hits,
            spec.knobs,
            spec.gate,
        )
    assert knobs.BASELINE == "none" and knobs.CALIBRATED == "lmcache-mp"
    assert not knobs.offloads("none") and knobs.offloads("native") and knobs.offloads("unknown")


def test_a_candidates_knobs_are_its_specs_and_its_gate() -> None:
    from kvstack.tune.space import Gate

    mp = Candidate("lmcache-mp", 256, 3 * GIB // 2, 4 * GIB, Gate("prompt", 900))
    assert mp.knobs() == {
        "--chunk-size": 256.0,
        "--l1-size-gb": 1.5,
        "max_capacity_gb": 4.0,
        "kvstack.gate_prompt_tokens": 900.0,
    }
    assert Candidate("native", 16, GIB, 0).knobs() == {"--kv-offloading-size": 1.0}
    assert Candidate("none").knobs() == {} and Candidate("none").label == "none"
    # LMCache's server keeps its tiers 72% full on average; the others all of it.
    assert mp.blocks(KIB) == (int(3 * GIB // 2 * 0.72 // (256 * KIB)), int(4 * GIB * 0.72 // (256 * KIB)))
    assert Candidate("lmcache", 256, GIB).blocks(KIB) == (GIB // (256 * KIB), 0)


def test_native_is_tuned_on_its_block_without_a_disk_tier() -> None:
    native = [c for c in _space("cuda", 16, GIB, 10 * GIB) if c.connector == "native"]
    assert native and {(c.chunk_tokens, c.disk_bytes) for c in native} == {(16, 0)}


def test_limits_are_the_most_the_hardware_allows_each_tier() -> None:
    from kvstack.model.source import resolve_model
    from kvstack.planning.plan import PlanRequest, make_plan
    from kvstack.planning.workload import default_workload
    from kvstack.profiles import profiles_dir
    from kvstack.tune.limits import limits_of, most_plan
    from tests.unit.planning.helpers import snapshot

    demo = resolve_model(str(profiles_dir() / "demo"))
    wl = default_workload(demo.geometry.max_context)
    hw = snapshot("no-gpu")
    usual = make_plan(hw, demo.geometry, demo.path, PlanRequest(), wl)
    limits = limits_of(most_plan(hw, demo.geometry, demo.path, PlanRequest(), wl))
    assert (limits.platform, limits.engine_block_tokens, limits.bytes_per_token) == ("cpu", 128, 1024.0)
    assert limits.engine_pool_tokens == usual.cache.tiers[0].tokens
    l1, disk = usual.tier("cpu"), usual.tier("disk")
    assert l1 is not None and disk is not None
    assert limits.dram_max_bytes > l1.size_bytes and limits.disk_max_bytes > disk.size_bytes
    assert (
        limits_of(most_plan(hw, demo.geometry, demo.path, PlanRequest(), wl), 17408).engine_pool_tokens
        == 17408
    )


def test_a_gate_knob_sets_the_connectors_own_gate_and_zero_turns_it_off() -> None:
    from kvstack.tune.ranking import with_knobs
    from kvstack.tune.space import Gate

    base = Candidate("lmcache-mp", 256, GIB)
    gated = with_knobs(base, {"kvstack.gate_prompt_tokens": 1024})
    assert (
        gated.gate == Gate("prompt", 1024, "--knob") and gated.knobs()["kvstack.gate_prompt_tokens"] == 1024
    )
    assert with_knobs(gated, {"kvstack.gate_prompt_tokens": 0}).gate is None
    inproc = with_knobs(Candidate("lmcache", 256, GIB), {"min_retrieve_tokens": 512})
    assert inproc.gate == Gate("load", 512, "--knob")
