"""`kvstack bench`: measure TTFT, throughput and cache hits on cache-heavy workloads."""

from __future__ import annotations

from typing import Annotated

import typer

from kvstack.apikey import ApiKeyInputs
from kvstack.bench.request import BenchRequest
from kvstack.cli.flags import Pick, command
from kvstack.flags import JsonInputs
from kvstack.serving.request import ServeRequest

# What the layouts kvstack serves are served with, without --url (--model, --offload and --run-dir
# are bench's own: the served name with --url, the layout when --compare names none).
BenchServe = Annotated[
    ServeRequest,
    Pick(
        only=("engine", "hardware", "context", "port", "cache_dir", "ready_timeout_s"),
        help={
            "port": "Without --url: the port of the server it starts",
            "ready_timeout_s": "Without --url: readiness wait",
        },
    ),
]
BenchOutput = Annotated[JsonInputs, Pick(help={"as_json": "Print results.json to stdout"})]


def register(app: typer.Typer) -> None:
    @command(app, "bench", context_settings={"allow_interspersed_args": False})
    def _cmd(
        bench: BenchRequest,
        key: ApiKeyInputs,
        serve: BenchServe,
        output: BenchOutput,
        extra_args: list[str] = typer.Argument(
            None, help="Without --url: extra engine arguments for every layout, after --", show_default=False
        ),
    ) -> None:
        """Measure TTFT/throughput on cache-heavy workloads and the server's cache hit rate."""
        from kvstack.bench.bench import run_bench_command
        from kvstack.rendering.bench import bench_events

        request = bench.with_key_and_engine_args(key.value(), list(extra_args or []))
        served = None
        if not request.url:  # no server given: kvstack serves each layout itself (the demo model by default)
            from kvstack.serving.start_layout import measuring_request

            served = measuring_request(
                serve, request.api_key, request.extra_args, model=request.model, run_dir=request.run_dir
            )
            request = request.model_copy()
            request.model = served.model_spec()
        run_bench_command(request, served, bench_events(json_mode=output.as_json))
