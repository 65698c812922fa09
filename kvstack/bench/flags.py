"""The flags of a measured replay that ``kvstack bench`` and ``kvstack tune`` share, declared once: a
field of either model is typed by one of these (names, help, range and default here; tune re-words
and re-defaults them for its command with ``Pick``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# A load's SLO (bench --sweep, tune --objective capacity, plan --slo-ttft) is declared once in
# kvstack/flags.py; named here too, for bench's and tune's models.
from kvstack.flags import DEFAULT_SLO_SHARE, SloShare, SloTpot, SloTtft, flag

__all__ = ["DEFAULT_SLO_SHARE", "SloShare", "SloTpot", "SloTtft"]

Seed = Annotated[
    int,
    flag("--seed", help="Same seed, same prompts and arrivals; a new seed misses every earlier run's cache"),
    Field(default=0),
]
Timeout = Annotated[float, flag("--timeout", help="Per-request timeout, seconds"), Field(default=300.0)]
CheckCorrectness = Annotated[
    int,
    flag(
        "--check-correctness",
        help="After each layout: generate K of the last round's prompts greedily as served from "
        "cache (--trace: K of the replayed answers the caches served most of) and have a recompute "
        "score every token, in the engine's own request; a token outside its margin fails (exit 1)",
        metavar="K",
    ),
    Field(default=0),
]
# A trace's blocks scaled to this many tokens (bench --trace: 64 by default; tune: the trace's own).
BLOCK_TOKENS = flag(
    "--block-tokens",
    help="--trace: tokens per hash block (the trace's 512, scaled to fit)",
    ge=1,
    example="64",
)
TimeScale = Annotated[
    float,
    flag(
        "--time-scale",
        help="--trace: arrival = timestamp x this (0.01: 100x faster; 0: back to back)",
        ge=0,
        example="0.01",
    ),
    Field(default=1.0),
]
MaxOutputTokens = Annotated[
    int,
    flag(
        "--max-output-tokens",
        help="--trace: cap on each request's output length from the trace",
        ge=1,
        example="16",
    ),
    Field(default=16),
]
