"""One ``kvstack bench --trace`` invocation: check the target, replay, write the report and hand it
to the events; and ``run_bench_command``, the one call of ``kvstack bench`` (it sits here, above
workload_run and replay/, because it chooses between the trace replay and the workload bench;
nothing of bench imports it)."""

from __future__ import annotations

from kvstack.bench.events import BenchEvents
from kvstack.bench.replay.results import layouts_of
from kvstack.bench.replay.trace_bench import ReplayRequest, load_slice, replay_of, run_trace
from kvstack.bench.replay.trace_sweep import run_trace_sweep
from kvstack.bench.report import environment
from kvstack.bench.request import BenchRequest
from kvstack.bench.schema import BenchResult
from kvstack.bench.sweep.run import run_sweep
from kvstack.bench.sweep.schema import SweepResult
from kvstack.bench.workload_run import check_out, conclude, run_bench, target, write_files
from kvstack.errors import InputError
from kvstack.jsonvalue import JsonObject
from kvstack.redact import redact_url
from kvstack.serving.request import ServeRequest
from kvstack.serving.served_layout import StartLayout
from kvstack.serving.start_layout import sized_layout_starter

PREDICTION_PLOT = "trace_prediction.png"


def _config(
    o: BenchRequest, replay: ReplayRequest, base_url: str | None, model: str, metrics: list[str]
) -> JsonObject:
    return {
        "url": redact_url(base_url) if base_url else None,
        "model": model,
        "api_key": "***" if o.api_key else None,
        "workload": "trace",
        "trace": str(replay.path),
        "compare": o.layouts(),
        "concurrency": replay.concurrency,
        "seed": replay.seed,
        "metrics_urls": [redact_url(u) for u in metrics],
        "timeout_s": o.timeout_s,
        "tier_sizes": o.sizes.to_dict(),
        "lmcache": redact_url(o.lmcache) if o.lmcache else None,
        "check_correctness": replay.check_correctness,
    }


def run_trace_bench(
    o: BenchRequest, start_layout: StartLayout | None, events: BenchEvents | None = None
) -> BenchResult:
    """``bench --trace``: replay per layout, write the report (and the predicted vs measured plot),
    hand it to ``events``, then raise what the replay ended with."""
    events = events or BenchEvents()
    check_out(o.out)
    replay = replay_of(o)
    sliced = load_slice(replay)  # a bad trace is named before any server is asked
    base_url, metrics, model = target(o.url, o.metrics_urls, o.model, o.api_key)
    if base_url is None and (not model or start_layout is None):
        raise InputError("a replay needs --url or a layout kvstack serves", hint="add --url URL")
    result, failure = run_trace(
        replay,
        sliced,
        url=base_url,
        names=o.layouts(),
        start_layout=start_layout,
        metrics_urls=metrics,
        model=model,
        api_key=o.api_key,
        timeout_s=o.timeout_s,
        config=_config(o, replay, base_url, model, metrics),
        environment=environment(),
        lmcache=o.lmcache,
        run_dir=o.run_dir if base_url is not None else None,
    )
    written = write_files(result, o.out)
    if o.out is not None and written and layouts_of(result):
        from kvstack.bench.replay.plots import (
            prediction_plot,  # matplotlib is slow to import: only when asked
        )

        written.append(prediction_plot(result, o.out / PREDICTION_PLOT))
    events.report(result, written)
    conclude(result, failure, f"no request of the replay succeeded ({len(result.requests)} failed)", o.out)
    return result


def run_bench_command(
    request: BenchRequest, serve: ServeRequest | None, events: BenchEvents | None = None
) -> BenchResult | SweepResult:
    """``kvstack bench``: on the layouts ``serve`` starts in turn (None: the server at --url), the
    trace replay with --trace, the load sweep with --sweep (of the trace with both), else the
    workload bench."""
    events = events or BenchEvents()
    start_layout = None if serve is None else sized_layout_starter(serve, request.sizes, events.serving)
    if request.sweep is not None and request.trace is not None:
        return run_trace_sweep(request, start_layout, events)
    if request.sweep is not None:
        return run_sweep(request, start_layout, events)
    if request.trace is not None:
        return run_trace_bench(request, start_layout, events)
    return run_bench(request, start_layout, events)
