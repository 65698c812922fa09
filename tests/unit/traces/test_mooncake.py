"""Reading Mooncake-format traces: the real trace's sample, slices, AIPerf's optional fields, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import InputError
from kvstack.traces.mooncake import read_trace

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "conversation_1in40.jsonl"


def test_reads_the_conversation_sample() -> None:
    trace = read_trace(FIXTURE)
    assert len(trace.requests) == 342
    assert trace.block_tokens == 512
    first = trace.requests[0]
    assert first.hash_ids[1] % 40 == 0
    assert first.input_length <= len(first.hash_ids) * 512
    assert trace.prompt_tokens == 4_243_065
    assert trace.block_refs == 8449
    assert trace.duration_s > 3000  # the sample spans the hour


def test_start_and_max_requests_take_a_slice() -> None:
    whole = read_trace(FIXTURE).requests
    part = read_trace(FIXTURE, start=10, max_requests=5)
    assert part.requests == whole[10:15]
    assert part.first_line == 11


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    return path


def test_session_and_delay_rows(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '{"session_id": "a", "timestamp": 1000, "input_length": 600, "output_length": 5, '
        '"hash_ids": [1, 2]}\n'
        "\n"
        '{"session_id": "a", "delay": 250, "input_length": 900, "output_length": 5, "hash_ids": [1, 2]}\n'
        '{"session_id": 7, "delay": 10, "input_length": 10, "hash_ids": [3]}\n',
    )
    a, b, c = read_trace(path).requests
    assert (a.session_id, a.delay_ms, a.timestamp_ms) == ("a", None, 1000.0)
    assert (b.delay_ms, b.timestamp_ms) == (250.0, 1250.0)  # placed after its session's previous turn
    assert (c.session_id, c.timestamp_ms, c.output_length) == ("7", 10.0, 0)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{"timest',
            "t.jsonl:2: not JSON",
        ),
        ("[1, 2]\n", "t.jsonl:1: expected a JSON object"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n', "hash_ids must be a non-empty list"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [-1]}\n', "non-negative"),
        (
            '{"timestamp": 0, "input_length": "5", "output_length": 1, "hash_ids": [1]}\n',
            "input_length must be",
        ),
        ('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [1]}\n', "at least 1"),
        (
            '{"timestamp": -4, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n',
            "must not be negative",
        ),
        ('{"input_length": 5, "output_length": 1, "hash_ids": [1]}\n', "timestamp is missing"),
        ('{"timestamp": 0, "input_length": 5, "hash_ids": [true]}\n', "non-negative integers"),
        ('{"timestamp": 0, "text_input": "hi"}\n', "text_input rows are not supported"),
        ("\n\n", "has no requests"),
    ],
)
def test_bad_lines_name_file_line_and_fix(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(InputError) as info:
        read_trace(_write(tmp_path, text))
    assert problem in info.value.message
    assert "\n" not in info.value.message
    assert info.value.hint


def test_missing_file_and_past_the_end(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        read_trace(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="no requests after its first 342"):
        read_trace(FIXTURE, start=342)
    with pytest.raises(InputError, match="--max-requests"):
        read_trace(FIXTURE, max_requests=0)
