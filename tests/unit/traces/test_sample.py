"""Session sampling keeps whole sessions; block scaling keeps the reuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import InputError
from kvstack.planning.predict.capacity import capacity_curve
from kvstack.traces.mooncake import TraceRow, read_trace
from kvstack.traces.sample import parse_ratio, sample_sessions, scale_blocks, session_key

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "conversation_1in40.jsonl"


def test_one_in_forty_keeps_sessions_whose_second_block_is_its_residue() -> None:
    requests = read_trace(FIXTURE).requests
    # The fixture is the 1-in-40 sample of the conversation trace: sampling it again keeps it all,
    # another residue keeps none of it.
    assert sample_sessions(requests, 1 / 40) == requests
    assert sample_sessions(requests, 1 / 40, seed=1) == []
    half = sample_sessions(requests, 0.3, seed=3)  # hashed: 1/0.3 is not whole
    kept = {session_key(r) for r in half}
    assert 0 < len(half) < len(requests)
    # Whole sessions: every request of a kept session is kept.
    assert [r for r in requests if session_key(r) in kept] == half
    assert sample_sessions(requests, 0.3, seed=3) == half  # stable


def test_named_sessions_are_hashed_and_kept_whole() -> None:
    requests = [TraceRow(float(i), 10, 1, [i], session_id=f"s{i % 7}") for i in range(70)]
    kept = sample_sessions(requests, 1 / 2, seed=5)
    sessions = {r.session_id for r in kept}
    assert 0 < len(sessions) < 7
    assert len(kept) == 10 * len(sessions)


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.1])
def test_ratio_out_of_range(bad: float) -> None:
    with pytest.raises(InputError, match=r"\(0, 1\]"):
        sample_sessions([], bad)


def test_parse_ratio_forms() -> None:
    assert parse_ratio("1/40") == parse_ratio("0.025") == parse_ratio("2.5%") == 0.025
    for bad in ("abc", "0", "1/0", "2"):
        with pytest.raises(InputError, match="--trace-sample"):
            parse_ratio(bad)


def test_scaled_blocks_keep_the_ids_and_the_reuse() -> None:
    trace = read_trace(FIXTURE)
    small = scale_blocks(trace, 64)
    assert small.block_tokens == 64
    for a, b in zip(trace.requests, small.requests, strict=True):
        assert a.hash_ids == b.hash_ids
        assert (len(b.hash_ids) - 1) * 64 < b.input_length <= len(b.hash_ids) * 64
    ratio = capacity_curve(trace.requests, 512).max_ratio
    assert capacity_curve(small.requests, 64).max_ratio == pytest.approx(ratio, abs=0.01)
    assert scale_blocks(trace, 512) is trace
    with pytest.raises(InputError, match="--block-tokens"):
        scale_blocks(trace, 0)
