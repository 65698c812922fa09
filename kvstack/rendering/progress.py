"""The live progress bars on standard error (rich): LiveBar, which bench's and tune's views are built
on, and bench's, one bar per layout fed by the runner's progress callback; a no-op when disabled
(not a terminal, or --json)."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from kvstack.bench.runner import Progress as RunProgress


class LiveBar:
    """A rich progress bar on stderr (or ``console``), started and stopped as a context manager; a
    no-op when disabled (not a terminal, or --json). bench's and tune's views are these."""

    def __init__(
        self, enabled: bool, columns: Sequence[ProgressColumn], console: Console | None = None
    ) -> None:
        self._bar: Progress | None = None
        if enabled:
            self._bar = Progress(*columns, console=console or Console(stderr=True), transient=False)

    def __enter__(self) -> Self:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()


class ProgressView(LiveBar):
    """A rich progress bar per layout with live ok/error/in-flight counts; a no-op when disabled."""

    def __init__(self, enabled: bool, console: Console | None = None) -> None:
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ok {task.fields[ok]}  errors {task.fields[errors]}  in flight {task.fields[busy]}"),
            TimeElapsedColumn(),
        )
        super().__init__(enabled, columns, console)
        self._tasks: dict[str, TaskID] = {}

    def update(self, p: RunProgress) -> None:
        if self._bar is None:
            return
        task = self._tasks.get(p.layout)
        if task is None:
            task = self._bar.add_task(p.layout, total=p.total, ok=0, errors=0, busy=0)
            self._tasks[p.layout] = task
        self._bar.update(
            task,
            completed=p.done,
            description=f"{p.layout} {p.round_label}",
            ok=p.ok,
            errors=p.errors,
            busy=p.in_flight,
        )
