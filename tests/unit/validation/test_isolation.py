"""Each connector's tier steps: what they drop, what they are named for, per the installed code's facts."""

from __future__ import annotations

import pytest

from kvstack.connectors import SPECS
from kvstack.connectors.engines import engine_spec
from kvstack.connectors.spec import ConnectorSpec, isolate_unknown
from kvstack.validation.isolation import StepPlan, chunk_tokens, covering_tokens, step_plan

ALL = ["cpu", "disk", "remote"]


@pytest.mark.parametrize(
    ("connector", "engine", "tier", "name", "drops"),
    [
        # LMCache's cache server: /cache/clear empties L1; the remote step hides the disk tier's files.
        ("lmcache-mp", "vllm", "cpu", "tier:cpu", ("gpu",)),
        ("lmcache-mp", "vllm", "disk", "tier:disk", ("cache_server_l1", "gpu")),
        ("lmcache-mp", "vllm", "remote", "tier:remote", ("cache_server_l1", "gpu", "hide_disk_files")),
        # vLLM native: reset_external=true resets the CPU tier and keeps the fs secondary tier.
        ("native", "vllm", "cpu", "tier:cpu", ("gpu",)),
        ("native", "vllm", "disk", "tier:disk", ("gpu_and_external",)),
        # SGLang HiCache: the DRAM step overflows (flush would empty the host pool); the disk step flushes.
        ("hicache", "sglang", "cpu", "tier:cpu", ("gpu_overflow",)),
        ("hicache", "sglang", "disk", "tier:disk", ("flush_all_but_storage",)),
        # In-process LMCache cannot empty DRAM without its unauthenticated internal API server.
        ("lmcache", "vllm", "cpu", "tier:cpu", ("gpu",)),
        ("lmcache", "vllm", "disk", "tier:cpu+disk", ("gpu",)),
        ("lmcache", "vllm", "remote", "tier:cpu+disk+remote", ("gpu",)),
        (None, "vllm", "disk", "tier:cpu+disk", ("gpu",)),
    ],
)
def test_step_plan_per_connector(
    connector: str | None, engine: str, tier: str, name: str, drops: tuple[str, ...]
) -> None:
    plan = step_plan(connector, engine, tier, ALL)
    assert (plan.name, plan.drops) == (name, drops)
    assert plan.isolated == (name == f"tier:{tier}")
    if not plan.isolated:
        assert plan.why and set(plan.not_isolated) <= {"cpu", "disk"}


@pytest.mark.parametrize("connector", ["lmcache", "native", "hicache", None, "lmcache-mp"])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_no_step_is_called_tier_disk_without_emptying_dram(connector: str | None, engine: str) -> None:
    plan = step_plan(connector, engine, "disk", ALL)
    empties_dram = {"cache_server_l1", "gpu_and_external", "flush_all_but_storage"} & set(plan.drops)
    assert (plan.name == "tier:disk" and empties_dram) or (plan.name == "tier:cpu+disk" and not plan.isolated)


def test_a_tier_with_nothing_above_it_is_isolated_whatever_the_connector() -> None:
    assert step_plan("lmcache", "vllm", "disk", ["disk"]) == StepPlan("disk", "tier:disk", ("gpu",))
    plan = step_plan("lmcache-mp", "vllm", "remote", ["cpu", "remote"])
    assert plan.drops == ("cache_server_l1", "gpu")  # no disk tier: nothing to hide


@pytest.mark.parametrize(
    ("prompt", "chunk", "need"),
    [(2048, 256, 1792), (1024, 16, 1008), (2000, 256, 1536), (300, 256, 256), (100, 256, 256)],
)
def test_a_hit_covers_the_prompt_when_it_holds_its_full_chunks_less_one(
    prompt: int, chunk: int, need: int
) -> None:
    assert covering_tokens(prompt, chunk) == need


@pytest.mark.parametrize("spec", [s for s in SPECS.values() if s.offloads], ids=lambda s: s.name)
@pytest.mark.parametrize("tier", ALL)
def test_a_connectors_steps_are_its_specs(spec: ConnectorSpec, tier: str) -> None:
    for engine in spec.engines:
        assert step_plan(spec.name, engine, tier, ALL) == spec.isolate(tier, frozenset(ALL))


@pytest.mark.parametrize("connector", [None, "none", "lmcache", "native", "unknown"])
def test_sglang_without_a_connector_it_runs_takes_its_own_hicache(connector: str | None) -> None:
    own = SPECS[engine_spec("sglang").default_connector]
    assert step_plan(connector, "sglang", "cpu", ALL) == own.isolate("cpu", frozenset(ALL))
    assert step_plan(connector, "sglang", "cpu", ALL).drops == ("gpu_overflow",)
    # vLLM has no cache of its own: with no connector it runs named, only the GPU copy is dropped.
    named = SPECS.get(connector or "")
    if named is None or not named.offloads:
        assert step_plan(connector, "vllm", "disk", ALL) == isolate_unknown("disk", frozenset(ALL))


def test_the_default_chunk_is_the_specs_and_256_for_an_unknown_connector() -> None:
    assert [chunk_tokens(c, None) for c in ("lmcache", "lmcache-mp", "native", "hicache")] == [
        256,
        256,
        16,
        64,
    ]
    assert chunk_tokens(None, None) == chunk_tokens("unknown", None) == 256
    assert chunk_tokens("native", 512) == 512
