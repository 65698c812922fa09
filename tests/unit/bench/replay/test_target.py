"""bench --trace --url finds the server's offload tiers as top and validate do, or predicts nothing.

The server is the stand-in engine with LMCache's cache server behind it (its /status and
lmcache_mp_* counters on the same port, so the one URL is also the cache server's); the run dir is
what `kvstack serve` writes (launch.json's keys as LaunchSpec.public() records them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvstack.bench.bench import run_trace_bench
from kvstack.bench.replay.target import url_layout
from kvstack.bench.request import BenchRequest
from kvstack.errors import InputError
from kvstack.rendering.bench import bench_events
from tests.support.stream_server import ServerKnobs, StreamServer
from tests.unit.bench.replay.test_replay import write_trace

# The engine's pool holds 128 tokens, LMCache's DRAM 256 over a disk that keeps everything.
TIERED = ServerKnobs(
    connector="lmcache", lmcache_mp=True, block_size=16, num_gpu_blocks=8, chunk_tokens=32, l1_tokens=256
)


def launch(url: str, cache_server: str | None) -> dict[str, Any]:
    """launch.json of a `kvstack serve --offload lmcache-mp` run (serving/launch_files.record_run)."""
    return {
        "argv": ["vllm", "serve"],
        "helpers": [{"name": "lmcache-server", "argv": ["lmcache", "server"]}],
        "cache_dirs": {},
        "metrics_urls": [url + "/metrics", *([cache_server + "/metrics"] if cache_server else [])],
        "cache_server_url": cache_server,
        "tier_adapters": {"disk": "fs"},
        "served_model_name": "demo-model",
        "base_url": url,
        "engine": "vllm",
        "connector": "lmcache-mp",
    }


def serve_run(state: Path, name: str, doc: dict[str, Any]) -> Path:
    run = state / "kvstack" / "runs" / name
    run.mkdir(parents=True)
    (run / "launch.json").write_text(json.dumps(doc))
    return run


def replay(tmp_path: Path, url: str, **options: Any) -> dict[str, Any]:
    result = run_trace_bench(
        BenchRequest(
            trace=write_trace(tmp_path / "t.jsonl"),
            block_tokens=32,
            time_scale=0.0,
            max_output_tokens=2,
            url=url,
            **options,
        ),
        None,
    )
    assert result.trace is not None
    trace: dict[str, Any] = result.trace
    return trace


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The runs root kvstack reads ($XDG_STATE_HOME/kvstack/runs), empty."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def test_a_server_kvstack_serve_started_is_predicted_with_its_tiers(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StreamServer(TIERED) as srv:
        serve_run(state, "20250101-000000-1", launch("http://127.0.0.1:1", None))  # another server
        run = serve_run(state, "20250101-000001-2", launch(srv.url, srv.url))
        trace = replay(tmp_path, srv.url)
    capsys.readouterr()
    (layout,) = trace["layouts"]
    assert [lv["tier"] for lv in layout["hierarchy"]["levels"]] == ["engine_cache", "dram", "disk"]
    assert "no_prediction" not in layout
    tiers = {t["tier"]: t for t in layout["tiers"]}
    assert tiers["dram"]["predicted"] is not None and tiers["dram"]["measured"] > 0
    assert layout["ttft"]["predicted"]["p50_s"] is not None
    assert any(str(run) in note for note in trace["notes"])


def test_lmcache_names_the_cache_server(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StreamServer(TIERED) as srv:
        trace = replay(tmp_path, srv.url, lmcache=srv.url)
    capsys.readouterr()
    (layout,) = trace["layouts"]
    assert [lv["tier"] for lv in layout["hierarchy"]["levels"]] == ["engine_cache", "dram", "disk"]
    assert {t["tier"] for t in layout["tiers"]} >= {"engine_cache", "dram", "disk", "recomputed"}


def test_tiers_no_one_names_give_no_prediction_and_say_why(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StreamServer(TIERED) as srv:
        trace = replay(tmp_path, srv.url)
    capsys.readouterr()
    (layout,) = trace["layouts"]
    why = layout["no_prediction"]
    assert "offload tiers" in why and "--lmcache URL" in why and "DRAM tier" in why
    assert all(t["predicted"] is None for t in layout["tiers"])
    assert {t["tier"] for t in layout["tiers"]} >= {"dram", "disk"}  # measured, not hidden
    assert layout["predicted_tokens"] == {} and layout["ttft"]["predicted"]["p50_s"] is None
    assert any("no prediction" in note for note in trace["notes"])


def test_the_table_prints_no_predicted_share_and_the_note(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StreamServer(TIERED) as srv:
        run_trace_bench(
            BenchRequest(
                trace=write_trace(tmp_path / "t.jsonl"), block_tokens=32, time_scale=0.0, url=srv.url
            ),
            None,
            bench_events(json_mode=False),
        )
    out = capsys.readouterr().out
    assert "note: server: no prediction: server serves prompt tokens from offload tiers" in " ".join(
        out.split()
    )


def test_a_run_dir_that_does_not_serve_the_url_is_refused(tmp_path: Path, state: Path) -> None:
    run = serve_run(state, "r", launch("http://127.0.0.1:1", None))
    with pytest.raises(InputError, match=r"serves http://127\.0\.0\.1:1, not http://127\.0\.0\.1:2"):
        url_layout("http://127.0.0.1:2", run_dir=run)


def test_the_newest_run_serving_the_url_wins_and_its_plan_is_read(tmp_path: Path, state: Path) -> None:
    import os

    old = serve_run(state, "old", launch("http://127.0.0.1:5", "http://127.0.0.1:6"))
    new = serve_run(state, "new", launch("http://127.0.0.1:5", "http://127.0.0.1:7"))
    os.utime(old / "launch.json", (1, 1))
    (new / "plan.json").write_text("{}")
    layout, notes = url_layout("http://127.0.0.1:5")
    assert layout.cache_server_url == "http://127.0.0.1:7" and layout.served_model == "demo-model"
    assert layout.metrics_urls == ("http://127.0.0.1:5/metrics", "http://127.0.0.1:7/metrics")
    assert layout.plan is None and any("is not a kvstack plan" in n for n in notes)
