"""Break-even prefix length: above it, fetching a prefix's KV from a tier beats recomputing it.

Recomputing N prompt tokens costs ``2 x active_params`` FLOPs per token for the linear layers plus
attention, which grows with the position: each full-attention layer does ``2 x heads x (qk + v)``
FLOPs per token per earlier token (QK^T and AV), so N tokens cost ~``heads x (qk + v) x layers x N^2``;
sliding layers are bounded by their window. The GPU delivers ``PEAK_FRACTION`` of its data-sheet
peak across the TP ranks. Fetching costs ``latency + N x bytes_per_token / bandwidth``. Both sides
are estimates; the reasons in the plan say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvstack.hardware.gpu_specs import GpuSpec
from kvstack.model.geometry import ModelGeometry

PEAK_FRACTION = 0.4


@dataclass(frozen=True)
class PrefillModel:
    flops_per_s: float  # effective, all TP ranks together
    linear_flops_per_token: float  # 2 x active params, plus the sliding layers' bounded attention
    attn_flops_coeff: float  # recomputing N tokens costs attn_flops_coeff x N^2 on top of the linear part
    source: str

    def recompute_seconds(self, tokens: int) -> float:
        return (
            self.linear_flops_per_token * tokens + self.attn_flops_coeff * tokens * tokens
        ) / self.flops_per_s

    def tokens_per_s(self, context: int) -> float:
        """Average prefill rate over a prompt of ``context`` tokens."""
        return context / self.recompute_seconds(context) if context > 0 else 0.0


def prefill_model(
    model: ModelGeometry, spec: GpuSpec, tp: int, effective_flops: float | None = None
) -> PrefillModel:
    """``effective_flops``: a measured per-GPU rate (calibration) replacing peak x PEAK_FRACTION."""
    heads_dim = model.heads * ((model.qk_head_dim or model.head_dim) + (model.v_head_dim or model.head_dim))
    sliding = 2.0 * heads_dim * model.sliding_layers * (model.sliding_window or 0)
    if effective_flops is not None:
        rate, source = (
            effective_flops * tp,
            f"calibrated {effective_flops / 1e12:.0f} TFLOP/s per GPU x TP {tp}",
        )
    else:
        rate = spec.bf16_flops * PEAK_FRACTION * tp
        peak = f"{spec.bf16_flops / 1e12:.0f} TFLOP/s dense BF16 peak"
        source = f"estimate: {spec.model} {peak} x {PEAK_FRACTION} x TP {tp}"
    return PrefillModel(
        flops_per_s=rate,
        linear_flops_per_token=2.0 * model.active_params + sliding,
        attn_flops_coeff=float(heads_dim * model.full_attention_layers),
        source=source,
    )


def breakeven_tokens(
    prefill: PrefillModel, bytes_per_token: float, bandwidth: float, latency_s: float = 0.0
) -> int | None:
    """Smallest prefix length at which fetch time < recompute time; None when fetching never wins.

    Solves ``a N^2 + b N - latency > 0`` with ``a = attn/R``, ``b = linear/R - bytes/bandwidth``.
    """
    if bandwidth <= 0:
        return None
    a = prefill.attn_flops_coeff / prefill.flops_per_s
    b = prefill.linear_flops_per_token / prefill.flops_per_s - bytes_per_token / bandwidth
    if a <= 0:
        if b <= 0:
            return None
        return math.ceil(latency_s / b)
    root = (-b + math.sqrt(b * b + 4 * a * latency_s)) / (2 * a)
    return max(0, math.ceil(root))
