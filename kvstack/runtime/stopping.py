"""Stopping a unit's process groups the way vLLM's process managers do (vllm/v1/utils.py): SIGTERM,
one shared deadline, then SIGKILL for what is left."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence

from kvstack.runtime.process import Proc
from kvstack.runtime.spawn import group_members


def signal_groups(procs: Sequence[Proc], sig: int) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pgid, sig)
            if sig == signal.SIGTERM:  # a stopped (SIGSTOP) process handles it only once continued
                os.killpg(p.pgid, signal.SIGCONT)


def alive(p: Proc) -> bool:
    p.popen.poll()  # reap the leader so it does not count as a zombie member
    return bool(group_members(p.pgid))


def wait_gone(procs: Sequence[Proc], deadline: float, hurry: Callable[[], bool]) -> None:
    while time.monotonic() < deadline and not hurry():
        if not any(alive(p) for p in procs):
            return
        time.sleep(0.05)


def stop_groups(
    procs: Sequence[Proc], server: Proc | None, timeout_s: float, hurry: Callable[[], bool]
) -> None:
    """The server first (it may flush to its helpers), helpers once it is gone or half the time is
    up, SIGKILL at the deadline (or at once when ``hurry()`` turns true: a second Ctrl-C)."""
    deadline = time.monotonic() + timeout_s
    order = list(reversed(procs))
    server_part = [p for p in order if p is server]
    helper_part = [p for p in order if p is not server]
    signal_groups(server_part, signal.SIGTERM)
    wait_gone(server_part, time.monotonic() + timeout_s / 2, hurry)
    signal_groups(helper_part, signal.SIGTERM)
    wait_gone(order, deadline, hurry)
    left = [p for p in order if alive(p)]
    if left:
        signal_groups(left, signal.SIGKILL)
        wait_gone(left, time.monotonic() + 3.0, lambda: False)
