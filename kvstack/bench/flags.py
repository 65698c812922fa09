"""The flags of a measured replay that ``kvstack bench`` and ``kvstack tune`` share, declared once: a
field of either model is typed by one of these (names, help, range and default here; tune re-words
and re-defaults them for its command with ``Pick``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from kvstack.flags import flag

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

# A load sweep's SLO (bench --sweep, tune --objective capacity): what a request must meet, and the
# share of a step's requests that must meet it for the step to pass.
DEFAULT_SLO_SHARE = 0.9
SloTtft = Annotated[
    float | None,
    flag("--slo-ttft", help="--sweep: a request's TTFT must be at most this", metavar="MS", gt=0,
         example="500", show_default=False),
    Field(default=None),
]  # fmt: skip
SloTpot = Annotated[
    float | None,
    flag("--slo-tpot", help="--sweep: a request's time per output token must be at most this",
         metavar="MS", gt=0, example="50", show_default=False),
    Field(default=None),
]  # fmt: skip
SloShare = Annotated[
    float | None,
    flag(
        "--slo-share",
        help=f"--sweep: the share of a step's requests that must meet the SLO for the step to pass "
        f"(default {DEFAULT_SLO_SHARE}); a layout's capacity is the highest load that passes",
        gt=0,
        example="0.9",
        show_default=False,
    ),
    Field(default=None),
]
