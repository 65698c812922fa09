"""Tier directories whose KV once served a wrong answer: marked by serving, refused by the next serve."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from kvstack.canary.state import CheckRecord
from kvstack.errors import PathError
from kvstack.fsutil import atomic_write

MARKER = "KVSTACK-WRONG-KV.json"  # in a tier directory that served wrong KV


def mark_dirs(dirs: list[str], record: CheckRecord, run_dir: Path) -> list[str]:
    """A marker in each tier directory; the ones written."""
    doc = {**record.model_dump(), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run_dir": str(run_dir)}
    out = []
    for directory in dirs:
        with contextlib.suppress(OSError):
            atomic_write(Path(directory) / MARKER, json.dumps(doc, indent=1) + "\n")
            out.append(directory)
    return out


def quarantined(directory: Path) -> None:
    """Refuse a tier directory whose KV once served a wrong answer (a marker file in it)."""
    marker = directory / MARKER
    if not marker.is_file():
        return
    try:
        doc = json.loads(marker.read_text(encoding="utf-8"))
        when = f" at {doc.get('at')} (run {doc.get('run_dir')})"
    except (OSError, ValueError, AttributeError):
        when = ""
    raise PathError(
        f"the tier directory {directory} served wrong KV{when}: kvstack keeps it off until it is emptied",
        hint=f"delete its contents (rm -rf {directory}/*, {MARKER} included), or give another --cache-dir",
    )
