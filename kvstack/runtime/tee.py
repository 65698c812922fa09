"""Copy a child's output into its log file: secrets masked, never blocking the child.

The reader drains the pipe for as long as the child writes to it. A write to the log that fails
(the run dir's filesystem full, an I/O error) drops that line and counts it; reading goes on, so
the pipe never fills and the child never blocks on its own output. Only a failed read (the pipe
gone) ends the reader.

Fatal patterns (ProcessSpec.fatal_patterns) are searched only in the process's own log records at
WARNING level or above and in the last line of a traceback, never in what a logger quotes at INFO
or DEBUG: with --enable-log-requests vLLM logs prompts, stop strings and outputs, which any client
chooses (see ``record_message``).
"""

from __future__ import annotations

import os
import re
import threading
from collections import deque
from typing import IO

from kvstack.redact import redact_text

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# vLLM prefixes every record (and a child process's output) with "(APIServer pid=12) ",
# "(EngineCore_DP0 pid=34) ", ... (vllm/logger.py _FORMAT).
_PROCESS_TAG = re.compile(r"^(?:\([\w.\- ]+ pid=\d+\) )+")
_LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"
_RECORD_FORMATS = (
    # vLLM: "INFO 11-23 21:00:00 [file.py:12] message" (vllm/logger.py, datefmt %m-%d %H:%M:%S).
    re.compile(rf"^(?P<level>{_LEVELS}) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] (?P<msg>.*)$"),
    # LMCache: "[2026-11-22 04:12:33,120] LMCache ERROR: message (file.py:402:module)" (lmcache/logging.py).
    re.compile(
        rf"^\[\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?\] LMCache (?P<level>{_LEVELS}):\s*(?P<msg>.*)$"
    ),
    # SGLang: "[2026-11-22 04:12:33 TP0] message" has no level: treated as INFO below.
    # uvicorn / Python's default: "ERROR:    message", "WARNING:root:message".
    re.compile(rf"^(?P<level>{_LEVELS}):\s*(?P<msg>.*)$"),
    # The last line of a traceback: "OSError: [Errno 98] Address already in use".
    re.compile(r"^(?P<level>[A-Za-z_][\w.]*(?:Error|Exception|Exit)): (?P<msg>.*)$"),
)
_QUIET = {"DEBUG", "INFO"}


def record_message(line: str) -> str | None:
    """The message of ``line`` when it is a log record at WARNING or above (or a traceback's
    exception line) of the process itself; None for INFO/DEBUG records and anything else."""
    body = _PROCESS_TAG.sub("", ANSI.sub("", line).strip())
    for fmt in _RECORD_FORMATS:
        m = fmt.match(body)
        if m is not None:
            return None if m.group("level") in _QUIET else m.group("msg")
    return None


class LogTee(threading.Thread):
    """Copies a child's output into its log file, masking secrets, keeping the last lines."""

    def __init__(
        self, src: IO[bytes], log: IO[bytes], secrets: list[str], fatal_patterns: list[str] | None = None
    ) -> None:
        super().__init__(daemon=True, name="kvstack-tee")
        self.src, self.log, self.secrets = src, log, secrets
        self.tail: deque[str] = deque(maxlen=200)
        self.lock = threading.Lock()
        self.fatal_re = re.compile("|".join(f"(?:{p})" for p in fatal_patterns)) if fatal_patterns else None
        self.fatal: str | None = None  # the first record matching a fatal pattern
        self.dropped = 0  # lines that could not be written to the log
        self.write_error: str | None = None  # why the first of them could not

    def run(self) -> None:
        while True:
            try:
                raw = self.src.readline()
            except (OSError, ValueError):  # the pipe is gone: nothing more to drain
                return
            if not raw:
                return
            line = redact_text(raw.decode("utf-8", "replace"), self.secrets)
            self._write(line.encode("utf-8"))
            shown = ANSI.sub("", line).rstrip("\r\n")
            if shown.strip():
                with self.lock:
                    self.tail.append(shown)
                    if self.fatal is None and self.fatal_re is not None:
                        msg = record_message(shown)
                        if msg is not None and self.fatal_re.search(msg):
                            self.fatal = shown.strip()

    def _write(self, data: bytes) -> None:
        """One line to the log with os.write (no buffer to keep failed bytes); dropped on error."""
        try:
            fd = self.log.fileno()
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        except (OSError, ValueError) as exc:
            with self.lock:
                self.dropped += 1
                if self.write_error is None:
                    self.write_error = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"

    def last(self, n: int) -> list[str]:
        with self.lock:
            return list(self.tail)[-n:]

    def drops(self) -> tuple[int, str | None]:
        """Lines dropped so far and why the first was."""
        with self.lock:
            return self.dropped, self.write_error
