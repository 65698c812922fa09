"""Paths of the recorded inputs the hardware tests replay."""

from __future__ import annotations

from pathlib import Path

from kvstack.hardware.nvml import RecordedNvml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NVML = FIXTURES / "nvml"
PROC = FIXTURES / "proc"
FIO = FIXTURES / "fio"
NVML_DEVICES = sorted(p.stem for p in NVML.glob("*.json"))


def recorded(name: str) -> RecordedNvml:
    return RecordedNvml.from_file(NVML / f"{name}.json")
