"""The scrapes behind `kvstack top`: one window (two scrapes an interval apart) or a window every
interval; rendering/top_live.py draws them and leaves on q or Ctrl-C."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from kvstack.top.snapshot import TopSnapshot
from kvstack.top.sources import Scrape, collect
from kvstack.top.targets import Targets
from kvstack.top.window import build


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


def windows(
    targets: Targets,
    interval_s: float,
    api_key: str | None,
    wait: Callable[[float], bool],
) -> Iterator[TopSnapshot]:
    """A window every ``interval_s`` (``wait(seconds) -> stop?`` paces them and says when to stop):
    each built from the scrape before it and its own."""
    before: Scrape = collect(targets, api_key)
    while not wait(interval_s):
        after = collect(targets, api_key)
        yield build(targets, before, after)
        before = after
