"""One ``kvstack bench --trace`` invocation: check the target, replay, print and write the report."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kvstack.bench.command import _check_out, _metrics_url, normalize_url, raise_on_correctness, served_model
from kvstack.bench.report import correctness_lines, environment, write_report
from kvstack.bench.schema import BenchResult
from kvstack.clients import token_sources as ts
from kvstack.errors import EngineError, InputError
from kvstack.redact import redact_url
from kvstack.replay.command import TraceArgs, load_slice, run_trace
from kvstack.serving.served_layout import StartLayout

PREDICTION_PLOT = "trace_prediction.png"


@dataclass(frozen=True)
class TraceOptions:
    """One ``bench --trace`` run: which requests it replays and how (``replay``), against what."""

    replay: TraceArgs
    url: str | None = None
    model: str | None = None
    api_key: str | None = None
    compare: list[str] = field(default_factory=list)
    metrics_urls: list[str] = field(default_factory=list)
    timeout_s: float = 300.0
    out: Path | None = None
    as_json: bool = False
    tier_sizes: dict[str, int | None] = field(default_factory=dict)
    lmcache: str | None = None  # --url: LMCache's cache server, as validate and top take it
    run_dir: Path | None = None  # --url: the kvstack serve run behind it (default: the newest serving it)


def _config(o: TraceOptions, base_url: str | None, model: str, metrics: list[str]) -> dict[str, Any]:
    return {
        "url": redact_url(base_url) if base_url else None,
        "model": model,
        "api_key": "***" if o.api_key else None,
        "workload": "trace",
        "trace": str(o.replay.path),
        "compare": o.compare,
        "concurrency": o.replay.concurrency,
        "seed": o.replay.seed,
        "metrics_urls": [redact_url(u) for u in metrics],
        "timeout_s": o.timeout_s,
        "tier_sizes": o.tier_sizes,
        "lmcache": redact_url(o.lmcache) if o.lmcache else None,
        "check_correctness": o.replay.check_correctness,
    }


def run_trace_bench(o: TraceOptions, start_layout: StartLayout | None) -> BenchResult:
    _check_out(o.out)
    o.replay.check()
    load_slice(o.replay)  # a bad trace is named before any server is asked
    base_url = normalize_url(o.url) if o.url else None
    metrics = [_metrics_url(u) for u in o.metrics_urls]
    if base_url is not None:
        model = o.model or served_model(base_url, o.api_key)
    else:
        model = o.model or ""
        if not model or start_layout is None:
            raise InputError("a replay needs --url or a layout kvstack serves", hint="add --url URL")
    result, failure = run_trace(
        o.replay,
        url=base_url,
        names=o.compare,
        start_layout=start_layout,
        metrics_urls=metrics,
        model=model,
        api_key=o.api_key,
        timeout_s=o.timeout_s,
        config=_config(o, base_url, model, metrics),
        environment=environment(),
        lmcache=o.lmcache,
        run_dir=o.run_dir if base_url is not None else None,
    )
    _emit(o, result)
    if failure is not None:
        raise failure
    raise_on_correctness(result)
    if result.requests and not any(r.ok for r in result.requests):
        raise EngineError(
            f"no request of the replay succeeded ({len(result.requests)} failed)",
            hint="see requests.csv for every error" if o.out else "rerun with --out DIR to keep every error",
        )
    return result


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def prediction_table(result: BenchResult) -> Table:
    table = Table(title="Predicted vs measured: share of prompt tokens served, per tier")
    for col in ("layout", "tier", "size (tokens)", "predicted", "measured", "gap (points)"):
        table.add_column(col, justify="left" if col in ("layout", "tier") else "right")
    for cmp_ in (result.trace or {}).get("layouts", []):
        sizes = {lv["tier"]: lv["tokens"] for lv in cmp_["hierarchy"]["levels"]}
        for row in cmp_["tiers"]:
            gap = row["gap_points"]
            size = sizes.get(row["tier"])
            table.add_row(
                cmp_["layout"],
                ts.LABELS.get(row["tier"], row["tier"]),
                "-" if size is None else f"{size:,}",
                _pct(row["predicted"]),
                _pct(row["measured"]),
                "-" if gap is None else f"{gap:+.1f}",
            )
    return table


def ttft_table(result: BenchResult) -> Table:
    table = Table(title="TTFT and prompt tokens by source, per layout")
    per_layout = {c["layout"]: c["measured_tokens"] for c in (result.trace or {}).get("layouts", [])}
    by_layout = {lay.name: per_layout.get(lay.name) or lay.cache.tokens_by_source for lay in result.layouts}
    sources = [s for s in ts.SOURCES if any(tokens.get(s) for tokens in by_layout.values())]
    predicted = {
        c["layout"]: (c.get("ttft") or {}).get("predicted") or {}
        for c in (result.trace or {}).get("layouts", [])
    }
    columns = ["layout", "requests", "TTFT p50 ms", "TTFT p90 ms", "predicted p50 / p90 ms"]
    for col in [*columns, *[ts.LABELS[s] for s in sources]]:
        table.add_column(col, justify="left" if col == "layout" else "right")
    for lay in result.layouts:
        t = lay.summary.ttft_s
        tokens = by_layout[lay.name]
        p = predicted.get(lay.name) or {}
        table.add_row(
            lay.name,
            f"{lay.summary.ok}/{lay.summary.requests}",
            "-" if t is None else f"{t.p50 * 1000:.1f}",
            "-" if t is None else f"{t.p90 * 1000:.1f}",
            f"{_ms(p.get('p50_s'))} / {_ms(p.get('p90_s'))}",
            *[f"{tokens.get(s, 0.0):,.0f}" for s in sources],
        )
    return table


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _emit(o: TraceOptions, result: BenchResult) -> None:
    written: list[Path] = []
    if o.out is not None and (result.requests or result.layouts):
        written = write_report(result, o.out)
        if result.trace and result.trace.get("layouts"):
            from kvstack.replay.plots import prediction_plot

            written.append(prediction_plot(result, o.out / PREDICTION_PLOT))
    if o.as_json:
        sys.stdout.write(result.model_dump_json(by_alias=True, indent=1) + "\n")
        return
    console = Console()
    info = result.trace or {}
    console.print(
        f"trace {info.get('source')}: {info.get('requests_sent')} requests, "
        f"{info.get('prompt_tokens') or 0:,} prompt tokens, blocks of {info.get('block_tokens')} tokens; "
        f"an unbounded cache serves {_pct(info.get('unbounded_hit_ratio'))}",
        markup=False,
        highlight=False,
    )
    for note in info.get("notes", []):
        console.print(f"note: {note}", markup=False, highlight=False)
    console.print(ttft_table(result))
    console.print(prediction_table(result))
    for line in correctness_lines(result):
        console.print(line, markup=False, highlight=False)
    err = Console(stderr=True)
    for path in written:
        err.print(f"wrote {path}", markup=False, highlight=False)
