"""Read a Mooncake-format trace: JSONL, one request a line.

Fields (Mooncake FAST'25 release, as NVIDIA AIPerf's ``mooncake_trace`` dataset reads them):
``timestamp`` (ms from the start), ``input_length``, ``output_length``, ``hash_ids`` (ids of
512-token prefix blocks: equal ids = reusable KV; the last block may be partial), and optionally
``session_id`` and ``delay`` (ms after the session's previous turn; AIPerf's multi-turn rows).
A row without ``timestamp`` but with ``delay`` is placed ``delay`` ms after its session's previous
row (the open-loop approximation of AIPerf's closed-loop turns).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from kvstack.errors import InputError
from kvstack.jsonvalue import JsonObject

# Mooncake's hash_ids cover 512-token blocks (FAST'25 trace release README).
MOONCAKE_BLOCK_TOKENS = 512

_FIX = "each line must be a JSON object with timestamp, input_length, output_length and hash_ids"


@dataclass(frozen=True, slots=True)
class TraceRow:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: list[int]
    session_id: str | None = None
    delay_ms: float | None = None


@dataclass(frozen=True)
class Trace:
    requests: list[TraceRow]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    source: str = ""
    first_line: int = 1  # the file line of requests[0]
    notes: list[str] = field(default_factory=list)

    @property
    def prompt_tokens(self) -> int:
        return sum(r.input_length for r in self.requests)

    @property
    def block_refs(self) -> int:
        return sum(len(r.hash_ids) for r in self.requests)

    @property
    def duration_s(self) -> float:
        if not self.requests:
            return 0.0
        stamps = [r.timestamp_ms for r in self.requests]
        return (max(stamps) - min(stamps)) / 1000.0


def _bad(where: str, what: str) -> InputError:
    return InputError(f"{where}: {what}", hint=_FIX)


def _int(row: JsonObject, key: str, where: str, *, minimum: int) -> int:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise _bad(where, f"{key} must be an integer, not {value!r}")
    if value < minimum:
        raise _bad(where, f"{key} must be at least {minimum}, not {value}")
    return int(value)


def _number(value: object, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(where, f"{key} must be a number of milliseconds, not {value!r}")
    if value < 0:
        raise _bad(where, f"{key} must not be negative, not {value}")
    return float(value)


def parse_row(row: object, where: str, last_in_session: dict[str, float]) -> TraceRow:
    """One decoded JSON line -> TraceRow; ``where`` (file:line) names it in errors."""
    if not isinstance(row, dict):
        raise _bad(where, f"expected a JSON object, not {type(row).__name__}")
    if "text_input" in row and "hash_ids" not in row:
        raise _bad(where, "text_input rows are not supported (kvstack sizes from hash_ids)")
    ids = row.get("hash_ids")
    if not isinstance(ids, list) or not ids:
        raise _bad(where, f"hash_ids must be a non-empty list of block ids, not {ids!r}")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise _bad(where, "hash_ids must hold non-negative integers")
    input_length = _int(row, "input_length", where, minimum=1)
    output_length = _int(row, "output_length", where, minimum=0) if "output_length" in row else 0
    session = row.get("session_id")
    if session is not None and not isinstance(session, str | int):
        raise _bad(where, f"session_id must be a string, not {session!r}")
    session_id = None if session is None else str(session)
    delay = _number(row["delay"], "delay", where) if row.get("delay") is not None else None
    if row.get("timestamp") is not None:
        timestamp = _number(row["timestamp"], "timestamp", where)
    elif delay is not None:
        timestamp = last_in_session.get(session_id or "", 0.0) + delay
    else:
        raise _bad(where, "timestamp is missing (and no delay to place the request)")
    if session_id is not None:
        last_in_session[session_id] = timestamp
    return TraceRow(timestamp, input_length, output_length, ids, session_id, delay)


def read_trace(path: str | Path, *, start: int = 0, max_requests: int | None = None) -> Trace:
    """Requests ``start`` .. ``start + max_requests`` (0-based, blank lines skipped) of a trace file.

    Bad input (missing file, a line that is not a request, no requests) raises InputError naming
    the file and line.
    """
    p = Path(path)
    if start < 0:
        raise InputError(f"--start must be 0 or more, not {start}", hint="e.g. --start 0")
    if max_requests is not None and max_requests < 1:
        raise InputError(
            f"--max-requests must be at least 1, not {max_requests}", hint="e.g. --max-requests 300"
        )
    try:
        handle = p.open("r", encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(f"trace {p} does not exist", hint="pass a Mooncake-format JSONL file") from exc
    except IsADirectoryError as exc:
        raise InputError(f"trace {p} is a directory", hint="pass a Mooncake-format JSONL file") from exc
    except OSError as exc:
        raise InputError(f"trace {p} cannot be read ({exc.strerror})", hint="check its permissions") from exc
    requests: list[TraceRow] = []
    sessions: dict[str, float] = {}
    index, first_line = 0, 0
    with handle:
        try:
            for lineno, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                where = f"{p}:{lineno}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise _bad(where, f"not JSON ({exc.msg})") from exc
                # Every row is parsed (a session's delays chain through the rows before the slice).
                request = parse_row(row, where, sessions)
                if index >= start:
                    if not requests:
                        first_line = lineno
                    requests.append(request)
                    if max_requests is not None and len(requests) >= max_requests:
                        break
                index += 1
        except UnicodeDecodeError as exc:
            raise InputError(f"trace {p} is not UTF-8 text", hint=_FIX) from exc
    if not requests:
        if start:
            raise InputError(
                f"trace {p} has no requests after its first {start}", hint="use a smaller --start"
            )
        raise InputError(f"trace {p} has no requests", hint=_FIX)
    return Trace(requests=requests, source=str(p), first_line=first_line)
