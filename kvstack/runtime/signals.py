"""SIGINT/SIGTERM while kvstack runs children: stop them all, then raise Interrupted.

The first signal stops everything (``stop``) and raises ``Interrupted`` in the main thread; a
second one while stopping only asks the stop to stop waiting politely (``hurry``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from kvstack.errors import Interrupted

HANDLED = (signal.SIGINT, signal.SIGTERM)


class StopOnSignal:
    def __init__(
        self, stop: Callable[[], None], hurry: Callable[[], None], stopping: Callable[[], bool]
    ) -> None:
        self._stop = stop
        self._hurry = hurry
        self._stopping = stopping
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        """Only the main thread can own signal handlers; elsewhere this does nothing."""
        if self._old or threading.current_thread() is not threading.main_thread():
            return
        for sig in HANDLED:
            self._old[sig] = signal.signal(sig, self._on_signal)

    def restore(self) -> None:
        for sig, old in self._old.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, old)
        self._old.clear()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._stopping():
            self._hurry()
            return
        self._stop()
        raise Interrupted(f"interrupted by {signal.Signals(signum).name}; stopped everything kvstack started")
