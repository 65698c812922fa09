"""The TTFT validation pass: what it is pointed at, the run, and what it reports.

The public entry: ``run_validation(target)`` returns a ``ValidationReport``; ``target_from_launch``
builds the target for a server ``kvstack serve`` started. The parts: ``run`` (the pass),
``steps`` (cold, warm, dropping the GPU copy, correctness), ``tier_step``, ``isolation`` (what each
connector lets a tier step drop), ``server_api`` (the server's HTTP surface), ``prompts``,
``evidence`` (counters from /metrics), ``cache_server`` (LMCache's), ``remote`` (Redis),
``scoring`` and ``correctness`` (the gate), ``thresholds``, ``prediction``, ``diagnosis``
(engine logs), ``replicas`` (the shared-tier step) and ``report``.

The names below load on first use, so that ``kvstack --help`` can read ``thresholds`` without
importing the pass.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvstack.validation.report import (
        StepResult,
        TierTarget,
        ValidationReport,
        ValidationTarget,
        check_target,
        write_report,
    )
    from kvstack.validation.run import run_validation, run_validation_async, target_from_launch

_HOME = {
    "StepResult": "report",
    "TierTarget": "report",
    "ValidationReport": "report",
    "ValidationTarget": "report",
    "check_target": "report",
    "write_report": "report",
    "run_validation": "run",
    "run_validation_async": "run",
    "target_from_launch": "run",
}

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


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"kvstack.validation.{_HOME[name]}"), name)
    raise AttributeError(f"module 'kvstack.validation' has no attribute {name!r}")
