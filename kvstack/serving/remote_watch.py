"""Watch the remote tier's store while serving: say when it goes away and when it is back.

The engine keeps serving when Redis disappears (LMCache logs the failure and recomputes), so
nothing else would tell the user that the shared tier stopped serving. The pings run in a daemon
thread so that a store that hangs cannot delay noticing an engine death (within 2 s).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from types import TracebackType

from kvstack.hardware.snapshot import RemoteInfo

# A store that stops answering (SIGSTOP, a stuck host) is reported within about 4 s: a ping every
# 2 s, each given 1.5 s; cheap for Redis (PING and DBSIZE).
CHECK_EVERY_S = 2.0
PING_TIMEOUT_S = 1.5

Probe = Callable[[str, float], RemoteInfo]


def _ping(url: str, timeout_s: float) -> RemoteInfo:
    from kvstack.remote.preflight import ping  # lazy: redis-py only when a remote tier exists

    return ping(url, timeout_s)


class RemoteWatch:
    """``with RemoteWatch(url) as watch: ... watch.changes() ...``; the store starts as reachable
    (serve's preflight proved it)."""

    def __init__(self, url: str, every_s: float = CHECK_EVERY_S, probe: Probe = _ping) -> None:
        self.url = url
        self.every_s = every_s
        self.probe = probe
        self._messages: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="kvstack-remote-watch")

    def __enter__(self) -> RemoteWatch:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=PING_TIMEOUT_S + 1)

    def changes(self) -> list[str]:
        """Messages about state changes since the last call (oldest first)."""
        out = []
        while True:
            try:
                out.append(self._messages.get_nowait())
            except queue.Empty:
                return out

    def _run(self) -> None:
        reachable = True
        while not self._stop.wait(self.every_s):
            try:
                info = self.probe(self.url, PING_TIMEOUT_S)
            except Exception as exc:  # a probe bug must not kill serving; report it as unknown
                info = RemoteInfo(url="the remote store", reachable=False, error=f"{type(exc).__name__}")
            if info.reachable == reachable:
                continue
            reachable = info.reachable
            if reachable:
                self._messages.put(f"remote store {info.url} is reachable again: the remote tier can serve")
            else:
                self._messages.put(
                    f"remote store {info.url} is unreachable or not answering within {PING_TIMEOUT_S:g} s "
                    f"({info.error or 'no answer'}): the engine "
                    "keeps serving but recomputes what the remote tier held; "
                    "`kvstack validate --remote URL` checks it"
                )
