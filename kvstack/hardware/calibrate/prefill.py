"""Prefill throughput of a randomly initialised Llama-shaped model built from a catalog entry.

Plain torch modules (embedding, RMSNorm, GQA attention through scaled_dot_product_attention with
RoPE, SwiGLU MLP), built on the device in the model's dtype: no weights, no hub. One forward pass
at batch 1 per prompt length, logits for the last position only (as an engine's prefill does).
FLOPs are counted as the planner counts them (planning/predict/breakeven.py: 2 x active params per token
plus heads x (qk + v) x layers x N^2 for attention), so the rate measured here is the rate that
makes the planner's recompute estimate match this machine.
"""

from __future__ import annotations

import functools
import statistics

import torch
import torch.nn.functional as F
from pydantic import ConfigDict
from torch import nn

from kvstack.errors import UnsupportedError
from kvstack.hardware.calibrate import buffers
from kvstack.hardware.calibrate.model import PrefillFigures, PrefillPoint, PrefillShape
from kvstack.hardware.calibrate.timing import Deadline, median, timed_runs
from kvstack.model.catalog import find_catalog_entry
from kvstack.model.geometry import ModelGeometry

ROPE_THETA = 500000.0  # Llama 3.1's; the rotation costs the same whatever the base


class Shape(PrefillShape):
    """The shape, with what its figures are derived from. Built by code, never read from a file: a
    field it does not have is refused (the figures' extra="allow" is for files a newer kvstack wrote)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @property
    def active_params(self) -> int:
        """Parameters as built: embedding + untied LM head, attention, MLP and norms per layer."""
        attn = (
            2 * self.hidden_size * self.heads * self.head_dim
            + 2 * self.hidden_size * self.kv_heads * self.head_dim
        )
        per_layer = attn + 3 * self.hidden_size * self.intermediate_size + 2 * self.hidden_size
        return 2 * self.vocab_size * self.hidden_size + self.layers * per_layer + self.hidden_size

    def flops(self, tokens: int) -> float:
        """The planner's FLOP count for a prompt of ``tokens`` tokens."""
        attn_coeff = self.heads * 2 * self.head_dim * self.layers
        return 2.0 * self.active_params * tokens + float(attn_coeff) * tokens * tokens


def _intermediate_size(geo: ModelGeometry) -> int:
    """From the catalog's config; else solved from the parameter count (the geometry's estimate, inverted)."""
    entry = find_catalog_entry(geo.name)
    value = entry.config.get("intermediate_size") if entry is not None else None
    if isinstance(value, int) and value > 0:
        return value
    attn = 2 * geo.hidden_size * geo.heads * geo.head_dim + 2 * geo.hidden_size * geo.kv_heads * geo.head_dim
    embedding = 2 * (geo.vocab_size or 0) * geo.hidden_size
    per_layer_mlp = (geo.params - embedding) / geo.layers - attn
    return max(1, round(per_layer_mlp / (3 * geo.hidden_size)))


def shape_of(geo: ModelGeometry) -> Shape:
    if geo.attention == "mla" or geo.num_experts or geo.sliding_layers or not geo.vocab_size or not geo.heads:
        raise UnsupportedError(
            f"prefill calibration builds dense Llama-shaped models; {geo.name} is not one",
            hint="calibrate with a dense GQA/MHA catalog model such as llama-3.1-8b",
        )
    return Shape(
        layers=geo.layers,
        hidden_size=geo.hidden_size,
        heads=geo.heads,
        kv_heads=geo.kv_heads,
        head_dim=geo.head_dim,
        intermediate_size=_intermediate_size(geo),
        vocab_size=geo.vocab_size,
    )


