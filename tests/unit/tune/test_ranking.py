"""The ranking: the candidates ordered by the objective, on each candidate's predicted TTFT (the
simulator serving the bundled sample one request at a time, as tune's replay sends it)."""

from __future__ import annotations

import itertools

import pytest

from kvstack.planning.predict.capacity import capacity_curve
from kvstack.tune.options import RANK_OBJECTIVES, Objective
from kvstack.tune.predict import CandidatePrediction, Costs, SimTrace
from kvstack.tune.ranking import TIE_TOLERANCE, rank
from kvstack.tune.space import Limits, candidate_space, curve_sizes

from .helpers import DEMO_POOL, KIB, PLAIN, offload, sample

GIB = 1 << 30


def _ranked(block_tokens: int, cost_s: float, objective: Objective = "p50") -> list[CandidatePrediction]:
    trace = sample(block_tokens)
    limits = Limits("cpu", 128, DEMO_POOL, KIB, GIB, 10 * GIB)
    sim = SimTrace(trace.requests, block_tokens=block_tokens, limits=limits)
    curve = capacity_curve(trace.requests, block_tokens)
    lengths = [r.input_length for r in trace.requests]
    space = candidate_space(
        limits, curve_sizes(curve, int(block_tokens * KIB)), lengths, PLAIN, offload(cost_s)
    )
    return rank(sim, space, Costs(PLAIN, offload(cost_s)), objective, slo_s=0.2)


def _best(ranked: list[CandidatePrediction], kind: str) -> CandidatePrediction:
    pick = {
        "none": lambda c: not c.offloads,
        "offload": lambda c: c.offloads and c.gate is None,
        "gated": lambda c: c.gate is not None,
    }[kind]
    return next(p for p in ranked if pick(p.candidate))


# The same sessions of the bundled sample, prompts scaled by their blocks, the offload path at the
# issue's 15 ms a request: 16-token blocks give prompts of ~390 tokens (the path's fixed cost
# dominates), 64-token ones 4x longer (reuse dominates: offload wins, whether gated or not), 32-token
# ones the mixed traffic (offload alone loses the median and wins the tail).
@pytest.mark.parametrize(
    ("block_tokens", "winner"),
    [(16, "none"), (64, "offload"), (32, "gated")],
    ids=["short-none", "4x-longer-offload", "mixed-gated"],
)
def test_the_winner_follows_the_traffic(block_tokens: int, winner: str) -> None:
    ranked = _ranked(block_tokens, 0.015)
    top = ranked[0]
    assert top.candidate.offloads == (winner != "none"), top.candidate.label
    none, plain_offload = _best(ranked, "none"), _best(ranked, "offload")
    tol = 1 + TIE_TOLERANCE
    if winner == "none":
        assert none.p50_s * tol < plain_offload.p50_s
    if winner == "offload":
        assert plain_offload.p50_s < none.p50_s and top.p50_s <= plain_offload.p50_s
        assert top.tokens["dram"] + top.tokens["disk"] > 0
    if winner == "gated":
        assert top.candidate.gate is not None and top.gated > 0, top.candidate.label
        assert plain_offload.p50_s > none.p50_s * tol and plain_offload.p90_s * tol < none.p90_s
        # The gate keeps both: the median of none, the tail of offload.
        assert top.p50_s <= none.p50_s * tol and top.p90_s <= plain_offload.p90_s * tol


def test_each_objective_ranks_by_its_own_figure_ties_within_the_tolerance() -> None:
    for objective in RANK_OBJECTIVES:
        ranked = _ranked(32, 0.015, objective)
        values = [p.loss(objective) for p in ranked]
        best = min(values)
        assert values[0] <= best * (1 + TIE_TOLERANCE)
        # Out of order only within the tolerance of a better one before it.
        assert all(b >= a / (1 + TIE_TOLERANCE) for a, b in itertools.pairwise(values))
