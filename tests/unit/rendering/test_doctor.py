from __future__ import annotations

from rich.console import Console

from kvstack.hardware import nvml
from kvstack.hardware.snapshot import Check, DiskInfo, HardwareSnapshot, MemoryInfo
from kvstack.rendering.doctor import render

from ..hardware.snapshots import gpu_host


def _text(snap: HardwareSnapshot) -> str:
    console = Console(record=True, width=200, color_system=None)
    render(snap, console)
    return console.export_text()


def test_gpu_host_report_has_every_section() -> None:
    snap = gpu_host("rtx_pro_6000_blackwell")
    text = _text(snap)
    for words in ("GPUs", "Memory", "Disks", "Software", "Checks", "Summary:"):
        assert words in text
    assert "NVIDIA RTX PRO 6000 Blackwell Workstation Edition" in text
    assert "Gen1 x16 / Gen5 x16" in text
    assert "12.0" in text and "Blackwell" in text
    assert snap.summary is not None and snap.summary.split(":")[0] in text.replace("\n", " ")
    for c in snap.checks:
        assert c.name in text


def test_cpu_report_shows_why_and_keeps_brackets() -> None:
    snap = HardwareSnapshot(
        gpu_reason=nvml.NO_DRIVER,
        memory=MemoryInfo(total_bytes=1 << 34, memlock_unlimited=True),
        disks=[DiskInfo(path="/data", unknown={"read_bw_bytes_per_s": "not measured (--no-fio)"})],
        checks=[Check(name="engine", status="fail", message="pip install 'kvstack[vllm]'")],
        summary="no GPU (no NVIDIA driver)",
    )
    text = _text(snap)
    assert nvml.NO_DRIVER.split(":")[0] in text
    # Rich markup must not eat "[vllm]" out of a message.
    assert "kvstack[vllm]" in text
    assert "FAIL" in text and "unlimited" in text and "not measured (--no-fio)" in text
