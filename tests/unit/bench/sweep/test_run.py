"""A whole sweep against stand-in servers whose TTFT rises with the requests in flight (ServerKnobs'
``ttft_s_per_in_flight``): 80 ms per request in flight against a 200 ms SLO, so that one or two in
flight pass (82 and 162 ms) and three or more fail (242 ms and up, once the first two of a step are
past), each with some 40 ms to spare for a busy machine; a step passes with 75% of its requests
within the SLO (one late request of 8 is not a failed step). The capacity and its bracket are known
before the sweep runs."""

from __future__ import annotations

import contextlib
import csv
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvstack.bench.events import BenchEvents
from kvstack.bench.request import BenchRequest
from kvstack.bench.sweep.report import load_sweep
from kvstack.bench.sweep.run import run_sweep
from kvstack.bench.sweep.schema import Capacity
from kvstack.errors import EngineError
from kvstack.serving.served_layout import ServedLayout
from tests.support.stream_server import ServerKnobs, StreamServer

SLO = {"slo_ttft": 200.0, "slo_share": 0.75}
SMALL = {"workload": "random", "requests": 8, "prompt_tokens": "32", "output_tokens": 2}


def _knobs(per_in_flight: float) -> ServerKnobs:
    return ServerKnobs(base_ttft_s=0.002, prefill_s_per_token=0.0, ttft_s_per_in_flight=per_in_flight)


