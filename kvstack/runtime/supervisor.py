"""Start the engine and its helpers, watch them, and make sure none outlives kvstack.

Each process runs in its own session (so its process group is ours to signal as a whole),
with PR_SET_PDEATHSIG=SIGKILL for the direct child and a watchdog process
(``kvstack.runtime.watchdog``) for everything it spawns, which PDEATHSIG cannot reach. Output
is teed, secrets masked, into ``RUN_DIR/<name>.log``. Stopping follows vLLM's process managers
(vllm/v1/utils.py): SIGTERM to every group, one shared deadline, then SIGKILL.

PR_SET_PDEATHSIG fires when the *thread* that forked the child exits: call ``start`` from a
thread that lives as long as the server (the main thread, in the CLI).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from kvstack.fsutil import ensure_private_dir
from kvstack.rundir import log_name
from kvstack.runtime.disk_space import low_disk_warning
from kvstack.runtime.failure import FATAL_LINE, HUNG, ProcessFailed, describe_exit
from kvstack.runtime.liveness import HangWatch
from kvstack.runtime.process import Proc, WatchdogLink, launch
from kvstack.runtime.readiness import probe_ready, wait_until_ready
from kvstack.runtime.root_cause import root_cause
from kvstack.runtime.signals import StopOnSignal
from kvstack.runtime.spawn import child_env, remove_start_files
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.runtime.status import StatusCallback, SupervisorStatus
from kvstack.runtime.stopping import stop_groups

# Re-exported: where callers have always found them.
__all__ = [
    "FATAL_LINE",
    "HUNG",
    "ProcessFailed",
    "Supervisor",
    "child_env",
    "describe_exit",
    "remove_start_files",
]

TAIL_LINES = 30


class Supervisor:
    """Runs a LaunchSpec: helpers first (each waited for), then the server; a helper that
    ``starts_with_server`` starts right before the server and is waited for while it starts.

    Use as a context manager; ``stop`` runs on exit, on SIGINT/SIGTERM (which then raise
    ``Interrupted``) and is idempotent.
    """

    def __init__(
        self,
        spec: LaunchSpec,
        run_dir: Path | str,
        *,
        on_status: StatusCallback | None = None,
        stop_timeout_s: float = 10.0,
        helper_ready_timeout_s: float = 120.0,
        api_key: str | None = None,
        base_env: Mapping[str, str] | None = None,
        handle_signals: bool = True,
        label: str | None = None,
    ) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.on_status = on_status
        self.stop_timeout_s = stop_timeout_s
        self.helper_ready_timeout_s = helper_ready_timeout_s
        self.api_key = api_key
        self.base_env = base_env
        self.handle_signals = handle_signals
        # Shown before process names in errors and status ("replica 1 engine") when several
        # supervisors run side by side (kvstack.runtime.group).
        self.label = label
        self.procs: list[Proc] = []
        self.died: tuple[str, int] | None = None
        self.restarts = 0  # of the whole unit, after a critical helper died
        self._watchdog = WatchdogLink()
        self._signals = StopOnSignal(self.stop, self.hurry, lambda: self._stopping)
        self._stopping = False
        self._stopped = False
        self._kill_now = False
        self._t0 = time.monotonic()
        self._phase = "created"
        self.liveness = HangWatch()

    # --- life cycle -------------------------------------------------------------------------

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start helpers (waiting until each is ready), then the server (``_launch_all``); returns
        once the server is launched and every helper is ready, not waiting for the server."""
        ensure_private_dir(self.run_dir)
        if self.handle_signals:
            self._signals.install()
        self._t0 = time.monotonic()
        try:
            self._watchdog.start()
            self._launch_all()
        except BaseException:
            self.stop()  # a failed start leaves nothing running, with or without ``with``
            raise
        self._report("starting", self.spec.server.name)

    def _launch_all(self) -> None:
        """Each helper, waited for, then the server; a helper that ``starts_with_server`` is waited
        for once the server is launched too (its start overlaps the server's)."""
        for helper in self.spec.helpers:
            self._launch(helper)
            if not helper.starts_with_server:
                self.wait_ready(self.helper_ready_timeout_s, name=helper.name)
        self._launch(self.spec.server)
        for helper in self.spec.helpers:
            if helper.starts_with_server:
                self.wait_ready(self.helper_ready_timeout_s, name=helper.name)

    def _launch(self, pspec: ProcessSpec) -> None:
        self.procs.append(launch(pspec, self.run_dir, self.spec.secrets, self.base_env, self._watchdog))

    def restartable(self) -> bool:
        """Whether what was found dead restarts the unit: a critical helper's death, or a server that
        hangs (it answers nothing, so only a restart brings it back, as for a hung cache server)."""
        if self.died is None:
            return False
        name, rc = self.died
        if rc == HUNG and name == self.spec.server.name:
            return True
        return any(h.critical and h.name == name for h in self.spec.helpers)

    def restart_what(self) -> str:
        """What ``restart`` restarts, in words: "the cache server, then the engine"."""
        server = self.spec.server.name
        return f"the cache server, then the {server}" if self.spec.helpers else f"the {server}"

    def restart(self, ready_timeout_s: float) -> None:
        """Stop what is left of the unit, start helpers then the server again, wait until ready.

        For a critical helper's death (LMCache's server): the engine cannot recover by itself,
        so both restart; the disk tier's files are kept, so its KV serves again after. For a hung
        server (runtime/liveness.py), likewise.
        """
        self.restarts += 1
        self._report("restarting", self.spec.server.name)
        self.liveness.forget()
        self._stop_groups()
        self._close_procs()
        self.procs = []
        self.died = None
        self._t0 = time.monotonic()
        try:
            self._launch_all()
            self.wait_ready(ready_timeout_s)
        except BaseException:
            self.stop()
            raise

    # --- readiness and death ----------------------------------------------------------------

    def _proc(self, name: str) -> Proc:
        for p in self.procs:
            if p.spec.name == name:
                return p
        raise KeyError(name)

    def log_path(self, name: str | None = None) -> Path:
        return self.run_dir / log_name(name or self.spec.server.name)

    def tail(self, name: str | None = None, n: int = TAIL_LINES) -> list[str]:
        proc = self._proc(name or self.spec.server.name)
        if proc.popen.poll() is not None:
            proc.tee.join(timeout=1.0)  # let the last lines of a dead process reach the tail
        return proc.tee.last(n)

    def poll_died(self) -> int | None:
        """Exit code of the first supervised process found dead, else None."""
        if self.died is not None:
            return self.died[1]
        for p in self.procs:
            rc = p.popen.poll()
            if rc is None and p.tee.fatal is not None:
                rc = FATAL_LINE
            if rc is None and self.liveness.hung(p.spec.name) is not None:
                rc = HUNG
            if rc == FATAL_LINE and p.spec is self.spec.server and (blamed := self._silent_helper()):
                # The engine's "LMCache server is unhealthy" because its cache server hangs: the
                # helper's hang, which restarts the unit, not an engine that can never serve.
                self.died = (blamed, HUNG)
                return HUNG
            if rc is not None:
                self.died = (p.spec.name, rc)
                return rc
        return None

    def _silent_helper(self) -> str | None:
        """A critical helper that is alive but does not answer its health URL right now."""
        for p in self.procs:
            if p.spec.critical and p.popen.poll() is None and not self.liveness.answers_now(p.spec.name):
                return p.spec.name
        return None

    def fatal_line(self, name: str) -> str | None:
        return self._proc(name).tee.fatal

    def shown(self, name: str) -> str:
        """``name`` as errors and status show it: prefixed with the label, when there is one."""
        return f"{self.label} {name}" if self.label else name

    def death_error(self, during: str = "serving") -> ProcessFailed:
        """The error to raise once ``poll_died`` returned a code."""
        assert self.died is not None
        name, rc = self.died
        what = describe_exit(rc)
        if rc == FATAL_LINE:
            what = f"logged {self.fatal_line(name)!r}, after which it cannot serve"
        if rc == HUNG:
            silent = self.liveness.hung(name) or 0.0
            what = f"stopped answering {self.liveness.url(name)} for {silent:.0f} s (hung, not dead)"
        tail = self.tail(name)
        # A process that exited on its own may have logged why above the tail's last frames.
        cause = None if rc in (FATAL_LINE, HUNG) or rc < 0 else root_cause(self.log_path(name))
        return ProcessFailed(
            self.shown(name),
            f"{what} during {during} (pid {self._proc(name).popen.pid})",
            None if rc in (FATAL_LINE, HUNG) else rc,
            self.log_path(name),
            tail,
            hint=f"read the full log: {self.log_path(name)}",
            cause=cause,
        )

    def _probe(self, client: httpx.Client, pspec: ProcessSpec) -> bool:
        api = self.spec.base_url if pspec is self.spec.server else None
        return probe_ready(client, pspec.ready_url, api_base_url=api, api_key=self.api_key)

    def wait_ready(self, timeout_s: float, name: str | None = None) -> None:
        """Poll the readiness URL with backoff (runtime/readiness.py); raise ProcessFailed on death
        or timeout."""
        target = self._proc(name or self.spec.server.name).spec.name
        self._report("waiting for readiness", target)
        outcome = wait_until_ready(
            lambda client: self.probe_ready(client, target),
            lambda: self.poll_died() is not None,
            timeout_s,
            waiting=lambda: self._report("waiting for readiness", target),
        )
        if outcome == "ready":
            return
        self._phase = "failed"
        if outcome == "died":
            raise self.death_error(during="startup")
        raise self.not_ready_error(timeout_s, target)

    def not_ready_error(self, timeout_s: float, name: str | None = None) -> ProcessFailed:
        """The error for a process that is still running but was not ready after ``timeout_s``."""
        proc = self._proc(name or self.spec.server.name)
        return ProcessFailed(
            self.shown(proc.spec.name),
            f"was not ready after {timeout_s:.0f} s (pid {proc.popen.pid}, still running)",
            None,
            proc.log_path,
            self.tail(proc.spec.name),
            hint=f"raise --ready-timeout or read the full log: {proc.log_path}",
        )

    def probe_ready(self, client: httpx.Client, name: str | None = None) -> bool:
        """One readiness probe and no waiting, for a caller that watches several supervisors."""
        proc = self._proc(name or self.spec.server.name)
        if not self._probe(client, proc.spec):
            return False
        self._became_ready(proc)
        return True

    def _became_ready(self, proc: Proc) -> None:
        if proc.spec.ready_url is not None:  # it answers, so it has read its start files
            remove_start_files(proc.spec)
            if proc.spec.critical or proc.spec is self.spec.server:
                # From now on, a hang is a death (runtime/liveness.py): the server's (an engine
                # alive but not answering /health) and a critical helper's.
                self.liveness.watch(proc.spec.name, proc.spec.ready_url)
        self._report("ready", proc.spec.name)

    def report(self, phase: str, name: str | None = None) -> None:
        """Set the phase and tell ``on_status`` (for a caller that drives the waiting itself)."""
        self._report(phase, name or self.spec.server.name)

    def hurry(self) -> None:
        """Stop waiting politely: a stop in progress goes to SIGKILL now (a second Ctrl-C)."""
        self._kill_now = True

    # --- status -----------------------------------------------------------------------------

    def status(self, name: str | None = None) -> SupervisorStatus:
        target = name or (self.procs[-1].spec.name if self.procs else self.spec.server.name)
        try:
            last = self._proc(target).tee.last(1)
        except KeyError:
            last = []
        elapsed = time.monotonic() - self._t0
        dropped = sum(p.tee.drops()[0] for p in self.procs)
        return SupervisorStatus(self._phase, self.shown(target), elapsed, last[0] if last else "", dropped)

    def log_drops(self) -> list[tuple[str, int, str | None, Path]]:
        """(process, lines dropped, why the first was, log path) for each process whose log
        could not be written: its output was drained and dropped, never left to block it."""
        out = []
        for p in self.procs:
            n, why = p.tee.drops()
            if n:
                out.append((self.shown(p.spec.name), n, why, p.log_path))
        return out

    def _report(self, phase: str, name: str) -> None:
        self._phase = phase
        if self.on_status is not None:
            self.on_status(self.status(name))

    def disk_warnings(self, min_free_bytes: int | None = None) -> list[str]:
        """Warnings for disk-tier directories whose filesystem runs low (see low_disk_warning)."""
        out = []
        for kind, path in self.spec.cache_dirs.items():
            if kind == "disk" and (w := low_disk_warning(path, min_free_bytes)):
                out.append(w)
        return out

    # --- stopping ---------------------------------------------------------------------------

    def stop(self) -> None:
        """SIGTERM every group, one shared deadline, then SIGKILL what is left. Idempotent."""
        if self._stopped or self._stopping:
            return
        self._stopping = True
        self.liveness.forget()
        try:
            if self.procs:
                self._report("stopping", self.spec.server.name)
            self._stop_groups()
        finally:
            self._finish()
            self._stopping = False
            self._stopped = True
            if self._phase != "failed":
                self._phase = "stopped"
            self._signals.restore()

    def _stop_groups(self) -> None:
        server = next((p for p in self.procs if p.spec is self.spec.server), None)
        stop_groups(self.procs, server, self.stop_timeout_s, lambda: self._kill_now)

    def _close_procs(self) -> None:
        for p in self.procs:
            p.close()
            self._watchdog.tell(f"-{p.pgid}")

    def _finish(self) -> None:
        self.liveness.close()
        self._close_procs()
        self._watchdog.close()
