"""The canary beside a serving engine: its loop in a thread, its state on disk and at /metrics.

``kvstack serve`` starts one after the startup validation (canary/checker.py does the work) and
polls ``wrong_kv()`` from its supervision loop, which acts on a failed check (serving/wrong_kv.py):
the loop only reports. ``pause()`` holds the checks while the engine restarts; ``retarget()``
points them at what serves after a fallback.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kvstack.canary.budget import PrefillBudget
from kvstack.canary.checker import Canary, CanaryConfig
from kvstack.canary.defaults import OnWrongKv
from kvstack.canary.exposition import MetricsServer
from kvstack.canary.state import CanaryFiles, CanaryState, CheckRecord, FallbackRecord
from kvstack.validation.noise import NoiseFloor
from kvstack.validation.report import ValidationTarget

STOP_WAIT_S = 10.0


class CanaryRunner:
    def __init__(
        self,
        target: ValidationTarget,
        config: CanaryConfig,
        on_wrong_kv: OnWrongKv,
        run_dir: Path,
        noise: NoiseFloor | None = None,
        on_error: Callable[[str], None] = lambda m: None,
    ) -> None:
        self.target = target
        self.config = config
        self.noise = noise
        self.files = CanaryFiles(run_dir)
        self.state = CanaryState(interval_s=config.interval_s, budget=config.budget, on_wrong_kv=on_wrong_kv)
        self.lock = threading.Lock()
        self.failures: queue.Queue[CheckRecord] = queue.Queue()
        self.on_error = on_error
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._restart = threading.Event()
        self.metrics: MetricsServer | None = None
        self.thread: threading.Thread | None = None
        self.budget: PrefillBudget | None = None

    # --- what the serving loop calls --------------------------------------------------------

    def start(self, metrics_host: str | None = None, metrics_port: int = 0, token: str | None = None) -> None:
        if metrics_host is not None and token:
            self.metrics = MetricsServer(metrics_host, metrics_port, token, self.snapshot)
            self.state.metrics_url = self.metrics.url
        self._save()
        self.files.event("canary-start", interval_s=self.config.interval_s, budget=self.config.budget)
        self.thread = threading.Thread(target=self._main, name="kvstack-canary", daemon=True)
        self.thread.start()

    def halt(self) -> None:
        """Send nothing more, now (the engines are about to stop); ``stop`` then waits for the thread."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self.thread is not None:
            self.thread.join(STOP_WAIT_S)
        if self.metrics is not None:
            self.metrics.close()
        with self.lock:
            if self.state.status != "fallback":
                self.state.status = "stopped"
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

    def retarget(self, target: ValidationTarget) -> None:
        """Check ``target`` from now on (its probes start over: the old ones' KV is gone)."""
        self.target = target
        self._restart.set()
        self._paused.clear()

    def acted(self, record: FallbackRecord) -> None:
        with self.lock:
            self.state.fallback = record
            if record.tiers_off:
                self.state.status = "fallback"
        self.files.event(
            "wrong-kv-" + record.action,
            served_from=record.served_from,
            detail=record.detail,
            tiers_off=record.tiers_off,
            restarted=record.restarted,
        )
        self._save()

    def noted(self, kind: str, **fields: object) -> None:
        """An event in the run dir, the state unchanged."""
        self.files.event(kind, **fields)

    def snapshot(self) -> CanaryState:
        with self.lock:
            return self.state.model_copy(deep=True)

    # --- the thread -------------------------------------------------------------------------

    def _save(self) -> None:
        try:
            self.files.write(self.snapshot())
        except OSError as exc:  # a full run dir must not stop the canary: the metrics still say it
            self.on_error(f"canary state not written: {exc}")

    def _check(self, record: CheckRecord) -> None:
        self.files.event("canary-check", **record.model_dump(exclude_none=True))
        if record.verdict == "fail":
            self.failures.put(record)
        self._save()

    def _main(self) -> None:
        while not self._stop.is_set():
            self._restart.clear()
            canary = Canary(
                self.target,
                self.config,
                self.state,
                self.noise,
                on_check=self._check,
                on_change=self._save,
                stopped=lambda: self._stop.is_set() or self._restart.is_set(),
                paused=self._paused.is_set,
                lock=self.lock,
                budget=self.budget,
            )
            try:
                asyncio.run(canary.run())
            except Exception as exc:
                if self._stop.is_set():
                    return
                self.files.event("canary-error", error=f"{type(exc).__name__}: {exc}"[:300])
                time.sleep(min(self.config.interval_s, 5.0))
            self.noise = canary.noise or self.noise  # keep the gate across a retarget
            self.budget = canary.budget or self.budget  # and the cost, counted since the start