def test_a_concurrency_sweep_finds_the_knee_and_bisects_it(tmp_path: Path) -> None:
    seen: list[tuple[str, float, str]] = []
    events = BenchEvents(
        sweep_step=lambda layout, ladder, step: seen.append((layout, step.load, step.origin))
    )
    with StreamServer(_knobs(0.08)) as srv:
        args = BenchRequest(url=srv.url, sweep="concurrency:1,2,4,8", out=tmp_path, **SLO, **SMALL)
        result = run_sweep(args, events=events)
    (lay,) = result.layouts
    # The ladder, then the bracket (2, 4) bisected once: 3 fails, and nothing is left between 2 and 3.
    assert seen == [("server", c, "ladder") for c in (1, 2, 4, 8)] + [("server", 3, "bisect")]
    assert [(s.load, s.meets_slo) for s in lay.steps] == [
        (1, True),
        (2, True),
        (4, False),
        (8, False),
        (3, False),
    ]
    assert lay.capacity == Capacity(status="bracketed", load=2, highest_passing=2, lowest_failing=3)
    assert [s.seed for s in lay.steps] == [0, 1, 2, 3, 4]  # fresh prompts at every step
    assert all(s.summary.ok == 8 and s.complete for s in lay.steps)
    assert lay.steps[2].share_within_slo < 0.75
    ttft_p90 = [s.summary.ttft_s.p90 for s in sorted(lay.steps, key=lambda s: s.load) if s.summary.ttft_s]
    assert ttft_p90 == sorted(ttft_p90)  # latency rises with the load
    back = load_sweep(tmp_path)
    assert back == result and back.kind == "concurrency" and back.slo.ttft_s == 0.2 and back.slo.share == 0.75
    assert back.config.ladder == [1, 2, 4, 8] and back.config.bisect == 2
    with (tmp_path / "requests.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 40 and list(rows[0])[:3] == ["layout", "step", "load"]
    assert {(r["step"], r["load"]) for r in rows} == {
        ("0", "1.0"),
        ("1", "2.0"),
        ("2", "4.0"),
        ("3", "8.0"),
        ("4", "3.0"),
    }
    for name in ("sweep_ttft_p90.png", "sweep_throughput.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_compared_layouts_each_get_their_capacity(tmp_path: Path) -> None:
    """Two layouts kvstack would serve: 'none' saturates at 80 ms per request in flight, 'lmcache' at
    30 ms (4 in flight: 122 ms, within the SLO)."""
    started: list[str] = []

    @contextlib.contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        started.append(name)
        with StreamServer(_knobs(0.08 if name == "none" else 0.03)) as srv:
            yield ServedLayout(name, srv.url, (srv.url + "/metrics",))

    args = BenchRequest(
        model="demo-model",
        compare=["none,lmcache"],
        sweep="concurrency:1,2,4",
        sweep_bisect=0,
        **SLO,
        **SMALL,
    )
    result = run_sweep(args, start_layout=start)
    assert started == ["none", "lmcache"]
    none, lmcache = result.layouts
    assert none.capacity == Capacity(status="bracketed", load=2, highest_passing=2, lowest_failing=4)
    assert lmcache.capacity == Capacity(status="above_ladder", load=4, highest_passing=4)
    assert [s.load for s in lmcache.steps] == [1, 2, 4]  # --sweep-bisect 0: the ladder only
    assert {r.layout for r in result.requests} == {"none", "lmcache"} and len(result.requests) == 48
    # Each step's prompt tokens by source, from the server's counters (the stand-in's prefix cache).
    assert all(s.prompt_token_shares and s.token_hit_rate is not None for s in none.steps)


def test_a_rate_sweep_below_its_first_step_is_not_bisected() -> None:
    with StreamServer(_knobs(0.0)) as srv:
        args = BenchRequest(url=srv.url, sweep="rate:20,40", **{**SMALL, "requests": 4, "slo_ttft": 0.5})
        result = run_sweep(args)
    (lay,) = result.layouts
    assert result.kind == "rate" and [s.load for s in lay.steps] == [20, 40]
    assert lay.capacity == Capacity(status="below_first_step", lowest_failing=20)
    assert all(s.within_slo == 0 and s.summary.ok == 4 for s in lay.steps)


def test_a_dead_engine_keeps_the_steps_measured(tmp_path: Path) -> None:
    """The engine dies in the third step: the two before it are in the report, the cut step is no
    point of the capacity, and the engine's error is what the sweep raises."""
    steps_done: list[Any] = []

    def check() -> None:
        if len(steps_done) >= 2 and time.monotonic() > deadline[0]:
            raise EngineError("vllm exited with code 1 during the bench", hint="see the log")

    deadline = [0.0]

    def on_step(layout: str, ladder: Any, step: Any) -> None:
        steps_done.append(step)
        deadline[0] = time.monotonic() + 0.3

    @contextlib.contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        with StreamServer(_knobs(0.08)) as srv:
            yield ServedLayout(name, srv.url, (), check_alive=check)

    args = BenchRequest(
        model="demo-model",
        compare=["none"],
        sweep="concurrency:1,2,4",
        out=tmp_path,
        # An SLO c=2 meets by 5x (~160 ms at 80 ms a request in flight): on a loaded machine too,
        # the capacity is the two steps before the cut one.
        **{**SLO, "slo_ttft": 1000.0, **SMALL, "requests": 12},
    )
    with pytest.raises(EngineError, match="exited with code 1"):
        run_sweep(args, start_layout=start, events=BenchEvents(sweep_step=on_step))
    (lay,) = load_sweep(tmp_path).layouts
    assert [s.complete for s in lay.steps] == [True, True, False]
    assert lay.steps[2].aborted and "code 1" in lay.steps[2].aborted
    assert lay.capacity == Capacity(status="above_ladder", load=2, highest_passing=2)


def test_each_layouts_simulated_prediction_beside_what_it_measured(tmp_path: Path, capsys: Any) -> None:
    """'none' runs a plan kvstack made (an H100's: the simulator takes the plan's TTFT model);
    'lmcache' has none, so the sweep calibrates it first and the simulator takes those costs. Both
    bracket at c=2 (the stand-in's TTFT grows with what is in flight); each step gets the simulator's
    TTFT at its load, each layout its capacity and its bound at the knee."""
    from kvstack.rendering.bench_sweep import print_sweep
    from tests.unit.planning.helpers import plan_for

    plan = plan_for("h100-sxm", "llama-3.1-8b", context=8192)

    @contextlib.contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        knobs = ServerKnobs(base_ttft_s=0.002, prefill_s_per_token=2e-4, ttft_s_per_in_flight=0.08)
        with StreamServer(knobs) as srv:
            yield ServedLayout(name, srv.url, (srv.url + "/metrics",), plan=plan if name == "none" else None)

    args = BenchRequest(model="demo-model", compare=["none,lmcache"], sweep="concurrency:1,2,4",
                        sweep_bisect=0, out=tmp_path, **SLO, **SMALL)  # fmt: skip
    result = run_sweep(args, start_layout=start)
    none, lmcache = result.layouts
    for lay in (none, lmcache):
        assert lay.capacity.status == "bracketed" and lay.bound is not None
        assert lay.bound.at_load == 4 and lay.bound.passing_load == 2 and lay.bound.bound is not None
        assert {u.resource for u in lay.bound.resources} >= {"prefill", "decode", "step", "pool"}
        pred = lay.predicted
        assert pred is not None and pred.load is not None and 0 < pred.load < float("inf")
        assert pred.measured_load == 2 and pred.ratio == pytest.approx(pred.load / 2)
        assert "closed loop" in pred.workload
        for step in lay.steps:
            assert step.predicted is not None and (step.predicted.ttft_p50_s or 0) > 0
    assert none.predicted is not None and "the plan's TTFT model" in none.predicted.source
    assert none.bound is not None and "the plan's TTFT model" in none.bound.figures
    # No plan: the sweep's own calibration of the layout, and the pool its counters gave.
    assert lmcache.predicted is not None and "costs measured on the served engine" in lmcache.predicted.source
    from kvstack.bench.sweep.calibration import sweep_calibration

    assert none.calibration is None and sweep_calibration(result, "none") is None
    assert lmcache.calibration is not None and lmcache.calibration.costs is not None
    assert lmcache.calibration.pool_tokens and lmcache.calibration.block_tokens
    served = sweep_calibration(result, "lmcache")
    assert served is not None and served.plain_layout == "lmcache" and served.offload is None
    assert (
        served.plain.linear_s + served.plain.quadratic_s > 0
        and served.decode_fixed_s is not None
        and served.decode_fixed_s >= 0.001
    )
    assert load_sweep(tmp_path) == result  # kept in results.json (schema /2), its prediction too
    print_sweep(result, [], json_mode=False)
    out = capsys.readouterr().out
    assert "sim p50" in out and "lmcache: bound at the knee (simulated): " in out and "at c=4 (" in out
    assert "none: predicted capacity (simulated) " in out and "predicted / measured" in out
    assert "lmcache: simulated: the lowest step's 8 requests" in out
