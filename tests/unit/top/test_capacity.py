"""`kvstack top`'s capacity line: the live load against what a sweep measured for the served layout,
from --capacity (a bench --sweep or tune --objective capacity --out DIR) or the tune behind a
serve --tuned run; a warning once the load is beyond it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstack.cli.app import run
from kvstack.errors import InputError
from kvstack.rendering.top import capacity_line, render
from kvstack.top.capacity import read_capacity
from kvstack.top.snapshot import ServerView, TopSnapshot
from kvstack.top.targets import Targets, resolve_targets
from kvstack.top.window import capacity_view, capacity_warnings
from tests.support.stream_server import ServerKnobs, StreamServer
from tests.unit.top.test_targets import launch, write_run

SLO = {"ttft_s": 0.5, "tpot_s": None, "share": 0.9}


def sweep_doc(kind: str = "trace_rate", layouts: tuple[str, ...] = ("none",)) -> dict[str, object]:
    """The keys of a bench --sweep results.json top reads (the rest of SweepResult is ignored)."""
    return {
        "schema": "kvstack.bench.sweep/1",
        "kind": kind,
        "slo": SLO,
        "config": {"workload": "trace"},
        "layouts": [
            {"name": n, "base_url": "x", "steps": [], "capacity": {"status": "bracketed", "load": 2 + i}}
            for i, n in enumerate(layouts)
        ],
        "requests": [],
        "trace": {"rate_per_s": 3.0, "requests": 100} if kind == "trace_rate" else None,
    }


def tune_doc(measured: bool = True) -> dict[str, object]:
    capacity = {"sweep": {"name": "lmcache-mp x", "capacity": {"status": "above_ladder", "load": 4}}}
    return {
        "kind": "kvstack-tune",
        "winner": "lmcache-mp x",
        "measured": {
            "objective": "capacity",
            "capacity": {"slo": SLO, "multiples": [1, 2, 4], "trace_rate_per_s": 2.5} if measured else None,
            "candidates": [{"label": "none"}, {"label": "lmcache-mp x", "capacity": capacity}],
        },
    }


def write(path: Path, doc: dict[str, object]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps(doc))
    return path


def test_a_trace_sweep_capacity_is_a_multiple_of_the_traces_rate_in_requests_per_s(tmp_path: Path) -> None:
    cap = read_capacity(str(write(tmp_path / "sweep", sweep_doc())))
    assert (cap.layout, cap.kind, cap.load, cap.rate_per_s) == ("none", "trace_rate", 2, 6.0)
    assert cap.label == "2x the trace's rate = 6 requests/s"
    assert cap.slo == "90% of requests within TTFT <= 500 ms"


def test_a_compared_sweep_needs_the_served_layout(tmp_path: Path) -> None:
    out = write(tmp_path / "sweep", sweep_doc("rate", ("none", "lmcache-mp")))
    with pytest.raises(InputError, match="which layout is served"):
        read_capacity(str(out))
    assert read_capacity(f"{out}#lmcache-mp").rate_per_s == 3
    assert read_capacity(str(out), connector="none").rate_per_s == 2  # the run's connector picks it


def test_a_tune_gives_its_winners_capacity_and_one_without_is_refused(tmp_path: Path) -> None:
    cap = read_capacity(str(write(tmp_path / "tune", tune_doc()) / "tuned.json"))
    assert cap.layout == "lmcache-mp x" and cap.rate_per_s == 10.0
    assert cap.label == "at least 4x the trace's rate = 10 requests/s"
    with pytest.raises(InputError, match="did not measure capacity"):
        read_capacity(str(write(tmp_path / "p50", tune_doc(measured=False))))


def test_a_serve_tuned_run_finds_its_tunes_capacity(tmp_path: Path) -> None:
    tuned = write(tmp_path / "tune", tune_doc())
    run_dir = write_run(tmp_path / "run", {**launch(8000), "tuned": {"path": str(tuned / "tuned.json")}})
    targets = resolve_targets([], [], None, run_dir)
    assert targets.capacity is not None and targets.capacity.rate_per_s == 10.0


def _server(requests: float, running: float) -> ServerView:
    return ServerView(url="http://127.0.0.1:8000", up=True, engine="vllm", requests=requests, running=running)


def test_the_live_rate_is_set_against_the_capacity_and_warned_beyond_it(tmp_path: Path) -> None:
    cap = read_capacity(str(write(tmp_path / "sweep", sweep_doc())))
    view = capacity_view(cap, [_server(18, 3), _server(6, 1)], window_s=2.0)
    assert view.live_per_s == 12.0 and view.live_in_flight == 4 and view.used == 2.0
    line = capacity_line(view)
    assert line.startswith("load 12 requests/s (200% of it) · capacity 2x the trace's rate = 6 requests/s")
    assert "for none · SLO 90% of requests within TTFT <= 500 ms" in line
    (warning,) = capacity_warnings(view, "2s")
    assert warning.startswith("serving 12 requests/s in the last 2s, 2.0x the capacity none was measured")
    calm = capacity_view(cap, [_server(6, 1)], window_s=2.0)
    assert calm.used == 0.5 and capacity_warnings(calm, "2s") == []
    snap = TopSnapshot(time=0.0, window_s=2.0, servers=[_server(6, 1)], capacity=calm)
    from rich.console import Console

    console = Console(record=True, width=300)
    console.print(render(snap))
    assert "load 3 requests/s (50% of it) · capacity 2x the trace's rate" in console.export_text()


def test_a_concurrency_capacity_is_set_against_the_requests_running(tmp_path: Path) -> None:
    doc = sweep_doc("concurrency")
    cap = read_capacity(str(write(tmp_path / "sweep", doc)))
    view = capacity_view(cap, [_server(10, 3)], window_s=1.0)
    assert view.concurrency == 2 and view.used == 1.5
    assert capacity_line(view).startswith("load 3 in flight (150% of it) · capacity c=2")


def test_top_once_json_carries_the_capacity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = write(tmp_path / "sweep", sweep_doc())
    with StreamServer(ServerKnobs()) as srv:
        rc = run(["top", "--url", srv.url, "--once", "--json", "--interval", "0.2", "--capacity", str(out)])
    snap = json.loads(capsys.readouterr().out)
    assert rc == 0 and snap["capacity"]["rate_per_s"] == 6.0 and snap["capacity"]["layout"] == "none"


def test_a_bad_capacity_exits_2_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = run(["top", "--url", "http://127.0.0.1:1", "--once", "--capacity", str(tmp_path / "missing")])
    err = capsys.readouterr().err
    assert rc == 2 and "--capacity" in err and "hint:" in err and len(err.strip().splitlines()) == 2


def test_targets_without_a_capacity_show_none() -> None:
    assert Targets(servers=("http://x",)).capacity is None
