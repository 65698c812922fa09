"""tune's PNGs, drawn from its results.json (``measured.candidates``), never from live state, with
bench's figure helpers (matplotlib's Agg backend, ``Figure`` objects, atomic writes).

- ``predicted_vs_measured.png``: each measured candidate's predicted p50 and p90 (the ranking model
  on exactly the requests replayed) against the measured ones with their noise; the diagonal is a
  perfect model, the dotted lines 1.5x either way.
- ``candidates.png``: each measured candidate's p50 and p90 with their noise, ``none`` first and
  the winner marked.
- --objective capacity: ``sweep_ttft_p90.png`` and ``sweep_throughput.png``, bench --sweep's plots
  of each swept candidate's curve against the load (x trace rate), its capacity ringed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kvstack.bench.plots import _figure, _save
from kvstack.tune.knobs import offloads
from kvstack.tune.results import MeasuredRow, MeasuredStats, TuneResults
from kvstack.units import in_ms

PREDICTED_VS_MEASURED = "predicted_vs_measured.png"
CANDIDATES = "candidates.png"


def _done(doc: TuneResults) -> list[MeasuredRow]:
    return [c for c in doc.measured.candidates if c.measured is not None] if doc.measured is not None else []


def _short(c: MeasuredRow) -> str:
    return f"#{c.rank}" if offloads(c.connector) else c.connector


def _stat_ms(c: MeasuredRow, stat: str, part: str) -> float:
    """The measured ``stat`` (p50, p90) of ``c``: its value or its noise, in milliseconds."""
    measured: MeasuredStats | None = c.measured
    assert measured is not None
    return in_ms(getattr(getattr(measured, stat), part)) or 0.0


def predicted_vs_measured(doc: TuneResults, path: Path) -> Path:
    fig = _figure(7.0, 5.5)
    ax = fig.add_subplot()
    done = [c for c in _done(doc) if c.predicted.p50_s is not None]
    top = 1.0
    for stat, marker, color in (("p50", "o", "#3182bd"), ("p90", "s", "#e6550d")):
        xs = [in_ms(getattr(c.predicted, f"{stat}_s")) or 0.0 for c in done]
        ys = [_stat_ms(c, stat, "value") for c in done]
        err = [_stat_ms(c, stat, "noise") for c in done]
        if xs:
            ax.errorbar(xs, ys, yerr=err, fmt=marker, color=color, capsize=3, label=f"TTFT {stat}")
            for x, y, c in zip(xs, ys, done, strict=True):
                ax.annotate(_short(c), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
            top = max(top, *xs, *(y + e for y, e in zip(ys, err, strict=True)))
    top *= 1.15
    ax.plot([0, top], [0, top], color="black", linewidth=0.8, label="measured = predicted")
    for f in (1.5, 1 / 1.5):
        ax.plot([0, top], [0, top * f], color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("predicted TTFT (ms): the ranking model on the requests replayed")
    ax.set_ylabel("measured TTFT (ms), whisker: noise")
    ax.set_title("kvstack tune: predicted vs measured (dotted: 1.5x either way)")
    ax.grid(True, alpha=0.3)
    if done:
        ax.legend(loc="upper left")
    else:
        ax.text(0.5, 0.5, "no candidate measured", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, path)


def candidates_plot(doc: TuneResults, path: Path) -> Path:
    done = _done(doc)
    verdict = doc.measured.verdict if doc.measured is not None else None
    winner = verdict.winner if verdict is not None else None
    excluded = verdict.excluded if verdict is not None else {}
    fig = _figure(max(6.0, 0.9 * len(done) + 2.5), 4.8)
    ax = fig.add_subplot()
    xs = list(range(len(done)))
    width = 0.38
    for offset, stat, color in ((-width / 2, "p50", "#3182bd"), (width / 2, "p90", "#e6550d")):
        ys = [_stat_ms(c, stat, "value") for c in done]
        err = [_stat_ms(c, stat, "noise") for c in done]
        ax.bar([x + offset for x in xs], ys, width, yerr=err, capsize=3, color=color, label=f"TTFT {stat}")
    labels = [
        _short(c) + (" *" if c.label == winner else "") + ("\nout" if c.label in excluded else "")
        for c in done
    ]
    ax.set_xticks(xs, labels, fontsize=8)
    ax.set_ylabel("measured TTFT (ms), whisker: noise")
    ax.set_title("kvstack tune: measured candidates (* the winner; #n: the model's rank)")
    ax.grid(True, axis="y", alpha=0.3)
    if done:
        ax.legend(loc="upper right")
    else:
        ax.text(0.5, 0.5, "no candidate measured", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, path)


def capacity_plots(doc: TuneResults, out: Path) -> list[Path]:
    """--objective capacity: each swept candidate's curve (none: no candidate was swept)."""
    from kvstack.bench.sweep.plots import curve_plots

    measured = doc.measured
    if measured is None or measured.capacity is None:
        return []
    layouts = [
        c.capacity.sweep for c in measured.candidates if c.capacity is not None and c.capacity.sweep.steps
    ]
    return curve_plots(layouts, "trace_rate", measured.capacity.slo, out) if layouts else []


def write_plots(doc: TuneResults, out: Path) -> Sequence[Path]:
    return [
        predicted_vs_measured(doc, out / PREDICTED_VS_MEASURED),
        candidates_plot(doc, out / CANDIDATES),
        *capacity_plots(doc, out),
    ]
