"""The live progress bar (rich, on stderr) that bench's and tune's terminal views are built on
(kvstack/rendering/progress.py, kvstack/rendering/tune_progress.py).

It belongs in kvstack/rendering/progress.py: it stays here only while tune_progress.py imports it
from here; bench itself prints nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Self

from rich.console import Console
from rich.progress import Progress, ProgressColumn


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
