from __future__ import annotations

import json
from typing import Any

import pytest

from kvstack.hardware.gpu import architecture, kv_dtypes, probe_gpus
from kvstack.hardware.nvml import NOT_SUPPORTED, StaticNvml

from .fixtures import NVML, NVML_DEVICES, nvml_fixture


def _recording(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((NVML / f"{name}.json").read_text())
    return data


@pytest.mark.parametrize("name", NVML_DEVICES)
def test_probe_reports_each_fixture_device(name: str) -> None:
    rec = _recording(name)
    gpus, reason = probe_gpus(nvml_fixture(name))
    assert reason is None
    expected = [dev for dev in rec["devices"] for _ in range(dev.get("count", 1))]
    assert [g.index for g in gpus] == list(range(len(expected)))
    for gpu, dev in zip(gpus, expected, strict=True):
        errors = dev.get("errors", {})
        assert gpu.name == dev["name"]
        assert (gpu.memory_total_bytes, gpu.memory_free_bytes) == tuple(dev["memory"])
        assert gpu.compute_capability == tuple(dev["compute_capability"])
        assert gpu.pcie_gen_current == dev["pcie_gen_current"]
        assert gpu.pcie_gen_max == dev["pcie_gen_max"]
        assert gpu.pcie_width_max == dev["pcie_width_max"]
        assert gpu.driver_version == rec["driver_version"]
        # "Not Supported" for NVLink / MIG is a fact: no links, MIG off; not an unknown.
        assert gpu.nvlink_links == (0 if "nvlink_links" in errors else dev["nvlink_links"])
        assert gpu.mig_enabled is (False if "mig_mode" in errors else bool(dev["mig_mode"]))
        assert gpu.unknown == {}


def test_hopper_and_blackwell_facts() -> None:
    h100, _ = probe_gpus(nvml_fixture("h100_sxm_80gb"))
    b200, _ = probe_gpus(nvml_fixture("b200"))
    rtx, _ = probe_gpus(nvml_fixture("rtx_pro_6000_blackwell"))
    assert architecture(h100[0].compute_capability) == "Hopper"
    assert kv_dtypes(h100[0].compute_capability) == ["FP8"]
    # vLLM's NVFP4 KV runs on CC 10.0 only, not on the workstation Blackwell (12.0).
    assert kv_dtypes(b200[0].compute_capability) == ["FP8", "NVFP4"]
    assert kv_dtypes(rtx[0].compute_capability) == ["FP8"]
    assert architecture(rtx[0].compute_capability) == "Blackwell"


def test_a100_has_no_native_fp8_kv() -> None:
    a100, _ = probe_gpus(nvml_fixture("a100_sxm4_80gb"))
    assert architecture(a100[0].compute_capability) == "Ampere"
    assert kv_dtypes(a100[0].compute_capability) == []


def test_a_failing_field_is_unknown_with_its_reason() -> None:
    rec = _recording("h200_141gb")
    rec["devices"][0] = {**rec["devices"][0], "count": 1, "errors": {"memory": "GPU is lost"}}
    gpus, reason = probe_gpus(StaticNvml(rec))
    assert reason is None
    assert gpus[0].memory_total_bytes is None
    assert gpus[0].unknown == {"memory": "GPU is lost"}
    assert gpus[0].compute_capability == (9, 0)


def test_unsupported_pcie_query_stays_unknown() -> None:
    rec = _recording("l40s")
    rec["devices"][0] = {**rec["devices"][0], "count": 1, "errors": {"pcie_gen_current": NOT_SUPPORTED}}
    gpus, _ = probe_gpus(StaticNvml(rec))
    assert gpus[0].pcie_gen_current is None
    assert gpus[0].unknown["pcie_gen_current"] == NOT_SUPPORTED


def test_no_devices_and_broken_nvml_give_reasons() -> None:
    gpus, reason = probe_gpus(StaticNvml({"driver_version": "550.54.15", "devices": []}))
    assert gpus == []
    assert reason is not None and "sees no GPU" in reason
    gpus, reason = probe_gpus(StaticNvml({"init_error": "Unknown Error", "devices": []}))
    assert gpus == []
    assert reason == "NVML cannot count devices: Unknown Error"


def test_missing_driver_version_is_recorded_per_gpu() -> None:
    rec = _recording("l40s")
    del rec["driver_version"]
    gpus, _ = probe_gpus(StaticNvml(rec))
    assert all(g.driver_version is None and "driver_version" in g.unknown for g in gpus)
