"""The engines a tune serves, through serving's own paths: each candidate as `serve --tuned` serves a
winner, and (no --calibration) the layouts its costs are measured on as `bench --trace --compare
none,lmcache-mp` serves them. Each starts on an empty disk tier of its own (a private directory
under the cache root, removed after it): an engine must start from cold caches, not from the files
an earlier one wrote."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvstack.errors import PathError
from kvstack.fsutil import ensure_private_dir
from kvstack.serving.served_layout import ServedLayout, StartLayout
from kvstack.tune.calibration import calibration_run_dir
from kvstack.tune.files import now, write_json
from kvstack.tune.predict import CandidatePrediction
from kvstack.tune.prove import StartCandidate, candidate_run_dir
from kvstack.tune.space import Candidate

if TYPE_CHECKING:
    from kvstack.serving.request import ServeRequest


def _fresh_cache_dir(base: Any, prefix: str) -> Path:
    """A new private directory under ``base``'s cache root (mode 0700) for one engine's disk tier."""
    cache_root = ensure_private_dir(base.resolved_cache_root(), "--cache-dir")
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=cache_root))
    except OSError as exc:
        raise PathError(
            f"cannot create a directory in {cache_root}: {exc.strerror}", hint="choose a writable --cache-dir"
        ) from exc


def candidate_request(
    base: ServeRequest, root: Path, p: CandidatePrediction, index: int, objective: str
) -> ServeRequest:
    """``base`` (a ServeRequest) with ``p``'s candidate as its tuned layout: the candidate's
    tuned.json written in the ``index``-th run dir, which the request serves from (and records in
    its launch.json), exactly as `serve --tuned` serves a winner. Its disk tier lives in a fresh
    private directory of its own under the cache root (``serve_starter`` removes it afterwards)."""
    from kvstack.planning.tuned import TUNED_JSON
    from kvstack.tune.report import tuned_layout

    # Private, as serve keeps its run and cache directories (fsutil.ensure_private_dir).
    run_dir = ensure_private_dir(candidate_run_dir(root, index), "--out")
    cache_dir = _fresh_cache_dir(base, f"tune-{index:02d}-")
    why = f"kvstack tune {root.parent}: candidate {index}, measured"
    write_json(run_dir / TUNED_JSON, tuned_layout(p, objective, why, created=now()).model_dump(mode="json"))
    out = base.model_copy()
    out.tuned, out.run_dir, out.cache_dir = run_dir / TUNED_JSON, run_dir, cache_dir
    return out


@contextmanager
def _served_once(request: Any, layout: str, events: Any) -> Iterator[ServedLayout]:
    """``request`` served as ``layout`` through serving's layout starter (serving/start_layout.py, as
    bench --compare serves its layouts); its cache directory removed after: the disk tier's space
    back, and nothing of it reused by the next engine."""
    from kvstack.serving.start_layout import TierOverrides, sized_layout_starter

    try:
        with sized_layout_starter(request, TierOverrides(), events)(layout) as served:
            yield served
    finally:
        shutil.rmtree(request.cache_dir, ignore_errors=True)


def serve_starter(
    base: Any, root: Path, events: Any, ranked: Sequence[CandidatePrediction], objective: str
) -> StartCandidate:
    """``start(candidate, n)``: ``candidate_request`` served, one engine."""
    by_label = {p.candidate.label: p for p in ranked}

    def start(candidate: Candidate, index: int) -> AbstractContextManager[ServedLayout]:
        request = candidate_request(base, root, by_label[candidate.label], index, objective)
        return _served_once(request, candidate.connector, events)

    return start


def calibration_starter(base: ServeRequest, root: Path, events: Any) -> StartLayout:
    """``start(name)``: ``base`` served with ``--offload name`` and the plan's sizes, exactly as `bench
    --trace --compare` serves a layout, in its calibration run dir under ``root``."""

    def start(name: str) -> AbstractContextManager[ServedLayout]:
        run_dir = ensure_private_dir(calibration_run_dir(root, name), "--out")
        request = base.model_copy()
        request.run_dir, request.cache_dir = run_dir, _fresh_cache_dir(base, f"tune-{name}-")
        return _served_once(request, name, events)

    return start
