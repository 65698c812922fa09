from __future__ import annotations

import pytest

from kvstack.errors import InputError
from kvstack.export import FORMATS, exporter
from kvstack.export.bundle import ExportOptions
from kvstack.export.deployment import (
    GIB,
    deployment_name,
    engine_image,
    gib_ceil,
    gib_floor,
    lmcache_settings,
)
from tests.unit.export.plans import make_plan


def test_gib_rounding_never_exceeds_the_plan_for_tier_sizes() -> None:
    assert gib_floor(3 * GIB - 1) == 2 and gib_floor(3 * GIB) == 3
    assert gib_ceil(3 * GIB + 1) == 4 and gib_ceil(0) == 1


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Llama-3.1-8B-Instruct", "llama-3-1-8b-instruct"),
        ("/srv/models/Qwen2.5_7B", "qwen2-5-7b"),
        ("---", "model"),
    ],
)
def test_deployment_name_is_a_dns_label(name: str, expected: str) -> None:
    plan = make_plan()
    geometry = plan.model.geometry.model_copy(update={"name": name})
    plan = plan.model_copy(update={"model": plan.model.model_copy(update={"geometry": geometry})})
    assert deployment_name(plan) == expected
    assert deployment_name(plan, "x" * 80) == "x" * 63


def test_lmcache_settings_without_tiers_leave_lmcache_defaults() -> None:
    cfg = lmcache_settings(make_plan(cpu_gib_per_rank=None, disk_gib_per_rank=None), None, None)
    assert "max_local_cpu_size" not in cfg and "local_disk" not in cfg and "remote_url" not in cfg
    assert cfg["local_cpu"] is True  # kept on: disk and remote go through it


def test_lmcache_image_for_lmcache_and_pinned_vllm_otherwise() -> None:
    assert engine_image(make_plan(), ExportOptions(engine_version="0.33.0"))[:2] == (
        "lmcache/vllm-openai",
        "latest",
    )
    assert engine_image(make_plan(connector="native"), ExportOptions(engine_version="0.33.0"))[:2] == (
        "vllm/vllm-openai",
        "v0.33.0",
    )


def test_every_format_has_an_exporter_and_unknown_is_an_input_error() -> None:
    for fmt in FORMATS:
        assert callable(exporter(fmt))
    with pytest.raises(InputError):
        exporter("kubernetes")
