"""`kvstack top`'s live view: a window redrawn in place every interval until q or Ctrl-C (the terminal
read a key at a time), or printed in turn where standard output is not a terminal."""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from kvstack.rendering.console import out_console
from kvstack.rendering.top import render
from kvstack.top.live import windows
from kvstack.top.targets import Targets

QUIT_KEYS = frozenset("qQ")


@contextlib.contextmanager
def _keys(stream: TextIO) -> Iterator[Callable[[float], bool]]:
    """``wait(timeout) -> quit?``: reads single keys from a terminal; elsewhere it only waits."""
    try:
        fd = stream.fileno()
        interactive = os.isatty(fd)
    except (AttributeError, OSError, ValueError):
        interactive = False
    if not interactive:

        def sleep(timeout: float) -> bool:
            time.sleep(timeout)
            return False

        yield sleep
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def wait(timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if ready and os.read(fd, 1).decode(errors="replace") in QUIT_KEYS:
                return True
        return False

    try:
        yield wait
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def run_live(
    targets: Targets,
    interval_s: float,
    api_key: str | None = None,
    console: Console | None = None,
    stdin: TextIO | None = None,
    max_frames: int | None = None,
) -> int:
    """Until q or Ctrl-C (or ``max_frames`` windows drawn, for tests); returns 0."""
    con = console or out_console(None, soft_wrap=False, highlight=True)
    frames = 0
    try:
        with (
            _keys(stdin or sys.stdin) as wait,
            Live(
                Text(f"kvstack top: first window in {interval_s:g} s ...  (q or Ctrl-C to leave)"),
                console=con,
                screen=con.is_terminal,
                auto_refresh=False,
                transient=False,
            ) as live,
        ):
            for snap in windows(targets, interval_s, api_key, wait):
                live.update(render(snap), refresh=True)
                frames += 1
                if max_frames is not None and frames >= max_frames:
                    break
    except KeyboardInterrupt:
        pass
    return 0
