"""Host copies through the real measurement code on device cpu (host <-> host memcpy)."""

from __future__ import annotations

import torch

from kvstack.hardware.calibrate.copy import measure_copy
from kvstack.hardware.calibrate.timing import Deadline


def test_cpu_copies_are_memcpy_and_pinned_is_unknown() -> None:
    figures = measure_copy(torch.device("cpu"), 256 * 1024, Deadline.after(2.0), max_runs=3)
    assert figures.transfer_bytes == 256 * 1024
    assert 1 <= figures.runs <= 3
    assert figures.h2d_pageable_bytes_per_s is not None and figures.h2d_pageable_bytes_per_s > 0
    assert figures.d2h_pageable_bytes_per_s is not None and figures.d2h_pageable_bytes_per_s > 0
    assert figures.h2d_pinned_bytes_per_s is None and figures.d2h_pinned_bytes_per_s is None
    assert "needs CUDA" in figures.unknown["h2d_pinned_bytes_per_s"]
    assert "memcpy" in figures.method
