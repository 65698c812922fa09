"""One ``kvstack bench`` invocation: check the target, build the workload, run, report.

Order matters for a clean failure: every user mistake (bad numbers, nothing listening, wrong key,
unknown workload) is raised before a request is sent and before anything is written. Once the
run has started, an interrupt or a dead engine still leaves the rows measured so far in --out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from kvstack.bench.events import BenchEvents
from kvstack.bench.report import environment, workload_info, write_report
from kvstack.bench.request import BenchRequest
from kvstack.bench.runner import Recorder, RunOptions, run_layout, run_layouts
from kvstack.bench.schema import BenchResult
from kvstack.bench.text import TextBuilder
from kvstack.bench.tokenize import resolve_tokenizer
from kvstack.bench.workloads import (
    RequestSet,
    TierSizes,
    WorkloadSpec,
    build_workload,
    tier_sizes_from_metrics,
    tier_sizes_from_plan,
)
from kvstack.clients.client import check_http_url
from kvstack.clients.metrics import scrape_sync
from kvstack.clients.models import served_models
from kvstack.errors import (
    EngineError,
    InputError,
    Interrupted,
    KvstackError,
    ValidationFailed,
)
from kvstack.jsonvalue import JsonObject
from kvstack.planning.schema import Plan
from kvstack.redact import redact_url
from kvstack.serving.served_layout import ServedLayout, StartLayout
from kvstack.userfile import read_model

DEFAULT_CONCURRENCY = 8


def default_concurrency(workload: str) -> int:
    """Requests in flight when neither --concurrency nor --rate is given.

    tier-overflow re-reads its documents in the order it stored them, so that under LRU each
    re-read finds its document evicted from the engine's pool; requests in flight at once reach
    the engine in any order, and a re-read that overtakes the fill's tail hits the GPU copy.
    """
    return 1 if workload == "tier-overflow" else DEFAULT_CONCURRENCY


def normalize_url(url: str, flag: str = "--url") -> str:
    """``http://h:8000/v1/`` -> ``http://h:8000``; anything that is not an http(s) URL is refused."""
    raw = url.strip()
    check_http_url(raw, flag)
    base = raw.rstrip("/")
    return base.removesuffix("/v1").rstrip("/")


def _metrics_url(url: str) -> str:
    """A full /metrics URL; a bare ``http://host:port`` gets ``/metrics`` appended."""
    base = normalize_url(url, "--metrics-url")
    return base if urlsplit(base).path not in ("", "/") else base + "/metrics"


def served_model(base_url: str, api_key: str | None, timeout_s: float = 10.0) -> str:
    """The first model the server lists; raises an InputError naming the URL when it does not answer."""
    return str(served_models(base_url, api_key, timeout_s)[0]["id"])


def target(
    url: str | None, metrics_urls: list[str], model: str | None, api_key: str | None
) -> tuple[str | None, list[str], str]:
    """--url as a base URL (None: layouts kvstack serves), the extra /metrics URLs in full, and the
    model: --model, else the first the server at --url lists ("" when neither names one)."""
    base_url = normalize_url(url) if url else None
    metrics = [_metrics_url(u) for u in metrics_urls]
    if base_url is not None:
        model = model or served_model(base_url, api_key)
    return base_url, metrics, model or ""


def bench_target(args: BenchRequest) -> tuple[str | None, list[str], str]:
    """What a bench run is sent to: --url as a base URL (None: the layouts of --compare), every
    /metrics URL it reads (the server's own first), and the model; --compare without --model is
    refused."""
    base_url, metrics_urls, model = target(args.url, args.all_metrics_urls, args.model, args.api_key)
    if base_url is None and not model:
        raise InputError("--compare needs --model (the model every layout serves)", hint="add --model DIR")
    return base_url, [base_url + "/metrics", *metrics_urls] if base_url is not None else metrics_urls, model


def load_plan(path: Path) -> Plan:
    hint = "write one with kvstack plan ... --json > plan.json"
    return read_model(path, Plan, "a kvstack plan", hint, what="--plan")


def tier_sizes(args: BenchRequest, base_url: str | None, metrics_urls: list[str]) -> TierSizes | None:
    if args.workload != "tier-overflow":
        return None
    if args.plan_file is not None:
        return tier_sizes_from_plan(load_plan(args.plan_file))
    if base_url is None:
        return None
    return tier_sizes_from_metrics(scrape_sync(metrics_urls, args.api_key))


def workload_spec(args: BenchRequest) -> WorkloadSpec:
    spec = WorkloadSpec(
        name=args.workload,
        requests=args.requests,
        prompt_tokens=args.prompt_token_count,
        output_tokens=args.output_tokens,
        seed=args.seed,
    )
    spec.validate()
    return spec


