"""Notice a process that is alive but no longer answers: stopped (SIGSTOP), stuck on a disk, deadlocked.

A dead process is seen by ``poll``; a hung one is not: an engine whose cache server hangs hangs
every request, and so does an engine that hangs itself. So the health URL of each critical helper
and of the server (the engine, or the router) is probed from a daemon thread every ``every_s``
with a ``timeout_s`` timeout; ``misses`` failures in a row make it hung, which the supervisor then
handles like a critical helper's death (kvstack/runtime/supervisor.py: the unit restarts). With the
defaults a hang is noticed within about 8 to 11 seconds.
"""

from __future__ import annotations

import threading
import time

import httpx

# Three misses of 2.5 s each: a helper slowed down by a busy machine (2 cores, the engine computing)
# is not a hang; one that does not answer for about 8 s is.
EVERY_S = 1.0
TIMEOUT_S = 2.5
MISSES = 3


class HangWatch:
    def __init__(self, every_s: float = EVERY_S, timeout_s: float = TIMEOUT_S, misses: int = MISSES) -> None:
        self.every_s, self.timeout_s, self.misses = every_s, timeout_s, misses
        self._urls: dict[str, str] = {}
        self._failed: dict[str, int] = {}
        self._first_miss: dict[str, float] = {}
        self._hung: dict[str, float] = {}  # name -> seconds it had not answered when declared hung
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, name: str, url: str) -> None:
        """Probe ``url`` for ``name`` from now on (it answered a moment ago)."""
        with self._lock:
            self._urls[name] = url
            self._failed.pop(name, None)
            self._first_miss.pop(name, None)
            self._hung.pop(name, None)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="kvstack-liveness")
            self._thread.start()

    def forget(self) -> None:
        """Stop probing everything (a unit stopping or restarting)."""
        with self._lock:
            self._urls.clear()
            self._failed.clear()
            self._first_miss.clear()
            self._hung.clear()

    def hung(self, name: str) -> float | None:
        """Seconds ``name`` had not answered when it was found hung, else None."""
        with self._lock:
            return self._hung.get(name)

    def answers_now(self, name: str, timeout_s: float = TIMEOUT_S) -> bool:
        """One probe of ``name`` right now; a process no longer answering is marked hung."""
        url = self.url(name)
        if url is None:
            return True
        with httpx.Client(trust_env=False) as client:
            if self._probe(client, url, timeout_s):
                return True
        with self._lock:
            self._hung.setdefault(name, timeout_s)
        return False

    def url(self, name: str) -> str | None:
        with self._lock:
            return self._urls.get(name)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)
            self._thread = None

    def _run(self) -> None:
        with httpx.Client(trust_env=False) as client:
            while not self._stop.wait(self.every_s):
                with self._lock:
                    todo = [(n, u) for n, u in self._urls.items() if n not in self._hung]
                for name, url in todo:
                    t0 = time.monotonic()
                    ok = self._probe(client, url, self.timeout_s)
                    with self._lock:
                        if name not in self._urls:  # forgotten meanwhile
                            continue
                        if ok:
                            self._failed.pop(name, None)
                            self._first_miss.pop(name, None)
                            continue
                        self._failed[name] = self._failed.get(name, 0) + 1
                        first = self._first_miss.setdefault(name, t0)
                        if self._failed[name] >= self.misses:
                            self._hung[name] = time.monotonic() - first

    def _probe(self, client: httpx.Client, url: str, timeout_s: float) -> bool:
        try:
            return client.get(url, timeout=timeout_s).status_code < 500
        except httpx.HTTPError:
            return False
