"""Measured against predicted TTFT for each validation step (the plan's model, planning/predict/ttft.py).

The prediction is anchored on the warm step: a hit of the same prompts on this server (HTTP,
scheduling and the last token's forward step). Cold adds the recompute estimate when the plan has a
prefill figure; a tier step adds the tier's latency and the prompt's KV bytes over its bandwidth.
A step more than SLOW_FACTOR times slower than predicted gets a warning: a slow disk, a throttled
link, or another tier serving than the one planned. It never fails the step: the figures are
estimates, and the step's verdict rests on the counters.
"""

from __future__ import annotations

from kvstack.planning.predict import ttft
from kvstack.planning.schema import TtftModel
from kvstack.units import fmt_bw
from kvstack.validation.report import StepResult, ValidationReport


def _how(m: TtftModel, step: str) -> str:
    if step == "cold":
        return f"warm + recompute ({m.prefill_source})"
    kind = step.removeprefix("tier:")
    path = m.fetch[kind]
    latency = f"{path.latency_s * 1000:.1f} ms + " if path.latency_s else ""
    return f"warm + {latency}KV at {fmt_bw(path.bw_bytes_per_s)}" + (
        f" ({path.source})" if path.source else ""
    )


def apply_predictions(report: ValidationReport, model: TtftModel | None) -> None:
    """Set each measured step's predicted TTFT, and warn where it is far slower than predicted."""
    warm = report.step("warm")
    anchor = warm.ttft_s if warm is not None and warm.verdict == "pass" else None
    if model is None or anchor is None:
        return
    for step in report.steps:
        if step.ttft_s is None or not (step.name == "cold" or step.name.startswith("tier:")):
            continue
        expected = ttft.predicted(model, step.name, report.prompt_tokens, anchor)
        if expected is None:
            continue
        _judge(step, expected, _how(model, step.name))


def _judge(step: StepResult, expected: float, how: str) -> None:
    assert step.ttft_s is not None
    step.predicted_ttft_s = expected
    step.prediction = how
    ratio = step.ttft_s / expected if expected > 0 else float("inf")
    if ratio > ttft.SLOW_FACTOR:
        step.warnings.append(
            f"{ratio:.1f}x slower than predicted ({step.ttft_s * 1000:.1f} ms vs {expected * 1000:.1f} ms, "
            f"{how}): check the tier's device and link, and which tier served"
        )
