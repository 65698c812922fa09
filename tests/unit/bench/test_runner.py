"""The runner against a REAL local streaming HTTP server whose knobs set the timings and faults."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kvstack.bench.runner import (
    Progress,
    Recorder,
    RunOptions,
    arrival_offsets,
    arrival_rng,
    run_layout,
    run_layouts,
)
from kvstack.bench.schema import LayoutResult
from kvstack.bench.text import TextBuilder
from kvstack.bench.tokenize import EstimateTokenizer
from kvstack.bench.workloads import RequestSet, WorkloadSpec, build_workload
from kvstack.errors import EngineError, InputError
from kvstack.serving.served_layout import ServedLayout
from tests.support.stream_server import ServerKnobs, StreamServer

BUILDER = TextBuilder(EstimateTokenizer())


class InFlight:
    """Counts the server's concurrent /v1/completions handlers (a subclass of its own handler)."""

    def __init__(self, srv: StreamServer) -> None:
        self.now = 0
        self.peak = 0
        self.lock = threading.Lock()
        counter = self
        base: Any = srv.httpd.RequestHandlerClass

        class Counting(base):  # type: ignore[misc, valid-type]
            def _complete(self, body: dict[str, Any]) -> None:
                with counter.lock:
                    counter.now += 1
                    counter.peak = max(counter.peak, counter.now)
                try:
                    super()._complete(body)
                finally:
                    with counter.lock:
                        counter.now -= 1

        srv.httpd.RequestHandlerClass = Counting


def _workload(name: str = "random", requests: int = 8, prompt_tokens: int = 64, **kw: Any) -> RequestSet:
    return build_workload(WorkloadSpec(name, requests=requests, prompt_tokens=prompt_tokens, **kw), BUILDER)


def _run(srv: StreamServer, workload: RequestSet, **opts: Any) -> tuple[LayoutResult, Recorder]:
    rec = Recorder(workload)
    layout = ServedLayout("l", srv.url, (srv.url + "/metrics",))
    options = RunOptions(model=srv.knobs.model, **{"concurrency": 4, **opts})
    result = asyncio.run(run_layout(layout, workload, options, rec))
    return result, rec


def test_ttft_and_tpot_follow_the_server_delays() -> None:
    knobs = ServerKnobs(base_ttft_s=0.15, prefill_s_per_token=0.0, itl_s=0.02)
    with StreamServer(knobs) as srv:
        result, rec = _run(srv, _workload(requests=6, output_tokens=5), concurrency=3)
    assert result.complete and result.summary.ok == 6
    # The figures come from the stream's own timing, so they track the server's delays; the bounds
    # are loose (a busy 2-core machine delays events, asyncio may wake a tick early), never tight.
    for row in rec.rows:
        assert row.ttft_s is not None and 0.15 * 0.9 <= row.ttft_s < 0.15 + 1.0
        assert row.tpot_s is not None and 0.02 * 0.8 <= row.tpot_s < 0.02 + 0.2
        assert row.output_tokens == 5 and len(row.itl_s) == 4
        assert row.server_prompt_tokens == row.prompt_tokens + 1  # the server's BOS


def test_http_errors_are_rows_not_exceptions() -> None:
    with StreamServer(ServerKnobs(status=503)) as srv:
        result, rec = _run(srv, _workload(requests=5))
    assert result.complete
    assert result.summary.errors == 5 and result.summary.ok == 0
    assert all(r.status == 503 and r.error and "injected failure" in r.error for r in rec.rows)
    assert result.summary.ttft_s is None


def test_mid_stream_disconnects_are_recorded() -> None:
    with StreamServer(ServerKnobs(disconnect_after=2)) as srv:
        result, rec = _run(srv, _workload(requests=4, output_tokens=6))
    assert result.summary.errors == 4
    for row in rec.rows:
        assert not row.ok and row.status == 200
        assert row.ttft_s is not None  # the first tokens arrived before the connection dropped
        assert row.error and ("connection lost" in row.error or "before [DONE]" in row.error)


def test_concurrency_limit_is_respected() -> None:
    with StreamServer(ServerKnobs(base_ttft_s=0.05)) as srv:
        counter = InFlight(srv)
        result, _ = _run(srv, _workload(requests=20), concurrency=3)
    assert result.summary.ok == 20
    assert counter.peak == 3


def test_high_concurrency_sends_everything_at_once() -> None:
    with StreamServer(ServerKnobs(base_ttft_s=0.2)) as srv:
        counter = InFlight(srv)
        result, _ = _run(srv, _workload(requests=40, output_tokens=2), concurrency=64)
    assert result.summary.ok == 40 and counter.peak == 40


def test_rounds_run_in_order() -> None:
    workload = _workload("long-doc-qa", requests=12, prompt_tokens=200)
    with StreamServer(ServerKnobs(base_ttft_s=0.01)) as srv:
        result, rec = _run(srv, workload, concurrency=4)
    warm_end = max(r.start_s + (r.e2e_s or 0) for r in rec.rows if r.round == 0)
    assert min(r.start_s for r in rec.rows if r.round == 1) >= warm_end - 0.002
    assert [r.label for r in result.rounds] == ["warm-up", "query"]
    # The server's counters: the warm-up round computes, the query round reuses each document.
    warm, query = result.rounds
    assert warm.cache.token_hit_rate == pytest.approx(0.0)
    assert query.cache.token_hit_rate is not None and query.cache.token_hit_rate > 0.5
    assert query.summary.ideal_hit_rate is not None and query.summary.ideal_hit_rate > 0.5
    assert result.cache.prefix_queries == sum(r.server_prompt_tokens or 0 for r in rec.rows)


