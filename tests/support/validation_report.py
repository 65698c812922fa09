"""A validation report as `kvstack validate` writes one, for the code that reads reports."""

from __future__ import annotations

from typing import Literal

from kvstack.validation.report import StepResult, ValidationReport


def demo_report(steps: list[StepResult], overall: Literal["PASS", "FAIL"] = "FAIL") -> ValidationReport:
    """The demo model validated on vLLM at 127.0.0.1:8000 (2048 exact prompt tokens, 1.5x, 3 repeats)."""
    return ValidationReport(
        base_url="http://127.0.0.1:8000",
        model="demo",
        engine="vllm",
        prompt_tokens=2048,
        prompt_tokens_exact=True,
        min_speedup=1.5,
        repeat=3,
        steps=steps,
        overall=overall,
    )
