"""This user's kvstack measuring a server holds that server's canary off while it measures.

`validate`, `bench` and `tune` read a server's counters around their own requests; a canary check
in the same window (kvstack serve's, or `kvstack canary`'s) would move them. So each measurement
writes a hold, ``<state>/kvstack/quiet/<server key>-<pid>`` (0600, in the user's 0700 state dir:
the same key as the control token's index, clients/control.py), for as long as it runs; a canary
sends nothing while a hold on its server names a live process, and a hold whose process died is
ignored (and removed). Only this user's processes can write there, and only for servers this user
reaches: nothing about another user's runs changes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from kvstack.clients.control import server_key, state_dir
from kvstack.errors import PathError
from kvstack.fsutil import atomic_write, ensure_private_dir

__all__ = ["BUSY", "busy", "hold", "holder", "server_key"]


def _dir() -> Path:
    return state_dir() / "quiet"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


BUSY = ".busy"  # a canary's mark while its requests are in flight: <key>.busy-<pid>
SETTLE_WAIT_S = 30.0


@contextlib.contextmanager
def hold(base_url: str) -> Iterator[None]:
    """The canary of ``base_url`` sends nothing while the block runs; the block starts once the
    canary's requests in flight (if any) have ended."""
    with _marked(f"{server_key(base_url)}-{os.getpid()}"):
        deadline = time.monotonic() + SETTLE_WAIT_S
        while _live(server_key(base_url) + BUSY + "-") is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        yield


@contextlib.contextmanager
def busy(base_url: str) -> Iterator[bool]:
    """The canary's side: marked busy for the block; yields False when a measurement holds the
    server (the canary then sends nothing). Either side writes its mark before it reads the other's,
    so at least one of them sees the other."""
    with _marked(f"{server_key(base_url)}{BUSY}-{os.getpid()}"):
        yield holder(base_url) is None


@contextlib.contextmanager
def _marked(name: str) -> Iterator[None]:
    made = [d for d in (_dir(), *_dir().parents) if not d.exists()]  # removed again on exit when empty
    path: Path | None = None
    try:
        path = ensure_private_dir(_dir()) / name
        atomic_write(path, f"{os.getpid()}\n", mode=0o600)
    except (OSError, PathError):
        path = None  # no state dir: the measurement goes on, unheld
    try:
        yield
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
        for directory in made:  # deepest first: a measurement leaves no trace behind
            with contextlib.suppress(OSError):
                directory.rmdir()


def holder(base_url: str) -> int | None:
    """The pid of a live process of this user measuring ``base_url``, or None."""
    return _live(server_key(base_url) + "-")


def _live(prefix: str) -> int | None:
    """The pid of a live process with a mark starting ``prefix``; dead ones' marks are removed."""
    try:
        names = [p.name for p in _dir().iterdir() if p.name.startswith(prefix)]
    except OSError:
        return None
    for name in names:
        pid_text = name.removeprefix(prefix)
        if not pid_text.isdigit():
            continue
        pid = int(pid_text)
        if _alive(pid):
            return pid
        else:
            with contextlib.suppress(OSError):
                (_dir() / name).unlink()
    return None