def test_poisson_schedule_is_seeded_and_has_the_rate() -> None:
    a = arrival_offsets(2000, 50.0, arrival_rng(7, 0))
    assert a == arrival_offsets(2000, 50.0, arrival_rng(7, 0))
    assert a != arrival_offsets(2000, 50.0, arrival_rng(8, 0))
    assert a != arrival_offsets(2000, 50.0, arrival_rng(7, 1))  # each round its own draws
    assert all(x < y for x, y in itertools.pairwise(a))
    assert a[-1] / len(a) == pytest.approx(1 / 50.0, rel=0.1)  # mean gap 1/rate


def test_rate_mode_sends_on_the_schedule() -> None:
    workload = _workload(requests=25, output_tokens=1)
    with StreamServer(ServerKnobs()) as srv:
        _, rec = _run(srv, workload, concurrency=None, rate=60.0, seed=7)
    due = arrival_offsets(25, 60.0, arrival_rng(7, 0))
    starts = sorted(r.start_s for r in rec.rows)
    # Never early: starts count from the first request's, which a busy machine can itself start late
    # (a CI run measured 0.8 ms beyond a 5 ms allowance), so that lag is allowed on top; a runner
    # that ignored the schedule would send all 25 within it, ~0.4 s early at the last.
    first_lag_s = 0.025
    for i in range(1, 25):
        assert starts[i] - starts[0] >= due[i] - due[0] - first_lag_s
    assert starts[-1] - starts[0] < due[-1] - due[0] + 1.0


def test_options_exclude_each_other() -> None:
    with pytest.raises(InputError, match="exactly one"):
        RunOptions(model="m", concurrency=2, rate=1.0).validate()
    with pytest.raises(InputError, match="--concurrency"):
        RunOptions(model="m", concurrency=0).validate()
    with pytest.raises(InputError, match="--rate"):
        RunOptions(model="m", concurrency=None, rate=-1.0).validate()


def test_progress_callback_counts_live() -> None:
    seen: list[Progress] = []
    workload = _workload(requests=6)
    with StreamServer(ServerKnobs(status=500)) as srv:
        rec = Recorder(workload)
        opts = RunOptions(model="demo-model", concurrency=2)
        asyncio.run(run_layout(ServedLayout("p", srv.url), workload, opts, rec, seen.append))
    assert [p.done for p in seen] == [1, 2, 3, 4, 5, 6]
    assert seen[-1].errors == 6 and seen[-1].ok == 0 and seen[-1].total == 6
    assert all(0 <= p.in_flight <= 2 for p in seen)


def test_a_dead_engine_stops_the_run_within_two_seconds_and_keeps_rows() -> None:
    died_at: list[float] = []

    def check() -> None:
        if died_at and time.monotonic() >= died_at[0]:
            raise EngineError("engine exited with code 137", hint="see the log")

    workload = _workload(requests=200, output_tokens=2)
    with StreamServer(ServerKnobs(base_ttft_s=0.05)) as srv:
        rec = Recorder(workload)
        layout = ServedLayout("dies", srv.url, (), check_alive=check)
        died_at.append(time.monotonic() + 0.4)
        t0 = time.monotonic()
        with pytest.raises(EngineError, match="137"):
            asyncio.run(run_layout(layout, workload, RunOptions(model="demo-model", concurrency=2), rec))
        noticed = time.monotonic() - died_at[0]
    assert noticed < 2.0 and time.monotonic() - t0 < 3.0
    (result,) = rec.layouts
    assert not result.complete and result.aborted and "137" in result.aborted
    assert 0 < len(rec.rows) < 200 and result.summary.requests == len(rec.rows)


def test_compare_loop_starts_each_layout_with_the_same_workload() -> None:
    started: list[str] = []

    @contextlib.contextmanager
    def start_layout(name: str) -> Iterator[ServedLayout]:
        knobs = ServerKnobs(base_ttft_s=0.01 if name == "fast" else 0.08, prefill_s_per_token=0.0)
        with StreamServer(knobs) as srv:
            started.append(name)
            yield ServedLayout(name, srv.url, (srv.url + "/metrics",))

    workload = _workload("shared-prefix", requests=6, prompt_tokens=200)
    rec = Recorder(workload)
    results = run_layouts(["fast", "slow"], start_layout, workload, RunOptions(model="demo-model"), rec)
    assert started == ["fast", "slow"] and [r.name for r in results] == ["fast", "slow"]
    by_layout = {name: sorted(r.id for r in rec.rows if r.layout == name) for name in started}
    assert by_layout["fast"] == by_layout["slow"] and len(by_layout["fast"]) == 6
    fast, slow = (r.summary.ttft_s for r in results)
    assert fast is not None and slow is not None and fast.p50 < slow.p50
    with pytest.raises(InputError, match="given twice"):
        run_layouts(["fast"], start_layout, workload, RunOptions(model="demo-model"), rec)
