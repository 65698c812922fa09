"""`kvstack tune`: rank every connector and knob setting on a trace with costs measured on the
engine, prove the best ones by replaying the trace on the engine within a budget, and keep the
measured winner for `serve --tuned` and `export --tuned`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kvstack.cli import options as opt
from kvstack.errors import InputError

if TYPE_CHECKING:
    from rich.console import Console

    from kvstack.tune.command import TuneRun
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


def _pct(n: float, total: float) -> str:
    return f"{100 * n / total:.1f}%" if total else "-"


def _console() -> Console:
    from rich.console import Console

    return Console(soft_wrap=True, highlight=False, width=None if sys.stdout.isatty() else 160)


def render_ranking(result: TuneResult, top: int, console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    ranked = result.ranked
    shown = ranked[:top] + ([result.baseline] if result.baseline not in ranked[:top] else [])
    table = Table(title=f"kvstack tune: {len(ranked)} candidates ranked by predicted TTFT {result.objective}")
    cols = ["#", "candidate", "p50 ms", "p90 ms", "mean ms", "engine", "DRAM", "disk", "recomputed", "note"]
    if result.slo_s is not None:
        cols.insert(5, "within SLO")
    for col in cols:
        table.add_column(col, justify="left" if col in ("candidate", "note") else "right")
    for p in shown:
        t, total = p.tokens, sum(p.tokens.values())
        note = "modelled only" if p.candidate.not_settable else ("" if p.gated == 0 else f"{p.gated} gated")
        cells = [
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
        ]
        if result.slo_s is not None:
            cells.insert(5, f"{(p.under_slo or 0.0) * 100:.1f}%")
        table.add_row(*cells)
    console.print(table)
    win, base = result.winner, result.baseline
    knobs = ", ".join(f"{k} {v:g}" for k, v in win.candidate.knobs().items()) or "no offload"
    console.print(
        f"  predicted best: {win.candidate.label} ({knobs}): p50 {win.p50_s * 1000:,.1f} ms, "
        f"p90 {win.p90_s * 1000:,.1f} ms; none p50 {base.p50_s * 1000:,.1f} ms, "
        f"p90 {base.p90_s * 1000:,.1f} ms",
        markup=False,
    )
    if ranked[0] is not win:
        c = ranked[0].candidate
        console.print(f"  ranked above it, modelled only: {c.label}: {c.not_settable}", markup=False)


def _ms(iv: dict[str, Any] | None) -> str:
    if not iv:
        return "-"
    return f"{iv['value'] * 1000:,.1f} ± {iv['noise'] * 1000:,.1f}"


def _ms_value(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:,.1f}"


def render_measured(doc: dict[str, Any], console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    measured = doc.get("measured") or {}
    verdict = measured.get("verdict") or {}
    excluded = verdict.get("excluded") or {}
    winner = verdict.get("winner")
    table = Table(
        title=f"measured: {len(measured.get('candidates') or [])} candidates replayed "
        f"({(measured.get('setup') or {}).get('requests')} requests each; TTFT in ms, predicted for the "
        "requests sent, measured ± its noise: 95% bootstrap; prompt tokens by source measured)"
    )
    slo = measured.get("slo_ms")
    cols = ["#", "candidate", "p50 pred", "p50 meas", "p90 pred", "p90 meas", "meas/pred p50"]
    cols += [f"within {slo:g} ms"] if slo is not None else []
    cols += ["engine", "DRAM", "disk", "recomputed", "correct", "verdict"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("candidate", "verdict") else "right")
    for c in measured.get("candidates") or []:
        m, pred = c.get("measured"), c.get("predicted") or {}
        tokens = c.get("measured_tokens") or {}
        total = sum(tokens.values())
        ratio = c.get("measured_over_predicted_p50")
        if c["label"] == winner:
            verdict_text = "winner"
        elif c["label"] in excluded:
            verdict_text = "out"
        else:
            verdict_text = "kept" if c["connector"] == "none" else "not better"
        good = (m or {}).get("goodput")
        within = [f"{good['value'] * 100:.1f}% ± {good['noise'] * 100:.1f}" if good else "-"]
        table.add_row(
            str(c["rank"]),
            escape(c["label"]),
            _ms_value(pred.get("p50_s")),
            _ms(m["p50"]) if m else "-",
            _ms_value(pred.get("p90_s")),
            _ms(m["p90"]) if m else "-",
            "-" if ratio is None else f"{ratio:.2f}x",
            *(within if slo is not None else []),
            _pct(tokens.get("engine_cache", 0.0), total),
            _pct(tokens.get("dram", 0.0), total),
            _pct(tokens.get("disk", 0.0), total),
            _pct(tokens.get("recomputed", 0.0), total),
            "yes" if c.get("correct") else "no",
            verdict_text,
        )
    console.print(table)
    if verdict:
        console.print(f"  winner (measured, {measured['objective']}): {verdict['why']}", markup=False)
    for label, why in excluded.items():
        console.print(f"  out: {label}: {why}", markup=False)
    for c in measured.get("candidates") or []:
        if c.get("below_gate") is not None:
            lookups = "-" if c.get("lookups") is None else f"{c['lookups']:,}"
            console.print(
                f"  gate: {c['label']}: {c['below_gate']:,} of {c['requests']:,} requests below it; "
                f"LMCache's server counted {lookups} lookups",
                markup=False,
            )
    inversions = verdict.get("inversions") or []
    for inv in inversions:
        how = "beyond the noise" if inv["beyond_noise"] else "within the noise"
        console.print(
            f"  the model ranked {inv['model_ranked_higher']} above {inv['measured_better']}, which "
            f"measured better ({how})",
            markup=False,
        )
    if verdict and not inversions:
        console.print("  the model's order held for every pair measured", markup=False)
    refits = measured.get("refits") or []
    if refits:
        console.print(f"  {_refit_line(refits[-1])}", markup=False)
    for label, why in (measured.get("skipped") or {}).items():
        console.print(f"  not measured: {label}: {why}", markup=False)
    from kvstack.tune.budget import fmt_duration

    console.print(
        f"  {measured.get('stopped')}; {fmt_duration(measured.get('elapsed_s') or 0)} of the "
        f"{fmt_duration(measured.get('budget_s') or 0)} budget",
        markup=False,
    )


def _refit_line(fit: dict[str, Any]) -> str:
    """The model as the last replay left it (results.json's ``measured.refits[-1]``)."""
    p = fit["plain"]
    parts = [
        f"model refit from the replays of {', '.join(fit['after'])}: none {p['hit_s'] + p['miss_s']:.4f} s "
        f"+ {p['linear_s_per_token'] * 1e6:.2f} µs per recomputed token"
    ]
    for name, c in (fit.get("by_connector") or {}).items():
        fetch = max((c.get("fetch_s_per_token") or {}).values(), default=0.0)
        parts.append(
            f"{name} +{c['miss_s'] * 1000:.1f} ms a request, +{c.get('chunk_s', 0.0) * 1000:.2f} ms a chunk, "
            f"{fetch * 1e6:.2f} µs per tier token"
        )
    return "; ".join(parts)


def serve_command(out: Path, model: str | None, extra_args: list[str]) -> str:
    """The exact command that serves what tune measured: its layout, the model, the engine arguments."""
    import shlex

    where = f"--model {shlex.quote(model)} " if model else ""
    engine = (" -- " + shlex.join(extra_args)) if extra_args else ""
    return f"kvstack serve {where}--tuned {shlex.quote(str(out))}{engine}"


def render(run: TuneRun, top: int, model: str | None, extra_args: list[str] | None = None) -> None:
    console = _console()
    render_ranking(run.result, top, console)
    if run.proof is None:
        console.print(
            "  predicted, not measured (--budget 0): no replay proved it on the engine", markup=False
        )
    else:
        render_measured(run.doc, console)
    if run.out is not None:
        console.print(f"  serve it: {serve_command(run.out, model, extra_args or [])}", markup=False)
    else:
        console.print(
            "  keep it: --out DIR writes results.json and tuned.json (serve --tuned DIR)", markup=False
        )
    err = _err_console()
    for path in run.written:
        err.print(f"wrote {path}", markup=False, highlight=False)


def _err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("tune", context_settings={"allow_interspersed_args": False})
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
        objective: str = typer.Option(
            "p50", "--objective", help="p50, p90, mean of TTFT, or goodput (requests within --slo-ms)."
        ),
        slo_ms: float | None = typer.Option(None, "--slo-ms", help="The TTFT SLO goodput counts, in ms."),
        budget: str = typer.Option(
            "30m",
            "--budget",
            help="Replay none and the best-ranked candidates on the engine until this runs out "
            "(30m, 90s, 1h; 0: rank only).",
        ),
        replay_requests: int = typer.Option(
            400, "--replay-requests", help="Replay the first N requests of the trace for each candidate."
        ),
        candidates: int | None = typer.Option(
            None,
            "--candidates",
            help="Measure at most N candidates besides none (default: what the budget holds).",
        ),
        check_correctness: int = typer.Option(
            4,
            "--check-correctness",
            metavar="K",
            help="After each replay, judge K cached answers against recompute (bench --check-correctness).",
        ),
        max_output_tokens: int = typer.Option(
            16, "--max-output-tokens", help="Cap on each replayed request's output (as bench --trace)."
        ),
        time_scale: float = typer.Option(
            0.0,
            "--time-scale",
            help="Arrival = trace timestamp x this (default 0: back to back; one request in flight, "
            "so a request's TTFT starts when it is sent either way).",
        ),
        seed: int = typer.Option(0, "--seed", help="Same seed, same token prompts (as bench --trace)."),
        resume: Path | None = typer.Option(
            None, "--resume", help="Continue a stopped tune in its --out DIR from the candidates measured."
        ),
        top: int = typer.Option(15, "--top", help="Rows of the ranking table."),
        out: Path | None = typer.Option(
            None,
            "--out",
            help="Write results.json, tuned.json, the PNGs and each candidate's run dir here "
            "(default when measuring: a new tune-* dir under kvstack's runs).",
        ),
        json_out: bool = typer.Option(False, "--json", help="Print results.json."),
        engine: opt.Engine = "vllm",
        context: opt.Context = None,
        port: int = typer.Option(8000, "--port", help="The port of the engines it serves."),
        cache_dir: opt.CacheDir = None,
        ready_timeout: float = typer.Option(
            900.0, "--ready-timeout", help="Each engine's readiness wait, s."
        ),
        timeout_s: float = typer.Option(300.0, "--timeout", help="Per-request timeout, seconds."),
        api_key: opt.ApiKey = None,
        api_key_file: opt.ApiKeyFile = None,
        extra_args: list[str] = typer.Argument(
            None, help="Extra engine arguments for every candidate, after --", show_default=False
        ),
    ) -> None:
        """Rank every connector and knob setting on a trace of your traffic, then prove the best by
        replaying it on your engine within --budget."""
        import dataclasses
        import json

        from kvstack.names import choice
        from kvstack.tune.budget import parse_duration
        from kvstack.tune.command import TuneOptions, run_tune
        from kvstack.tune.rank import OBJECTIVES

        choice(objective, OBJECTIVES, "--objective")
        if trace is None:
            raise InputError("tune needs a trace of your traffic", hint="add --trace FILE (Mooncake JSONL)")
        if calibration is None:
            raise InputError(
                "tune needs costs measured on your engine (--calibration)", hint=CALIBRATION_HINT
            )
        budget_s = parse_duration(budget)
        options = TuneOptions(
            trace=trace, calibration=calibration, sample=trace_sample, start=start,
            max_requests=max_requests, block_tokens=block_tokens, model=model, revision=revision,
            hardware=hardware, engine_pool_tokens=engine_pool_tokens, connector=connector,
            knobs=parse_knobs(knob, connector), objective=objective,  # type: ignore[arg-type]
            slo_ms=slo_ms, out=out, resume=resume, budget_s=budget_s, replay_requests=replay_requests,
            max_candidates=candidates, max_output_tokens=max_output_tokens, time_scale=time_scale,
            seed=seed, check_k=check_correctness, timeout_s=timeout_s,
        )  # fmt: skip
        options.check()
        from kvstack.replay.inputs import read_trace_input

        traced = read_trace_input(trace, trace_sample, start, max_requests, (None, None), None)
        assert traced is not None
        serve = None
        if budget_s > 0:
            serve, key = _serve_request(
                model, revision, engine, hardware, context, port, cache_dir, ready_timeout,
                api_key, api_key_file, extra_args or [],
            )  # fmt: skip
            options = dataclasses.replace(options, api_key=key)
        elif extra_args:
            raise InputError(
                f"engine arguments ({' '.join(extra_args)}) are for the engines tune serves: --budget 0 "
                "serves none",
                hint="drop them, or give a --budget",
            )
        from kvstack.tune.progress import ProofView

        live = budget_s > 0 and not json_out and sys.stderr.isatty()
        from kvstack.rendering.serve import serve_events

        events = serve_events(json_mode=True) if budget_s > 0 and not live else None
        with ProofView(enabled=live) as view:  # without it, each engine start is told on stderr
            run = run_tune(options, traced, serve=serve, view=view if live else None, events=events)
        if json_out:
            typer.echo(json.dumps(run.doc, indent=2))
        else:
            render(run, top, model, extra_args or [])
        _fail_on_baseline(run)


