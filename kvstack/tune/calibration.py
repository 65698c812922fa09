"""The costs a tune ranks with (planning/predict/served_ttft.py's ServedCalibration), from three places:

- ``--calibration``: a `bench --trace --compare none,lmcache-mp` result, a served-ttft.json, or an
  earlier tune's --out DIR (bench/replay/served_calibration.py reads them);
- ``--resume DIR`` without it: the calibration the stopped tune ranked with (its results.json);
- neither: measured by this tune on the engine, as `bench --trace FILE --compare none,lmcache-mp`
  measures it. ``none``, then LMCache's server (the layout bench serves: the plan's sizes), each on a
  fresh engine, replay the slice every candidate is sent and are calibrated after it
  (bench/replay/calibrate.py): none's costs are the plain path's, lmcache-mp's the offload path's (where
  its tiers are known, as bench's calibration reads them: bench/replay/offload_cost.py). A replay whose
  layout the ranking has (``none`` always) is then that candidate's measurement: it is not replayed
  twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kvstack.bench.replay.results import Costs
from kvstack.bench.replay.trace_bench import ReplayOutcome, Shared
from kvstack.errors import EngineError, Interrupted
from kvstack.planning.predict.served_ttft import ServedCalibration
from kvstack.serving.served_layout import ServedLayout, StartLayout
from kvstack.tune import results
from kvstack.tune.knobs import BASELINE, CALIBRATED, offloads
from kvstack.tune.measure import CandidateReplay, EngineSize, engine_size, replay
from kvstack.tune.progress import RowClock, View
from kvstack.tune.prove import candidate_run_dir
from kvstack.tune.space import Candidate

# What bench --trace --compare none,lmcache-mp calibrates: the plain path, then LMCache's server.
LAYOUTS = (BASELINE, CALIBRATED)


@dataclass(frozen=True)
class LayoutReplay:
    """One layout replayed and calibrated; ``candidate``: the layout as tune's candidates describe
    them (None where its plan is not known)."""

    name: str
    replayed: ReplayOutcome
    wall_s: dict[str, float]
    run_dir: str | None
    candidate: Candidate | None

    @property
    def costs(self) -> Costs | None:
        return self.replayed.compared.calibration()

    def document(self, counted_as: str | None) -> results.CalibrationReplay:
        """results.json's ``calibration_replays`` entry."""
        rows = self.replayed.rows
        return results.CalibrationReplay(
            layout=self.name,
            candidate=counted_as,
            run_dir=self.run_dir,
            requests=len(rows),
            ok=sum(r.ok for r in rows),
            wall_s=self.wall_s,
            calibration=self.costs,
        )


@dataclass(frozen=True)
class MeasuredCosts:
    calibration: ServedCalibration
    replays: list[LayoutReplay]
    shared: Shared  # what every layout was sent (the candidates are sent the same)
    engine: EngineSize | None  # the served engine's prefix cache, as none's counters gave it


def calibration_run_dir(root: Path, name: str) -> Path:
    """Where a calibration layout is served: none in the first candidate's run dir (it is the
    first candidate measured), lmcache-mp in one of its own."""
    return root / "calibration" if offloads(name) else candidate_run_dir(root, 1)


def from_results(doc: results.Calibration) -> ServedCalibration:
    """results.json's ``calibration`` (ServedCalibration.to_dict) back; ValueError on a damaged one."""
    found = [(name, e.offload, e.calibration.served()) for name, e in doc.layouts.items()]
    calibration = ServedCalibration.first_of(found, doc.source)
    if calibration is None:
        raise ValueError("no calibrated layout without offload")
    return calibration


def layout_candidate(name: str, layout: ServedLayout) -> Candidate | None:
    """The candidate a served layout is (its plan's connector, chunk and tier sizes), if known."""
    if not offloads(name):
        return Candidate(name)
    plan = layout.plan
    if plan is None or plan.transfer.connector != name:
        return None
    dram, disk = plan.tier("cpu"), plan.tier("disk")
    return Candidate(
        connector=name,
        chunk_tokens=plan.cache.chunk_size,
        dram_bytes=dram.size_bytes if dram is not None else 0,
        disk_bytes=disk.size_bytes if disk is not None else 0,
    )


def calibration_of(replays: list[LayoutReplay], trace: Path) -> ServedCalibration:
    """The calibration bench --trace --compare gives from the same replays: the first layout
    without offload the plain costs, the first with an offload tier the offload path's."""
    found = [
        (r.name, r.replayed.compared.hierarchy.offloads, costs.served())
        for r in replays
        if (costs := r.costs) is not None
    ]
    calibration = ServedCalibration.first_of(found, "")
    if calibration is None:
        raise EngineError(
            "none's replay gave no costs: its calibration did not run", hint="see its run dir's logs"
        )
    used = [calibration.plain_layout, *([calibration.offload_layout] if calibration.offload else [])]
    requests = len(replays[0].replayed.rows)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    source = f"measured by this tune: {' + '.join(used)} replays of {trace} ({requests} requests), {when}"
    return dataclasses.replace(calibration, source=source)


def measure_costs(
    setup: CandidateReplay,
    start: StartLayout,
    *,
    trace: Path,
    run_root: Path | None,
    deadline: float,
    view: View | None = None,
    clock: Callable[[], float],
) -> MeasuredCosts:
    """Replay the slice on ``none`` and on ``lmcache-mp``, each calibrated after its replay, and the
    calibration they give. A layout that cannot be served or replayed stops the tune (EngineError):
    without its costs nothing can be ranked."""
    shared = Shared()
    replays: list[LayoutReplay] = []
    try:
        for index, name in enumerate(LAYOUTS, 1):
            run_dir = str(calibration_run_dir(run_root, name)) if run_root is not None else None
            replays.append(_one(name, index, setup, start, shared, run_dir, deadline, view, clock))
    except (KeyboardInterrupt, Interrupted) as exc:
        raise Interrupted(
            "interrupted while tune measured its costs (none and lmcache-mp): nothing is kept yet"
        ) from exc
    finally:
        if view is not None:
            view.end()
    cal = calibration_of(replays, trace)
    return MeasuredCosts(cal, replays, shared, engine_size(replays[0].replayed.compared))


def _one(
    name: str,
    index: int,
    setup: CandidateReplay,
    start: StartLayout,
    shared: Shared,
    run_dir: str | None,
    deadline: float,
    view: View | None,
    clock: Callable[[], float],
) -> LayoutReplay:
    # the replay's last answer: its correctness check and calibration follow it
    on_row = RowClock(view, lambda: len(shared.sent), clock, "checking correctness, measuring costs")

    if view is not None:
        view.begin(f"{name} (its costs)", index, len(LAYOUTS), len(setup.rows), deadline)
        view.phase("starting the engine")
    t_start = clock()
    with start(name) as layout:
        t_ready = clock()
        if view is not None:
            view.phase("replaying the trace")
        replayed = replay(dataclasses.replace(layout, name=name), setup, shared, on_row, calibrate=True)
        t_done = clock()
        candidate = layout_candidate(name, layout)
    if view is not None:
        view.end()
    walls = {"start": t_ready - t_start, "replay": on_row.replay_s(t_ready, t_done)}
    walls["check"] = t_done - t_ready - walls["replay"]  # the correctness check and the calibration
    walls["total"] = clock() - t_start
    return LayoutReplay(name, replayed, walls, run_dir, candidate)
