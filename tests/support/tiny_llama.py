"""A reference forward pass of the demo model (Llama: RMSNorm, RoPE, GQA, SwiGLU) in plain torch.

Small enough to read in one sitting; used to check that the demo weights make the next token
depend on the context, without starting an engine.
"""

from __future__ import annotations

from typing import Any

import torch


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    # x: (heads, seq, head_dim); Llama's rotate-half convention.
    _, seq, dim = x.shape
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    half = dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def logits(weights: dict[str, torch.Tensor], config: dict[str, Any], ids: list[int]) -> torch.Tensor:
    """Next-token logits (float32) at every position of ``ids``."""
    w = {k: v.float() for k, v in weights.items()}
    eps, theta = config["rms_norm_eps"], config["rope_theta"]
    heads, kv_heads, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    seq = len(ids)
    mask = torch.full((seq, seq), float("-inf")).triu(1)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(seq, heads, hd).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(seq, kv_heads, hd).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(seq, kv_heads, hd).transpose(0, 1)
        q, k = _rope(q, theta), _rope(k, theta)
        rep = heads // kv_heads
        k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
        att = torch.softmax(q @ k.transpose(1, 2) / hd**0.5 + mask, -1)
        o = (att @ v).transpose(0, 1).reshape(seq, heads * hd)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    return _rms(x, w["model.norm.weight"], eps) @ w["lm_head.weight"].T


def greedy(
    weights: dict[str, torch.Tensor], config: dict[str, Any], ids: list[int], n: int
) -> tuple[list[int], list[float]]:
    """``n`` greedy tokens after ``ids`` and the top-1 minus top-2 log-probability margin of each."""
    ids = list(ids)
    out: list[int] = []
    margins: list[float] = []
    for _ in range(n):
        lp = torch.log_softmax(logits(weights, config, ids)[-1], -1)
        top = torch.topk(lp, 2)
        out.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(out[-1])
    return out, margins
