"""The flags of a measured replay that ``kvstack bench`` and ``kvstack tune`` share, declared once: a
field of either model is typed by one of these (names, help, range and default here; tune re-words
and re-defaults them for its command with ``Pick``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

# A load's SLO (bench --sweep, tune --objective capacity, plan --slo-ttft) is declared once in
# kvstack/flags.py; bench's and tune's models take its three flags as one group (LoadSlo).
from kvstack.flags import (
    DEFAULT_SLO_SHARE,
    FlagGroup,
    SloShare,
    SloTpot,
    SloTtft,
    check_slo_share,
    flag,
)

if TYPE_CHECKING:  # imported where used: `kvstack --help` imports this module, never the bench
    from kvstack.bench.sweep.schema import Slo

__all__ = ["DEFAULT_SLO_SHARE", "LoadSlo", "ReplayFlags", "SloShare", "SloTpot", "SloTtft"]


class LoadSlo(FlagGroup):
    """The SLO a load is judged by (bench --sweep, tune --objective capacity): each request's TTFT
    and time per output token (milliseconds), and the share of a step's requests that must meet them."""

    slo_ttft: SloTtft
    slo_tpot: SloTpot
    slo_share: SloShare

    def slo_flags_given(self) -> list[str]:
        """The SLO flags set, by name (for the refusal of a command that reads none of them)."""
        given = {"--slo-ttft": self.slo_ttft, "--slo-tpot": self.slo_tpot, "--slo-share": self.slo_share}
        return [name for name, value in given.items() if value is not None]

    def check_slo(self) -> None:
        check_slo_share(self.slo_share)

    @property
    def slo(self) -> Slo:
        """The flags as a sweep judges each step: seconds, the share's default when not given."""
        from kvstack.bench.sweep.schema import Slo

        return Slo(
            ttft_s=None if self.slo_ttft is None else self.slo_ttft / 1000,
            tpot_s=None if self.slo_tpot is None else self.slo_tpot / 1000,
            share=DEFAULT_SLO_SHARE if self.slo_share is None else self.slo_share,
        )


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


class ReplayFlags(FlagGroup):
    """How a measured replay runs (bench, tune): its prompts' seed, each request's timeout, the answers
    judged against recompute, and a trace's clock and output cap."""

    seed: Seed
    timeout_s: Timeout
    check_correctness: CheckCorrectness
    time_scale: TimeScale
    max_output_tokens: MaxOutputTokens
