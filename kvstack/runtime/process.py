"""One supervised process: started in its own session with its output teed to its log, and the
watchdog that kills every group kvstack started if kvstack itself dies."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kvstack.errors import EngineError, MissingProgramError
from kvstack.fsutil import atomic_write
from kvstack.redact import redact_argv
from kvstack.rundir import log_name
from kvstack.runtime.spawn import child_env, child_setup, load_libc, remove_start_files, watchdog_env
from kvstack.runtime.specs import ProcessSpec
from kvstack.runtime.tee import LogTee


@dataclass
class Proc:
    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    tee: LogTee
    started: float

    @property
    def pgid(self) -> int:
        return self.popen.pid  # start_new_session: the child leads its own group

    def close(self) -> None:
        """After its group is gone: reap it, drain the last of its output, close its log."""
        remove_start_files(self.spec)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=1.0)
        self.tee.join(timeout=2.0)
        with contextlib.suppress(OSError):
            self.log.close()


class WatchdogLink:
    """The watchdog process (``kvstack.runtime.watchdog``), told each group as it starts (``+pgid``)
    and ends (``-pgid``): it kills what is left if kvstack dies without stopping them."""

    def __init__(self) -> None:
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.popen is not None:
            return
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "kvstack.runtime.watchdog", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd="/",
            env=watchdog_env(),
        )

    def tell(self, line: str) -> None:
        if self.popen is not None and self.popen.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self.popen.stdin.write(f"{line}\n".encode())
                self.popen.stdin.flush()

    def close(self) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert self.popen.stdin is not None
            self.popen.stdin.close()  # EOF with no groups left: it exits quietly
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5.0)
        self.popen = None


def launch(
    pspec: ProcessSpec,
    run_dir: Path,
    secrets: list[str],
    base_env: Mapping[str, str] | None,
    watchdog: WatchdogLink,
) -> Proc:
    """Start ``pspec`` in its own session, its output teed (secrets masked) into RUN_DIR/<name>.log."""
    log_path = run_dir / log_name(pspec.name)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    log = os.fdopen(fd, "ab")
    shown = " ".join(redact_argv(pspec.argv, secrets))
    with contextlib.suppress(OSError):  # a full run dir must not stop a (re)start: see LogTee
        log.write(f"# kvstack: starting {pspec.name}: {shown}\n".encode())
        log.flush()
    for f in pspec.start_files:
        atomic_write(Path(f.path), f.content, mode=f.mode)
    try:
        popen = subprocess.Popen(
            pspec.argv,
            env=child_env(pspec, base_env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=child_setup(os.getpid(), load_libc()),
        )
    except FileNotFoundError as exc:
        log.close()
        remove_start_files(pspec)
        raise MissingProgramError(
            f"cannot start {pspec.name}: {pspec.argv[0]} not found",
            hint="install the engine in the Python environment kvstack uses (see kvstack doctor)",
        ) from exc
    except OSError as exc:
        log.close()
        remove_start_files(pspec)
        raise EngineError(f"cannot start {pspec.name}: {exc}", hint=f"check {pspec.argv[0]}") from exc
    watchdog.tell(f"+{popen.pid}")
    assert popen.stdout is not None
    tee = LogTee(popen.stdout, log, secrets, pspec.fatal_patterns)
    tee.start()
    return Proc(pspec, popen, log_path, log, tee, time.monotonic())