def scaled_down(shape: Shape) -> Shape:
    """A two-layer model of the same kind (GQA ratio, MLP ratio) for runs on a CPU."""
    heads = 4
    kv_heads = max(1, heads * shape.kv_heads // shape.heads)
    hidden = 128
    return Shape(  # every field anew (Shape is frozen)
        layers=2,
        hidden_size=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate_size=max(1, round(hidden * shape.intermediate_size / shape.hidden_size)),
        vocab_size=512,
    )


class RMSNorm(nn.Module):
    def __init__(self, dim: int, device: torch.device, dtype: torch.dtype, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, s: Shape, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.s = s
        qkv_out = (s.heads + 2 * s.kv_heads) * s.head_dim
        self.qkv = nn.Linear(s.hidden_size, qkv_out, bias=False, device=device, dtype=dtype)
        self.o = nn.Linear(s.heads * s.head_dim, s.hidden_size, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        s, (b, n, _) = self.s, x.shape
        kv_width = s.kv_heads * s.head_dim
        q, k, v = self.qkv(x).split([s.heads * s.head_dim, kv_width, kv_width], -1)
        q = _rotate(q.view(b, n, s.heads, s.head_dim).transpose(1, 2), cos, sin)
        k = _rotate(k.view(b, n, s.kv_heads, s.head_dim).transpose(1, 2), cos, sin)
        v = v.view(b, n, s.kv_heads, s.head_dim).transpose(1, 2)
        # Expanded KV heads rather than enable_gqa: every SDPA backend (flash included) takes these.
        group = s.heads // s.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(1, 2).reshape(b, n, s.heads * s.head_dim))  # type: ignore[no-any-return]


class Mlp(nn.Module):
    def __init__(self, s: Shape, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.gate_up = nn.Linear(
            s.hidden_size, 2 * s.intermediate_size, bias=False, device=device, dtype=dtype
        )
        self.down = nn.Linear(s.intermediate_size, s.hidden_size, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)  # type: ignore[no-any-return]


class Block(nn.Module):
    def __init__(self, s: Shape, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(s.hidden_size, device, dtype)
        self.attn = Attention(s, device, dtype)
        self.mlp_norm = RMSNorm(s.hidden_size, device, dtype)
        self.mlp = Mlp(s, device, dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))  # type: ignore[no-any-return]


class LlamaShaped(nn.Module):
    def __init__(self, s: Shape, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.s = s
        self.embed = nn.Embedding(s.vocab_size, s.hidden_size, device=device, dtype=dtype)
        self.blocks = nn.ModuleList(Block(s, device, dtype) for _ in range(s.layers))
        self.norm = RMSNorm(s.hidden_size, device, dtype)
        self.lm_head = nn.Linear(s.hidden_size, s.vocab_size, bias=False, device=device, dtype=dtype)
        inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, s.head_dim, 2, device=device).float() / s.head_dim)
        self.inv_freq = inv_freq

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        positions = torch.arange(ids.shape[1], device=ids.device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x[:, -1:]))  # type: ignore[no-any-return]


def _figures(model_name: str, shape: Shape, dtype: torch.dtype, scaled: bool) -> PrefillFigures:
    entry = find_catalog_entry(model_name)
    return PrefillFigures(
        model=model_name,
        names=entry.names() if entry is not None else [model_name],
        dtype=str(dtype).removeprefix("torch."),
        scaled_down=scaled,
        **shape.model_dump(),
        active_params=shape.active_params,
    )


def measure_prefill(
    geo: ModelGeometry,
    device: torch.device,
    dtype: torch.dtype,
    lengths: list[int],
    deadline: Deadline,
    *,
    scale: bool = False,
    max_runs: int = 3,
    peak: tuple[float, str] | None = None,
) -> PrefillFigures:
    """Median seconds of a prefill at each prompt length (shortest first) within ``deadline``.

    ``peak``: (FLOP/s, where the figure comes from) for the achieved fraction, or None (no figure).
    """
    full = shape_of(geo)
    shape = scaled_down(full) if scale else full
    figures = _figures(geo.name, shape, dtype, scale)
    if peak is not None:
        figures.peak_tflops, figures.peak_source = peak[0] / 1e12, peak[1]
    else:
        figures.unknown["peak_fraction"] = f"no data-sheet peak for device {device.type}"
    lengths = sorted({n for n in lengths if 0 < n <= geo.max_context})
    if not lengths:
        figures.unknown["points"] = f"no prompt length within the model's context ({geo.max_context})"
        return figures
    try:
        with torch.inference_mode():
            _time_lengths(LlamaShaped(shape, device, dtype).eval(), lengths, deadline, max_runs, figures)
    finally:
        if buffers.is_cuda(device):
            torch.cuda.empty_cache()  # the model is gone: give its memory back for what runs next
    for p in figures.points:
        p.peak_fraction = p.achieved_tflops * 1e12 / peak[0] if peak else None
    return figures


def _time_lengths(
    model: LlamaShaped, lengths: list[int], deadline: Deadline, max_runs: int, figures: PrefillFigures
) -> None:
    shape, device = model.s, model.lm_head.weight.device
    sync = buffers.sync_fn(device)
    for i, n in enumerate(lengths):
        if figures.points and deadline.passed():
            figures.unknown["skipped"] = f"prompt lengths {lengths[i:]}: time budget spent"
            return
        ids = torch.randint(0, shape.vocab_size, (1, n), device=device)
        # Longer prompts cost more: each length gets its share of the time by its FLOPs.
        weight = shape.flops(n) / sum(shape.flops(m) for m in lengths[i:])
        try:
            times = timed_runs(functools.partial(model, ids), sync, deadline.share(weight), max_runs)
        except torch.cuda.OutOfMemoryError:
            figures.unknown["skipped"] = f"prompt lengths {lengths[i:]}: out of GPU memory"
            return
        seconds = median(times)
        figures.points.append(
            PrefillPoint(
                prompt_tokens=n,
                seconds=seconds,
                tokens_per_s=n / seconds,
                achieved_tflops=shape.flops(n) / seconds / 1e12,
            )
        )


def effective_tflops(figures: PrefillFigures) -> float | None:
    """The median achieved rate: one figure for the planner's recompute model."""
    if not figures.points:
        return None
    return statistics.median(p.achieved_tflops for p in figures.points)
