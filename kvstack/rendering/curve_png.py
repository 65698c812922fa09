"""The capacity curve of a trace as a PNG, each tier's boundary marked (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

from kvstack.errors import PathError
from kvstack.planning.trace_schema import TraceSizing
from kvstack.units import fmt_bytes

_COLORS = {"engine": "tab:green", "cpu": "tab:blue", "disk": "tab:orange", "remote": "tab:purple"}


def write_curve_png(sizing: TraceSizing, path: Path, title: str) -> Path:
    """Hit ratio against cache size (log scale), with the tiers and the target marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for p in sizing.curve if p.size_bytes > 0]
    fig, ax = plt.subplots(figsize=(9, 5))
    try:
        ax.plot(
            [p.size_bytes / 2**30 for p in points],
            [100 * p.hit_ratio for p in points],
            color="black",
            label="LRU prefix cache, this trace",
        )
        ax.axhline(
            100 * sizing.max_ratio, color="grey", linestyle=":", label=f"unbounded {sizing.max_ratio:.1%}"
        )
        for tier in sizing.tiers:
            if tier.size_bytes <= 0:
                continue
            ax.axvline(
                tier.size_bytes / 2**30,
                color=_COLORS.get(tier.kind, "tab:red"),
                linestyle="--",
                label=f"{tier.kind} {fmt_bytes(tier.size_bytes)}: serves {tier.hit_ratio:.1%}",
            )
        ax.axvline(
            sizing.target_bytes / 2**30,
            color="tab:red",
            linestyle=":",
            label=f"target {fmt_bytes(sizing.target_bytes)} ({sizing.target_fraction:.0%} of unbounded)",
        )
        ax.set_xscale("log")
        ax.set_xlabel("cache size (GiB, all tiers together; tiers are inclusive)")
        ax.set_ylabel("prompt tokens served from cache (%)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        try:
            fig.savefig(path, dpi=110)
        except OSError as exc:
            raise PathError(
                f"cannot write --curve-png {path} ({exc.strerror or exc})", hint="pass a writable path"
            ) from exc
    finally:
        plt.close(fig)
    return path
