"""The calibration table of `kvstack doctor` (rendered from a record; no torch needed)."""

from __future__ import annotations

from rich.console import Console

from kvstack.hardware.calibrate import store_calibration
from kvstack.hardware.calibrate.model import (
    CopyFigures,
    DiskFigures,
    PrefillPoint,
    SanityFigures,
)
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.rendering.doctor import render
from tests.support.calibration import h100_calibration, llama8b_prefill


def _text(snap: HardwareSnapshot) -> str:
    console = Console(record=True, width=220, color_system=None)
    render(snap, console)
    return console.export_text()


def test_calibration_table_and_notes() -> None:
    cal = h100_calibration(  # cuda:0, NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, CUDA 13.0
        effective_tflops=512.0,
        host_copy=CopyFigures(
            transfer_bytes=32 << 20,
            runs=10,
            method="m",
            h2d_pinned_bytes_per_s=51e9,
            h2d_pageable_bytes_per_s=9e9,
        ),
        disks=[
            DiskFigures(
                path="/nvme/kv",
                files=32,
                file_bytes=32 << 20,
                bounce_bytes_per_s=6.2e9,
                unknown={"gds_bytes_per_s": "kvikio is not installed"},
                notes=["bounce buffer: pinned"],
            )
        ],
        prefill=llama8b_prefill(
            [
                PrefillPoint(
                    prompt_tokens=8192,
                    seconds=0.5,
                    tokens_per_s=16384,
                    achieved_tflops=500,
                    peak_fraction=0.5,
                )
            ]
        ),
        sanity=SanityFigures(
            copy_bytes=2 << 30, matmul_tflops=790, matmul_dtype="bfloat16", matmul_size=8192
        ),
        unknown={"disk /mnt/slow": "OSError: Input/output error"},
    )
    snap = HardwareSnapshot()
    store_calibration(snap, cal)
    text = _text(snap)
    assert "Calibration (measured on cuda:0: NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, CUDA 13.0)" in text
    assert "host->device, pinned (32.0 MiB)" in text and "51.0 GB/s" in text
    assert "device->host, pinned (32.0 MiB)" in text and "- (not measured)" in text
    assert "disk /nvme/kv -> device, pinned bounce" in text and "6.2 GB/s" in text
    assert "- (kvikio is not installed)" in text
    assert "prefill llama-3.1-8b (bfloat16) at 8K tokens" in text
    assert "16,384 tokens/s (500 TFLOP/s, 50% of peak)" in text
    assert "effective prefill rate (planner)" in text and "512 TFLOP/s" in text
    assert "matmul 8192^3 bfloat16" in text and "790 TFLOP/s" in text
    assert "disk /mnt/slow: OSError: Input/output error" in text
    assert "/nvme/kv: bounce buffer: pinned" in text


def test_no_calibration_no_table() -> None:
    assert "Calibration" not in _text(HardwareSnapshot())
