"""Several supervisors run as one unit: N engine replicas, then a router in front of them.

Members start in stages (``launch``): each stage from this thread, in order, and a stage
may wait until every member so far is ready. A death of any member is the death of the
group: ``poll_died`` names the member and ``death_error`` carries its exit code and log tail.
``stop`` (on exit, on SIGINT/SIGTERM, after a failed start) stops the stages in reverse,
the members of one stage in parallel, so N engines stop in the time of one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

import httpx

from kvstack.runtime.readiness import wait_until_ready
from kvstack.runtime.signals import StopOnSignal
from kvstack.runtime.supervisor import ProcessFailed, Supervisor


class SupervisorGroup:
    """Use as a context manager; members must be built with ``handle_signals=False``."""

    def __init__(self, *, handle_signals: bool = True) -> None:
        self.stages: list[list[Supervisor]] = []
        self.handle_signals = handle_signals
        self.died: Supervisor | None = None
        self._ready: set[int] = set()
        self._signals = StopOnSignal(self.stop, self._hurry_members, lambda: self._stopping)
        self._stopping = False
        self._stopped = False
        self._before_stop: list[Callable[[], None]] = []

    @property
    def members(self) -> list[Supervisor]:
        return [s for stage in self.stages for s in stage]

    def __enter__(self) -> SupervisorGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- starting ---------------------------------------------------------------------------

    def launch(self, stage: list[Supervisor]) -> None:
        """Start every member of ``stage`` (its helpers, then its server: Supervisor.start).

        Called from the thread that lives as long as the servers (PR_SET_PDEATHSIG fires when
        the forking thread exits). A failed start stops everything, earlier stages included.
        """
        if self.handle_signals:
            self._signals.install()
        self.stages.append(list(stage))
        try:
            for sup in stage:
                sup.start()
                if self.poll_died() is not None:
                    raise self.death_error(during="startup")
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout_s: float) -> None:
        """Until every member's server is ready; any member's death or the timeout stops all."""
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        pending = [s for s in self.members if id(s) not in self._ready]
        if not pending:
            return
        for sup in pending:
            sup.report("waiting for readiness")

        def all_ready(client: httpx.Client) -> bool:
            for sup in list(pending):
                if sup.probe_ready(client):
                    self._ready.add(id(sup))
                    pending.remove(sup)
            return not pending

        def waiting() -> None:  # the live status line follows the member waited for (its time, its log)
            pending[0].report("waiting for readiness")

        outcome = wait_until_ready(
            all_ready, lambda: self.poll_died() is not None, timeout_s, waiting=waiting
        )
        if outcome == "died":
            raise self.death_error(during="startup")
        if outcome == "timeout":
            raise pending[0].not_ready_error(timeout_s)

    # --- death ------------------------------------------------------------------------------

    def poll_died(self) -> int | None:
        """Exit code of the first process found dead in any member, else None."""
        if self.died is not None:
            return self.died.poll_died()
        for sup in self.members:
            rc = sup.poll_died()
            if rc is not None:
                self.died = sup
                return rc
        return None

    def death_error(self, during: str = "serving") -> ProcessFailed:
        """The dead member's error (its label names the replica), once ``poll_died`` saw it."""
        assert self.died is not None
        return self.died.death_error(during=during)

    def restartable(self) -> bool:
        return self.died is not None and self.died.restartable()

    def restart_what(self) -> str:
        assert self.died is not None
        what = self.died.restart_what()
        return f"{what} of {self.died.label}" if self.died.label else what

    def restart(self, ready_timeout_s: float) -> None:
        """Restart the member whose critical helper died or which hung; the others keep serving."""
        assert self.died is not None
        member, self.died = self.died, None
        member.restart(ready_timeout_s)

    def disk_warnings(self, min_free_bytes: int | None = None) -> list[str]:
        # Replicas share the disk tier's directory: one warning per directory, not per replica.
        return list(dict.fromkeys(w for s in self.members for w in s.disk_warnings(min_free_bytes)))

    def log_drops(self) -> list[tuple[str, int, str | None, Path]]:
        return [d for s in self.members for d in s.log_drops()]

    # --- stopping ---------------------------------------------------------------------------

    def before_stop(self, hook: Callable[[], None]) -> None:
        """``hook`` runs first when the group stops, on a signal too: what watches the members (the
        canary) stops sending before they go, instead of reporting them gone. It must not block."""
        self._before_stop.append(hook)

    def stop(self) -> None:
        """Last stage first (the router before the engines behind it); a stage's members at once."""
        if self._stopped or self._stopping:
            return
        self._stopping = True
        try:
            for hook in self._before_stop:
                with contextlib.suppress(Exception):
                    hook()
            for stage in reversed(self.stages):
                self._stop_stage(stage)
        finally:
            self._stopping = False
            self._stopped = True
            self._signals.restore()

    @staticmethod
    def _stop_stage(stage: list[Supervisor]) -> None:
        if len(stage) == 1:
            stage[0].stop()
            return
        threads = [threading.Thread(target=s.stop, name="kvstack-stop", daemon=True) for s in stage]
        for t in threads:
            t.start()
        for t in threads:
            # Joined in slices: a second Ctrl-C must reach this (main) thread's handler meanwhile.
            while t.is_alive():
                t.join(timeout=0.2)

    # --- signals ----------------------------------------------------------------------------

    def _hurry_members(self) -> None:
        for sup in self.members:
            sup.hurry()