def _serve_request(
    model: str | None,
    revision: str | None,
    engine: str,
    hardware: Path | None,
    context: str | None,
    port: int,
    cache_dir: Path | None,
    ready_timeout: float,
    api_key: str | None,
    api_key_file: Path | None,
    extra_args: list[str],
) -> tuple[Any, str | None]:
    """What each candidate is served with (as bench --compare serves its layouts)."""
    from kvstack.apikey import resolve_api_key
    from kvstack.names import ENGINES, choice
    from kvstack.serving.request import ServeRequest

    key = resolve_api_key(api_key, api_key_file).value
    request = ServeRequest(
        model=model,
        revision=revision,
        engine=choice(engine, ENGINES, "--engine"),  # type: ignore[arg-type]
        hardware=hardware,
        context=context,
        port=port,
        cache_dir=cache_dir,
        api_key=key or None,
        ready_timeout_s=ready_timeout,
        validate_after_start=False,
        extra_args=list(extra_args),
    )
    from kvstack.serving.request_checks import check_request

    check_request(request, dry_run=False)  # serve's refusals; loopback: nothing to warn
    return request, key or None


def _fail_on_baseline(run: TuneRun) -> None:
    """none's own cached answers are not recompute's: the engine itself serves wrong KV (exit 1)."""
    from kvstack.errors import ValidationFailed

    base = run.proof.baseline() if run.proof is not None else None
    if base is None or base.correct:
        return
    raise ValidationFailed(
        f"none's cached answers are not recompute's ({base.correctness_problem()}): the engine itself "
        "serves wrong KV, so no layout can be chosen",
        hint=f"results.json in {run.out} has every position judged",
    )
