"""The refresh loop: scrape every interval, draw the window, leave on q or Ctrl-C (exit 0)."""

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

from kvstack.top.snapshot import TopSnapshot
from kvstack.top.sources import Scrape, collect
from kvstack.top.targets import Targets
from kvstack.top.view import render
from kvstack.top.window import build

QUIT_KEYS = frozenset("qQ")


def snapshot_once(
    targets: Targets,
    interval_s: float,
    api_key: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> TopSnapshot:
    """Two scrapes ``interval_s`` apart, so that the window's rates exist."""
    first = collect(targets, api_key)
    sleep(interval_s)
    return build(targets, first, collect(targets, api_key))


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
    con = console or Console()
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
            before: Scrape = collect(targets, api_key)
            while max_frames is None or frames < max_frames:
                if wait(interval_s):
                    break
                after = collect(targets, api_key)
                live.update(render(build(targets, before, after)), refresh=True)
                before = after
                frames += 1
    except KeyboardInterrupt:
        pass
    return 0
