"""A sweep's plots, drawn from the SweepResult: TTFT p90 and output tokens/s against load, one line
per layout, the TTFT SLO as a line and each layout's capacity (the knee) marked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvstack.bench.plots import _figure, _save
from kvstack.bench.sweep.ladder import LoadKind
from kvstack.bench.sweep.schema import LayoutSweep, Slo, SweepResult, SweepStep

SWEEP_TTFT = "sweep_ttft_p90.png"
SWEEP_THROUGHPUT = "sweep_throughput.png"
_AXIS = {
    "concurrency": "concurrency (requests in flight)",
    "rate": "request rate (requests/s)",
    "trace_rate": "load (x trace rate)",
}


def _ttft_p90_ms(step: SweepStep) -> float | None:
    d = step.summary.ttft_s
    return None if d is None else d.p90 * 1000


def _tokens_per_s(step: SweepStep) -> float | None:
    return step.summary.output_tokens_per_s if step.summary.ok else None


def _line(ax: Any, lay: LayoutSweep, figure: Callable[[SweepStep], float | None]) -> None:
    """The layout's steps by load (bisect steps in their place), its capacity ringed."""
    pts = sorted((s.load, y) for s in lay.steps if (y := figure(s)) is not None)
    if not pts:
        return
    (line,) = ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=lay.name)
    knee = lay.capacity.load
    at = [y for x, y in pts if x == knee]
    if knee is not None and at and lay.capacity.status == "bracketed":
        ax.plot([knee], at, marker="o", markersize=14, fillstyle="none", color=line.get_color())
        ax.annotate(f"capacity {knee:g}", (knee, at[0]), textcoords="offset points", xytext=(8, 8),
                    fontsize=8, color=line.get_color())  # fmt: skip


def _plot(
    layouts: Sequence[LayoutSweep],
    kind: LoadKind,
    path: Path,
    figure: Callable[[SweepStep], float | None],
    ylabel: str,
    title: str,
    slo_ms: float | None,
) -> Path:
    fig = _figure()
    ax = fig.add_subplot()
    for lay in layouts:
        _line(ax, lay, figure)
    if slo_ms is not None:
        ax.axhline(slo_ms, color="red", linestyle="dashed", label=f"SLO {slo_ms:g} ms")
    ax.set_xlabel(_AXIS[kind])
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return _save(fig, path)


def write_plots(result: SweepResult, out_dir: Path) -> list[Path]:
    return curve_plots(result.layouts, result.kind, result.slo, out_dir)


def curve_plots(layouts: Sequence[LayoutSweep], kind: LoadKind, slo: Slo, out_dir: Path) -> list[Path]:
    """TTFT p90 and output tokens/s against load, one line per layout (a sweep's, or tune
    --objective capacity's candidates)."""
    ttft = slo.ttft_s
    share = f"{slo.share * 100:g}%"
    return [
        _plot(
            layouts,
            kind,
            out_dir / SWEEP_TTFT,
            _ttft_p90_ms,
            "TTFT p90 (ms)",
            f"TTFT p90 against load (capacity: {share} within the SLO)",
            None if ttft is None else ttft * 1000,
        ),
        _plot(
            layouts,
            kind,
            out_dir / SWEEP_THROUGHPUT,
            _tokens_per_s,
            "output tokens/s",
            "Output tokens/s against load",
            None,
        ),
    ]
