from __future__ import annotations

import torch

from kvstack.hardware.calibrate.sanity import measure_sanity
from kvstack.hardware.calibrate.timing import Deadline


def test_cpu_memory_bandwidth_and_matmul() -> None:
    figures = measure_sanity(torch.device("cpu"), 1 << 20, 64, torch.float32, Deadline.after(2.0), 3)
    assert figures.memory_bw_bytes_per_s is not None and figures.memory_bw_bytes_per_s > 0
    assert figures.matmul_tflops is not None and figures.matmul_tflops > 0
    assert (figures.matmul_dtype, figures.matmul_size, figures.copy_bytes) == ("float32", 64, 1 << 20)
    assert any("DRAM" in n for n in figures.notes)
