"""Counting the engines a test run starts: every vLLM API server process (``python -m
vllm.entrypoints.openai.api_server`` or ``vllm serve``) below this process that appears while a test
runs is one start, attributed to that test (tests/e2e/conftest.py; scripts/bench-engine-starts
prints the counts). Engines of other runs on the machine are not this run's.

A thread samples the process table every ``interval_s``; an engine lives for seconds at the least
(even a start that fails parses its arguments first), so no start is missed at 0.25 s.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path

import psutil

ENGINE_MARKERS = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main")


def is_engine(cmdline: list[str]) -> bool:
    """An engine's API server by its command line (its forked children share it until they rename
    themselves: ``EngineStarts`` counts a process only where its parent is no engine)."""
    if any(marker in cmdline for marker in ENGINE_MARKERS):
        return True
    return len(cmdline) >= 2 and cmdline[0].endswith("vllm") and cmdline[1] == "serve"


class EngineStarts:
    """Engine processes seen per test node id (a process counts once, for the test it appeared in)."""

    def __init__(self, interval_s: float = 0.25, ancestor: int | None = None) -> None:
        self.interval_s = interval_s
        self.ancestor = os.getpid() if ancestor is None else ancestor
        self.by_test: Counter[str] = Counter()
        self._seen: set[tuple[int, float]] = set()
        self._engines: set[int] = set()
        self._current = "(collection)"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engine-starts", daemon=True)
        self._thread.start()

    def now(self, nodeid: str) -> None:
        """From now on, a new engine is ``nodeid``'s (its module-scoped fixtures run in its setup).
        The first call starts the sampling thread (a conftest below the root is loaded after the
        session started: its pytest_sessionstart is never called)."""
        if self._thread is None:
            self.start()
        self.sample()
        with self._lock:
            self._current = nodeid

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.sample()

    def sample(self) -> None:
        for proc in psutil.process_iter(["pid", "ppid", "create_time", "cmdline"]):
            try:
                key = (proc.info["pid"], proc.info["create_time"])
                if key in self._seen or not is_engine(proc.info["cmdline"] or []):
                    continue
                if self.ancestor not in {p.pid for p in proc.parents()}:
                    continue
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            with self._lock:
                self._seen.add(key)
                self._engines.add(proc.info["pid"])
                if proc.info["ppid"] not in self._engines:  # a fork of an engine is that engine
                    self.by_test[self._current] += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def by_module(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for nodeid, n in self.by_test.items():
            counts[nodeid.split("::", 1)[0]] += n
        return dict(sorted(counts.items()))

    def total(self) -> int:
        return sum(self.by_test.values())

    def write(self, path: Path) -> None:
        doc = {"total": self.total(), "by_module": self.by_module(), "by_test": dict(self.by_test)}
        path.write_text(json.dumps(doc, indent=1) + "\n")
