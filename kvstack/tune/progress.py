"""tune's live progress bar (rich, on stderr): the candidate running, its phase, its replay's
requests, and the time left of the budget."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.text import Text

from kvstack.tune.budget import fmt_duration


class TimeLeftColumn(ProgressColumn):
    """The budget's time left, counted down at every refresh."""

    def render(self, task: Task) -> Text:
        deadline = task.fields.get("deadline")
        if deadline is None:
            return Text("")
        return Text(f"{fmt_duration(max(0.0, float(deadline) - time.monotonic()))} left of the budget")


class ProofView:
    """One bar per measured candidate; a no-op when disabled (not a terminal, or --json)."""

    def __init__(self, enabled: bool, console: Console | None = None) -> None:
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._label = ""
        if enabled:
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeLeftColumn(),
                console=console or Console(stderr=True),
                transient=False,
            )

    def __enter__(self) -> ProofView:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

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
