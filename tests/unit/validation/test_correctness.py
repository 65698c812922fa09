"""The correctness gate: every served token judged by a recompute's scores (teacher-forced)."""

from __future__ import annotations

import pytest

from kvstack.clients.streaming import RequestResult
from kvstack.validation.correctness import determinism, judge, summary
from kvstack.validation.scoring import PositionScore, parse_sglang, parse_vllm
from tests.support.stream_server import prompt_logprobs, sglang_input_logprobs


def served(ids: list[int]) -> RequestResult:
    return RequestResult(ok=True, token_ids=ids, prompt_token_ids=[1, 2, 3])


def pos(token: int, logprob: float, rank: int, best: int = 7, best_logprob: float = -0.1) -> PositionScore:
    return PositionScore(token, logprob, rank, best, best_logprob)


def recompute_choice(n: int) -> list[PositionScore]:
    return [pos(7, -0.1, 1) for _ in range(n)]


def test_every_position_at_recompute_choice_passes() -> None:
    check = judge(served([7] * 4), recompute_choice(4), asked=4)
    assert check.verdict == "pass" and check.tokens == 4 and check.worst_deficit == 0.0
    assert check.failed_at == []


def test_a_first_token_near_tie_passes() -> None:
    # Recompute chose 7 over 9 by one bf16 step: the cached request's 9 is numerics, at position 1 too.
    scores = [pos(9, -0.1625, 2), *recompute_choice(3)]
    check = judge(served([9, 7, 7, 7]), scores, asked=4)
    assert check.verdict == "pass"
    assert check.worst_at == 1 and check.worst_deficit == pytest.approx(0.0625)


def test_a_late_token_far_below_recompute_fails_at_any_position() -> None:
    scores = [*recompute_choice(14), pos(9, -2.1, 2), pos(7, -0.1, 1)]
    check = judge(served([7] * 14 + [9, 7]), scores, asked=16)
    assert check.verdict == "fail" and check.failed_at == [15]
    assert "served token 15 of 16" in check.detail and "2.000 nats below" in check.detail


def test_a_late_token_outside_top_k_fails_even_within_the_margin() -> None:
    scores = [*recompute_choice(10), pos(9, -0.15, 8)]  # 0.05 nats down but ranked 8th
    check = judge(served([7] * 10 + [9]), scores, asked=11, top_k=5)
    assert check.verdict == "fail" and check.failed_at == [11]
    assert "outside recompute's top 5" in check.detail


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
    check = judge(served(ids), scores, asked=4)
    assert check.verdict == "unknown" and text in check.detail


def test_unknown_fails_the_summary_and_failure_names_the_tier() -> None:
    ok = judge(served([7] * 2), recompute_choice(2), asked=2)
    unknown = judge(served([]), "no prompt_logprobs", asked=2)
    line, problem = summary([ok, unknown], "the disk tier")
    assert line.startswith("correctness: 1/2 cached requests")
    assert problem is not None and "correctness of the disk tier could not be checked" in problem
    bad = judge(served([9, 7]), [pos(9, -2.1, 2), pos(7, -0.1, 1)], asked=2)
    _, problem = summary([ok, bad], "the disk tier")
    assert problem is not None and problem.startswith(
        "the KV served from the disk tier differs from recompute"
    )
    _, problem = summary([ok, ok], "the disk tier")
    assert problem is None


def test_identical_is_recorded_against_recompute_greedy_run() -> None:
    rec = served([7, 7])
    check = judge(served([9, 7]), [pos(9, -0.1625, 2), pos(7, -0.1, 1)], asked=2, recompute=rec)
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
