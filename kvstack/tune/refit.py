"""The ranking model refit from the replays tune has measured. Pure.

The first ranking's costs come from a calibration (a few requests, maybe another day's or another
machine's). Each replay measures hundreds of requests of the user's own traffic on this engine, and
the slice's simulation (tune/predict.py, the step-level simulator serving each replayed candidate)
says where each one's prompt tokens came from, so each replay refits the
model before the next candidate is predicted and queued:

- ``none``'s replay fits the plain path: TTFT = fixed + linear x recomputed + quadratic x
  (prompt^2 - held^2), over its answered requests;
- the replays of one offload connector (pooled, every chunk size measured) fit what its path costs
  over the plain one's: extra = miss + chunk x the prompt's chunks + fetch x tokens its tiers
  served. One chunk size cannot tell the per-chunk term from the fixed one (a trace's prompts have
  similar chunk counts at one chunk size); two can, which is what the measured 1-in-40 tune showed
  LMCache needs (its cost grows with the chunks a request moves: docs/measurements.md).

Each fit is a non-negative least-absolute-deviations one (through the middle of the requests, as the p50 the
ranking predicts is): a replay on its timestamps queues some requests behind others, which no
per-request cost explains and which would pull a least-squares fit up.
A connector not measured yet keeps its calibrated extra cost over the refit plain path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvstack.planning.predict.served_ttft import FloatArray, ServedCosts, nonneg_fit, whole_chunks
from kvstack.tune.knobs import BASELINE
from kvstack.tune.predict import Costs, SimTrace
from kvstack.tune.space import Candidate

MIN_ROWS = 8  # fewer answered requests than this fit nothing
IRLS_STEPS = 20
IRLS_FLOOR_S = 1e-4  # residuals below 0.1 ms weigh as 0.1 ms (keeps the weights finite)


@dataclass(frozen=True)
class Replayed:
    """One measured candidate: its TTFT per request sent (None: not answered), in the slice's order."""

    candidate: Candidate
    ttfts: Sequence[float | None]


def _robust(columns: list[FloatArray], y: FloatArray) -> list[float]:
    """Least absolute deviations, no coefficient negative (iteratively reweighted least squares):
    the fit through the middle of each request's TTFT, as the p50 it predicts is, which a few
    requests queued behind others do not pull up as they pull a least-squares fit."""
    design = np.stack(columns, axis=1)
    coef = nonneg_fit(columns, y)
    for _ in range(IRLS_STEPS):
        res = np.abs(design @ np.array(coef) - y)
        w = np.sqrt(1.0 / np.maximum(res, IRLS_FLOOR_S))
        coef = nonneg_fit([c * w for c in columns], y * w)
    return coef


def _answered(trace: SimTrace, r: Replayed) -> tuple[npt.NDArray[np.bool_], FloatArray]:
    """(mask of answered requests, their TTFTs) over the slice."""
    n = trace.n
    t = np.full(n, np.nan)
    for i, v in enumerate(r.ttfts[:n]):
        if v is not None:
            t[i] = v
    ok = ~np.isnan(t)
    return ok, t


def fit_plain(trace: SimTrace, replayed: Replayed, calibrated: Costs) -> ServedCosts | None:
    """The plain path's costs from ``none``'s replay (None: too few answers); where its prompts
    came from is the simulation's, with the ``calibrated`` costs."""
    ok, t = _answered(trace, replayed)
    if ok.sum() < MIN_ROWS:
        return None
    lengths = trace.lengths.astype(np.float64)[ok]
    engine = trace.simulate(replayed.candidate, calibrated).engine
    held = np.minimum(engine.astype(np.float64)[ok], lengths)
    fixed, linear, quadratic = _robust([np.ones_like(lengths), lengths - held, lengths**2 - held**2], t[ok])
    return ServedCosts(
        hit_s=fixed, miss_s=0.0, linear_s=linear, quadratic_s=quadratic,
        source=f"refit: none's replay ({int(ok.sum())} requests)",
    )  # fmt: skip


def fit_connector(
    trace: SimTrace, replays: Sequence[Replayed], plain: ServedCosts, calibrated: Costs
) -> ServedCosts | None:
    """One offload connector's costs from its replays (pooled), over ``plain``'s recompute."""
    ys: list[FloatArray] = []
    cols: list[list[FloatArray]] = [[], [], []]
    chunk_sizes: set[int] = set()
    lengths = trace.lengths.astype(np.float64)
    for r in replays:
        ok, t = _answered(trace, r)
        s = trace.simulate(r.candidate, calibrated)
        if r.candidate.prompt_gate is not None:
            ok = ok & ~s.gated  # a gated request took the plain path
        tier = (s.dram + s.disk).astype(np.float64)  # a load gate's: none (recomputed)
        held = s.engine.astype(np.float64) + tier
        plain_ttft, _ = plain.predict(lengths, held, np.zeros(len(lengths)))
        ys.append((t - plain_ttft)[ok])
        cols[0].append(np.ones(int(ok.sum())))
        cols[1].append(whole_chunks(lengths, r.candidate.chunk_tokens)[ok])
        cols[2].append(tier[ok])
        chunk_sizes.add(r.candidate.chunk_tokens)
    y = np.concatenate(ys) if ys else np.zeros(0)
    if len(y) < MIN_ROWS:
        return None
    columns = [np.concatenate(c) for c in cols]
    if len(chunk_sizes) < 2:
        columns[1] = np.zeros_like(columns[1])  # one chunk size: no per-chunk term (it is the fixed)
    miss, chunk, fetch = _robust(columns, y)
    sizes = ", ".join(str(c) for c in sorted(chunk_sizes))
    return ServedCosts(
        hit_s=plain.fixed_s, miss_s=miss, linear_s=plain.linear_s, quadratic_s=plain.quadratic_s,
        fetch_s={"dram": fetch, "disk": fetch}, chunk_s=chunk,
        source=f"refit: {len(replays)} replay(s), {len(y)} requests, chunks {sizes}",
    )  # fmt: skip


def refit(calibrated: Costs, trace: SimTrace, replays: Sequence[Replayed]) -> Costs:
    """``calibrated`` refit from ``replays`` (every candidate measured so far, on ``trace``, the slice)."""
    base = next((r for r in replays if r.candidate.connector == BASELINE), None)
    plain = calibrated.plain
    if base is not None:
        plain = fit_plain(trace, base, calibrated) or plain

    def shifted(c: ServedCosts) -> ServedCosts:
        """A connector not measured: its calibrated extra over the refit plain path."""
        return dataclasses.replace(
            c, hit_s=plain.fixed_s, miss_s=max(0.0, c.fixed_s - calibrated.plain.fixed_s),
            linear_s=plain.linear_s, quadratic_s=plain.quadratic_s,
        )  # fmt: skip

    default = shifted(calibrated.default)
    by_connector = {name: shifted(c) for name, c in calibrated.by_connector.items()}
    for name in sorted({r.candidate.connector for r in replays if r.candidate.offloads}):
        fit = fit_connector(trace, [r for r in replays if r.candidate.connector == name], plain, calibrated)
        if fit is not None:
            by_connector[name] = fit
    return Costs(plain, default, by_connector)
