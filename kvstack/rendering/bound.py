"""What bounds a layout, in words: ``disk read 92% of 1.9 GB/s`` (the simulator's accounting,
planning/predict/plan_capacity.py ``resources_at``, computes it; this only words it)."""

from __future__ import annotations

from kvstack.planning.predict.capacity_schema import ResourceUse
from kvstack.units import fmt_bw


def amount(value: float, unit: str) -> str:
    """A resource's figure in its unit: ``1.9 GB/s``, ``12,400 tokens/s``, ``1,200,000 tokens``."""
    if unit == "B/s":
        return fmt_bw(value)
    return f"{value:,.0f} {unit}"


def bound_text(use: ResourceUse) -> str:
    """``disk read 92% of 1.9 GB/s``; the engine's parts say how busy the engine is in all."""
    text = f"{use.label} {use.utilisation:.0%} of {amount(use.capacity, use.unit)}"
    if use.engine_busy is not None and use.engine_busy - use.utilisation >= 0.005:
        text += f" (the engine {use.engine_busy:.0%} busy)"
    return text
