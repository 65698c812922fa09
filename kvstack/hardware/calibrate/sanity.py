"""Sanity figures of the device itself: memory bandwidth (a large device copy) and matmul rate.

They say whether the device runs at its data-sheet speed (clocks, power cap, a shared GPU)
before the other figures are trusted. A copy reads and writes every byte: both are counted,
as memory-bandwidth data sheets do.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kvstack.hardware.calibrate import buffers
from kvstack.hardware.calibrate.model import SanityFigures
from kvstack.hardware.calibrate.timing import Deadline, median, timed_runs


def _copy_times(
    device: torch.device, nbytes: int, sync: Callable[[], None], deadline: Deadline, max_runs: int
) -> list[float]:
    # Buffers local to this function: freed before the matmul allocates its own.
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return timed_runs(lambda: dst.copy_(src), sync, deadline, max_runs)


def _matmul_times(
    device: torch.device,
    n: int,
    dtype: torch.dtype,
    sync: Callable[[], None],
    deadline: Deadline,
    max_runs: int,
) -> list[float]:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return timed_runs(lambda: a @ b, sync, deadline, max_runs)


def measure_sanity(
    device: torch.device,
    copy_bytes: int,
    matmul_size: int,
    dtype: torch.dtype,
    deadline: Deadline,
    max_runs: int,
) -> SanityFigures:
    sync = buffers.sync_fn(device)
    figures = SanityFigures(
        copy_bytes=copy_bytes, matmul_dtype=str(dtype).removeprefix("torch."), matmul_size=matmul_size
    )
    times = _copy_times(device, copy_bytes, sync, deadline.share(0.5), max_runs)
    figures.memory_bw_bytes_per_s = 2 * copy_bytes / median(times)
    times = _matmul_times(device, matmul_size, dtype, sync, deadline, max_runs)
    figures.matmul_tflops = 2.0 * matmul_size**3 / median(times) / 1e12
    if not buffers.is_cuda(device):
        figures.notes.append("device cpu: the memory figure is DRAM memcpy bandwidth")
    return figures
