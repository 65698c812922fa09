"""The offload path's cost per request, read from a `kvstack bench --trace --compare` result.

`bench --trace` calibrates every layout it serves after its replay (bench/replay/calibrate.py):
``hit_s`` is a prompt the engine holds whole, ``miss_s`` what every request pays beyond that on the
layout's path. A layout with no offload tier and one with, measured on the same engine and
machine, differ by what the connector adds to each request whether it hits or not (lookup, store,
transfer setup): the figure `kvstack plan --trace` charges every request of an offload layout.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from kvstack.bench.replay.results import LayoutComparison, read_layouts
from kvstack.bench.report import load_result
from kvstack.errors import InputError

HINT = "run kvstack bench --trace FILE --compare none,lmcache-mp --out DIR and pass DIR"


def _path_cost(layout: LayoutComparison) -> float | None:
    costs = layout.calibration()
    return costs.hit_s + costs.miss_s if costs is not None else None


def offload_cost_from(path: Path) -> tuple[float, str]:
    """(seconds per request, where the figure comes from) from a bench --trace result (its --out
    directory or results.json) holding a calibrated layout without offload and one with."""
    result = load_result(path)
    costed = [(lv, c) for lv in read_layouts(result, path, HINT) if (c := _path_cost(lv)) is not None]
    plain = [(lv.layout, c) for lv, c in costed if not lv.hierarchy.offloads]
    offload = [(lv.layout, c) for lv, c in costed if lv.hierarchy.offloads]
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
