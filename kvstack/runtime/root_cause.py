"""The root cause of a process that died, read from its log: the first exception a traceback ends
with, or a command-line parser's refusal, not the last frames of the log.

vLLM's engine core dies in a process of its own: its log has that process's traceback ending in
the real error (an ``AssertionError``, a ``ValueError``), and after it the API server's own
traceback ending in "RuntimeError: Engine core initialization failed. See root cause above". A log
tail shows the second; a user needs the first.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvstack.redact import redact_text

# vLLM prefixes each line with the process it came from, "(EngineCore pid=8731) ", and its logger
# each line of a message (a traceback's too) with "ERROR 11-28 01:05:18 [core.py:1011] ".
_PREFIX = re.compile(
    r"^(?:\([\w:-]+ pid=\d+\)\s*)?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\d-]+ [\d:]+ \[[^\]]*\]\s?)?"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The line a Python traceback ends with: "ValueError: ...", "torch.OutOfMemoryError: ...".
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::\s*(.*))?$")
# argparse's refusal: "api_server.py: error: unrecognized arguments: --no-such-flag".
_USAGE = re.compile(r"^\S+: error: .+")
# What only points elsewhere: the wrapper's own word that the cause is above.
_POINTERS = ("See root cause above", "Engine core initialization failed")
MAX_CHARS = 300


def root_cause_in(lines: list[str]) -> str | None:
    """The first root-cause line among ``lines`` (a log's), cleaned of prefixes and colour."""
    in_traceback = False
    for raw in lines:
        line = _PREFIX.sub("", _ANSI.sub("", raw)).strip()
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
            continue
        if _USAGE.match(line) and not in_traceback:
            return _short(line)
        if not in_traceback or not _EXCEPTION.match(line):
            continue
        in_traceback = False
        if not any(p in line for p in _POINTERS):
            return _short(line)
    return None


def root_cause(log_path: Path, secrets: list[str] | None = None, max_bytes: int = 4 << 20) -> str | None:
    """The root cause in the last ``max_bytes`` of ``log_path`` (None: none found, or no log)."""
    try:
        size = log_path.stat().st_size
        with log_path.open("rb") as fh:
            fh.seek(max(0, size - max_bytes))
            text = fh.read().decode(errors="replace")
    except OSError:
        return None
    found = root_cause_in(text.splitlines())
    return redact_text(found, secrets or []) if found is not None else None


def _short(line: str) -> str:
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 3] + "..."
