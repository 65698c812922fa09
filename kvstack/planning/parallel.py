"""Tensor-parallel size and the GPU budget at each candidate size; why a plan does not fit."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvstack.errors import InputError, UnsupportedError
from kvstack.hardware.snapshot import GpuInfo, HardwareSnapshot
from kvstack.model.geometry import ModelGeometry
from kvstack.planning import tiers as tr
from kvstack.planning.dtype import DtypeChoice, choose_kv_dtype
from kvstack.planning.kv import KvFootprint, KvLayout, footprint
from kvstack.planning.request import DEFAULT_UTILIZATION, PlanRequest
from kvstack.planning.schema import Workload
from kvstack.units import fmt_bytes, fmt_tokens

TP_SIZES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Attempt:
    """The budget, dtype and KV footprint at one TP size."""

    tp: int
    utilization: float
    budget: tr.GpuBudget
    dtype: DtypeChoice
    kv: KvFootprint
    working_set: int
    util_note: str

    @property
    def problem(self) -> str | None:
        if not self.budget.weights_fit:
            return "weights"
        # vLLM refuses to start unless the pool holds one request at max_model_len.
        if self.budget.pool_per_rank < self.kv.session_bytes_per_rank:
            return "session"
        return None


def tp_ok(model: ModelGeometry, tp: int) -> bool:
    """vLLM needs TP to divide the attention heads, and to divide or be a multiple of the KV heads."""
    if model.heads % tp:
        return False
    return model.attention == "mla" or model.kv_heads % tp == 0 or tp % model.kv_heads == 0


def utilization(request: PlanRequest, gpus: list[GpuInfo]) -> tuple[float, str]:
    asked = request.gpu_memory_utilization
    util = asked if asked is not None else DEFAULT_UTILIZATION[request.engine]
    origin = "as asked" if asked is not None else f"{request.engine}'s default for kvstack"
    # The engine refuses to start when less than util x total is free (another process holds memory).
    fractions = [
        g.memory_free_bytes / g.memory_total_bytes
        for g in gpus
        if g.memory_free_bytes and g.memory_total_bytes
    ]
    if fractions and min(fractions) < util:
        lowered = math.floor((min(fractions) - 0.02) * 100) / 100
        if lowered >= 0.05:
            note = f"{lowered:.2f}: only {min(fractions):.0%} of a GPU's memory is free ({util:.2f} asked)"
            return lowered, note
    return util, f"{util:.2f} ({origin})"


def attempt(
    snapshot: HardwareSnapshot,
    model: ModelGeometry,
    request: PlanRequest,
    wl: Workload,
    tp: int,
    sglang: str | None,
    layout: KvLayout | None = None,
) -> Attempt:
    gpus = snapshot.gpus[:tp]
    util, note = utilization(request, gpus)
    budget = tr.gpu_budget(gpus, tp, util, model.weight_bytes)
    cc = min((g.compute_capability for g in gpus if g.compute_capability), default=None)

    def working_set(element_bytes: float) -> int:
        kv = footprint(model, element_bytes, tp, wl.context_tokens, layout)
        return math.ceil(wl.users * wl.reuse * kv.session_bytes)

    dtype = choose_kv_dtype(
        request.engine, cc, model, request.kv_dtype, lambda b: working_set(b) <= budget.pool_total, sglang
    )
    kv = footprint(model, dtype.bytes_per_element, tp, wl.context_tokens, layout)
    return Attempt(tp, util, budget, dtype, kv, working_set(dtype.bytes_per_element), note)


def choose_tp(
    snapshot: HardwareSnapshot,
    model: ModelGeometry,
    request: PlanRequest,
    wl: Workload,
    sglang: str | None,
    layout: KvLayout | None = None,
) -> tuple[Attempt, str]:
    """--tp as asked, else the smallest TP at which all concurrent sessions fit, else the largest."""
    n = len(snapshot.gpus)
    if request.tp is not None:
        if request.tp > n:
            raise UnsupportedError(
                f"--tp {request.tp} needs {request.tp} GPUs; the snapshot has {n}",
                hint=f"use --tp {n} or less",
            )
        if not tp_ok(model, request.tp):
            raise UnsupportedError(
                f"--tp {request.tp} does not divide {model.name}'s {model.heads} attention / "
                f"{model.kv_heads} KV heads",
                hint="use a power of two that divides the head counts",
            )
        return attempt(
            snapshot, model, request, wl, request.tp, sglang, layout
        ), f"--tp {request.tp} as asked"
    candidates = [t for t in TP_SIZES if t <= n and tp_ok(model, t)] or [1]
    attempts = [attempt(snapshot, model, request, wl, tp, sglang, layout) for tp in candidates]
    ok = [a for a in attempts if a.problem is None]
    seen = f" of {n} GPUs" if n > 1 else ""
    if not ok:
        last = attempts[-1]
        return last, f"TP {last.tp}: the largest this machine allows{seen}, and still too small"
    for a in ok:
        if a.kv.sessions(a.budget.pool_total) >= wl.users:
            why = f"the smallest TP{seen} at which the weights and all {wl.users} concurrent sessions fit"
            return a, f"TP {a.tp}: {why}"
    # More GPUs add HBM for KV: take them all when the concurrent sessions do not fit.
    return ok[-1], f"TP {ok[-1].tp}: the largest TP{seen}; even so the concurrent sessions do not all fit"


def needed_gpus(
    snapshot: HardwareSnapshot, model: ModelGeometry, request: PlanRequest, wl: Workload
) -> int | None:
    """Smallest TP (GPUs of this model) that would fit, if the machine had them."""
    gpu = snapshot.gpus[0]
    for tp in TP_SIZES[1:]:
        if not tp_ok(model, tp):
            continue
        shadow = snapshot.model_copy()
        shadow.gpus = [gpu] * tp
        asked = request.model_copy()
        asked.tp = tp
        try:
            if attempt(shadow, model, asked, wl, tp, None).problem is None:
                return tp
        except InputError:
            return None
    return None


def infeasible_error(
    chosen: Attempt, needed: int | None, model: ModelGeometry, wl: Workload, gpu: str
) -> str:
    """One line saying what does not fit and what to do: more GPUs, an FP8 checkpoint, FP8 KV."""
    b, kv = chosen.budget, chosen.kv
    more = f"use --tp {needed} on {needed} x {gpu}" if needed else "use more GPUs"
    if chosen.problem == "weights":
        fp8 = " or an FP8 checkpoint (half the weight bytes)" if model.weight_bytes_per_param >= 1.5 else ""
        usable = b.memory_per_rank * b.utilization - b.reserve_per_rank
        return (
            f"the weights ({fmt_bytes(model.weight_bytes)}) need {fmt_bytes(b.weights_per_rank)} per GPU at "
            f"TP {chosen.tp}, but a {gpu} has {fmt_bytes(usable)} at gpu_memory_utilization "
            f"{chosen.utilization:.2f}: {more}{fp8}"
        )
    fp8 = "" if chosen.dtype.bytes_per_element <= 1 else ", FP8 KV (--kv-dtype fp8)"
    return (
        f"one {fmt_tokens(wl.context_tokens)}-token session needs {fmt_bytes(kv.session_bytes_per_rank)} "
        f"of KV per GPU at TP {chosen.tp}, but the GPU pool after weights is "
        f"{fmt_bytes(max(0, b.pool_per_rank))}: {more}{fp8} or a shorter --context"
    )
