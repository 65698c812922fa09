"""Watch the remote tier's store while serving: say when it goes away, when it hangs, when it is back.

A store that is gone (connection refused, Redis dead) costs nothing but misses: LMCache's `resp`
adapter turns a failed lookup into a miss and the engine recomputes, so serving only says so. A
store that hangs (SIGSTOP, a stuck host: the connection opens, no answer comes) is worse: LMCache
0.5.6 waits for it without a timeout, so every request hangs, and it cannot drop an L2 adapter at
runtime (kvstack/engines/remote_drop.py says what was read). So a store that has not answered for
``HANG_GRACE_S`` asks serving to restart the unit without the remote tier, once per run.

The pings run in a daemon thread so that a store that hangs cannot delay noticing an engine death.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from kvstack.hardware.snapshot import RemoteInfo
from kvstack.remoteurl import RemoteURL

# A store that stops answering (SIGSTOP, a stuck host) is reported within about 4 s: a ping every
# 2 s, each given 1.5 s; cheap for Redis (PING and DBSIZE).
CHECK_EVERY_S = 2.0
PING_TIMEOUT_S = 1.5
# How long a store may hang before the remote tier is dropped (a restart of the unit, about 40 to
# 55 s without answers on this 2-core machine). Long enough that a blip does not cost a restart:
# a healthy Redis stalls for well under a second (a fork for BGSAVE, an fsync), a failover or a
# network hiccup for a few seconds. Short enough that users notice little: every request waits
# through it, and 10 s is about what the restart itself adds again, not minutes.
HANG_GRACE_S = 10.0

Probe = Callable[[RemoteURL, float], RemoteInfo]


def _ping(url: RemoteURL, timeout_s: float) -> RemoteInfo:
    from kvstack.remote.preflight import ping  # lazy: redis-py only when a remote tier exists

    return ping(url, timeout_s)


def hangs(info: RemoteInfo) -> bool:
    """The store took the connection but did not answer in time (redis-py's TimeoutError reads
    "Timeout reading from socket" / "Timeout connecting to server"), as opposed to refusing it."""
    return not info.reachable and "timeout" in (info.error or "").lower()


@dataclass
class Outage:
    """What to do about the store, from one probe result after another (pure: no I/O, no clock)."""

    grace_s: float = HANG_GRACE_S
    reachable: bool = True
    hung_since: float | None = None
    dropped: bool = False  # the remote tier is off for the rest of the run

    def observe(self, info: RemoteInfo, now: float) -> tuple[str | None, bool]:
        """(a message for the user or None, whether to restart without the remote tier now)."""
        if info.reachable or not hangs(info):
            self.hung_since = None
        elif self.hung_since is None:
            self.hung_since = now
        message = None
        if info.reachable != self.reachable:
            self.reachable = info.reachable
            message = self._back(info) if info.reachable else self._gone(info)
        if self.dropped or self.hung_since is None or now - self.hung_since < self.grace_s:
            return message, False
        self.dropped = True
        drop = (
            f"remote store {info.url} has not answered for {now - self.hung_since:.0f} s (hung, not gone: "
            "LMCache waits for it without a timeout, so requests hang): restarting the cache server and the "
            "engine without the remote tier; they keep serving from the local tiers"
        )
        return (f"{message}\n{drop}" if message else drop), True

    def _gone(self, info: RemoteInfo) -> str:
        if self.dropped:
            return f"remote store {info.url} is unreachable again (the remote tier is off for this run)"
        hung = (
            f"; if it does not answer within {self.grace_s:g} s, the remote tier is dropped "
            "(requests wait for it)"
            if hangs(info)
            else ""
        )
        return (
            f"remote store {info.url} is unreachable or not answering within {PING_TIMEOUT_S:g} s "
            f"({info.error or 'no answer'}): the engine keeps serving but recomputes what the remote tier "
            f"held{hung}; `kvstack validate --remote URL` checks it"
        )

    def _back(self, info: RemoteInfo) -> str:
        if self.dropped:
            return (
                f"remote store {info.url} is answering again; the remote tier stays off for this run: "
                "restart `kvstack serve` to use it again"
            )
        return f"remote store {info.url} is reachable again: the remote tier can serve"


class RemoteWatch:
    """``with RemoteWatch(url) as watch: ... watch.changes() ... watch.drop_requested() ...``; the
    store starts as reachable (serve's preflight proved it)."""

    def __init__(
        self,
        url: RemoteURL,
        every_s: float = CHECK_EVERY_S,
        probe: Probe = _ping,
        grace_s: float = HANG_GRACE_S,
    ) -> None:
        self.url = url
        self.every_s = every_s
        self.probe = probe
        self.outage = Outage(grace_s=grace_s)
        self._messages: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._drop = threading.Event()
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

    def drop_requested(self) -> bool:
        """True once (per run): the store hung past the grace window; restart without the tier."""
        if self._drop.is_set():
            self._drop.clear()
            return True
        return False

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                info = self.probe(self.url, PING_TIMEOUT_S)
            except Exception as exc:  # a probe bug must not kill serving; report it as unknown
                info = RemoteInfo(url="the remote store", reachable=False, error=f"{type(exc).__name__}")
            message, drop = self.outage.observe(info, time.monotonic())
            if message:
                self._messages.put(message)
            if drop:
                self._drop.set()
