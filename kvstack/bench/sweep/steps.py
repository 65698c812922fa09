"""The steps of one layout's sweep, whatever a step sends: the ladder, then up to ``bisect`` loads
between the highest that met the SLO and the lowest that did not. A step is run by a ``StepRunner``
(bench's workload at a load, a trace replayed at a multiple of its rate) that hands what it measured
to ``record``, complete or cut short, before any error it ends with propagates: every step that ran
is kept, and the layout's capacity is recomputed after each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from kvstack.bench.schema import LayoutResult, RequestRow
from kvstack.bench.sweep.ladder import LoadLadder
from kvstack.bench.sweep.schema import LayoutSweep, Slo, SweepRow, SweepStep
from kvstack.bench.sweep.search import capacity_of, next_probe
from kvstack.bench.sweep.stats import points, step_of, sweep_rows

Record = Callable[[LayoutResult, Sequence[RequestRow]], None]


class StepRunner(Protocol):
    def __call__(self, load: float, seed: int, record: Record) -> None:
        """Send the step at ``load`` with prompts drawn from ``seed``; ``record`` what it measured."""


@dataclass(frozen=True)
class StepPlan:
    ladder: LoadLadder
    bisect: int  # extra steps bisecting the bracket (0: the ladder only)
    slo: Slo
    seed: int  # step i's prompts are drawn from seed + i


def run_step(
    lay: LayoutSweep,
    plan: StepPlan,
    runner: StepRunner,
    load: float,
    origin: Literal["ladder", "bisect"],
    rows: list[SweepRow],
    on_step: Callable[[SweepStep], None] = lambda _: None,
) -> None:
    """One step: its record and rows kept (cut short or not), then the layout's capacity."""
    index = len(lay.steps)
    seed = plan.seed + index

    def record(result: LayoutResult, measured: Sequence[RequestRow]) -> None:
        step = step_of(index, origin, load, seed, result, measured, plan.slo)
        lay.steps.append(step)
        rows.extend(sweep_rows(index, load, measured))
        lay.capacity = capacity_of(points(lay.steps))
        on_step(step)

    runner(load, seed, record)


def sweep_steps(
    lay: LayoutSweep,
    plan: StepPlan,
    runner: StepRunner,
    rows: list[SweepRow],
    on_step: Callable[[SweepStep], None] = lambda _: None,
) -> LayoutSweep:
    """The ladder on one layout, then the bisection of its bracket."""
    for load in plan.ladder.loads:
        run_step(lay, plan, runner, load, "ladder", rows, on_step)
    for _ in range(plan.bisect):
        probe = next_probe(plan.ladder.kind, lay.capacity)
        if probe is None or any(s.load == probe for s in lay.steps):
            break
        run_step(lay, plan, runner, probe, "bisect", rows, on_step)
    return lay
