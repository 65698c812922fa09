"""`kvstack tune`: rank every connector and knob setting on a trace, with costs measured on the
engine; keep the winner for `serve --tuned` and `export --tuned`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kvstack.cli import options as opt
from kvstack.errors import InputError

if TYPE_CHECKING:
    from kvstack.tune.run import TuneResult

CALIBRATION_HINT = (
    "measure one: kvstack bench --trace FILE --compare none,lmcache-mp --out DIR, then --calibration DIR"
)


def parse_knobs(texts: list[str], connector: str | None) -> dict[str, float]:
    """``NAME=VALUE`` pairs, names as the connector spells them (leading dashes optional)."""
    from kvstack.tune.knobs import CONNECTORS

    known = (
        {k.name.lstrip("-"): k.name for k in CONNECTORS[connector].knobs} if connector in CONNECTORS else {}
    )
    out: dict[str, float] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not sep or not name.strip() or number != number:
            raise InputError(
                f"--knob {text!r} is not NAME=VALUE with a number", hint="e.g. --knob chunk-size=512"
            )
        out[known.get(name.strip().lstrip("-"), name.strip())] = number
    return out


def _pct(n: int, total: int) -> str:
    return f"{100 * n / total:.1f}%" if total else "-"


def render(result: TuneResult, top: int, out: Path | None, model: str | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(soft_wrap=True, highlight=False, width=None if sys.stdout.isatty() else 160)
    ranked = result.ranked
    shown = ranked[:top] + ([result.baseline] if result.baseline not in ranked[:top] else [])
    table = Table(title=f"kvstack tune: {len(ranked)} candidates ranked by predicted TTFT {result.objective}")
    for col in (
        "#",
        "candidate",
        "p50 ms",
        "p90 ms",
        "mean ms",
        "engine",
        "DRAM",
        "disk",
        "recomputed",
        "note",
    ):
        table.add_column(col, justify="left" if col in ("candidate", "note") else "right")
    for p in shown:
        t, total = p.tokens, sum(p.tokens.values())
        note = "modelled only" if p.candidate.not_settable else ("" if p.gated == 0 else f"{p.gated} gated")
        table.add_row(
            str(ranked.index(p) + 1),
            escape(p.candidate.label),
            f"{p.p50_s * 1000:,.1f}",
            f"{p.p90_s * 1000:,.1f}",
            f"{p.mean_s * 1000:,.1f}",
            _pct(t["engine_cache"], total),
            _pct(t["dram"], total),
            _pct(t["disk"], total),
            _pct(t["recomputed"], total),
            note,
        )
    console.print(table)
    win, base = result.winner, result.baseline
    knobs = ", ".join(f"{k} {v:g}" for k, v in win.candidate.knobs().items()) or "no offload"
    console.print(
        f"  winner: {win.candidate.label} ({knobs}): predicted p50 {win.p50_s * 1000:,.1f} ms, "
        f"p90 {win.p90_s * 1000:,.1f} ms; none p50 {base.p50_s * 1000:,.1f} ms, "
        f"p90 {base.p90_s * 1000:,.1f} ms",
        markup=False,
    )
    if ranked[0] is not win:
        c = ranked[0].candidate
        console.print(f"  ranked above it, modelled only: {c.label}: {c.not_settable}", markup=False)
    console.print(
        "  predicted, not measured: the replay that proves the winner on the engine is not run yet",
        markup=False,
    )
    if out is not None:
        where = f"--model {model} " if model else ""
        console.print(f"  serve it: kvstack serve {where}--tuned {out}", markup=False)
    else:
        console.print(
            "  keep it: --out DIR writes results.json and tuned.json (serve --tuned DIR)", markup=False
        )


def register(app: typer.Typer) -> None:
    @app.command("tune")
    def _cmd(
        trace: opt.Trace = None,
        trace_sample: opt.TraceSample = None,
        start: opt.TraceStart = 0,
        max_requests: opt.TraceMaxRequests = None,
        block_tokens: int | None = typer.Option(
            None, "--block-tokens", help="Scale the trace's blocks to this many tokens (as bench --trace)."
        ),
        calibration: opt.Calibration = None,
        model: str | None = typer.Option(None, "--model", help="Model (default: the bundled demo)."),
        revision: opt.Revision = None,
        hardware: opt.Hardware = None,
        engine_pool_tokens: int | None = typer.Option(
            None,
            "--engine-pool-tokens",
            help="The engine's prefix cache in tokens (default: the plan's pool).",
        ),
        connector: str | None = typer.Option(
            None, "--connector", help="Rank only this connector (and none)."
        ),
        knob: list[str] = typer.Option(
            [], "--knob", help="Fix a knob of --connector: NAME=VALUE (e.g. chunk-size=512); repeatable."
        ),
        objective: str = typer.Option("p50", "--objective", help="p50, p90 or mean of predicted TTFT."),
        top: int = typer.Option(15, "--top", help="Rows of the table."),
        out: Path | None = typer.Option(None, "--out", help="Write results.json and tuned.json here."),
        json_out: bool = typer.Option(False, "--json", help="Print results.json."),
    ) -> None:
        """Rank every connector and knob setting that runs here on a trace of your traffic."""
        import json

        from kvstack.names import choice
        from kvstack.tune.rank import OBJECTIVES

        choice(objective, OBJECTIVES, "--objective")
        if trace is None:
            raise InputError("tune needs a trace of your traffic", hint="add --trace FILE (Mooncake JSONL)")
        if calibration is None:
            raise InputError(
                "tune needs costs measured on your engine (--calibration)", hint=CALIBRATION_HINT
            )
        for name, value in (("--block-tokens", block_tokens), ("--engine-pool-tokens", engine_pool_tokens)):
            if value is not None and value < 1:
                raise InputError(f"{name} must be at least 1, not {value}", hint=f"e.g. {name} 128")
        knobs = parse_knobs(knob, connector)
        result, doc = _run(
            trace, trace_sample, start, max_requests, block_tokens, calibration, model, revision,
            hardware, engine_pool_tokens, connector, knobs, objective,
        )  # fmt: skip
        if out is not None:
            _write(out, result, doc)
        if json_out:
            typer.echo(json.dumps(doc, indent=2))
        else:
            render(result, top, out, model)


def _run(
    trace: Path,
    sample: str | None,
    start: int,
    max_requests: int | None,
    block_tokens: int | None,
    calibration: Path,
    model: str | None,
    revision: str | None,
    hardware: Path | None,
    pool: int | None,
    connector: str | None,
    knobs: dict[str, float],
    objective: str,
) -> tuple[TuneResult, dict[str, Any]]:
    from kvstack.bench.served_calibration import served_calibration_from
    from kvstack.cli.plan_trace import read_trace_input
    from kvstack.model.source import resolve_model
    from kvstack.planning.plan import PlanRequest
    from kvstack.planning.workload import default_workload
    from kvstack.serving.plan_inputs import load_or_probe
    from kvstack.serving.request import demo_model_dir
    from kvstack.traces.sample import scale_request
    from kvstack.tune.limits import limits_of, most_plan
    from kvstack.tune.report import results_document
    from kvstack.tune.run import tune

    traced = read_trace_input(trace, sample, start, max_requests, (None, None), None)
    assert traced is not None
    cal = served_calibration_from(calibration)  # before the probe: bad input fails at once
    source = resolve_model(model or str(demo_model_dir()), revision)
    snapshot = load_or_probe(hardware, None)
    requests, bt = list(traced.requests), traced.block_tokens
    if block_tokens is not None:
        requests, bt = [scale_request(r, block_tokens, bt) for r in requests], block_tokens
    workload = default_workload(source.geometry.max_context)
    limits = limits_of(most_plan(snapshot, source.geometry, source.path, PlanRequest(), workload), pool)
    result = tune(requests, bt, limits, cal, objective=objective, connector=connector, knobs=knobs)  # type: ignore[arg-type]
    doc = results_document(
        result,
        {
            "trace": str(trace),
            "sample": traced.sample,
            "block_tokens": bt,
            "requests": len(requests),
            "model": source.geometry.name,
            "calibration": cal.source,
            "connector": connector,
            "knobs": knobs,
        },
    )
    doc["calibration"] = cal.to_dict()
    return result, doc


def _write(out: Path, result: TuneResult, doc: dict[str, Any]) -> None:
    """results.json, tuned.json, and the calibration it ranked with (served-ttft.json: `plan
    --calibration DIR` reads it back)."""
    import json

    from kvstack.bench.served_calibration import SERVED_TTFT_JSON
    from kvstack.planning.tuned import TUNED_JSON
    from kvstack.tune.report import RESULTS_JSON, tuned_layout

    src = doc["source"]
    why = f"trace {src['trace']} ({src['requests']} requests), calibration {src['calibration']}"
    tuned = tuned_layout(result.winner, result.objective, why)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / RESULTS_JSON).write_text(json.dumps(doc, indent=2) + "\n")
        (out / TUNED_JSON).write_text(tuned.model_dump_json(indent=2) + "\n")
        (out / SERVED_TTFT_JSON).write_text(json.dumps(doc["calibration"], indent=2) + "\n")
    except OSError as exc:
        raise InputError(
            f"cannot write --out {out}: {exc.strerror or exc}", hint="choose a writable directory"
        ) from exc
