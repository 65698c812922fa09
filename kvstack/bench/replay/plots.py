"""The replay's predicted vs measured picture: per layout and tier, two bars side by side."""

from __future__ import annotations

from pathlib import Path

from kvstack.bench.plots import _figure, _save
from kvstack.bench.replay.results import layouts_of
from kvstack.bench.schema import BenchResult
from kvstack.clients import token_sources


def prediction_plot(result: BenchResult, path: Path) -> Path:
    rows = [
        (f"{c.layout}\n{token_sources.LABELS.get(r.tier, r.tier)}", r.predicted, r.measured)
        for c in layouts_of(result)
        for r in c.tiers
    ]
    fig = _figure(max(6.0, 1.1 * len(rows) + 2), 4.5)
    ax = fig.add_subplot()
    xs = list(range(len(rows)))
    width = 0.38
    predicted = [(p or 0.0) * 100 for _, p, _ in rows]
    measured = [(m or 0.0) * 100 for _, _, m in rows]
    ax.bar([x - width / 2 for x in xs], predicted, width, label="predicted (simulated)", color="#9ecae1")
    ax.bar([x + width / 2 for x in xs], measured, width, label="measured (counters)", color="#3182bd")
    for x, p, m in zip(xs, predicted, measured, strict=True):
        ax.text(x - width / 2, p + 1, f"{p:.1f}", ha="center", va="bottom", fontsize=7)
        ax.text(x + width / 2, m + 1, f"{m:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs, [label for label, _, _ in rows], fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("prompt tokens (%)")
    ax.set_title("Trace replay: predicted vs measured share of prompt tokens per tier")
    ax.legend(loc="upper right")
    return _save(fig, path)
