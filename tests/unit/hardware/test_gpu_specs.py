"""Peak throughput and bandwidth lookup (kvstack/hardware/gpu_specs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.hardware.gpu_specs import PCIE_EFFICIENCY, gpu_spec, host_link_bytes_per_s
from kvstack.hardware.snapshot import GpuInfo, load_snapshot
from kvstack.profiles import profiles_dir


@pytest.mark.parametrize(
    ("name", "model", "tflops", "tbps"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989, 3.35),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756, 2.0),
        ("NVIDIA H100 NVL", "H100 NVL", 835, 3.9),
        ("NVIDIA H200", "H200", 989, 4.8),
        ("NVIDIA GH200 480GB", "GH200", 989, 4.0),
        ("NVIDIA B200", "B200", 2250, 8.0),
        ("NVIDIA B300 SXM6 AC", "B300", 2250, 8.0),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 312, 2.039),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 312, 1.935),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB", 312, 1.555),
        ("NVIDIA L40S", "L40S", 362, 0.864),
        ("NVIDIA L4", "L4", 121, 0.3),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell", 504, 1.792),
    ],
)
def test_known_parts(name: str, model: str, tflops: float, tbps: float) -> None:
    spec = gpu_spec(name, None)
    assert spec.model == model
    assert spec.bf16_flops == pytest.approx(tflops * 1e12)
    assert spec.hbm_bytes_per_s == pytest.approx(tbps * 1e12)


@pytest.mark.parametrize(
    ("cc", "model"),
    [((9, 0), "Hopper"), ((10, 3), "Blackwell datacenter"), ((8, 0), "A100"), ((12, 0), "workstation")],
)
def test_unknown_names_fall_back_by_compute_capability(cc: tuple[int, int], model: str) -> None:
    spec = gpu_spec("NVIDIA Future GPU", cc)
    assert model in spec.model
    assert spec.source.startswith("fallback for CC")


def test_nothing_known_still_gives_a_spec() -> None:
    assert gpu_spec(None, None).bf16_flops > 0


def test_every_fixture_gpu_is_in_the_table() -> None:
    for path in sorted((profiles_dir() / "hardware").glob("*.json")):
        for gpu in load_snapshot(Path(path)).gpus:
            assert gpu_spec(gpu.name, gpu.compute_capability).source.startswith("data sheet"), gpu.name


def test_host_link_from_pcie_max_generation() -> None:
    idle = GpuInfo(
        index=0, name="NVIDIA H100 80GB HBM3", pcie_gen_current=1, pcie_gen_max=5, pcie_width_max=16
    )
    bw, how = host_link_bytes_per_s(idle)
    assert bw == pytest.approx(3.938e9 * 16 * PCIE_EFFICIENCY)
    assert "Gen5 x16" in how
    unknown = GpuInfo(index=0, name="NVIDIA L40S")
    bw, how = host_link_bytes_per_s(unknown)
    assert "assumed" in how and bw == pytest.approx(1.969e9 * 16 * PCIE_EFFICIENCY)


def test_grace_hopper_uses_nvlink_c2c() -> None:
    bw, how = host_link_bytes_per_s(
        GpuInfo(index=0, name="NVIDIA GH200 480GB", pcie_gen_max=5, pcie_width_max=16)
    )
    assert "C2C" in how and bw > 300e9
