"""A sweep's files: results.json (the source of truth), requests.csv (one row per request, with its
layout, step and load) and the plots; written atomically."""

from __future__ import annotations

from pathlib import Path

from kvstack.bench.report import REQUESTS_CSV, RESULTS_JSON, requests_csv
from kvstack.bench.sweep.schema import SweepResult, SweepRow
from kvstack.fsutil import atomic_write, make_out_dir
from kvstack.userfile import read_model

_LEADING = ["layout", "step", "load"]
CSV_FIELDS = _LEADING + [f for f in SweepRow.model_fields if f not in ("itl_s", *_LEADING)]


def write_sweep(result: SweepResult, out_dir: Path, plots: bool = True) -> list[Path]:
    """results.json, requests.csv and (unless disabled) the plots; the paths written."""
    make_out_dir(out_dir)
    json_path, csv_path = out_dir / RESULTS_JSON, out_dir / REQUESTS_CSV
    atomic_write(json_path, result.model_dump_json(by_alias=True, indent=1) + "\n", mode=0o644)
    atomic_write(csv_path, requests_csv(result.requests, CSV_FIELDS), mode=0o644)
    written = [json_path, csv_path]
    if plots and any(lay.steps for lay in result.layouts):
        from kvstack.bench.sweep.plots import write_plots  # matplotlib is slow to import: only when asked

        written.extend(write_plots(result, out_dir))
    return written


def load_sweep(path: Path) -> SweepResult:
    if path.is_dir():
        path = path / RESULTS_JSON
    return read_model(
        path, SweepResult, "a kvstack bench --sweep result", "point at a bench --sweep --out DIR"
    )
