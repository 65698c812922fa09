"""--sweep KIND:LOADS parsed once: the loads sorted and distinct, each mistake one InputError."""

from __future__ import annotations

import pytest

from kvstack.bench.sweep.ladder import MAX_STEPS, LoadLadder, parse_ladder
from kvstack.errors import InputError


@pytest.mark.parametrize(
    ("text", "ladder"),
    [
        ("concurrency:1,2,4,8", LoadLadder("concurrency", (1, 2, 4, 8))),
        ("rate:0.5,1,2,4", LoadLadder("rate", (0.5, 1, 2, 4))),
        (" Rate : 4, 1 ,2,1,", LoadLadder("rate", (1, 2, 4))),  # sorted, each once, blanks dropped
        ("concurrency:16", LoadLadder("concurrency", (16,))),
        ("concurrency:2.0", LoadLadder("concurrency", (2,))),
    ],
)
def test_parses(text: str, ladder: LoadLadder) -> None:
    assert parse_ladder(text) == ladder


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,2,4", "--sweep needs KIND:STEPS"),
        ("users:1,2", "--sweep load must be one of concurrency, rate, not 'users'"),
        ("rate:", "--sweep rate names no step"),
        ("rate:1,x", "--sweep step 'x' is not a number"),
        ("rate:0,1", "--sweep steps must be positive, not 0"),
        ("rate:1,inf", "--sweep steps must be positive"),
        ("concurrency:-1", "--sweep steps must be positive"),
        ("concurrency:1.5", "--sweep concurrency steps are whole requests, not 1.5"),
        ("rate:" + ",".join(str(i) for i in range(1, MAX_STEPS + 2)), f"at most {MAX_STEPS} steps"),
    ],
)
def test_refuses(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(")) as exc:
        parse_ladder(text)
    assert exc.value.hint and "--sweep concurrency:1,2,4,8" in exc.value.hint


def test_labels() -> None:
    assert LoadLadder("concurrency", (4,)).label(4) == "c=4"
    assert LoadLadder("rate", (2.5,)).label(2.5) == "2.5/s"
