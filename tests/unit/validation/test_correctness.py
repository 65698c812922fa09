"""The correctness gate: every served token judged by a recompute's scores (teacher-forced)."""

from __future__ import annotations

import pytest

from kvstack.clients.streaming import RequestResult
from kvstack.validation.correctness import beside_recompute, determinism, judge, summary
from kvstack.validation.noise import NoiseFloor
from kvstack.validation.scoring import PositionScore, parse_sglang, parse_vllm
from tests.support.stream_server import prompt_logprobs, sglang_input_logprobs


def served(ids: list[int], own: list[float] | None = None) -> RequestResult:
    """A served answer; ``own``: its own log-probability of each token (greedy: -0.1, its best)."""
    logprobs: list[float | None] = list(own) if own is not None else [-0.1] * len(ids)
    return RequestResult(ok=True, token_ids=ids, prompt_token_ids=[1, 2, 3], token_logprobs=logprobs)


def pos(token: int, logprob: float, rank: int, best: int = 7, best_logprob: float = -0.1) -> PositionScore:
    return PositionScore(token, logprob, rank, best, best_logprob)


def recompute_choice(n: int) -> list[PositionScore]:
    return [pos(7, -0.1, 1) for _ in range(n)]


def floor(threshold: float = 0.1) -> NoiseFloor:
    return NoiseFloor(method="test", answers=1, positions=16, floor=threshold / 3, threshold=threshold)


def test_every_position_at_recompute_choice_passes() -> None:
    check = judge(served([7] * 4), recompute_choice(4), asked=4, noise=floor())
    assert check.verdict == "pass" and check.tokens == 4 and check.worst_deficit == 0.0
    assert (check.typical, check.worst, check.over, check.threshold) == (0.0, 0.0, 0, 0.1)


def test_a_first_token_near_tie_passes() -> None:
    # Recompute chose 7 over 9 by one bf16 step: the cached request's 9 is numerics, at position 1 too.
    scores = [pos(9, -0.1625, 2), *recompute_choice(3)]
    check = judge(served([9, 7, 7, 7]), scores, asked=4, noise=floor())
    assert check.verdict == "pass" and check.flips == 1
    assert check.worst_at == 1 and check.worst_deficit == pytest.approx(0.0625)


def test_one_position_far_off_is_left_out_of_the_typical_disagreement() -> None:
    """2.5 nats at one position of 16: what a correct answer of SmolLM2-135M in bf16 showed."""
    scores = [pos(9, -2.6, 12), *recompute_choice(15)]
    check = judge(served([9] + [7] * 15), scores, asked=16, noise=floor())
    assert check.verdict == "pass" and check.typical == 0.0
    assert (check.over, check.worst_at, check.worst) == (1, 1, 2.5)


def test_many_positions_over_the_gate_fail() -> None:
    # The served path was confident (-0.1) in tokens recompute puts 1 nat down at 6 of 16 positions.
    scores = [*recompute_choice(10)] + [pos(9, -1.1, 2) for _ in range(6)]
    check = judge(served([7] * 10 + [9] * 6), scores, asked=16, noise=floor())
    assert check.verdict == "fail" and check.over == 6
    assert check.typical == pytest.approx(4 / 14, abs=1e-4)  # the largest 2 of 16 left out
    assert "typical disagreement with recompute 0.286 nats over the gate 0.100" in check.detail
    assert "(6 of 16 positions over it, first at token 11" in check.detail


def test_a_shift_without_a_flip_counts_too() -> None:
    """Wrong KV need not change the greedy token: the served path's own confidence moves."""
    scores = recompute_choice(16)
    check = judge(served([7] * 16, own=[-1.0] * 16), scores, asked=16, noise=floor())
    assert check.verdict == "fail" and check.flips == 0 and check.typical == pytest.approx(0.9)


CEILING = 0.5


def off_by(n: int, shift: float) -> list[PositionScore]:
    """Recompute's scores of a greedy answer whose own view sits ``shift`` nats from them everywhere."""
    return [pos(7, -0.1 - shift, 1, best_logprob=-0.1 - shift) for _ in range(n)]


def test_an_answer_over_the_gate_passes_within_half_of_it_of_its_recomputes_own() -> None:
    check = judge(served([7] * 16), off_by(16, 0.3), asked=16, noise=floor())
    assert check.verdict == "fail" and check.typical == pytest.approx(0.3)
    again = beside_recompute(check, served([7] * 16), off_by(16, 0.28), CEILING)
    assert (again.verdict, again.recompute_typical) == ("pass", 0.28)
    assert "over the gate 0.100 but within half of it of the recompute's own answer" in again.detail


def test_an_answer_further_than_half_the_gate_from_its_recomputes_own_still_fails() -> None:
    check = judge(served([7] * 16), off_by(16, 0.3), asked=16, noise=floor())
    again = beside_recompute(check, served([7] * 16), off_by(16, 0.2), CEILING)
    assert (again.verdict, again.recompute_typical) == ("fail", 0.2)
    assert again.detail.startswith(check.detail)
    assert "sits 0.200 nats from the same scorer (over 0.250 is not numerics)" in again.detail


