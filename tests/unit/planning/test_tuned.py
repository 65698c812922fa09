"""A layout kvstack tune chose, taken by the plan (planning/tuned.py): connector, chunk, sizes."""

from __future__ import annotations

import pytest

from kvstack.errors import InputError
from kvstack.model.source import resolve_model
from kvstack.planning.plan import PlanRequest, SizingTrace, make_plan
from kvstack.planning.schema import Plan
from kvstack.planning.tuned import TunedLayout
from kvstack.planning.workload import default_workload
from kvstack.profiles import profiles_dir
from kvstack.traces.mooncake import TraceRow

from .helpers import snapshot

GIB = 1 << 30


def _plan(tuned: TunedLayout, hw: str = "no-gpu", trace: SizingTrace | None = None) -> Plan:
    demo = resolve_model(str(profiles_dir() / "demo"))
    wl = default_workload(demo.geometry.max_context)
    return make_plan(snapshot(hw), demo.geometry, demo.path, PlanRequest(tuned=tuned), wl, trace)


def test_the_plan_takes_the_tuned_chunk_and_sizes() -> None:
    tuned = TunedLayout(
        connector="lmcache-mp", chunk_tokens=512, dram_bytes=3 * GIB, disk_bytes=5 * GIB, source="t"
    )
    plan = _plan(tuned)
    assert (plan.transfer.connector, plan.cache.chunk_size) == ("lmcache-mp", 512)
    l1, disk = plan.tier("cpu"), plan.tier("disk")
    assert l1 is not None and disk is not None
    assert (l1.size_bytes, disk.size_bytes) == (3 * GIB, 5 * GIB)
    assert l1.tokens == 3 * GIB // 1024 and "kvstack tune" in l1.reason
    assert plan.reasons["tuned"].startswith(
        "lmcache-mp, chunk 512, DRAM 3.0 GiB, disk 5.0 GiB: chosen by kvstack tune"
    )
    # No disk in the tuned layout: none planned.
    no_disk = _plan(tuned.model_copy(update={"disk_bytes": 0}))
    assert no_disk.tier("disk") is None and no_disk.reasons["disk_tier"].startswith("off:")


def test_tuned_none_plans_no_offload_and_a_layout_not_settable_is_only_said() -> None:
    plan = _plan(TunedLayout(connector="none", source="t"))
    assert plan.transfer.connector == "none" and [t.kind for t in plan.cache.tiers] == ["cpu"]
    modelled = TunedLayout(
        connector="lmcache-mp", chunk_tokens=256, dram_bytes=GIB, gate_tokens=600, not_settable="no such knob"
    )
    planned = _plan(modelled)
    assert planned.transfer.gate_prompt_tokens is None
    assert any("not served as modelled: no such knob" in w for w in planned.warnings)


def test_a_tuned_gate_is_planned_and_said_and_a_plan_without_one_serializes_as_before() -> None:
    gated = TunedLayout(connector="lmcache-mp", chunk_tokens=256, dram_bytes=GIB, gate_tokens=600, source="t")
    assert gated.label.endswith("gate prompt < 600")
    plan = _plan(gated)
    assert plan.transfer.gate_prompt_tokens == 600
    assert plan.reasons["gate"].startswith("prompts shorter than 600 tokens skip the offload lookup")
    assert plan.model_dump(mode="json")["gate_prompt_tokens"] == 600
    plain = _plan(gated.model_copy(update={"gate_tokens": None}))
    assert plain.transfer.gate_prompt_tokens is None
    assert "gate_prompt_tokens" not in plain.model_dump(mode="json")


def test_a_tuned_layout_and_a_trace_together_are_bad_input() -> None:
    trace = SizingTrace([TraceRow(0.0, 512, 1, [1])], 512, "t")
    with pytest.raises(InputError, match="--tuned and --trace both choose the layout"):
        _plan(TunedLayout(connector="none"), trace=trace)


def test_a_gate_on_any_connector_but_lmcache_mp_is_refused() -> None:
    from pydantic import ValidationError

    plan = _plan(TunedLayout(connector="lmcache-mp", chunk_tokens=256, dram_bytes=GIB, gate_tokens=600))
    doc = plan.model_dump(mode="json")
    with pytest.raises(
        ValidationError, match="gate_prompt_tokens is served by kvstack's gate over lmcache-mp"
    ):
        Plan.model_validate({**doc, "connector": "none"})
