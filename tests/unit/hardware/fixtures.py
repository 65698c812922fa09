"""Paths of the inputs the hardware tests replay: NVML device facts assembled from nvidia-smi figures
and data sheets (not recorded from a driver), sample /proc and /sys trees, fio outputs."""

from __future__ import annotations

from pathlib import Path

from kvstack.hardware.nvml import StaticNvml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NVML = FIXTURES / "nvml"
PROC = FIXTURES / "proc"
FIO = FIXTURES / "fio"
NVML_DEVICES = sorted(p.stem for p in NVML.glob("*.json"))


def nvml_fixture(name: str) -> StaticNvml:
    return StaticNvml.from_file(NVML / f"{name}.json")
