"""`kvstack tune`: parses, runs the tune (tune/tune.py: rank on a trace, prove the best by replay on
the engine, keep the winner for `serve --tuned`), hands the run to rendering/tune.py."""

from __future__ import annotations

from typing import Annotated

import typer

from kvstack.apikey import ApiKeyInputs
from kvstack.cli.flags import Pick, command
from kvstack.serving.request import ServeRequest
from kvstack.tune.options import DEFAULT_CHECKS, TuneOutputInputs, TuneRequest

# The trace's flags first, then tune's own; the replay's (bench's) re-worded and re-defaulted for tune.
TuneFlags = Annotated[
    TuneRequest,
    Pick(
        without=("offload_cost", "offload_cost_from"),
        help={
            "calibration": "Rank with costs measured earlier on your engine (an earlier tune's --out DIR, a "
            "kvstack bench --trace --compare none,lmcache-mp result, or a served-ttft.json) instead of "
            "measuring them first (replays of none and lmcache-mp).",
            "block_tokens": "Scale the trace's blocks to this many tokens (as bench --trace).",
            "check_correctness": "After each replay, judge K cached answers against recompute (bench "
            "--check-correctness).",
            "max_output_tokens": "Cap on each replayed request's output (as bench --trace).",
            "time_scale": "Arrival = trace timestamp x this (default 0: back to back; one request in flight, "
            "so a request's TTFT starts when it is sent either way).",
            "seed": "Same seed, same token prompts (as bench --trace).",
            "timeout_s": "Per-request timeout, seconds.",
            "slo_ttft": "--objective capacity: a request's TTFT must be at most this.",
            "slo_tpot": "--objective capacity: a request's time per output token must be at most this.",
            "slo_share": "--objective capacity: the share of a step's requests that must meet the SLO "
            "for the step to pass (default 0.9).",
        },
        default={"check_correctness": DEFAULT_CHECKS, "time_scale": 0.0},
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
TuneOutput = Annotated[TuneOutputInputs, Pick(help={"as_json": "Print results.json."})]


def register(app: typer.Typer) -> None:
    @command(app, "tune", context_settings={"allow_interspersed_args": False})
    def _cmd(
        tune: TuneFlags,
        serve: TuneServe,
        key: ApiKeyInputs,
        output: TuneOutput,
        extra_args: list[str] = typer.Argument(
            None, help="Extra engine arguments for every candidate, after --", show_default=False
        ),
    ) -> None:
        """Rank every connector and knob setting on a trace of your traffic, then prove the best by
        replaying it on your engine within --budget."""
        from kvstack.rendering.tune import show
        from kvstack.rendering.tune_progress import proof_progress
        from kvstack.serving.start_layout import measuring_request
        from kvstack.tune.tune import run_tune

        engine_args = list(extra_args or [])
        options = tune.served_by(serve, engine_args)
        served = None
        if options.measures:
            served = measuring_request(serve, key.value(), engine_args)
        with proof_progress(options.measures, output.as_json) as (view, events):
            run = run_tune(options, serve=served, view=view, events=events)
        show(run, output.top, serve.model, engine_args, output.as_json)
        if run.failure is not None:
            raise run.failure
