"""The correctness gate's judgement of two greedy runs of the same prompt."""

from __future__ import annotations

import math

import pytest

from kvstack.runtime.streaming import RequestResult
from kvstack.validation.correctness import compare, determinism, margin, summary


def run(tokens: list[str], margins: list[float], runner_up: str = "x") -> RequestResult:
    """A recompute/served run: each token's top-2 with the given margins."""
    tops = [
        {t: -0.1, runner_up + str(i): -0.1 - m} for i, (t, m) in enumerate(zip(tokens, margins, strict=True))
    ]
    return RequestResult(ok=True, tokens=tokens, top_logprobs=tops)


def test_margin() -> None:
    assert margin({"a": -0.1, "b": -1.1}) == pytest.approx(1.0)
    assert math.isinf(margin({"a": -0.1}))


def test_identical_runs_match_with_their_margins() -> None:
    cold = run(list("abcd"), [1.0, 0.5, 0.0625, 2.0])
    check = compare(cold, run(list("abcd"), [1.0, 0.5, 0.0625, 2.0]))
    assert (check.verdict, check.tokens, check.diverged_at, check.min_margin) == ("match", 4, None, 0.0625)


@pytest.mark.parametrize(
    ("served", "margins", "verdict", "at"),
    [
        (list("Xbcd"), [0.05, 1.0, 1.0, 1.0], "fail", 0),  # early: the first token follows from the KV alone
        (list("aXcd"), [1.0, 0.05, 1.0, 1.0], "fail", 1),  # still early (default: first 2 tokens)
        (list("abXd"), [1.0, 1.0, 0.5, 1.0], "fail", 2),  # late but decisive (margin 0.5 > 0.15)
        (list("abXd"), [1.0, 1.0, 0.125, 1.0], "warn", 2),  # late, within noise: numerics
        (list("abcX"), [1.0, 1.0, 1.0, 0.0], "warn", 3),  # a tie flipped
    ],
)
def test_divergence_rules(served: list[str], margins: list[float], verdict: str, at: int) -> None:
    check = compare(run(list("abcd"), margins), run(served, margins))
    assert (check.verdict, check.diverged_at, check.served_token) == (verdict, at, "X")
    assert check.recompute_margin == pytest.approx(margins[at])
    assert f"token {at + 1} of 4" in check.detail


def test_gap_is_reported_when_both_candidates_were_listed() -> None:
    cold = RequestResult(tokens=["a", "b"], top_logprobs=[{"a": -0.1, "z": -3.0}, {"b": -0.2, "c": -0.9}])
    check = compare(cold, RequestResult(tokens=["a", "c"], top_logprobs=[{"a": -0.1}, {"c": -0.1}]))
    assert (check.verdict, check.diverged_at, check.gap) == ("fail", 1, pytest.approx(0.7))


def test_thresholds_are_options() -> None:
    cold, served = run(list("abcd"), [1.0, 1.0, 0.5, 1.0]), run(list("abXd"), [1.0, 1.0, 0.5, 1.0])
    assert compare(cold, served, early=2, noise=0.6).verdict == "warn"
    assert compare(cold, served, early=3, noise=0.6).verdict == "fail"


def test_no_logprobs_is_unknown_not_a_pass() -> None:
    check = compare(RequestResult(ok=True), RequestResult(ok=True))
    assert check.verdict == "unknown"
    _, problem, warnings = summary([check], "the disk tier")
    assert problem is None and warnings == [f"correctness not checked: {check.detail}"]


def test_summary_names_the_tier_and_the_first_failure() -> None:
    ok = compare(run(list("ab"), [1.0, 1.0]), run(list("ab"), [1.0, 1.0]))
    bad = compare(run(list("ab"), [1.0, 1.0]), run(list("Xb"), [1.0, 1.0]))
    line, problem, _ = summary([ok, bad], "the disk tier")
    assert (
        line
        == "correctness: 1/2 prompts gave recompute's 2 greedy tokens (smallest recompute margin 1.000 nats)"
    )
    assert problem is not None and problem.startswith(
        "the KV served from the disk tier differs from recompute"
    )


def test_determinism_lines() -> None:
    assert "exactly" in determinism(True)
    assert "not batch-invariant" in determinism(False)
    assert "unknown" in determinism(None)
