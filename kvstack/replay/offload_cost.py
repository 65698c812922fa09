"""The offload path's cost per request, read from a `kvstack bench --trace --compare` result.

`bench --trace` calibrates every layout it serves after its replay (replay/calibrate.py):
``hit_s`` is a prompt the engine holds whole, ``miss_s`` what every request pays beyond that on the
layout's path. A layout with no offload tier and one with, measured on the same engine and
machine, differ by what the connector adds to each request whether it hits or not (lookup, store,
transfer setup): the figure `kvstack plan --trace` charges every request of an offload layout.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvstack.bench.report import load_result
from kvstack.clients.token_sources import ENGINE_CACHE
from kvstack.errors import InputError

HINT = "run kvstack bench --trace FILE --compare none,lmcache-mp --out DIR and pass DIR"


def _path_cost(layout: dict[str, Any]) -> float | None:
    calibration = (layout.get("ttft") or {}).get("calibration") or {}
    hit, miss = calibration.get("hit_s"), calibration.get("miss_s")
    if not isinstance(hit, int | float) or not isinstance(miss, int | float):
        return None
    return float(hit) + float(miss)


def offloads(layout: dict[str, Any]) -> bool:
    """Whether a bench --trace layout has a tier below the engine's own cache."""
    levels = (layout.get("hierarchy") or {}).get("levels") or []
    return any(isinstance(lv, dict) and lv.get("tier") != ENGINE_CACHE for lv in levels)


def offload_cost_from(path: Path) -> tuple[float, str]:
    """(seconds per request, where the figure comes from) from a bench --trace result (its --out
    directory or results.json) holding a calibrated layout without offload and one with."""
    result = load_result(path)
    layouts = (result.trace or {}).get("layouts") or []
    plain = [
        (lv.get("layout"), c) for lv in layouts if not offloads(lv) and (c := _path_cost(lv)) is not None
    ]
    offload = [(lv.get("layout"), c) for lv in layouts if offloads(lv) and (c := _path_cost(lv)) is not None]
    if not plain or not offload:
        raise InputError(
            f"{path} holds no calibrated pair of layouts without and with offload "
            "(a bench --trace result compares both)",
            hint=HINT,
        )
    (base_name, base), (name, cost) = plain[0], offload[0]
    seconds = max(0.0, cost - base)
    when = (
        datetime.fromtimestamp(result.layouts[0].started_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        if result.layouts
        else ""
    )
    source = (
        f"measured by kvstack bench --trace ({path}{', ' + str(when) if when else ''}): a request's fixed "
        f"cost {cost * 1000:.1f} ms on {name} vs {base * 1000:.1f} ms on {base_name}"
    )
    return seconds, source
