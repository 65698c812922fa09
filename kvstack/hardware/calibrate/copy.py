"""Host <-> device copy bandwidth at KV-chunk-sized transfers, pinned and pageable host buffers.

Offload connectors move KV in chunks (LMCache: 256 tokens, 32 MiB for Llama-3.1-8B at bf16), so
the figure that matters is one chunk-sized copy, not a multi-GiB best case. On device cpu there
is no host link: the figures are host <-> host memcpy, and the pinned ones are left unknown.
"""

from __future__ import annotations

import functools

import torch

from kvstack.hardware.calibrate import buffers
from kvstack.hardware.calibrate.model import CopyFigures
from kvstack.hardware.calibrate.timing import Deadline, median, timed_runs
from kvstack.units import fmt_bytes


def measure_copy(device: torch.device, transfer_bytes: int, deadline: Deadline, max_runs: int) -> CopyFigures:
    sync = buffers.sync_fn(device)
    dev = torch.empty(transfer_bytes, dtype=torch.uint8, device=device)
    hosts: dict[str, torch.Tensor] = {"pageable": buffers.pageable(transfer_bytes)}
    unknown: dict[str, str] = {}
    if buffers.is_cuda(device):
        hosts["pinned"] = torch.empty(transfer_bytes, dtype=torch.uint8, pin_memory=True)
        method = f"torch copy_ of {fmt_bytes(transfer_bytes)} (cudaMemcpy), median of up to {max_runs} runs"
    else:
        for direction in ("h2d", "d2h"):
            unknown[f"{direction}_pinned_bytes_per_s"] = "pinned host memory needs CUDA (device cpu)"
        method = f"device cpu: host <-> host memcpy of {fmt_bytes(transfer_bytes)}, no host link measured"
    figures: dict[str, float] = {}
    runs = 0
    legs = [(d, kind) for kind in hosts for d in ("h2d", "d2h")]
    for i, (direction, kind) in enumerate(legs):
        host = hosts[kind]
        src, dst = (host, dev) if direction == "h2d" else (dev, host)
        share = deadline.share(1 / (len(legs) - i))
        times = timed_runs(functools.partial(dst.copy_, src), sync, share, max_runs)
        figures[f"{direction}_{kind}_bytes_per_s"] = transfer_bytes / median(times)
        runs = max(runs, len(times))
    return CopyFigures(transfer_bytes=transfer_bytes, runs=runs, method=method, unknown=unknown, **figures)
