"""The watchdog process: kills the groups it was told about when its parent dies, no others."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from kvstack.runtime.watchdog import _apply, group_alive, main

ROOT = Path(__file__).resolve().parents[3]

# A stand-in for kvstack: starts the watchdog and two process groups, tells the watchdog to
# guard the first and (after adding it) to forget the second, reports the pids, then dies.
PARENT = """
import json, os, subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
guarded = subprocess.Popen(sleep, start_new_session=True)
released = subprocess.Popen(sleep, start_new_session=True)
env = dict(os.environ, PYTHONPATH={root!r})
dog = subprocess.Popen([sys.executable, "-m", "kvstack.runtime.watchdog", str(os.getpid())],
                       stdin=subprocess.PIPE, start_new_session=True, env=env)
dog.stdin.write(f"+{{guarded.pid}}\\n{{released.pid}}\\n-{{released.pid}}\\n".encode())
dog.stdin.flush()
print(json.dumps([guarded.pid, released.pid, dog.pid]), flush=True)
time.sleep(float(sys.argv[1]))
os._exit(0)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("dies_after_s", [1.0, 0.0], ids=["after-it-read", "before-it-read"])
def test_parent_death_kills_guarded_groups_only(tmp_path: Path, dies_after_s: float) -> None:
    """``before-it-read``: kvstack dies as soon as it has told the watchdog, before the watchdog's
    interpreter is up; what is waiting in the pipe still counts (a loaded CI run's SIGKILL test once
    left the engine's grandchildren alive that way)."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(PARENT.format(root=str(ROOT))))
    argv = [sys.executable, str(script), str(dies_after_s)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    guarded, released, dog = json.loads(proc.stdout.readline())
    try:
        proc.wait(timeout=10)
        deadline = time.monotonic() + 8
        while _alive(guarded) or _alive(dog):
            assert time.monotonic() < deadline, "the watchdog did not clean up after its parent"
            time.sleep(0.1)
        assert _alive(released)
    finally:
        for pid in (guarded, released):
            if _alive(pid):
                os.killpg(pid, signal.SIGKILL)


def test_protocol_lines() -> None:
    groups: set[int] = set()
    for line in ("+123", "456", "", "junk", "1", "0", "-123", "  789  "):
        _apply(line, groups)
    assert groups == {456, 789}


def test_group_alive_of_a_finished_group() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    assert not group_alive(proc.pid)


def test_usage_without_arguments() -> None:
    assert main([]) == 2