def test_a_recompute_over_the_ceiling_judges_nothing() -> None:
    check = judge(served([7] * 16), off_by(16, 0.7), asked=16, noise=floor())
    again = beside_recompute(check, served([7] * 16), off_by(16, 0.7), CEILING)
    assert again.verdict == "fail" and "(over the 0.5-nat ceiling)" in again.detail


@pytest.mark.parametrize(
    ("answer", "scores", "text"),
    [
        ("SGLang's completions cannot be asked to read no cache", "unused", "SGLang's completions"),
        (served([7] * 3), off_by(3, 0.3), "3 token ids of 16 asked"),
        (served([7] * 16), "the scoring request answered HTTP 500: boom", "HTTP 500"),
        (served([7] * 16), [], "no position of it was scored"),
    ],
)
def test_a_recompute_answer_that_cannot_judge_keeps_the_failure(
    answer: RequestResult | str, scores: list[PositionScore] | str, text: str
) -> None:
    check = judge(served([7] * 16), off_by(16, 0.3), asked=16, noise=floor())
    again = beside_recompute(check, answer, scores, CEILING)
    assert again.verdict == "fail" and again.recompute_typical is None and text in again.detail


def test_a_passing_or_unknown_check_is_not_judged_again() -> None:
    passed = judge(served([7] * 4), recompute_choice(4), asked=4, noise=floor())
    assert beside_recompute(passed, served([7] * 4), off_by(4, 0.0), CEILING) is passed
    unknown = judge(served([7] * 4), "boom", asked=4, noise=floor())
    assert beside_recompute(unknown, served([7] * 4), off_by(4, 0.0), CEILING) is unknown


@pytest.mark.parametrize(
    ("ids", "scores", "text"),
    [
        ([7] * 4, "the scoring request (POST /v1/completions) answered HTTP 500: boom", "HTTP 500"),
        ([7] * 3, [pos(7, -0.1, 1)] * 3, "returned 3 token ids of 4 asked"),
        (
            [7] * 4,
            "the served request returned no token ids (return_token_ids is not supported)",
            "no token ids",
        ),
    ],
)
def test_what_cannot_be_checked_is_unknown(
    ids: list[int], scores: list[PositionScore] | str, text: str
) -> None:
    check = judge(served(ids), scores, asked=4, noise=floor())
    assert check.verdict == "unknown" and text in check.detail


def test_no_own_log_probabilities_or_no_floor_is_unknown() -> None:
    check = judge(served([7] * 4, own=[]), recompute_choice(4), asked=4, noise=floor())
    assert check.verdict == "unknown" and "did not honour logprobs" in check.detail
    unmeasured = NoiseFloor(method="test", detail="no correct answer was scored")
    check = judge(served([7] * 4), recompute_choice(4), asked=4, noise=unmeasured)
    assert check.verdict == "unknown"
    assert check.detail == "the noise floor could not be measured: no correct answer was scored"


def test_unknown_fails_the_summary_and_failure_names_the_tier() -> None:
    ok = judge(served([7] * 2), recompute_choice(2), asked=2, noise=floor())
    unknown = judge(served([]), "no prompt_logprobs", asked=2, noise=floor())
    line, problem = summary([ok, unknown], "the disk tier")
    assert line.startswith("correctness: 1/2 cached requests had a typical disagreement within the 0.100")
    assert problem is not None and "correctness of the disk tier could not be checked" in problem
    bad = judge(served([9, 9]), [pos(9, -2.1, 2), pos(9, -2.1, 2)], asked=2, noise=floor())
    _, problem = summary([ok, bad], "the disk tier")
    assert problem is not None and problem.startswith(
        "the KV served from the disk tier differs from recompute"
    )
    _, problem = summary([ok, ok], "the disk tier")
    assert problem is None


def test_identical_is_recorded_against_recompute_greedy_run() -> None:
    rec = served([7, 7])
    check = judge(
        served([9, 7]), [pos(9, -0.1625, 2), pos(7, -0.1, 1)], asked=2, noise=floor(), recompute=rec
    )
    assert check.verdict == "pass" and check.identical is False


def test_vllm_prompt_logprobs_are_parsed_from_the_wire_form() -> None:
    prompt = (1, 50, 60, 70)
    seq = (*prompt, 100000 + 5, 200000 + 5)
    data = {"choices": [{"prompt_logprobs": prompt_logprobs(seq, 5, None)}]}
    out = parse_vllm(data, len(prompt), list(seq[len(prompt) :]))
    assert isinstance(out, list) and len(out) == 2
    assert all(p.rank >= 1 for p in out)
    assert parse_vllm({"choices": [{}]}, 4, [1]) == "the scoring response has no prompt_logprobs"


def test_sglang_input_logprobs_are_parsed_from_the_wire_form() -> None:
    seq = (1, 50, 60, 70, 11, 12)
    data = {"meta_info": sglang_input_logprobs(seq, 5, None)}
    out = parse_sglang(data, 4, [11, 12], top_k=5)
    assert isinstance(out, list) and [p.rank for p in out] == [6, 6]  # not among the candidates
    assert out[0].deficit == pytest.approx(8.9)


def test_determinism_lines() -> None:
    assert "exactly" in determinism(True)
    assert "unknown" in determinism(None)
    assert "not batch-invariant" in determinism(False)
