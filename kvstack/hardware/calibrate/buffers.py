"""Device handling shared by the measurements: synchronisation and host buffers.

Imported only by ``run.calibrate`` after it has checked that torch imports.
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable

import torch

PAGE = 4096  # O_DIRECT wants buffers, offsets and sizes aligned to the logical block size (<= 4 KiB)


def is_cuda(device: torch.device) -> bool:
    return device.type == "cuda"


def sync_fn(device: torch.device) -> Callable[[], None]:
    """Waits for the device's queued work; a no-op on the CPU, whose copies are synchronous."""
    if is_cuda(device):
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def pageable(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8)


def bounce(nbytes: int, device: torch.device) -> tuple[torch.Tensor, str]:
    """A page-aligned host buffer: pinned when the device is a GPU, anonymous mmap memory otherwise."""
    if is_cuda(device):
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True), "pinned"
    # Pinned memory needs CUDA; mmap memory is page-aligned, which is what O_DIRECT needs.
    region = mmap.mmap(-1, nbytes)
    return torch.frombuffer(region, dtype=torch.uint8), "page-aligned (pinned memory needs CUDA)"


def writable_view(tensor: torch.Tensor) -> memoryview:
    """A memoryview over a contiguous uint8 host tensor, so that readinto() fills it in place."""
    if tensor.device.type != "cpu" or not tensor.is_contiguous() or tensor.dtype != torch.uint8:
        raise ValueError("writable_view needs a contiguous uint8 host tensor")
    array = (ctypes.c_char * tensor.numel()).from_address(tensor.data_ptr())
    return memoryview(array).cast("B")


def page_aligned(tensor: torch.Tensor) -> bool:
    return tensor.data_ptr() % PAGE == 0
