"""tune's live progress bar (rich, on stderr): the candidate running, its phase, its replay's
requests, and the time left of the budget. tune reports through its View protocol
(tune/progress.py); this is the terminal's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, Task, TaskID, TextColumn
from rich.text import Text

from kvstack.rendering.progress import LiveBar
from kvstack.tune.budget import fmt_duration

if TYPE_CHECKING:
    from kvstack.serving.lifecycle import ServeEvents
    from kvstack.tune.progress import View


class TimeLeftColumn(ProgressColumn):
    """The budget's time left, counted down at every refresh."""

    def render(self, task: Task) -> Text:
        deadline = task.fields.get("deadline")
        if deadline is None:
            return Text("")
        return Text(f"{fmt_duration(max(0.0, float(deadline) - time.monotonic()))} left of the budget")


class ProofView(LiveBar):
    """One bar per measured candidate; a no-op when disabled (not a terminal, or --json)."""

    def __init__(self, enabled: bool, console: Console | None = None) -> None:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeLeftColumn())
        super().__init__(enabled, columns, console)
        self._task: TaskID | None = None
        self._label = ""

    def begin(self, label: str, index: int, total: int, requests: int, deadline: float) -> None:
        if self._bar is None:
            return
        self._label = f"[{index}/{total}] {label}"
        self._task = self._bar.add_task(self._label, total=requests, deadline=deadline)

    def phase(self, text: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=f"{self._label}: {text}")

    def row(self, done: int) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done)

    def end(self) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=f"{self._label}: done")
            self._task = None


@contextmanager
def proof_progress(measuring: bool, json_mode: bool) -> Iterator[tuple[View | None, ServeEvents | None]]:
    """What a tune reports while it measures: on a terminal (not --json) the live bar; else each
    engine start's events on stderr (serve's lines). Nothing when it only ranks."""
    import sys

    from kvstack.rendering.serve import serve_events

    live = measuring and not json_mode and sys.stderr.isatty()
    events = serve_events(json_mode=True) if measuring and not live else None
    with ProofView(enabled=live) as view:
        yield (view if live else None), events
