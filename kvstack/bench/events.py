"""How a bench run (the workload bench, or the trace replay) talks to whoever renders it: the CLI's
consoles (kvstack/rendering/bench.py), or nothing (a test, a script). Bench itself prints nothing."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from kvstack.bench.runner import Progress, RunOptions
from kvstack.bench.schema import BenchResult
from kvstack.bench.sweep.ladder import LoadLadder
from kvstack.bench.sweep.schema import SweepResult, SweepStep
from kvstack.bench.workloads import RequestSet
from kvstack.serving.lifecycle import ServeEvents


@dataclass
class BenchEvents:
    # What will be sent and how, once it is built (before the first request).
    workload: Callable[[RequestSet, RunOptions], None] = lambda workload, opts: None
    # Held while the requests run (a live progress bar), fed by ``progress``.
    live: Callable[[], AbstractContextManager[object]] = nullcontext
    progress: Callable[[Progress], None] = lambda p: None
    # The result and the files written: after the run, before the run's failure (if any) is raised.
    report: Callable[[BenchResult, list[Path]], None] = lambda result, written: None
    # --sweep: each step once measured (its layout, the ladder it belongs to); then the sweep's result
    # and the files written, before its failure (if any) is raised.
    sweep_step: Callable[[str, LoadLadder, SweepStep], None] = lambda layout, ladder, step: None
    sweep_report: Callable[[SweepResult, list[Path]], None] = lambda result, written: None
    # The layouts kvstack serves for the bench: their start, readiness and stop.
    serving: ServeEvents = field(default_factory=ServeEvents)
