"""How the supervisor starts a child: the environment it gets, the parent-death signal, and who
is left in a process group (kvstack/runtime/supervisor.py uses these)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil

from kvstack.runtime.specs import ProcessSpec
from kvstack.runtime.watchdog import group_alive

KVSTACK_SECRET_VARS = ("KVSTACK_API_KEY", "KVSTACK_REMOTE_URL")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_LIBC: Any = None


def load_libc() -> Any:
    # Loaded in the parent: a child between fork and exec must not dlopen.
    global _LIBC
    if _LIBC is None and sys.platform.startswith("linux"):
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def child_setup(parent_pid: int, libc: Any) -> Callable[[], None]:
    def setup() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return setup


def remove_start_files(pspec: ProcessSpec) -> None:
    for f in pspec.start_files:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f.path)


def child_env(spec: ProcessSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for key in KVSTACK_SECRET_VARS:  # kvstack's own: the children get what they need their way
        env.pop(key, None)
    for key in list(env):
        if key in spec.unset_env or any(key.startswith(p) for p in spec.unset_env_prefixes):
            del env[key]
    env.setdefault("PYTHONUNBUFFERED", "1")  # log lines as they happen, not at exit
    env.update(spec.env)
    return env


def watchdog_env() -> dict[str, str]:
    # The watchdog must import kvstack even when kvstack runs from a source tree.
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a group; zombies wait for a reaper, they run nothing."""
    if not group_alive(pgid):
        return []
    out = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return out