def _config(args: BenchRequest, base_url: str | None, model: str, metrics_urls: list[str]) -> JsonObject:
    """What was asked, secrets redacted: the key is never written, URLs lose their credentials."""
    return {
        "url": redact_url(base_url) if base_url else None,
        "model": model,
        "api_key": "***" if args.api_key else None,
        "workload": args.workload,
        "requests": args.requests,
        "concurrency": args.concurrency,
        "rate": args.rate,
        "prompt_tokens": args.prompt_token_count,
        "output_tokens": args.output_tokens,
        "seed": args.seed,
        "compare": args.layouts(),
        "plan": str(args.plan_file) if args.plan_file else None,
        "metrics_urls": [redact_url(u) for u in metrics_urls],
        "timeout_s": args.timeout_s,
    }


def check_out(out: Path | None) -> None:
    if out is not None and out.exists() and not out.is_dir():
        raise InputError(
            f"--out {out} exists and is not a directory", hint="choose a directory for the report"
        )


def write_files(result: BenchResult, out: Path | None) -> list[Path]:
    """The report in --out (when anything was measured); the paths written."""
    return write_report(result, out) if out is not None and (result.requests or result.layouts) else []


def conclude(result: BenchResult, failure: KvstackError | None, all_failed: str, out: Path | None) -> None:
    """Raise what the run ended with, once its report is out: its own error, a cached answer that is
    not recompute's, or ``all_failed`` when no request succeeded."""
    if failure is not None:
        raise failure
    raise_on_correctness(result)
    if result.requests and not any(r.ok for r in result.requests):
        raise EngineError(
            all_failed,
            hint="see requests.csv for every error" if out else "rerun with --out DIR to keep every error",
        )


def run_bench(
    args: BenchRequest, start_layout: StartLayout | None = None, events: BenchEvents | None = None
) -> BenchResult:
    """Run one bench invocation end to end, write its report and hand it to ``events``."""
    events = events or BenchEvents()
    check_out(args.out)
    spec = workload_spec(args)
    base_url, all_metrics, model = bench_target(args)
    text = TextBuilder(resolve_tokenizer(base_url, model, args.api_key))
    opts = RunOptions(
        model=model,
        api_key=args.api_key,
        concurrency=args.concurrency if args.rate is None else None,
        rate=args.rate,
        seed=args.seed,
        timeout_s=args.timeout_s,
        check_correctness=args.check_correctness,
    )
    if opts.concurrency is None and opts.rate is None:
        opts = replace(opts, concurrency=default_concurrency(args.workload))
    opts.validate()
    workload: RequestSet | None = None
    if base_url is None and args.workload == "tier-overflow" and args.plan_file is None:

        def sized_by(layout: ServedLayout) -> RequestSet:
            """tier-overflow sized from the cache sizes the first layout's server exposes."""
            built = build_workload(
                spec, text, tier_sizes_from_metrics(scrape_sync(layout.metrics_urls, args.api_key))
            )
            events.workload(built, opts)
            return built

        source: RequestSet | Callable[[ServedLayout], RequestSet] = sized_by
    else:
        workload = source = build_workload(spec, text, tier_sizes(args, base_url, all_metrics))
        events.workload(workload, opts)
    recorder = Recorder(workload)
    config = _config(args, base_url, model, all_metrics)
    config["concurrency"] = opts.concurrency
    failure: KvstackError | None = None
    try:
        with events.live():
            if base_url is not None:
                assert workload is not None
                layout = ServedLayout("server", base_url, tuple(all_metrics))
                asyncio.run(run_layout(layout, workload, opts, recorder, events.progress))
            else:
                assert start_layout is not None
                run_layouts(args.layouts(), start_layout, source, opts, recorder, events.progress)
    except KeyboardInterrupt:
        failure = Interrupted("interrupted: the rows measured so far are kept in the report")
    except KvstackError as exc:
        failure = exc
    result = BenchResult(
        config=config,
        environment=environment(),
        workload=workload_info(recorder.workload) if recorder.workload is not None else {},
        layouts=recorder.layouts,
        requests=recorder.rows,
    )
    events.report(result, write_files(result, args.out))
    kinds = result.layouts[0].summary.error_kinds if result.layouts else {}
    top = next(iter(kinds), "unknown error")
    conclude(
        result, failure, f"no request succeeded ({len(result.requests)} failed; most often: {top})", args.out
    )
    return result


def raise_on_correctness(result: BenchResult) -> None:
    """--check-correctness: a cached answer that is not recompute's, or could not be checked, fails."""
    for lay in result.layouts:
        c = lay.correctness
        bad = c.first_problem() if c is not None else None
        if c is None or bad is None:
            continue
        what = "differs from recompute" if bad.verdict == "fail" else "could not be checked"
        raise ValidationFailed(
            f"--check-correctness: {c.failed} of {c.checked} cached answers of {lay.name} differ from "
            f"recompute, {c.unknown} not checked; request {bad.request} {what}: {bad.detail}",
            hint="results.json has every position judged (layouts[].correctness)",
        )
