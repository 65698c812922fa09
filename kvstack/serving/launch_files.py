"""What a launch writes before it starts: private dirs, emptied state dirs, config files, and the
record of what ran (plan.json, launch.json; secrets masked) in the run dir."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kvstack.errors import PathError
from kvstack.fsutil import atomic_write, ensure_private_dir
from kvstack.rundir import LAUNCH_JSON, PLAN_JSON
from kvstack.runtime.specs import LaunchSpec
from kvstack.serving.prepare import Launch, PreparedServe
from kvstack.userfile import read_json_object


def write_launch_files(spec: LaunchSpec) -> None:
    """Private cache dirs (0700), emptied state dirs, config files (0600) written atomically."""
    for directory in spec.private_dirs:
        ensure_private_dir(Path(directory))
    for directory in spec.fresh_dirs:
        # Stale files here (e.g. PROMETHEUS_MULTIPROC_DIR) would be summed into this run's counters.
        shutil.rmtree(directory, ignore_errors=True)
        ensure_private_dir(Path(directory))
    for f in spec.files:
        atomic_write(Path(f.path), f.content, mode=f.mode)


def record_run(prepared: PreparedServe) -> None:
    """plan.json and launch.json (secrets masked) in the run dir: what ran, for later reading."""
    run_dir = ensure_private_dir(prepared.run_dir)
    atomic_write(run_dir / PLAN_JSON, prepared.plan.model_dump_json(indent=2) + "\n")
    atomic_write(run_dir / LAUNCH_JSON, json.dumps(prepared.record(), indent=2) + "\n")


def record_spec(run_dir: Path, spec: LaunchSpec) -> None:
    """launch.json (secrets masked) rewritten when serving restarts a unit with another spec; what
    it says of the tune that chose the layout (``tuned``) stays."""
    doc = spec.public()
    path = run_dir / LAUNCH_JSON
    if path.is_file():
        old = read_json_object(
            path, PathError, "it is kvstack's record of this run: restore it or restart serve"
        )
        if "tuned" in old:
            doc["tuned"] = old["tuned"]
    atomic_write(path, json.dumps(doc, indent=2) + "\n")


def record_replica_spec(replica_dir: Path, spec: LaunchSpec) -> None:
    """A unit restarted with another spec: its launch.json and, when it is one replica of several,
    its entry in the whole launch's launch.json above it (and the top-level fields, which are the
    first replica's). Nothing is written where serve wrote no record."""
    if not (replica_dir / LAUNCH_JSON).is_file():
        return
    record_spec(replica_dir, spec)
    top = replica_dir.parent / LAUNCH_JSON
    if not top.is_file():
        return
    doc = read_json_object(top, PathError, "it is kvstack's record of this run: restore it or restart serve")
    replicas = doc.get("replicas")
    if not isinstance(replicas, list):
        return
    new = spec.public()
    for i, entry in enumerate(replicas):
        if not isinstance(entry, dict) or Path(str(entry.get("run_dir"))) != replica_dir:
            continue
        replicas[i] = {"index": entry.get("index"), "run_dir": entry.get("run_dir"), **new}
        if entry.get("index") == 0:  # the top level repeats the first replica's fields
            for key in entry.keys() - {"index", "run_dir"}:
                doc.pop(key, None)
            doc.update(new)
    atomic_write(top, json.dumps(doc, indent=2) + "\n")


def record(launch: Launch) -> None:
    """Each replica's plan.json and launch.json in its run dir; with several replicas or a router,
    the whole launch's at the top of the run dir too (every replica and the router, masked)."""
    if launch.multi:
        run_dir = ensure_private_dir(launch.run_dir)
        doc = launch.dry_run_document()
        atomic_write(run_dir / PLAN_JSON, json.dumps(doc.pop("plan"), indent=2) + "\n")
        atomic_write(run_dir / LAUNCH_JSON, json.dumps(doc, indent=2) + "\n")
    for p in launch.replicas:
        record_run(p)
