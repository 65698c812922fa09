"""What a replay's records take from its request (kvstack/bench/replay/trace_bench.py ReplayRequest)."""

from __future__ import annotations

from pathlib import Path

from kvstack.bench.replay.results import TraceSlice
from kvstack.bench.replay.trace_bench import ReplayRequest
from kvstack.tune.results import Setup


def test_a_record_takes_the_requests_fields_it_names_and_nothing_else() -> None:
    args = ReplayRequest(
        path=Path("t.jsonl"), start=3, max_requests=9, session_sample=0.5, block_tokens=128,
        time_scale=0.25, max_output_tokens=4, concurrency=2, seed=7, check_correctness=2,
    )  # fmt: skip
    trace = args.record(TraceSlice, source="t.jsonl", trace_block_tokens=512, rows_taken=5)
    assert trace.model_dump() == {
        "source": "t.jsonl", "start": 3, "session_sample": 0.5, "max_requests": 9, "block_tokens": 128,
        "trace_block_tokens": 512, "time_scale": 0.25, "max_output_tokens": 4, "concurrency": 2,
        "rows_taken": 5,
    }  # fmt: skip
    setup = args.record(Setup, requests=40)
    assert setup.model_dump() == {
        "requests": 40, "block_tokens": 128, "time_scale": 0.25, "max_output_tokens": 4, "seed": 7,
        "check_correctness": 2,
    }  # fmt: skip
