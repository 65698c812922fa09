"""Run a workload against one or more server layouts and record every request as a row.

A layout is ``(name, base_url, metrics_urls)``; comparing layouts takes a ``start_layout(name)``
callable returning a context manager that yields a running layout and stops it on exit (the
``kvstack serve`` launcher plugs in there). Rounds run in order: a round starts when the previous
one has completed. Within a round requests go out either through C workers (``concurrency``) or on
a seeded Poisson schedule (``rate``). Errors are rows, never exceptions; memory stays bounded by
the number of requests in flight (the client keeps timings, not response text).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import httpx

from kvstack.bench.correctness import check_correctness, engine_of
from kvstack.bench.schema import CacheStats, CorrectnessResult, LayoutResult, RequestRow, RoundResult
from kvstack.bench.stats import cache_stats, measured, summarize
from kvstack.bench.workloads import RequestSet, WorkloadRequest
from kvstack.clients import quiet
from kvstack.clients.client import make_client
from kvstack.clients.metrics import MetricsSnapshot, scrape
from kvstack.clients.streaming import RequestResult, StreamClient
from kvstack.errors import InputError, KvstackError
from kvstack.redact import redact_url
from kvstack.serving.served_layout import ServedLayout, StartLayout

DEFAULT_MAX_IN_FLIGHT = 1024  # the cap of --rate runs, so a slow server cannot grow memory unboundedly
WATCH_INTERVAL_S = 0.5  # how often a layout's liveness check runs (a death is noticed within 2 s)


@dataclass(frozen=True)
class RunOptions:
    model: str
    api_key: str | None = None
    concurrency: int | None = 8
    rate: float | None = None  # requests/s (Poisson); excludes concurrency
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    seed: int = 0
    timeout_s: float = 300.0
    check_correctness: int = 0  # requests of the last round compared with recompute (bench/correctness.py)

    def validate(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise InputError(
                "give exactly one of --concurrency and --rate",
                hint="e.g. --concurrency 16 (closed loop) or --rate 4 (Poisson arrivals, requests/s)",
            )
        if self.concurrency is not None and self.concurrency < 1:
            raise InputError(f"--concurrency must be at least 1, not {self.concurrency}", hint="e.g. 16")
        if self.rate is not None and not self.rate > 0:
            raise InputError(f"--rate must be positive, not {self.rate}", hint="e.g. --rate 4")
        if not self.timeout_s > 0:
            raise InputError(f"--timeout must be positive, not {self.timeout_s}", hint="e.g. --timeout 300")

    @property
    def connections(self) -> int:
        return self.concurrency if self.concurrency is not None else self.max_in_flight


@dataclass(frozen=True)
class Progress:
    layout: str
    round: int
    round_label: str
    done: int  # requests finished in this layout
    total: int  # requests of this layout
    ok: int
    errors: int
    in_flight: int


ProgressFn = Callable[[Progress], None]


@dataclass
class _Current:
    layout: ServedLayout
    started_at: float
    snapshots: list[MetricsSnapshot] = field(default_factory=list)  # before round 0, after each round
    rows: list[RequestRow] = field(default_factory=list)
    correctness: CorrectnessResult | None = None


class Recorder:
    """Everything measured so far, so that an interrupted run still reports its rows."""

    def __init__(self, workload: RequestSet | None) -> None:
        self.workload = workload  # None until the first layout sized it (run_layouts)
        self.layouts: list[LayoutResult] = []
        self.current: _Current | None = None
        self._finished_rows: dict[str, list[RequestRow]] = {}

    @property
    def rows(self) -> list[RequestRow]:
        done = [r for lay in self.layouts for r in self._finished_rows[lay.name]]
        return done + (self.current.rows if self.current else [])

    def begin(self, layout: ServedLayout) -> _Current:
        if layout.name in self._finished_rows:
            raise InputError(f"layout {layout.name!r} given twice", hint="name each compared layout once")
        self.current = _Current(layout, time.time())
        return self.current

    def finish(self, aborted: str | None = None) -> LayoutResult | None:
        """Close the current layout (complete or cut short) and keep its result."""
        cur = self.current
        if cur is None:
            return None
        self.current = None
        assert self.workload is not None, "a layout ran before its workload was built"
        result = _layout_result(cur, self.workload, aborted)
        self._finished_rows[cur.layout.name] = sorted(cur.rows, key=lambda r: r.index)
        self.layouts.append(result)
        return result


def _layout_result(cur: _Current, workload: RequestSet, aborted: str | None) -> LayoutResult:
    snaps = cur.snapshots
    rounds: list[RoundResult] = []
    for rnd, label in enumerate(workload.round_labels):
        rows = [r for r in cur.rows if r.round == rnd]
        if not rows:
            continue
        cache = cache_stats(snaps[rnd], snaps[rnd + 1]) if len(snaps) > rnd + 1 else CacheStats()
        rounds.append(RoundResult(round=rnd, label=label, summary=summarize(rows), cache=cache))
    total_cache = cache_stats(snaps[0], snaps[-1]) if len(snaps) >= 2 else CacheStats()
    return LayoutResult(
        name=cur.layout.name,
        base_url=redact_url(cur.layout.base_url),
        metrics_urls=[redact_url(u) for u in cur.layout.metrics_urls],
        started_at=cur.started_at,
        complete=aborted is None,
        aborted=aborted,
        summary=summarize(cur.rows),  # wall time from the first send to the last answer
        cache=total_cache,
        rounds=rounds,
        correctness=cur.correctness,
    )


def to_row(layout: str, req: WorkloadRequest, res: RequestResult, started_at: float) -> RequestRow:
    return RequestRow(
        layout=layout,
        id=req.id,
        index=req.index,
        round=req.round,
        turn=req.turn,
        group=req.group,
        prompt_tokens=req.prompt_tokens,
        expected_prefix_tokens=req.shared_prefix_tokens,
        **measured(res, started_at),
    )


def arrival_offsets(n: int, rate: float, rng: random.Random) -> list[float]:
    """Send times (s from the round's start) of a Poisson process: exponential gaps of mean 1/rate."""
    out: list[float] = []
    due = 0.0
    for _ in range(n):
        due += rng.expovariate(rate)
        out.append(due)
    return out


def arrival_rng(seed: int, rnd: int) -> random.Random:
    """The same seed gives every layout the same arrivals, round by round."""
    return random.Random(f"kvstack-arrivals:{seed}:{rnd}")


class _RoundRun:
    """Sends one round's requests and turns results into rows as they finish."""

    def __init__(
        self,
        client: StreamClient,
        cur: _Current,
        opts: RunOptions,
        total: int,
        on_progress: ProgressFn | None,
    ) -> None:
        self.client = client
        self.cur = cur
        self.opts = opts
        self.total = total
        self.on_progress = on_progress
        self.in_flight = 0
        self.ok = sum(1 for r in cur.rows if r.ok)
        self.round = 0
        self.label = ""

    async def _send(self, req: WorkloadRequest) -> RequestResult:
        try:
            return await self.client.completion(
                self.opts.model,
                req.prompt,
                req.output_tokens,
                api_key=self.opts.api_key,
                timeout_s=self.opts.timeout_s,
            )
        except Exception as exc:  # the client records failures itself; anything else is still a row
            return RequestResult(start_time=time.time(), error=f"client error: {type(exc).__name__}: {exc}")

    async def one(self, req: WorkloadRequest) -> None:
        self.in_flight += 1
        try:
            res = await self._send(req)
        finally:
            self.in_flight -= 1
        row = to_row(self.cur.layout.name, req, res, self.cur.started_at)
        self.cur.rows.append(row)
        self.ok += row.ok
        if self.on_progress:
            done = len(self.cur.rows)
            self.on_progress(
                Progress(
                    self.cur.layout.name, self.round, self.label, done, self.total,
                    self.ok, done - self.ok, self.in_flight,
                )
            )  # fmt: skip

    async def closed_loop(self, requests: Sequence[WorkloadRequest], concurrency: int) -> None:
        pending: Iterator[WorkloadRequest] = iter(requests)

        async def worker() -> None:
            for req in pending:  # the workers share one iterator: each request is sent once
                await self.one(req)

        async with asyncio.TaskGroup() as tg:
            for _ in range(min(concurrency, len(requests))):
                tg.create_task(worker())

    async def poisson(self, requests: Sequence[WorkloadRequest], rate: float, rng: random.Random) -> None:
        free = asyncio.Semaphore(self.opts.max_in_flight)
        start = time.perf_counter()

        async def send(req: WorkloadRequest) -> None:
            try:
                await self.one(req)
            finally:
                free.release()

        async with asyncio.TaskGroup() as tg:
            for req, due in zip(requests, arrival_offsets(len(requests), rate, rng), strict=True):
                delay = start + due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await free.acquire()  # waits only when max_in_flight requests are out
                tg.create_task(send(req))


async def _watch(check: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(WATCH_INTERVAL_S)
        check()


async def _guarded(coro: asyncio.Future[None] | asyncio.Task[None], check: Callable[[], None] | None) -> None:
    """Await ``coro``; if the liveness check raises first, cancel it and re-raise that error."""
    if check is None:
        await coro
        return
    watcher = asyncio.ensure_future(_watch(check))
    try:
        done, _ = await asyncio.wait({coro, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher in done:
            coro.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await coro
            watcher.result()  # raises the engine's error
        await coro
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, KvstackError):
            await watcher


async def run_layout(
    layout: ServedLayout,
    workload: RequestSet,
    opts: RunOptions,
    recorder: Recorder,
    on_progress: ProgressFn | None = None,
) -> LayoutResult:
    """Run every round of ``workload`` against ``layout``; the result is also kept in ``recorder``."""
    if layout.served_model is not None:
        opts = replace(opts, model=layout.served_model)
    opts.validate()
    cur = recorder.begin(layout)
    aborted: str | None = "interrupted"
    try:
        with quiet.hold(layout.base_url):  # the server's canary sends nothing while bench measures
            await _measure(layout, workload, opts, cur, on_progress)
        aborted = None
    except KvstackError as exc:
        aborted = exc.message
        raise
    finally:
        result = recorder.finish(aborted)
    assert result is not None
    return result


async def _measure(
    layout: ServedLayout,
    workload: RequestSet,
    opts: RunOptions,
    cur: _Current,
    on_progress: ProgressFn | None,
) -> None:
    """The rounds, then the correctness check, against one layout."""
    async with (
        StreamClient(layout.base_url, opts.connections) as client,
        make_client(layout.base_url, max_connections=2) as scraper,
    ):
        await _rounds(layout, workload, opts, cur, client, scraper, on_progress)
        if opts.check_correctness:
            engine = engine_of(layout.plan, cur.snapshots[0] if cur.snapshots else None)
            cur.correctness = await check_correctness(
                client,
                workload,
                opts.model,
                opts.api_key,
                opts.timeout_s,
                opts.check_correctness,
                engine,
                in_flight=opts.connections,
            )


async def _rounds(
    layout: ServedLayout,
    workload: RequestSet,
    opts: RunOptions,
    cur: _Current,
    client: StreamClient,
    scraper: httpx.AsyncClient,
    on_progress: ProgressFn | None,
) -> None:
    cur.snapshots.append(await scrape(scraper, layout.metrics_urls, opts.api_key))
    run = _RoundRun(client, cur, opts, len(workload.requests), on_progress)
    for rnd, requests in enumerate(workload.rounds()):
        run.round, run.label = rnd, workload.round_labels[rnd]
        if opts.concurrency is not None:
            task = asyncio.ensure_future(run.closed_loop(requests, opts.concurrency))
        else:
            assert opts.rate is not None
            task = asyncio.ensure_future(run.poisson(requests, opts.rate, arrival_rng(opts.seed, rnd)))
        await _guarded(task, layout.check_alive)
        # Counters are scraped after every round so the query round's hit rate stands alone.
        cur.snapshots.append(await scrape(scraper, layout.metrics_urls, opts.api_key))


def run_layouts(
    names: Sequence[str],
    start_layout: StartLayout,
    workload: RequestSet | Callable[[ServedLayout], RequestSet],
    opts: RunOptions,
    recorder: Recorder,
    on_progress: ProgressFn | None = None,
) -> list[LayoutResult]:
    """The compare loop: start each layout in turn (same workload, same seed), bench it, stop it.

    ``workload`` may be a function of the first layout's server (tier-overflow sized from the
    cache sizes it exposes); every layout then runs what it built.
    """
    opts.validate()
    results: list[LayoutResult] = []
    for name in names:
        with start_layout(name) as layout:
            if not isinstance(workload, RequestSet):
                workload = workload(layout)
                recorder.workload = workload
            results.append(asyncio.run(run_layout(layout, workload, opts, recorder, on_progress)))
    return results
