"""Measured figures for the planner, from a snapshot's calibration (``kvstack doctor --calibrate``).

Pure (reads no files): each function reads a ``Calibration`` and returns a figure, or None when
the calibration has none, so that the caller falls back to its table estimate. The ``*_explained``
variants also return a sentence saying where the figure came from, for the plan's reasons.
"""

from __future__ import annotations

import itertools
import os
from pathlib import PurePath

from kvstack.hardware.calibrate.model import Calibration, DiskFigures, PrefillFigures
from kvstack.units import fmt_bw, fmt_tokens


def _same_model(measured: PrefillFigures, model_name: str) -> bool:
    if measured.scaled_down:
        return False
    wanted = model_name.strip().lower()
    return wanted in (n.lower() for n in (measured.model, *measured.names))


def _seconds_per_token(points: list[tuple[int, float]], context: int) -> tuple[float, str]:
    """Per-token prefill time at ``context`` from measured (length, seconds per token) points.

    Per-token time grows about linearly with the prompt (attention), so it is interpolated
    linearly, and beyond the longest prompt extrapolated along the last segment's slope.
    """
    exact = dict(points)
    if context in exact:
        return exact[context], f"measured at {fmt_tokens(context)} tokens"
    (first_n, first_s), (last_n, last_s) = points[0], points[-1]
    if context < first_n:
        return first_s, f"the rate at {fmt_tokens(first_n)} tokens, the shortest measured"
    if context > last_n:
        if len(points) == 1:
            return last_s, f"the rate at {fmt_tokens(last_n)} tokens, the only length measured"
        prev_n, prev_s = points[-2]
        slope = max(0.0, (last_s - prev_s) / (last_n - prev_n))
        return last_s + slope * (context - last_n), f"extrapolated beyond {fmt_tokens(last_n)} tokens"
    for (lo_n, lo_s), (hi_n, hi_s) in itertools.pairwise(points):
        if lo_n < context < hi_n:
            t = (context - lo_n) / (hi_n - lo_n)
            where = f"interpolated between {fmt_tokens(lo_n)} and {fmt_tokens(hi_n)} tokens"
            return lo_s + t * (hi_s - lo_s), where
    raise AssertionError("unreachable: points are sorted and context is inside them")


def prefill_rate_explained(
    calibration: Calibration | None,
    model_name: str,
    context_tokens: int,
    *,
    active_params: int | None = None,
) -> tuple[float, str] | None:
    """(prefill tokens/s of one GPU at ``context_tokens``, where it comes from), or None.

    Another model than the one measured is scaled by active parameters (measured / target);
    without the target's ``active_params`` there is no figure.
    """
    measured = calibration.prefill if calibration is not None else None
    if measured is None or not measured.points or context_tokens <= 0:
        return None
    points = sorted((p.prompt_tokens, 1.0 / p.tokens_per_s) for p in measured.points if p.tokens_per_s > 0)
    if not points:
        return None
    seconds, where = _seconds_per_token(points, context_tokens)
    rate = 1.0 / seconds
    source = f"calibrated: {measured.model} ({measured.dtype}) prefill {where}"
    if _same_model(measured, model_name):
        return rate, source
    if not active_params or active_params <= 0:
        return None
    kind = "a scaled-down " if measured.scaled_down else ""
    source += (
        f", scaled from {kind}{measured.model} by active params "
        f"{measured.active_params / 1e9:.3g}B / {active_params / 1e9:.3g}B"
    )
    return rate * measured.active_params / active_params, source


def _norm(path: str) -> PurePath:
    return PurePath(os.path.normpath(path))


def _disk_for(calibration: Calibration, path: str | None) -> DiskFigures | None:
    """The measured path itself, else the deepest measured directory that contains ``path``."""
    if path is None:
        return calibration.disks[0] if len(calibration.disks) == 1 else None
    target = _norm(path)
    containing = [d for d in calibration.disks if target.is_relative_to(_norm(d.path))]
    return max(containing, key=lambda d: len(_norm(d.path).parts), default=None)


def tier_read_bw_explained(
    calibration: Calibration | None, kind: str, path: str | None = None
) -> tuple[float, str] | None:
    """(read bandwidth into the device of a tier ``kind`` ("cpu" or "disk"), how measured), or None.

    cpu: host -> device copies from pinned memory (what LMCache and vLLM's offload use), pageable
    when no pinned figure exists. disk: buffered reads through a pinned bounce buffer (LMCache's
    default read path), else O_DIRECT, else plain reads; ``path`` picks the measured cache path.
    """
    if calibration is None:
        return None
    if kind == "cpu":
        copy = calibration.host_copy
        if copy is None:
            return None
        for value, how in (
            (copy.h2d_pinned_bytes_per_s, "pinned"),
            (copy.h2d_pageable_bytes_per_s, "pageable (no pinned figure)"),
        ):
            if value:
                return value, f"calibrated: host -> {calibration.device} copies, {how}, {fmt_bw(value)}"
        return None
    if kind == "disk":
        disk = _disk_for(calibration, path)
        if disk is None:
            return None
        for value, how in (
            (disk.bounce_bytes_per_s, "buffered reads through a pinned bounce buffer"),
            (disk.direct_bytes_per_s, "O_DIRECT reads through a pinned bounce buffer"),
            (disk.plain_bytes_per_s, "buffered reads into pageable memory"),
        ):
            if value:
                return value, f"calibrated: {disk.path} -> {calibration.device}, {how}, {fmt_bw(value)}"
    return None
