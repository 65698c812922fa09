"""How a supervised process failed: the exit codes beyond the OS's own, and the error that names it."""

from __future__ import annotations

import signal
from pathlib import Path

from kvstack.errors import EngineError

# poll_died's code for a process that is alive but logged a line after which it cannot serve
# (ProcessSpec.fatal_patterns): to everything watching, it is as good as dead.
FATAL_LINE = -(1 << 16)
# poll_died's code for a critical helper or a server that is alive but stopped answering its health
# URL (SIGSTOP, a stuck disk, a deadlock: runtime/liveness.py): the unit restarts, as for a death.
HUNG = -(1 << 17)


def describe_exit(code: int) -> str:
    if code == FATAL_LINE:
        return "logged a line after which it cannot serve"
    if code == HUNG:
        return "stopped answering its health check (hung)"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class ProcessFailed(EngineError):
    """A supervised process died or never became ready; carries its log tail."""

    def __init__(
        self,
        name: str,
        what: str,
        process_exit_code: int | None,
        log_path: Path,
        tail: list[str],
        hint: str,
        cause: str | None = None,
    ) -> None:
        """``cause``: the root cause read from the log (runtime/root_cause.py), quoted in the first
        line, since the tail may hold only a wrapper's word that the cause is above."""
        shown = "\n".join(f"  {line}" for line in tail) or "  (the log is empty)"
        first = f"{name} {what}: {cause}" if cause else f"{name} {what}"
        message = f"{first}\nlast {len(tail)} lines of {log_path}:\n{shown}"
        super().__init__(message, hint=hint)
        self.name = name
        self.process_exit_code = process_exit_code
        self.log_path = log_path
        self.tail = tail
        self.cause = cause
