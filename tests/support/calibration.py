"""Calibration records for tests: the prefill figures of a full-size Llama-3.1-8B run."""

from __future__ import annotations

from kvstack.hardware.calibrate.model import PrefillFigures, PrefillPoint

LLAMA_8B_PARAMS = 8_030_261_248


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
