"""The load a verdict is taken under: streams of fresh prompts against a real streaming HTTP server
on loopback (tests/support/stream_server.py), running side by side, stopped when the block ends."""

from __future__ import annotations

import asyncio
import time

from kvstack.validation.load import Load, LoadReport
from tests.support.stream_server import ServerKnobs, StreamServer

MODEL = "demo-model"


def test_the_line_says_what_ran_beside_the_verdict() -> None:
    report = LoadReport(concurrency=4, streams=3, prompt_tokens=2048, output_tokens=64, requests=17)
    line = report.line()
    assert line.startswith("judged with 4 requests in flight: 3 load streams")
    assert "fresh 2048-token prompts decoding 64 tokens each" in line
    assert "17 load requests answered" in line
    assert "TTFT" not in line and "failed" not in line
    timed = report.model_copy(update={"median_ttft_s": 0.0423, "failed": 2, "first_error": "HTTP 503: busy"})
    assert timed.line().endswith("17 load requests answered (median TTFT 0.042 s), 2 failed: HTTP 503: busy")


def test_streams_run_side_by_side_and_stop_when_the_block_ends() -> None:
    stall = 0.4  # each request waits this long before its first token
    knobs = ServerKnobs(model=MODEL, stall_s=stall, base_ttft_s=0.0, prefill_s_per_token=0.0, itl_s=0.0)
    with StreamServer(knobs) as srv:

        async def go() -> tuple[int, float, Load]:
            load = Load(srv.url, MODEL, None, streams=3, prompt_tokens=64, output_tokens=4)
            async with load:
                start = time.monotonic()
                while srv.connections < 3 and time.monotonic() - start < 5:
                    await asyncio.sleep(0.01)
                # All three streams are in flight before any has had its first answer.
                opened, answered = srv.connections, len(load.ttfts)
                assert (opened, answered) == (3, 0)
                await asyncio.sleep(3 * stall)
                elapsed = time.monotonic() - start
            return len(load.ttfts), elapsed, load

        answered, elapsed, load = asyncio.run(go())
        # One stream at a time could have had at most elapsed / stall answers.
        assert answered > elapsed / stall and answered >= 3
        assert all(task.done() for task in load._tasks)
        assert load._client is not None and load._client._session is None  # its connections closed
        time.sleep(stall + 0.2)  # requests cancelled in flight finish on the server's side
        seen = len(srv.requests)
        connections = srv.connections
        time.sleep(2 * stall)
        assert len(srv.requests) == seen and srv.connections == connections  # nothing sent after
        sent = srv.requests
    # Fresh prompts every time: no load request was served from a cache.
    assert sent and all(r["gpu_hit"] == 0 and r["tier_hit"] == 0 for r in sent)
    report = load.report()
    assert (report.concurrency, report.streams, report.requests, report.failed) == (4, 3, answered, 0)
    assert report.median_ttft_s is not None and report.median_ttft_s >= stall


def test_failures_are_counted_with_the_first_error() -> None:
    with StreamServer(ServerKnobs(model=MODEL, status=503)) as srv:

        async def go() -> Load:
            load = Load(srv.url, MODEL, None, streams=2, prompt_tokens=32, output_tokens=2)
            async with load:
                await asyncio.sleep(0.3)
            return load

        load = asyncio.run(go())
    report = load.report()
    assert report.failed >= 2 and report.requests == 0 and report.median_ttft_s is None
    assert "503" in report.first_error
    assert f"{report.failed} failed: " in report.line()


def test_no_streams_sends_nothing() -> None:
    with StreamServer(ServerKnobs(model=MODEL)) as srv:

        async def go() -> Load:
            async with Load(srv.url, MODEL, None, streams=0, prompt_tokens=64) as load:
                await asyncio.sleep(0.1)
            return load

        load = asyncio.run(go())
        assert srv.connections == 0 and srv.requests == []
    assert load.report().concurrency == 1 and load.report().requests == 0
