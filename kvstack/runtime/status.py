"""What a supervisor is doing, as a value and as one line for a live display."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SupervisorStatus:
    phase: str  # "starting", "waiting for /health", "ready", "stopping", "stopped", "failed"
    name: str  # the process the phase is about
    elapsed_s: float
    last_line: str
    dropped_lines: int = 0  # output lines that could not be written to the logs (run dir full)


StatusCallback = Callable[[SupervisorStatus], None]


def format_status(status: SupervisorStatus, width: int = 100) -> str:
    """One line for a live display: ``engine: waiting for readiness (12 s) | last log line``."""
    head = f"{status.name}: {status.phase} ({status.elapsed_s:.0f} s)"
    if status.dropped_lines:
        head += f" [{status.dropped_lines} log lines dropped]"
    if not status.last_line:
        return head
    room = max(width - len(head) - 3, 10)
    line = status.last_line if len(status.last_line) <= room else status.last_line[: room - 3] + "..."
    return f"{head} | {line}"
