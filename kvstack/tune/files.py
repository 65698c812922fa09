"""What a tune keeps in its --out DIR, each file written atomically: results.json (through its typed
model, tune/results.py), tuned.json and served-ttft.json (the calibration it ranked with, which
`tune --calibration DIR` and `plan --calibration DIR` read back)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvstack.errors import InputError
from kvstack.fsutil import atomic_write, make_out_dir
from kvstack.tune.ranking import TuneResult
from kvstack.tune.results import TuneResults


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_json(path: Path, doc: Any) -> Path:
    try:
        atomic_write(path, json.dumps(doc, indent=2) + "\n", mode=0o644)
    except OSError as exc:
        raise InputError(
            f"cannot write {path}: {exc.strerror or exc}", hint="choose a writable directory for --out"
        ) from exc
    return path


def write_results(out: Path, doc: TuneResults) -> Path:
    """results.json."""
    from kvstack.tune.report import RESULTS_JSON

    return write_json(out / RESULTS_JSON, doc.document())


def source_line(doc: TuneResults) -> str:
    src = doc.source
    return f"trace {src.trace} ({src.requests} requests), calibration {src.calibration}"


def write_ranking(out: Path, result: TuneResult, doc: TuneResults, tuned: bool = True) -> list[Path]:
    """results.json, tuned.json (the model's best; not when measuring: the measured winner's is
    written once the replays chose it), served-ttft.json (the calibration it ranked with, replaced by
    the model refit from the replays once one is measured: `plan --calibration DIR` and `tune
    --calibration DIR` read it back)."""
    from kvstack.bench.replay.served_calibration import SERVED_TTFT_JSON
    from kvstack.planning.tuned import TUNED_JSON
    from kvstack.tune.report import tuned_layout

    make_out_dir(out)
    written = [write_results(out, doc)]
    if tuned:
        layout = tuned_layout(result.winner, result.objective, source_line(doc), created=now())
        written.append(write_json(out / TUNED_JSON, layout.model_dump(mode="json")))
    return [*written, write_json(out / SERVED_TTFT_JSON, doc.calibration.model_dump(mode="json"))]
