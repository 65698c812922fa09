"""The canary beside serving engines: one loop per engine, each in a thread, the state on disk and
at /metrics.

``kvstack serve`` starts one after the startup validation (canary/checker.py does the work) and
polls ``wrong_kv()`` from its supervision loop, which acts on a failed check (serving/wrong_kv.py):
the loops only report. With several engines (``--replicas N``) every engine is checked, on its own
budget, and each check names its engine (``replica``: host:port) in its event line, the state's
``replicas`` and the metrics' ``replica`` label. ``pause()`` holds the checks while the engines
restart; ``retarget()`` points them at what serves after a fallback.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from kvstack.canary.budget import PrefillBudget
from kvstack.canary.checker import Canary, CanaryConfig
from kvstack.canary.defaults import OnWrongKv
from kvstack.canary.exposition import MetricsServer
from kvstack.canary.state import CanaryFiles, CanaryState, CheckRecord, FallbackRecord, merged
from kvstack.validation.noise import NoiseFloor
from kvstack.validation.report import ValidationTarget

STOP_WAIT_S = 10.0


def replica_name(target: ValidationTarget) -> str:
    """An engine's name in the canary's checks: its host:port."""
    return urlsplit(target.base_url).netloc or target.base_url


class CanaryRunner:
    """The canary against ``targets``: one engine, or each of several (by host:port)."""

    def __init__(
        self,
        targets: ValidationTarget | Sequence[ValidationTarget],
        config: CanaryConfig,
        on_wrong_kv: OnWrongKv,
        run_dir: Path,
        noise: NoiseFloor | None = None,
        on_error: Callable[[str], None] = lambda m: None,
    ) -> None:
        listed = [targets] if isinstance(targets, ValidationTarget) else list(targets)
        if not listed:
            raise ValueError("the canary needs an engine to watch")
        self.targets = {replica_name(t): t for t in listed}
        self.config = config
        self.files = CanaryFiles(run_dir)
        self.state = CanaryState(interval_s=config.interval_s, budget=config.budget, on_wrong_kv=on_wrong_kv)
        # What each engine's loop writes: one engine writes the run's state itself (as it always
        # has); several write their own, merged into it when read.
        self.several = len(self.targets) > 1
        self.parts = {name: self._part() if self.several else self.state for name in self.targets}
        self.noise: dict[str, NoiseFloor | None] = dict.fromkeys(self.targets, noise)
        self.budget: dict[str, PrefillBudget | None] = dict.fromkeys(self.targets)
        self.lock = threading.Lock()
        self._writing = threading.Lock()  # one state file write at a time: the last one is the newest
        self.failures: queue.Queue[CheckRecord] = queue.Queue()
        self.on_error = on_error
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._restart = {name: threading.Event() for name in self.targets}
        self.metrics: MetricsServer | None = None
        self.threads: list[threading.Thread] = []

    def _part(self) -> CanaryState:
        return CanaryState(
            interval_s=self.state.interval_s, budget=self.state.budget, on_wrong_kv=self.state.on_wrong_kv
        )

    @property
    def thread(self) -> threading.Thread | None:
        return self.threads[0] if self.threads else None

    # --- what the serving loop calls --------------------------------------------------------

    def start(self, metrics_host: str | None = None, metrics_port: int = 0, token: str | None = None) -> None:
        if metrics_host is not None and token:
            self.metrics = MetricsServer(metrics_host, metrics_port, token, self.snapshot)
            self.state.metrics_url = self.metrics.url
        self._save()
        replicas = {"replicas": list(self.targets)} if self.several else {}
        self.files.event(
            "canary-start", interval_s=self.config.interval_s, budget=self.config.budget, **replicas
        )
        for i, name in enumerate(self.targets):
            thread_name = f"kvstack-canary-{i}" if self.several else "kvstack-canary"
            thread = threading.Thread(target=self._main, args=(name,), name=thread_name, daemon=True)
            self.threads.append(thread)
            thread.start()

    def halt(self) -> None:
        """Send nothing more, now (the engines are about to stop); ``stop`` then waits for the thread."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + STOP_WAIT_S
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self.metrics is not None:
            self.metrics.close()
        with self.lock:
            for state in (self.state, *self.parts.values()):
                if state.status != "fallback":
                    state.status = "stopped"
        self._save()

    def wrong_kv(self) -> list[CheckRecord]:
        """Failed checks since the last call (each once)."""
        out = []
        while True:
            try:
                out.append(self.failures.get_nowait())
            except queue.Empty:
                return out

    def pause(self) -> None:
        self._paused.set()

    def retarget(self, update: Callable[[ValidationTarget], ValidationTarget]) -> None:
        """Check every engine as ``update`` makes its target from now on (their probes start over:
        the old ones' KV is gone)."""
        self.targets = {name: update(t) for name, t in self.targets.items()}
        for restart in self._restart.values():
            restart.set()
        self._paused.clear()

    def acted(self, record: FallbackRecord) -> None:
        with self.lock:
            self.state.fallback = record
            if record.tiers_off:
                for state in (self.state, *self.parts.values()):
                    state.status = "fallback"
        replica = {"replica": record.replica} if record.replica is not None else {}
        self.files.event(
            "wrong-kv-" + record.action,
            served_from=record.served_from,
            detail=record.detail,
            tiers_off=record.tiers_off,
            restarted=record.restarted,
            **replica,
        )
        self._save()

    def noted(self, kind: str, **fields: object) -> None:
        """An event in the run dir, the state unchanged."""
        self.files.event(kind, **fields)

    def snapshot(self) -> CanaryState:
        with self.lock:
            return merged(self.state, self.parts) if self.several else self.state.model_copy(deep=True)

    # --- the thread -------------------------------------------------------------------------

    def _save(self) -> None:
        try:
            with self._writing:
                self.files.write(self.snapshot())
        except OSError as exc:  # a full run dir must not stop the canary: the metrics still say it
            self.on_error(f"canary state not written: {exc}")

    def _check(self, record: CheckRecord) -> None:
        self.files.event("canary-check", **record.model_dump(exclude_none=True))
        if record.verdict == "fail":
            self.failures.put(record)
        self._save()

    def _main(self, name: str) -> None:
        restart = self._restart[name]
        while not self._stop.is_set():
            restart.clear()
            canary = Canary(
                self.targets[name],
                self.config,
                self.parts[name],
                self.noise[name],
                on_check=self._check,
                on_change=self._save,
                stopped=lambda: self._stop.is_set() or restart.is_set(),
                paused=self._paused.is_set,
                lock=self.lock,
                budget=self.budget[name],
                replica=name if self.several else None,
            )
            try:
                asyncio.run(canary.run())
            except Exception as exc:
                if self._stop.is_set():
                    return
                replica = {"replica": name} if self.several else {}
                self.files.event("canary-error", error=f"{type(exc).__name__}: {exc}"[:300], **replica)
                time.sleep(min(self.config.interval_s, 5.0))
            self.noise[name] = canary.noise or self.noise[name]  # keep the gate across a retarget
            self.budget[name] = canary.budget or self.budget[name]  # and the cost, since the start
