"""`kvstack tune`: parses, runs the tune (tune/command.py: rank on a trace, prove the best by replay on
the engine, keep the winner for `serve --tuned`), hands the run to rendering/tune.py."""

from __future__ import annotations

from typing import Annotated

import typer

from kvstack.apikey import ApiKeyInputs
from kvstack.cli.flags import Pick, command
from kvstack.replay.inputs import TraceInputs
from kvstack.serving.request import ServeRequest
from kvstack.tune.options import TuneInputs

TuneTrace = Annotated[
    TraceInputs,
    Pick(
        only=("trace", "trace_sample", "start", "max_requests", "calibration"),
        help={
            "calibration": "Rank with costs measured earlier on your engine (an earlier tune's --out DIR, a "
            "kvstack bench --trace --compare none,lmcache-mp result, or a served-ttft.json) instead of "
            "measuring them first (replays of none and lmcache-mp).",
        },
    ),
]
# What each candidate is served with (as bench --compare serves its layouts).
TuneServe = Annotated[
    ServeRequest,
    Pick(
        only=("model", "revision", "hardware", "engine", "context", "port", "cache_dir", "ready_timeout_s"),
        help={
            "model": "Model (default: the bundled demo).",
            "port": "The port of the engines it serves.",
            "ready_timeout_s": "Each engine's readiness wait, s.",
        },
    ),
]


def register(app: typer.Typer) -> None:
    @command(app, "tune", context_settings={"allow_interspersed_args": False})
    def _cmd(
        trace: TuneTrace,
        tune: TuneInputs,
        serve: TuneServe,
        key: ApiKeyInputs,
        top: int = typer.Option(15, "--top", help="Rows of the ranking table."),
        json_out: bool = typer.Option(False, "--json", help="Print results.json."),
        extra_args: list[str] = typer.Argument(
            None, help="Extra engine arguments for every candidate, after --", show_default=False
        ),
    ) -> None:
        """Rank every connector and knob setting on a trace of your traffic, then prove the best by
        replaying it on your engine within --budget."""
        from kvstack.rendering.tune import show
        from kvstack.rendering.tune_progress import proof_progress
        from kvstack.serving.start_layout import measuring_request
        from kvstack.tune.command import run_tune

        engine_args = list(extra_args or [])
        options = tune.options(
            trace=trace.trace, trace_sample=trace.trace_sample, start=trace.start,
            max_requests=trace.max_requests, calibration=trace.calibration, model=serve.model,
            revision=serve.revision, hardware=serve.hardware, extra_args=engine_args,
        )  # fmt: skip
        served = None
        if options.measures:
            served = measuring_request(serve, key.value(), engine_args)
        with proof_progress(options.measures, json_out) as (view, events):
            run = run_tune(options, serve=served, view=view, events=events)
        show(run, top, serve.model, engine_args, json_out)
        if run.failure is not None:
            raise run.failure
