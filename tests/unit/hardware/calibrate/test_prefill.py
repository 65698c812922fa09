"""The Llama-shaped prefill model and its timing, on device cpu with a scaled-down model."""

from __future__ import annotations

import time

import pytest
import torch
from pydantic import ValidationError

from kvstack.errors import UnsupportedError
from kvstack.hardware.calibrate.prefill import (
    LlamaShaped,
    Shape,
    effective_tflops,
    measure_prefill,
    scaled_down,
    shape_of,
)
from kvstack.hardware.calibrate.timing import Deadline
from kvstack.model.catalog import catalog_model

CPU = torch.device("cpu")


def test_llama_8b_shape_matches_its_published_parameter_count() -> None:
    geo, _ = catalog_model("meta-llama/Llama-3.1-8B")
    shape = shape_of(geo)
    assert (shape.layers, shape.hidden_size, shape.heads, shape.kv_heads) == (32, 4096, 32, 8)
    assert shape.head_dim == 128
    assert (shape.intermediate_size, shape.vocab_size) == (14336, 128256)
    assert shape.active_params == 8_030_261_248  # meta-llama/Llama-3.1-8B's published count


def test_flop_count_by_hand() -> None:
    s = Shape(layers=1, hidden_size=4, heads=2, kv_heads=1, head_dim=2, intermediate_size=8, vocab_size=10)
    # attention 2*4*2*2 + 2*4*1*2 = 48, MLP 3*4*8 = 96, norms 8, embedding + head 80, final norm 4
    assert s.active_params == 236
    # 2 x 236 x 3 tokens + heads 2 x (qk 2 + v 2) x 1 layer x 3^2
    assert s.flops(3) == 2 * 236 * 3 + 2 * 4 * 1 * 9
    with pytest.raises(ValidationError, match="hidden"):  # a misspelt field is refused, not kept
        Shape(layers=1, hidden=4, heads=2, kv_heads=1, head_dim=2, intermediate_size=8, vocab_size=10)


def test_scaled_down_keeps_the_kind_and_builds_what_it_counts() -> None:
    geo, _ = catalog_model("llama-3.1-8b")
    small = scaled_down(shape_of(geo))
    assert small.heads // small.kv_heads == 32 // 8
    assert small.intermediate_size == round(small.hidden_size * 14336 / 4096)
    model = LlamaShaped(small, CPU, torch.float32)
    assert sum(p.numel() for p in model.parameters()) == small.active_params
    with torch.inference_mode():
        logits = model(torch.randint(0, small.vocab_size, (1, 16)))
    assert logits.shape == (1, 1, small.vocab_size)


def test_measure_prefill_on_cpu() -> None:
    geo, _ = catalog_model("llama-3.1-8b")
    figures = measure_prefill(geo, CPU, torch.float32, [64, 32, 10**9], Deadline.after(5.0), scale=True)
    assert [p.prompt_tokens for p in figures.points] == [32, 64]  # sorted; beyond max context dropped
    assert figures.scaled_down and figures.model == "llama-3.1-8b" and figures.dtype == "float32"
    for p in figures.points:
        assert p.tokens_per_s == pytest.approx(p.prompt_tokens / p.seconds)
        assert p.achieved_tflops > 0 and p.peak_fraction is None
    assert "peak_fraction" in figures.unknown
    rate = effective_tflops(figures)
    assert rate is not None and min(p.achieved_tflops for p in figures.points) <= rate


def test_peak_fraction_and_a_spent_budget() -> None:
    geo, _ = catalog_model("llama-3.1-8b")
    spent = Deadline(time.monotonic() - 1)
    figures = measure_prefill(
        geo, CPU, torch.float32, [16, 32], spent, scale=True, max_runs=1, peak=(1e12, "test peak")
    )
    (point,) = figures.points
    assert point.prompt_tokens == 16
    assert point.peak_fraction == pytest.approx(point.achieved_tflops)  # peak is exactly 1 TFLOP/s
    assert "time budget" in figures.unknown["skipped"]


def test_non_llama_shapes_are_refused() -> None:
    for name in ("deepseek-v3", "qwen3-235b-a22b"):
        geo, _ = catalog_model(name)
        with pytest.raises(UnsupportedError, match="dense Llama-shaped"):
            shape_of(geo)
