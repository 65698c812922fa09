"""`kvstack bench`: measure TTFT, throughput and cache hits on cache-heavy workloads."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kvstack.cli import options as opt
from kvstack.errors import InputError

if TYPE_CHECKING:
    from kvstack.serving.request import ServeRequest
    from kvstack.serving.served_layout import StartLayout
    from kvstack.serving.start_layout import TierOverrides


def layout_starter(request: ServeRequest, sizes: TierOverrides | None = None) -> StartLayout:
    """``start_layout(name)``: serve ``request`` with ``--offload name`` (and the tier sizes
    given), yield it, stop it."""
    from kvstack.rendering.serve import serve_events
    from kvstack.serving.start_layout import TierOverrides, sized_layout_starter

    return sized_layout_starter(request, sizes or TierOverrides(), serve_events(json_mode=True))


def _compare_names(values: list[str]) -> list[str]:
    names: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if name and name not in names:
                names.append(name)
    return names


def register(app: typer.Typer) -> None:
    @app.command("bench", context_settings={"allow_interspersed_args": False})
    def _cmd(
        url: str | None = typer.Option(None, "--url", help="A running server, e.g. http://127.0.0.1:8000"),
        model: str | None = typer.Option(
            None, "--model", help="Served model name (default: from /v1/models)"
        ),
        api_key: opt.ApiKey = None,
        api_key_file: opt.ApiKeyFile = None,
        workload: str = typer.Option(
            "long-doc-qa",
            "--workload",
            help="long-doc-qa, multi-turn, shared-prefix, tier-overflow or random",
        ),
        requests: int = typer.Option(64, "--requests", help="Requests in all (per layout)"),
        concurrency: int | None = typer.Option(
            None,
            "--concurrency",
            help="Requests in flight at once (default 8, tier-overflow 1; excludes --rate)",
        ),
        rate: float | None = typer.Option(
            None, "--rate", help="Poisson arrivals, requests/s (seeded; excludes --concurrency)"
        ),
        prompt_tokens: str = typer.Option("2048", "--prompt-tokens", help="Prompt length, e.g. 2048 or 8k"),
        output_tokens: int = typer.Option(16, "--output-tokens", help="Tokens generated per request"),
        seed: int = typer.Option(
            0,
            "--seed",
            help="Same seed, same prompts and arrivals; a new seed misses every earlier run's cache",
        ),
        compare: list[str] = typer.Option(
            [], "--compare", help="Layouts to start and compare in turn (repeat or comma-separate)"
        ),
        plan_file: Path | None = typer.Option(
            None, "--plan", help="A plan JSON (kvstack plan --json) that sizes tier-overflow"
        ),
        metrics_urls: list[str] = typer.Option(
            [], "--metrics-url", help="Extra /metrics to read hit counters from (e.g. an LMCache server)"
        ),
        timeout_s: float = typer.Option(300.0, "--timeout", help="Per-request timeout, seconds"),
        check_correctness: int = typer.Option(
            0,
            "--check-correctness",
            help="After each layout: generate K of the last round's prompts greedily as served from "
            "cache (--trace: K of the replayed answers the caches served most of) and have a recompute "
            "score every token, in the engine's own request; a token outside its margin fails (exit 1)",
            metavar="K",
        ),
        out: Path | None = typer.Option(
            None, "--out", help="Write results.json, requests.csv and plots here"
        ),
        as_json: bool = typer.Option(False, "--json", help="Print results.json to stdout"),
        offload: opt.Offload = "auto",
        engine: opt.Engine = "vllm",
        hardware: opt.Hardware = None,
        context: opt.Context = None,
        port: int = typer.Option(8000, "--port", help="Without --url: the port of the server it starts"),
        cache_dir: opt.CacheDir = None,
        run_dir: Path | None = typer.Option(
            None,
            "--run-dir",
            help="Without --url: where each layout's logs go; --trace with --url: the kvstack serve run "
            "behind it, whose tiers the replay predicts (default: the newest run serving --url)",
        ),
        lmcache: str | None = typer.Option(
            None,
            "--lmcache",
            help="With --url: LMCache's cache server HTTP address (lmcache server --http-port), e.g. "
            "http://127.0.0.1:8002: its counters say which tier served each token, and --trace sizes "
            "the tiers from its /status",
            show_default=False,
        ),
        ready_timeout: float = typer.Option(900.0, "--ready-timeout", help="Without --url: readiness wait"),
        trace: Path | None = typer.Option(
            None, "--trace", help="Replay a Mooncake-format trace (JSONL: timestamp, input_length, hash_ids)"
        ),
        start: int = typer.Option(0, "--start", help="--trace: skip this many rows first"),
        max_requests: int | None = typer.Option(
            None, "--max-requests", help="--trace: replay at most this many rows (after the sample)"
        ),
        session_sample: str | None = typer.Option(
            None,
            "--session-sample",
            "--trace-sample",
            help="--trace: keep this share of sessions (0.025, 1/40, 2.5%; as plan --trace-sample)",
        ),
        block_tokens: int = typer.Option(
            64, "--block-tokens", help="--trace: tokens per hash block (the trace's 512, scaled to fit)"
        ),
        time_scale: float = typer.Option(
            1.0,
            "--time-scale",
            help="--trace: arrival = timestamp x this (0.01: 100x faster; 0: back to back)",
        ),
        max_output_tokens: int = typer.Option(
            16, "--max-output-tokens", help="--trace: cap on each request's output length from the trace"
        ),
        l1_size: str | None = typer.Option(
            None, "--l1-size", help="Without --url: LMCache's DRAM tier size for every layout (e.g. 64MiB)"
        ),
        disk_size: str | None = typer.Option(
            None, "--disk-size", help="Without --url: the disk tier's cap for every layout (e.g. 8MiB)"
        ),
        extra_args: list[str] = typer.Argument(
            None, help="Without --url: extra engine arguments for every layout, after --", show_default=False
        ),
    ) -> None:
        """Measure TTFT/throughput on cache-heavy workloads and the server's cache hit rate."""
        from kvstack.apikey import resolve_api_key
        from kvstack.bench.command import BenchArgs, run_bench
        from kvstack.units import parse_tokens

        api_key = resolve_api_key(api_key, api_key_file).value

        if concurrency is not None and rate is not None:
            raise InputError(
                "--concurrency and --rate exclude each other",
                hint="use --concurrency C (closed loop) or --rate R (Poisson arrivals), not both",
            )
        if not 0 <= check_correctness <= 1000:
            raise InputError(
                f"--check-correctness must be between 0 and 1000 requests, not {check_correctness}",
                hint="e.g. --check-correctness 4",
            )
        names = _compare_names(compare)
        if names and url:
            raise InputError(
                "--compare starts its own servers and cannot be combined with --url",
                hint="drop --url, or bench the running server alone",
            )
        if url and extra_args:
            raise InputError(
                f"engine arguments ({' '.join(extra_args)}) need a server that kvstack starts, not --url",
                hint="drop --url, or pass them to the server you started",
            )
        from kvstack.serving.start_layout import TierOverrides
        from kvstack.units import parse_bytes

        sizes = TierOverrides(
            cpu_bytes=parse_bytes(l1_size, "--l1-size") if l1_size else None,
            disk_bytes=parse_bytes(disk_size, "--disk-size") if disk_size else None,
        )
        if lmcache and not url:
            raise InputError(
                "--lmcache names the cache server of a running server (--url); a layout kvstack "
                "serves is known already",
                hint="drop --lmcache, or add --url",
            )
        if url and run_dir is not None and trace is None:
            raise InputError(
                "--run-dir with --url is read by --trace only (the serve run behind the server)",
                hint="drop --run-dir, or add --trace FILE",
            )
        if url and not sizes.empty:
            raise InputError(
                "--l1-size/--disk-size size the tiers of a server kvstack starts, not --url",
                hint="drop --url, or size the server you started",
            )
        sizes.check()
        start_layout: StartLayout | None = None
        if not url:
            # No server given: kvstack serves each layout itself (the demo model by default).
            from kvstack.names import ENGINES, choice
            from kvstack.names import OFFLOAD_CHOICES as OFFLOADS
            from kvstack.serving.request import ServeRequest
            from kvstack.serving.request_checks import check_request

            flag = "--compare" if names else "--offload"  # a layout is an --offload choice
            names = [choice(n, OFFLOADS, flag) for n in names or [offload]]
            serve_request = ServeRequest(
                model=model,
                engine=choice(engine, ENGINES, "--engine"),  # type: ignore[arg-type]
                hardware=hardware,
                context=context,
                port=port,
                cache_dir=cache_dir,
                run_dir=run_dir,
                api_key=api_key or None,
                ready_timeout_s=ready_timeout,
                validate_after_start=False,
                extra_args=list(extra_args or []),
            )
            model = serve_request.model_spec()
            check_request(serve_request, dry_run=False)  # serve's refusals; loopback: nothing to warn
            start_layout = layout_starter(serve_request, sizes)
        if trace is not None:
            from kvstack.replay.command import TraceArgs
            from kvstack.replay.run import TraceOptions, run_trace_bench
            from kvstack.traces.sample import parse_ratio

            run_trace_bench(
                TraceOptions(
                    TraceArgs(
                        path=trace,
                        start=start,
                        max_requests=max_requests,
                        session_sample=parse_ratio(session_sample) if session_sample else None,
                        block_tokens=block_tokens,
                        time_scale=time_scale,
                        max_output_tokens=max_output_tokens,
                        concurrency=concurrency or 1,
                        seed=seed,
                        check_correctness=check_correctness,
                    ),
                    url=url,
                    model=model,
                    api_key=api_key or None,
                    compare=names,
                    metrics_urls=metrics_urls,
                    timeout_s=timeout_s,
                    out=out,
                    as_json=as_json,
                    tier_sizes=sizes.to_dict(),
                    lmcache=lmcache,
                    run_dir=run_dir if url else None,
                ),
                start_layout,
            )
            return
        args = BenchArgs(
            url=url,
            model=model,
            api_key=api_key or None,
            workload=workload,
            requests=requests,
            concurrency=concurrency if rate is None else None,
            rate=rate,
            prompt_tokens=parse_tokens(prompt_tokens, "--prompt-tokens"),
            output_tokens=output_tokens,
            seed=seed,
            compare=names,
            plan_file=plan_file,
            metrics_urls=[*metrics_urls, *([lmcache] if lmcache else [])],
            timeout_s=timeout_s,
            check_correctness=check_correctness,
            out=out,
            as_json=as_json,
            interactive=not as_json and sys.stderr.isatty(),
        )
        run_bench(args, start_layout=start_layout)
