"""Calibration records for tests: a `kvstack calibrate` run on an H100, the prefill figures of a
full-size Llama-3.1-8B run, and the demo's served costs as bench --trace measured them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvstack.hardware.calibrate.model import Calibration, PrefillFigures, PrefillPoint

LLAMA_8B_PARAMS = 8_030_261_248


def h100_calibration(**figures: Any) -> Calibration:
    """The record of a `kvstack calibrate` run on cuda:0, an H100 80GB HBM3 (torch 2.11.0+cu130,
    CUDA 13.0), a minute of a 120 s budget; ``figures`` are what it measured (or any field to replace)."""
    run: dict[str, Any] = {
        "device": "cuda:0",
        "device_name": "NVIDIA H100 80GB HBM3",
        "torch_version": "2.11.0+cu130",
        "cuda_version": "13.0",
        "started_at": "2026-11-20T10:00:00+00:00",
        "finished_at": "2026-11-20T10:01:00+00:00",
        "budget_s": 120,
        "elapsed_s": 60.5,
    }
    return Calibration(**{**run, **figures})


def llama8b_prefill(
    points: list[PrefillPoint], *, scaled_down: bool = False, active_params: int = LLAMA_8B_PARAMS
) -> PrefillFigures:
    from kvstack.model.catalog import find_catalog_entry

    entry = find_catalog_entry("llama-3.1-8b")
    return PrefillFigures(
        model="llama-3.1-8b",
        names=entry.names() if entry is not None else [],  # as the calibration records them
        dtype="bfloat16",
        scaled_down=scaled_down,
        layers=32,
        hidden_size=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        active_params=active_params,
        points=points,
    )


# The demo's served costs as `bench --trace --compare none,lmcache-mp` measured them on the 2-core
# AVX2 machine (docs/measurements.md): 51.1 ms a request on none, 103 us a token recomputed, 34
# ns/token^2 of attention; on LMCache's path 15 ms a request more and a DRAM fetch 3.8 us a token.
DEMO_NONE = {
    "hit_s": 0.0411,
    "miss_s": 0.010,
    "linear_s_per_token": 1.03e-4,
    "quadratic_s_per_token2": 3.4e-8,
}
DEMO_LMCACHE_MP = {**DEMO_NONE, "hit_s": 0.0561, "fetch_s_per_token": {"dram": 3.8e-6}}


def demo_served_ttft(path: Path, source: str) -> Path:
    """Write the demo's served costs (``none`` and ``lmcache-mp``) to ``path`` as a served-ttft.json."""
    layouts = {
        "none": {"calibration": DEMO_NONE},
        "lmcache-mp": {"offload": True, "calibration": DEMO_LMCACHE_MP},
    }
    path.write_text(json.dumps({"source": source, "layouts": layouts}))
    return path
