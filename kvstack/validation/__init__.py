"""The TTFT validation pass: what it is pointed at, the run, and what it reports.

The public entry: ``run_validation(target)`` returns a ``ValidationReport``; ``target_from_launch``
builds the target for a server ``kvstack serve`` started. The parts: ``run`` (the steps),
``session`` (the server's HTTP surface), ``prompts``, ``evidence`` (counters from /metrics),
``cache_server`` (LMCache's), ``remote`` (Redis), ``correctness``, ``prediction``, ``diagnosis``
(engine logs), ``replicas`` (the shared-tier step) and ``report``.
"""

from kvstack.validation.report import (
    StepResult,
    TierTarget,
    ValidationReport,
    ValidationTarget,
    check_target,
    write_report,
)
from kvstack.validation.run import run_validation, run_validation_async, target_from_launch

__all__ = [
    "StepResult",
    "TierTarget",
    "ValidationReport",
    "ValidationTarget",
    "check_target",
    "run_validation",
    "run_validation_async",
    "target_from_launch",
    "write_report",
]
