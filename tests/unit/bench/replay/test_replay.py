"""bench --trace: prompts from hash ids, what is sent, per-request sources, predicted vs measured.

The replay runs against the real streaming test server (a toy block prefix cache and an LMCache
tier behind real HTTP), so the counters move the way an engine's do.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvstack.bench.bench import run_trace_bench
from kvstack.bench.replay.prompts import BlockTokens, ReplayShape, plan_requests
from kvstack.bench.replay.results import TraceReplay
from kvstack.bench.report import REQUESTS_CSV, RESULTS_JSON
from kvstack.bench.request import BenchRequest
from kvstack.bench.schema import BenchResult
from kvstack.errors import InputError
from kvstack.traces.mooncake import TraceRow
from tests.support.stream_server import ServerKnobs, StreamServer

POOL = list(range(100, 200))


def row(ts: float, length: int, ids: list[int], out: int = 50) -> TraceRow:
    return TraceRow(timestamp_ms=ts, input_length=length, output_length=out, hash_ids=ids)


def test_the_same_hash_id_gives_the_same_block_and_different_ids_differ() -> None:
    a, b = BlockTokens(POOL, 64, seed=0), BlockTokens(POOL, 64, seed=0)
    assert a.block(7) == b.block(7) and len(a.block(7)) == 64
    assert a.block(7) != a.block(8)
    assert BlockTokens(POOL, 64, seed=1).block(7) != a.block(7)  # a new seed misses an old run's cache


def test_a_partial_last_block_is_the_leading_part_of_the_same_block() -> None:
    shape = ReplayShape(
        block_tokens=64, align=32, max_prompt_tokens=10_000, max_output_tokens=4, time_scale=0.5
    )
    sent, _ = plan_requests([row(0, 200, [1, 2, 3, 4]), row(1000, 128, [1, 2])], shape)
    blocks = BlockTokens(POOL, 64, seed=0)
    long, short = blocks.prompt(sent[0]), blocks.prompt(sent[1])
    assert len(long) == 192 and len(short) == 128  # cut to whole multiples of 32
    assert long[:128] == short
    assert sent[1].arrival_s == 0.5 and sent[0].output_tokens == 4  # time-scaled; output capped


def test_prompts_are_cut_to_the_context_and_rows_too_short_are_left_out() -> None:
    shape = ReplayShape(block_tokens=64, align=64, max_prompt_tokens=150, max_output_tokens=4, time_scale=1)
    sent, notes = plan_requests([row(0, 640, list(range(10))), row(5, 40, [99])], shape)
    assert [s.prompt_tokens for s in sent] == [128] and sent[0].hash_ids == (0, 1)
    assert any("cut to the context" in n for n in notes) and any("left out" in n for n in notes)


def test_too_few_word_tokens_is_refused() -> None:
    with pytest.raises(InputError, match="distinct word tokens"):
        BlockTokens([1, 2, 3], 64, seed=0)


def write_trace(path: Path) -> Path:
    rows = []
    for turn in range(4):  # two sessions of four turns: each turn extends the last
        for s in range(2):
            ids = [0] + [1000 * (s + 1) + i for i in range(turn * 2 + 2)]
            rows.append(
                {
                    "timestamp": turn * 100 + s,
                    "input_length": len(ids) * 512 - 100,
                    "output_length": 30,
                    "hash_ids": ids,
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def quick_replay(tmp_path: Path, concurrency: int = 1, **given: Any) -> BenchRequest:
    """bench --trace of write_trace's trace in 32-token blocks, sent at once, two output tokens a
    request; ``given``: the other flags."""
    return BenchRequest(
        trace=write_trace(tmp_path / "t.jsonl"),
        block_tokens=32,
        time_scale=0.0,
        max_output_tokens=2,
        concurrency=concurrency,
        **given,
    )


def test_a_replay_writes_rows_with_sources_and_predicted_vs_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # no serve run knows the stand-in
    knobs = ServerKnobs(connector="lmcache", lmcache_mp=True, block_size=16, num_gpu_blocks=64)
    with StreamServer(knobs) as srv:
        out = tmp_path / "out"
        result = run_trace_bench(
            quick_replay(
                tmp_path,
                url=srv.url,
                lmcache=srv.url,  # the stand-in is its own cache server (/status, lmcache_mp_*)
                out=out,
            ),
            None,
        )
        seen = srv.requests
    assert len(result.requests) == 8 and all(r.ok for r in result.requests)
    # Token prompts arrive as sent (no BOS added), and a session's next turn hits its last one.
    # The calibration's requests follow the replay's (bench/replay/calibrate.py).
    assert [s["tokens"] for s in seen[:8]] == [r.prompt_tokens for r in result.requests]
    assert len(seen) > 8
    assert seen[0]["gpu_hit"] == 0 and seen[2]["gpu_hit"] >= result.requests[0].prompt_tokens - 16
    for r in result.requests:
        parts = [r.recomputed_tokens, r.engine_cache_tokens, r.dram_tokens, r.disk_tokens, r.remote_tokens]
        assert sum(p or 0.0 for p in parts) + (r.offload_tokens or 0.0) == pytest.approx(r.prompt_tokens)
    trace = result.trace
    assert trace is not None and trace["requests_sent"] == 8 and trace["unbounded_hit_ratio"] > 0.4
    (layout,) = trace["layouts"]
    tiers = {t["tier"]: t for t in layout["tiers"]}
    assert tiers["engine_cache"]["measured"] > 0 and tiers["engine_cache"]["predicted"] > 0
    assert [lv["tier"] for lv in layout["hierarchy"]["levels"]] == ["engine_cache", "dram", "disk"]
    assert layout["measured_derived"] == {} and "one in flight" in layout["measured_from"]
    assert layout["hierarchy"]["levels"][0] == {
        "tier": "engine_cache",
        "unit_tokens": 16,
        "nominal_blocks": 64,
        "blocks": 64,
        "tokens": 1024,
        "source": "vllm:cache_config_info num_gpu_blocks x block_size",
    }
    # The plan's TTFT model, calibrated against this server, predicts every request sent.
    ttft = layout["ttft"]
    assert ttft["calibration"]["hit_s"] > 0 and ttft["predicted"]["p50_s"] > 0
    assert ttft["measured"]["p90_s"] >= ttft["measured"]["p50_s"] > 0
    saved = json.loads((out / RESULTS_JSON).read_text())
    assert saved["trace"]["layouts"][0]["tiers"] == layout["tiers"]
    # The writer writes the typed model's document: it comes back unchanged, keys a layout whose
    # tiers are known does not have (no_prediction) stay out, and the workload's spec is the same.
    assert TraceReplay.model_validate(saved["trace"]).document() == saved["trace"]
    assert saved["workload"] == {"name": "trace", "spec": saved["trace"]}
    assert set(saved["trace"]["layouts"][0]) == {
        "layout", "hierarchy", "prompt_tokens_sent", "prompt_tokens_measured", "predicted_tokens",
        "measured_tokens", "tiers", "max_gap_points", "measured_derived", "measured_from", "ttft",
    }  # fmt: skip
    header = (out / REQUESTS_CSV).read_text().splitlines()[0].split(",")
    assert {"ttft_s", "recomputed_tokens", "engine_cache_tokens", "dram_tokens", "disk_tokens"} <= set(header)
    assert (out / "trace_prediction.png").stat().st_size > 0


# /status of a real lmcache 0.5.6 cache server (L1 0.05 GiB, fs_native capped at 0.01 GiB), trimmed.
STATUS = {
    "chunk_size": 256,
    "storage_manager": {
        "l1_manager": {
            "total_object_count": 163,
            "memory_used_bytes": 42729472,
            "memory_total_bytes": 53687091,
        },
        "l1_eviction_controller": {"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2},
        "l2_eviction_controller": {
            "adapters": [
                {
                    "eviction_policy": "LRU",
                    "trigger_watermark": 0.8,
                    "eviction_ratio": 0.2,
                    "total_bytes_used": 14942208,
                    "total_capacity_bytes": 10737418,
                }
            ]
        },
        "l2_adapters": [{"type": "FSNativeL2Adapter", "base_path": "/x"}],
    },
}


def test_lmcache_levels_come_from_its_status_at_the_middle_of_its_eviction_band() -> None:
    from kvstack.bench.replay.sizes import lmcache_levels
    from kvstack.clients.lmcache_status import LMCacheStatus

    status = LMCacheStatus.parse(STATUS)
    assert status is not None and status.bytes_per_token() == 1024  # the demo model's KV per token
    assert status.adapter_tiers() == {"disk": "fsnativel2adapter"} and status.chunk_size == 256
    assert LMCacheStatus.parse({"chunk_size": 256}) is None  # not a cache server's status
    levels, notes = lmcache_levels(status, 1024, {"disk": "disk"}, None)
    dram, disk = levels
    assert (dram.tier, dram.unit_tokens, dram.nominal_blocks, dram.blocks) == ("dram", 256, 204, 146)
    assert (disk.tier, disk.nominal_blocks, disk.blocks) == ("disk", 40, 28)
    assert "simulated at 72%" in notes[0]
    # kvstack's own cap (the plan's disk tier) wins over what LMCache was told.
    _, capped = lmcache_levels(status, 1024, {"disk": "disk"}, 8 << 20)[0]
    assert capped.nominal_blocks == 32 and capped.source.startswith("kvstack's disk cap")


def test_lmcache_with_an_l2_is_simulated_without_readmission() -> None:
    from kvstack.bench.replay.predict import predict
    from kvstack.bench.replay.prompts import SentRequest
    from kvstack.bench.replay.sizes import Level, lmcache_hierarchy, lmcache_levels
    from kvstack.clients.lmcache_status import LMCacheStatus

    status = LMCacheStatus.parse(STATUS)
    assert status is not None
    levels, notes = lmcache_levels(status, 1024, {"disk": "disk"}, None)
    engine = Level("engine_cache", 16, 0, 0, "vllm:cache_config_info")
    hierarchy = lmcache_hierarchy(engine, levels, notes)
    assert hierarchy.readmit is False and hierarchy.document().readmit is False
    assert "reads back from L2" in hierarchy.notes[-1]
    assert lmcache_hierarchy(engine, levels[:1], notes).readmit  # L1 alone: nothing to read back
    # Blocks a, b, a, b through a 1-chunk L1 over the disk: the third request's chunk is read back
    # from disk and not kept, so L1 still holds b for the fourth.
    one_chunk = [Level("dram", 256, 1, 1, "x"), Level("disk", 256, 10, 10, "x")]
    sent = [
        SentRequest(i, i, 0.0, (h,), prompt_tokens=256, output_tokens=1, session="s", original_input=256)
        for i, h in enumerate((1, 2, 1, 2))
    ]
    got = predict("lmcache-mp", sent, lmcache_hierarchy(engine, one_chunk, []), 256)
    assert (got.predicted_tokens["dram"], got.predicted_tokens["disk"]) == (256, 256)


def test_a_bad_trace_is_named_before_any_server_is_asked(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10}\n')
    with pytest.raises(InputError, match=r"t\.jsonl:1: hash_ids must be a non-empty list"):
        run_trace_bench(BenchRequest(trace=bad, url="http://127.0.0.1:1"), None)


def _replay(
    tmp_path: Path, knobs: ServerKnobs, concurrency: int = 1
) -> tuple[BenchResult, list[dict[str, Any]]]:
    with StreamServer(knobs) as srv:
        result = run_trace_bench(
            # its /metrics has the cache server's counters too
            quick_replay(tmp_path, concurrency, url=srv.url),
            None,
        )
        return result, srv.requests[: len(result.requests)]


# LMCache's L1 holds 8 chunks of 32 tokens over a disk that keeps every chunk; the engine's pool
# holds 128 tokens: the replay's sessions overflow both, so requests are served by the engine with
# DRAM or with disk, and LMCache's L1 lookups count the engine's prefix too.
TIERED = ServerKnobs(
    connector="lmcache", lmcache_mp=True, block_size=16, num_gpu_blocks=8, chunk_tokens=32, l1_tokens=256
)


def test_each_rows_dram_and_disk_tokens_are_the_tiers_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    result, truth = _replay(tmp_path, TIERED)
    capsys.readouterr()
    rows = sorted(result.requests, key=lambda r: r.index)
    assert [(r.engine_cache_tokens, r.dram_tokens, r.disk_tokens) for r in rows] == [
        (t["gpu_hit"], t["dram_hit"], t["l2_hit"]) for t in truth
    ]
    assert sum(t["dram_hit"] for t in truth) > 0 and sum(t["l2_hit"] for t in truth) > 0
    assert all(r.offload_tokens == 0 for r in rows)


def test_counters_that_place_more_than_the_engine_loaded_show_in_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The engine loads at most 64 tokens of a prompt from LMCache while LMCache's lookups count all
    # they found: DRAM and disk are each read from their own counter, so the row's sources add up to
    # more than its prompt instead of DRAM absorbing the difference.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    knobs = replace(TIERED, tier_hit_cap=64)
    result, truth = _replay(tmp_path, knobs)
    capsys.readouterr()
    parts = ("recomputed", "engine_cache", "dram", "disk", "remote", "offload")
    over = [
        r for r in result.requests if sum(getattr(r, f"{p}_tokens") or 0.0 for p in parts) > r.prompt_tokens
    ]
    capped = [t for t in truth if t["tier_hit"] == 64]
    assert capped and len(over) == len(capped)


def test_with_several_in_flight_the_runs_split_holds_and_dram_is_marked_derived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Several in flight: only the run's totals are read. L2 hits are counted on the part the engine
    # did not hold (half of each tier hit, through fs), so the run's disk and DRAM tokens are exact;
    # LMCache's L1 count, which includes the engine's prefix, is not a DRAM figure over a run.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    knobs = ServerKnobs(
        connector="lmcache", lmcache_mp=True, block_size=16, num_gpu_blocks=8, l2_fraction=0.5
    )
    result, truth = _replay(tmp_path, knobs, concurrency=2)
    capsys.readouterr()
    assert result.trace is not None
    (layout,) = result.trace["layouts"]
    measured = layout["measured_tokens"]
    assert sum(t["gpu_hit"] for t in truth) > 0  # the engine's prefix is in LMCache's L1 count
    assert measured["engine_cache"] == sum(t["gpu_hit"] for t in truth)
    assert measured["dram"] == pytest.approx(sum(t["dram_hit"] for t in truth))
    assert measured["disk"] == pytest.approx(sum(t["l2_hit"] for t in truth))
    assert set(layout["measured_derived"]) == {"dram"} and "in total" in layout["measured_from"]


def test_an_engine_that_dies_mid_replay_ends_it_with_its_error(tmp_path: Path) -> None:
    import contextlib
    from collections.abc import Iterator

    from kvstack.errors import EngineError
    from kvstack.serving.served_layout import ServedLayout

    sent: list[int] = []

    def check() -> None:
        sent.append(1)
        if len(sent) > 3:
            raise EngineError("vllm exited with code 1 during the bench of layout none", hint="see its log")

    @contextlib.contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        with StreamServer(ServerKnobs()) as srv:
            yield ServedLayout(name, srv.url, (srv.url + "/metrics",), check_alive=check)

    out = tmp_path / "out"
    opts = BenchRequest(
        trace=write_trace(tmp_path / "t.jsonl"), block_tokens=32, time_scale=0.0, model="demo-model",
        compare=["none"], out=out,
    )  # fmt: skip
    # The engine's own error (one line for the CLI), not the task group that carried it.
    with pytest.raises(EngineError, match="exited with code 1"):
        run_trace_bench(opts, start)
    assert len(sent) == 4


def test_a_bench_trace_result_the_kvstack_before_the_typed_writer_wrote_loads_unchanged() -> None:
    """A bench --trace result written at 1a1c99d (the writer built dicts then) reads back whole:
    the typed models give its trace unchanged, and bench --trace's tables render from it."""
    from kvstack.bench.replay.results import layouts_of
    from kvstack.bench.schema import BenchResult
    from kvstack.rendering.replay import prediction_table, trace_lines, ttft_table

    path = Path(__file__).resolve().parents[3] / "fixtures" / "results" / "bench-trace-1a1c99d.json"
    result = BenchResult.model_validate_json(path.read_text())
    assert result.trace is not None
    assert TraceReplay.model_validate(result.trace).document() == result.trace
    (layout,) = layouts_of(result)
    assert layout.hierarchy.offloads and layout.no_prediction is None
    assert layout.calibration() is not None and layout.calibration().hit_s > 0  # type: ignore[union-attr]
    assert trace_lines(result)[0].startswith("trace /tmp/kvstack-test.jsonl: 8 requests")
    assert prediction_table(result).row_count == len(layout.tiers) and ttft_table(result).row_count == 1
