"""PNG plots of a bench result, drawn from the BenchResult (results.json), never from live state.

matplotlib is imported here only, with the Agg backend and ``Figure`` objects rather than pyplot,
so plotting works without a display and keeps no global figure state.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from kvstack.bench.schema import BenchResult
from kvstack.bench.stats import percentile
from kvstack.fsutil import atomic_write

TTFT_CDF = "ttft_cdf.png"
TTFT_BY_ROUND = "ttft_by_round.png"
HIT_RATE = "hit_rate.png"


def _figure(width: float = 7.0, height: float = 4.5) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _save(fig: Any, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write(path, buf.getvalue(), mode=0o644)
    return path


def ttft_cdf(result: BenchResult, path: Path) -> Path:
    fig = _figure()
    ax = fig.add_subplot()
    for lay in result.layouts:
        ttfts = sorted(r.ttft_s * 1000 for r in result.requests if r.layout == lay.name and r.ok and r.ttft_s)
        if ttfts:
            frac = [(i + 1) / len(ttfts) for i in range(len(ttfts))]
            ax.step(ttfts, frac, where="post", label=f"{lay.name} (n={len(ttfts)})")
    ax.set_xlabel("time to first token (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.set_title("TTFT CDF per layout")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right")
    else:
        ax.text(0.5, 0.5, "no successful requests", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, path)


def ttft_by_round(result: BenchResult, path: Path) -> Path:
    """Median TTFT per round (turn for multi-turn) and layout, with the p90 as a whisker."""
    labels: list[str] = list(result.workload.get("rounds") or [])
    fig = _figure()
    ax = fig.add_subplot()
    for lay in result.layouts:
        xs: list[int] = []
        p50: list[float] = []
        p90: list[float] = []
        for rnd in range(len(labels)):
            vals = [
                r.ttft_s * 1000
                for r in result.requests
                if r.layout == lay.name and r.round == rnd and r.ok and r.ttft_s is not None
            ]
            if vals:
                xs.append(rnd)
                p50.append(percentile(vals, 50))
                p90.append(percentile(vals, 90))
        if xs:
            err = [[0.0] * len(xs), [b - a for a, b in zip(p50, p90, strict=True)]]
            ax.errorbar(xs, p50, yerr=err, marker="o", capsize=3, label=lay.name)
    ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 6 else 0)
    ax.set_ylabel("TTFT p50 (ms), whisker to p90")
    ax.set_title("TTFT by turn" if any(r.turn is not None for r in result.requests) else "TTFT by round")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return _save(fig, path)


def hit_rate(result: BenchResult, path: Path) -> Path:
    """The server-reported token hit rate per layout next to what a perfect cache could reach."""
    fig = _figure()
    ax = fig.add_subplot()
    names = [lay.name for lay in result.layouts]
    measured = [lay.cache.token_hit_rate for lay in result.layouts]
    ideal = [lay.summary.ideal_hit_rate or 0.0 for lay in result.layouts]
    xs = list(range(len(names)))
    width = 0.38
    ax.bar([x - width / 2 for x in xs], [(v or 0.0) * 100 for v in measured], width, label="server counters")
    ax.bar(
        [x + width / 2 for x in xs],
        [v * 100 for v in ideal],
        width,
        label="shared with earlier rounds",
        alpha=0.5,
    )
    for x, v in zip(xs, measured, strict=True):
        text = "n/a" if v is None else f"{v * 100:.0f}%"
        ax.text(x - width / 2, (v or 0.0) * 100 + 1, text, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, names)
    ax.set_ylim(0, 110)
    ax.set_ylabel("prompt tokens served from cache (%)")
    ax.set_title("Cache hit rate per layout")
    ax.legend(loc="upper right")
    return _save(fig, path)


def write_plots(result: BenchResult, out_dir: Path) -> list[Path]:
    return [
        ttft_cdf(result, out_dir / TTFT_CDF),
        ttft_by_round(result, out_dir / TTFT_BY_ROUND),
        hit_rate(result, out_dir / HIT_RATE),
    ]
