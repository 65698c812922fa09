"""The Plan's groups (planning/schema.py) and its flat JSON: every plan file reads back byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kvstack.planning.schema import CacheLayout, KvTransfer, Parallelism, Plan, PlannedModel
from kvstack.planning.tuned import TunedLayout, apply_tuned

from .helpers import plan_for, roomy_cpu_host
from .test_carriage import gemma3

GOLDEN = sorted((Path(__file__).resolve().parents[2] / "golden" / "plans").glob("*.json"))

# The wire keys in the order every plan file has them (before the groups, and since).
WIRE_ORDER = [
    "engine",
    "platform",
    "model",
    "model_path",
    "model_revision",
    "kv_cache_dtype",
    "kv_bytes_per_token",
    "tiers",
    "connector",
    "chunk_size",
    "max_model_len",
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "weight_bytes",
    "workload",
    "concurrency",
    "remote_url",
    "gpu_name",
    "compute_capability",
    "prefill_tokens_per_s",
    "prefill_source",
    "ttft",
    "warnings",
    "reasons",
    "feasible",
    "errors",
    "trace",
    "gate_prompt_tokens",
    "hybrid_manager",
    "kv_in_flight_tokens",
    "prefix_caching",
    "capacity",
]


def _flat(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_the_golden_plans_are_all_here() -> None:
    assert len(GOLDEN) >= 6


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_a_flat_plan_file_reads_into_groups_and_writes_back_byte_for_byte(path: Path) -> None:
    text = path.read_text()
    plan = Plan.model_validate_json(text)
    assert isinstance(plan.model, PlannedModel) and isinstance(plan.cache, CacheLayout)
    assert plan.model.path == _flat(path)["model_path"]
    assert plan.model.geometry.name == _flat(path)["model"]["name"]
    assert plan.transfer.connector == _flat(path)["connector"]
    assert plan.parallel.tensor_parallel_size == _flat(path)["tensor_parallel_size"]
    assert json.dumps(plan.model_dump(mode="json"), indent=2, sort_keys=True) + "\n" == text
    # The dict form reads the same, and the JSON written reads back to the same plan.
    assert Plan.model_validate(_flat(path)) == plan
    assert Plan.model_validate_json(plan.model_dump_json()) == plan
    assert plan.model_dump_json() == json.dumps(
        json.loads(plan.model_dump_json()), separators=(",", ":"), ensure_ascii=False
    )


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_the_wire_keys_keep_their_order(path: Path) -> None:
    keys = list(Plan.model_validate_json(path.read_text()).model_dump())
    assert keys == [k for k in WIRE_ORDER if k in keys]
    assert set(keys) == set(_flat(path))


def test_keys_left_out_when_unset_are_still_left_out_and_written_when_set() -> None:
    plain = plan_for("h100-sxm", "llama-3.1-8b")
    out = plain.model_dump()
    for key in ("trace", "gate_prompt_tokens", "hybrid_manager", "kv_in_flight_tokens", "capacity"):
        assert key not in out
    assert "prefix_caching" not in out and out["model_revision"] is None and "remote_url" in out
    hybrid = plan_for(roomy_cpu_host(), gemma3())
    written = hybrid.model_dump(mode="json")
    assert (
        written["hybrid_manager"] == "off"
        and written["kv_in_flight_tokens"] == hybrid.cache.kv_in_flight_tokens
    )
    assert list(written) == [k for k in WIRE_ORDER if k in written]
    assert Plan.model_validate_json(hybrid.model_dump_json()) == hybrid


def test_the_grouped_form_reads_too_and_python_builds_with_groups() -> None:
    plan = Plan.model_validate_json(GOLDEN[0].read_text())
    grouped = {name: getattr(plan, name) for name in Plan.model_fields}
    assert Plan.model_validate(grouped) == plan
    assert Plan(**grouped) == plan
    as_dicts = {
        **grouped,
        **{g: getattr(plan, g).model_dump() for g in ("model", "cache", "parallel", "transfer")},
    }
    assert Plan.model_validate(as_dicts) == plan
    assert plan.engine_pool is plan.cache.tiers[0] and plan.offload_tiers == plan.cache.tiers[1:]


def test_an_unknown_key_is_refused_flat_or_grouped() -> None:
    flat = _flat(GOLDEN[0])
    with pytest.raises(ValidationError, match=r"kv_cache_dtyp\n  Extra inputs are not permitted"):
        Plan.model_validate({**flat, "kv_cache_dtyp": "fp8"})
    with pytest.raises(ValidationError, match="path"):
        Plan.model_validate({k: v for k, v in flat.items() if k != "model_path"})  # "model" alone: grouped
    plan = Plan.model_validate(flat)
    grouped = {name: getattr(plan, name) for name in Plan.model_fields}
    cache = {**plan.cache.model_dump(), "bogus": 1}
    with pytest.raises(ValidationError, match=r"cache\.bogus"):
        Plan.model_validate({**grouped, "cache": cache})
    # A group given both ways is ambiguous: refused, not merged.
    with pytest.raises(ValidationError, match="'cache' given both grouped and as its flat keys"):
        Plan.model_validate({**grouped, "chunk_size": 512})


def test_a_gate_is_refused_on_a_connector_kvstack_does_not_gate() -> None:
    flat = _flat(GOLDEN[0])
    assert flat["connector"] == "lmcache-mp"
    assert Plan.model_validate({**flat, "gate_prompt_tokens": 600}).transfer.gate_prompt_tokens == 600
    with pytest.raises(
        ValidationError, match="gate_prompt_tokens is served by kvstack's gate over lmcache-mp"
    ):
        Plan.model_validate({**flat, "connector": "lmcache", "gate_prompt_tokens": 600})
    with pytest.raises(ValidationError, match="gate_prompt_tokens is served"):
        KvTransfer(connector="native", gate_prompt_tokens=600)
    assert Parallelism(tensor_parallel_size=2).tensor_parallel_size == 2


def test_copies_never_share_a_mutated_group_with_the_original() -> None:
    plan = plan_for(roomy_cpu_host(), "llama-3.1-8b")
    before = plan.model_dump_json()
    fewer = plan.with_tiers(plan.cache.tiers[:1])
    assert fewer.cache.tiers == plan.cache.tiers[:1] and fewer.cache is not plan.cache
    noted = plan.with_notes(warnings=["w"])
    assert noted.warnings == ["w"]
    pinned = plan.model_copy()
    pinned.model = plan.model.at_revision("v1")
    assert pinned.model.revision == "v1"
    tuned = TunedLayout(
        connector="lmcache-mp", chunk_tokens=512, dram_bytes=1 << 30, gate_tokens=600, source="t"
    )
    gated = apply_tuned(plan, tuned)
    assert (gated.cache.chunk_size, gated.transfer.gate_prompt_tokens) == (512, 600)
    assert plan.model_dump_json() == before  # the original plan is as it was


def test_model_copy_refuses_a_flat_key() -> None:
    plan = Plan.model_validate_json(GOLDEN[0].read_text())
    with pytest.raises(TypeError, match=r"no such field \['model_path'\]"):
        plan.model_copy(update={"model_path": "/elsewhere"})
    assert plan.model_copy(update={"feasible": False}).feasible is False
