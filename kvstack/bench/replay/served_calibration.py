"""The served-TTFT calibration a plan or tune predicts with, read from where kvstack measured it.

`bench --trace` calibrates every layout it serves after its replay (bench/replay/calibrate.py) and
keeps the costs in results.json (``trace.layouts[].ttft.calibration``); a layout without an offload
tier gives the plain costs, one with gives the offload path's. A tune run keeps the same costs in
``served-ttft.json`` (``planning.predict.served_ttft.ServedCalibration.to_dict``). Either, as a directory
or the file itself, is what `plan --calibration` and `serve --calibration` take.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvstack.bench.replay.results import Costs, read_layouts
from kvstack.bench.report import RESULTS_JSON, load_result
from kvstack.errors import InputError
from kvstack.planning.predict.served_ttft import ServedCalibration, ServedCosts
from kvstack.userfile import read_json_object

SERVED_TTFT_JSON = "served-ttft.json"
HINT = (
    "pass the --out DIR of kvstack bench --trace FILE --compare none,lmcache-mp (or its results.json), "
    f"or a {SERVED_TTFT_JSON}"
)


def _costs(doc: Any, where: str) -> ServedCosts | None:
    if not isinstance(doc, dict) or not doc:
        return None
    try:
        return ServedCosts.from_dict(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{where}: a calibration that cannot be read ({exc})", hint=HINT) from exc


def _served(costs: Costs, where: str) -> ServedCosts:
    try:
        return costs.served()
    except ValueError as exc:
        raise InputError(f"{where}: a calibration that cannot be read ({exc})", hint=HINT) from exc


def _pick(found: list[tuple[str, bool, ServedCosts]], path: Path, source: str) -> ServedCalibration:
    calibration = ServedCalibration.first_of(found, source)
    if calibration is None:
        raise InputError(
            f"{path} holds no calibrated layout without offload (the plain costs a verdict compares with)",
            hint=HINT,
        )
    return calibration


def _from_bench(path: Path) -> ServedCalibration:
    result = load_result(path)
    found = []
    for lv in read_layouts(result, path, HINT):
        calibration = lv.calibration()
        if calibration is not None:
            costs = _served(calibration, f"{path}: layout {lv.layout}")
            found.append((lv.layout, lv.hierarchy.offloads, costs))
    when = (
        datetime.fromtimestamp(result.layouts[0].started_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        if result.layouts
        else ""
    )
    return _pick(found, path, f"kvstack bench --trace {path}" + (f", {when}" if when else ""))


def _from_served(path: Path) -> ServedCalibration:
    doc = read_json_object(path, InputError, HINT, what="calibration")
    layouts = doc.get("layouts")
    if not isinstance(layouts, dict):
        raise InputError(f"{path} has no 'layouts' object: not a {SERVED_TTFT_JSON}", hint=HINT)
    found = []
    for name, entry in layouts.items():
        costs = _costs(entry.get("calibration") if isinstance(entry, dict) else None, f"{path}: {name}")
        if costs is not None:
            found.append((str(name), bool(entry.get("offload")), costs))
    return _pick(found, path, str(doc.get("source") or path))


def served_calibration_from(path: Path) -> ServedCalibration:
    """The calibration at ``path``: a bench --trace result (its directory or results.json), or a
    served-ttft.json (or the directory holding one)."""
    if path.is_dir() and (path / SERVED_TTFT_JSON).is_file():
        return _from_served(path / SERVED_TTFT_JSON)
    if path.is_dir() or path.name == RESULTS_JSON:
        return _from_bench(path)
    return _from_served(path)
