"""Kill kvstack's process groups when kvstack dies, even by SIGKILL.

``python -m kvstack.runtime.watchdog PARENT_PID [PGID...]``, started in its own session.
The parent keeps the write end of our stdin; it sends ``+PGID`` (or a bare PGID) to add a
group and ``-PGID`` once it has stopped that group itself. EOF on stdin (every writer gone) or
a new parent PID (we were re-parented) means kvstack is dead: the remaining groups get SIGTERM,
a short grace, then SIGKILL. PR_SET_PDEATHSIG only reaches a direct child; the engine's
workers are grandchildren, hence this process. Standard library only, so it starts fast.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

GRACE_S = 3.0


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_groups(pgids: set[int], grace_s: float = GRACE_S) -> None:
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(group_alive(p) for p in pgids):
        time.sleep(0.05)
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def _apply(line: str, pgids: set[int]) -> None:
    line = line.strip()
    if not line:
        return
    try:
        value = int(line)
    except ValueError:
        return
    if line.startswith("-"):
        pgids.discard(-value)
    elif value > 1:  # never signal group 0/1: that would be ourselves or init
        pgids.add(value)


def watch(parent_pid: int, pgids: set[int], grace_s: float = GRACE_S) -> None:
    """Read the parent's lines until it is gone, then kill what it left. A parent gone is acted on
    only once the pipe holds nothing more: a kvstack killed right after it told us of a group may die
    before this interpreter is up, and that group must still be killed."""
    fd = sys.stdin.fileno()
    buf = b""
    while True:
        orphaned = os.getppid() != parent_pid
        ready, _, _ = select.select([fd], [], [], 0.0 if orphaned else 0.25)
        chunk = os.read(fd, 4096) if ready else b""
        if chunk:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                _apply(raw.decode("ascii", "replace"), pgids)
        elif ready or orphaned:  # EOF, or a parent gone with nothing left to read
            break
    if pgids:
        kill_groups(pgids, grace_s)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -m kvstack.runtime.watchdog PARENT_PID [PGID...]\n")
        return 2
    # A Ctrl-C or hang-up aimed at kvstack must not kill the watchdog before kvstack cleans up.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    parent = int(argv[0])
    pgids: set[int] = set()
    for arg in argv[1:]:
        _apply(arg, pgids)
    watch(parent, pgids)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
