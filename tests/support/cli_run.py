"""Run the real ``kvstack`` CLI in a subprocess and see what it left behind.

Every run gets a marker in its environment; any process still carrying the marker after the
CLI exited was started by it and survived (children reparented to init included).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.support.fs_guard import USER_SPEC_CACHE, USER_VLLM_CACHE

MARK_VAR = "KVSTACK_TEST_RUN_MARK"


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str
    survivors: list[str]  # "name (pid N)" of processes the run started that still live

    @property
    def err_lines(self) -> list[str]:
        return self.stderr.strip().splitlines()


def isolated_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment with HOME and XDG dirs inside ``home`` (defaults land there)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVSTACK_", "XDG_"))}
    env.update(
        # The caches that only save time stay the user's (tests/support/fs_guard.py says why).
        VLLM_CACHE_ROOT=USER_VLLM_CACHE,
        KVSTACK_ENGINE_SPEC_CACHE=USER_SPEC_CACHE,
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        COLUMNS="200",  # rich wraps at the terminal width: one message, one line
    )
    env.update(extra or {})
    return env


def _marked(mark: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(MARK_VAR) == mark:
                found.append(f"{proc.info['name']} (pid {proc.info['pid']})")
    return found


# Only a hang is cut off: a plan or dry run that asks vLLM for its spec (an import of vLLM, ~8 s of
# CPU) took over 60 s on a fresh 2-core machine with the other test workers busy.
CLI_TIMEOUT_S = 300.0


def run_cli(argv: list[str], cwd: Path, env: Mapping[str, str], timeout: float = CLI_TIMEOUT_S) -> CliResult:
    """Safe to call from several threads at once: each run is told apart by its own marker."""
    mark = uuid.uuid4().hex
    proc = subprocess.run(
        [sys.executable, "-m", "kvstack", *argv],
        cwd=cwd,
        env={**env, MARK_VAR: mark},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr, _marked(mark))


def tree_state(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of the content (files), 'dir' or 'link', for everything under ``root``."""
    state: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in dirnames:
            p = base / name
            state[str(p.relative_to(root))] = "link" if p.is_symlink() else "dir"
        for name in filenames:
            p = base / name
            if p.is_symlink() or not p.is_file():
                state[str(p.relative_to(root))] = "other"
                continue
            state[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return state


def run_kvstack(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = CLI_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """``python -m kvstack ARGS`` as a user runs it (KVSTACK_DEBUG unset: errors are one line)."""
    full_env = {k: v for k, v in os.environ.items() if k != "KVSTACK_DEBUG"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "kvstack", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    """Exit 2, an ``error:`` line naming the problem, a ``hint:`` line, no traceback, nothing on stdout."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and needle in lines[0], lines
    assert len(lines) <= 2 and (len(lines) == 1 or lines[1].startswith("hint: ")), lines
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def modules_loaded_by(argv: list[str], modules: Sequence[str]) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after ``kvstack ARGV`` ran in it (in-process,
    through kvstack.cli.app.run), which must exit 0."""
    code = (
        "import sys\n"
        "from kvstack.cli.app import run\n"
        f"rc = run({argv!r})\n"
        f"loaded = [m for m in {tuple(modules)!r} if m in sys.modules]\n"
        "sys.stderr.write('LOADED=' + ','.join(loaded) + '\\n')\n"
        "sys.exit(rc)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("LOADED=")]
    return [m for m in line.removeprefix("LOADED=").split(",") if m]
