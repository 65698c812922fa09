"""The supervisor's status line (kvstack/runtime/status.py)."""

from __future__ import annotations

from kvstack.runtime.status import SupervisorStatus, format_status


def test_format_status() -> None:
    st = SupervisorStatus("waiting for readiness", "engine", 12.4, "INFO loading weights " + "x" * 200)
    line = format_status(st, width=80)
    assert line.startswith("engine: waiting for readiness (12 s) | INFO loading weights")
    assert len(line) == 80 and line.endswith("...")
    assert format_status(SupervisorStatus("ready", "engine", 3, "")) == "engine: ready (3 s)"
