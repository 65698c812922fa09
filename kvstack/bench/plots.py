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
from kvstack.clients import token_sources
from kvstack.fsutil import atomic_write

TTFT_CDF = "ttft_cdf.png"
TTFT_BY_ROUND = "ttft_by_round.png"
PROMPT_SOURCES = "prompt_sources.png"  # was hit_rate.png: the hit rate is its stacked cached part


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


# Cached sources stacked from the bottom (their height is the hit rate), recomputed on top.
_STACK = token_sources.CACHE_ORDER
_COLORS = {
    token_sources.RECOMPUTED: "#c8c8c8",
    token_sources.ENGINE_CACHE: "#1f77b4",
    token_sources.DRAM: "#2ca02c",
    token_sources.DISK: "#ff7f0e",
    token_sources.REMOTE: "#9467bd",
    token_sources.OFFLOAD: "#8c564b",
}


def source_shares(result: BenchResult) -> list[dict[str, float]]:
    """Per layout, each source's share of its prompt tokens (empty: the server has no such counters)."""
    out: list[dict[str, float]] = []
    for lay in result.layouts:
        total = sum(lay.cache.tokens_by_source.values())
        out.append({k: v / total for k, v in lay.cache.tokens_by_source.items()} if total > 0 else {})
    return out


def prompt_sources(result: BenchResult, path: Path) -> Path:
    """Prompt tokens by source per layout, stacked, next to what a perfect cache could have served."""
    fig = _figure()
    ax = fig.add_subplot()
    names = [lay.name for lay in result.layouts]
    xs = list(range(len(names)))
    shares = source_shares(result)
    bottoms = [0.0] * len(xs)
    for source in _STACK:
        heights = [s.get(source, 0.0) * 100 for s in shares]
        if not any(heights):
            continue
        ax.bar(xs, heights, 0.6, bottom=bottoms, label=token_sources.LABELS[source], color=_COLORS[source])
        for x, h, b in zip(xs, heights, bottoms, strict=True):
            if h >= 6:
                ax.text(x, b + h / 2, f"{h:.0f}%", ha="center", va="center", fontsize=8)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    for x, lay, s in zip(xs, result.layouts, shares, strict=True):
        ideal = lay.summary.ideal_hit_rate
        if ideal is not None:
            ax.hlines(ideal * 100, x - 0.36, x + 0.36, colors="black", linestyles="dashed")
        if not s:
            ax.text(x, 50, "n/a", ha="center", va="center", fontsize=9)
        tokens = sum(lay.cache.tokens_by_source.values())
        if tokens:
            ax.text(x, 101, f"{tokens:,.0f} tokens", ha="center", va="bottom", fontsize=8)
    ax.plot([], [], color="black", linestyle="dashed", label="shared with earlier rounds")
    ax.set_xticks(xs, names)
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_ylim(0, 112)
    ax.set_ylabel("prompt tokens (%)")
    ax.set_title("Prompt tokens by source per layout")
    handles, labels = ax.get_legend_handles_labels()
    order = [token_sources.LABELS[k] for k in token_sources.SOURCES] + ["shared with earlier rounds"]
    ranked = sorted(zip(handles, labels, strict=True), key=lambda hl: order.index(hl[1]))
    ax.legend([h for h, _ in ranked], [lab for _, lab in ranked], loc="upper left", bbox_to_anchor=(1.01, 1))
    return _save(fig, path)


def write_plots(result: BenchResult, out_dir: Path) -> list[Path]:
    return [
        ttft_cdf(result, out_dir / TTFT_CDF),
        ttft_by_round(result, out_dir / TTFT_BY_ROUND),
        prompt_sources(result, out_dir / PROMPT_SOURCES),
    ]
