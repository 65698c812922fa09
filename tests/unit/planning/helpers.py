"""Helpers for the planning tests: recorded hardware snapshots (profiles/hardware) and catalog models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvstack.hardware.snapshot import HardwareSnapshot, load_snapshot
from kvstack.model.catalog import find_catalog_entry
from kvstack.model.geometry import ModelGeometry
from kvstack.planning.plan import PlanRequest, make_plan
from kvstack.planning.schema import Plan
from kvstack.planning.workload import default_workload
from kvstack.profiles import profiles_dir
from kvstack.serving.workload_files import load_workload

PlanFor = Callable[..., Plan]


def snapshot(name: str) -> HardwareSnapshot:
    return load_snapshot(profiles_dir() / "hardware" / f"{name}.json")


def catalog_model(name: str) -> ModelGeometry:
    entry = find_catalog_entry(name)
    assert entry is not None, name
    return entry.geometry()


def plan_for(
    hw: str | HardwareSnapshot, model: str | ModelGeometry, workload: str | None = None, **req: Any
) -> Plan:
    snap = snapshot(hw) if isinstance(hw, str) else hw
    geo = catalog_model(model) if isinstance(model, str) else model
    wl = load_workload(workload) if workload else default_workload(geo.max_context)
    return make_plan(snap, geo, geo.name, PlanRequest(**req), wl)


def roomy_cpu_host(gib: int = 64) -> HardwareSnapshot:
    """The no-GPU snapshot with more DRAM: an 8B model's weights leave room for LMCache's tiers."""
    snap = snapshot("no-gpu")
    snap.memory = snap.memory.model_copy(
        update={"total_bytes": gib << 30, "available_bytes": (gib - 4) << 30}
    )
    return snap
