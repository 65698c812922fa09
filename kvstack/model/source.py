"""What ``--model`` names, resolved in one order: a local directory, a Hugging Face id from the
local cache, a catalog name (or id), a Hugging Face id fetched from the hub.

A cached checkpoint beats the catalog: its config.json and weight files are what the engine will
load. The catalog stays for models the machine does not have, so that planning them needs no
network; the hub is asked (config.json and the safetensors index only) for ids the catalog lacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kvstack.errors import ModelConfigError
from kvstack.model import hub
from kvstack.model.catalog import catalog_model, find_catalog_entry
from kvstack.model.geometry import ModelGeometry
from kvstack.model.local import local_model_dir, read_model_dir

Origin = Literal["directory", "hf-cache", "hub", "catalog"]


@dataclass(frozen=True)
class ModelSource:
    geometry: ModelGeometry
    path: str  # what the engine is given: the absolute directory, or the hub id
    revision: str | None  # the engine's --revision (hub ids only)
    origin: Origin
    commit: str | None = None  # the cache snapshot's commit (hub ids found in or fetched into the cache)
    # Where its config.json was read (a local directory or the cache snapshot; None: the catalog)
    # and that file's SHA-256: what the launch and the engine probe use, with no second read.
    directory: Path | None = None
    config_sha256: str | None = None


def _from_snapshot(snapshot: hub.Snapshot) -> ModelSource:
    geometry, sha256 = read_model_dir(snapshot.path, name=snapshot.repo_id)
    if geometry.checkpoint_bytes is None and snapshot.weight_bytes:
        geometry = geometry.with_checkpoint_bytes(snapshot.weight_bytes)
    return ModelSource(
        geometry=geometry,
        path=snapshot.repo_id,
        revision=snapshot.revision,
        origin="hub" if snapshot.fetched else "hf-cache",
        commit=snapshot.commit,
        directory=snapshot.path,
        config_sha256=sha256,
    )


def resolve_model(spec: str, revision: str | None = None) -> ModelSource:
    """The model ``--model spec [--revision R]`` names; raises a ModelConfigError (exit 2) saying why not."""
    if not spec or not spec.strip():
        raise ModelConfigError(
            "--model is empty", hint="give a model directory, a Hugging Face id or a catalog name"
        )
    if revision is not None and not revision.strip():
        raise ModelConfigError("--revision is empty", hint="give a branch, tag or commit, or drop --revision")
    local = local_model_dir(spec)
    if local is not None:
        if revision is not None:
            raise ModelConfigError(
                f"--revision applies to a Hugging Face id, not to the local directory {local}",
                hint="drop --revision, or give the model's id (org/name)",
            )
        geometry, sha256 = read_model_dir(local)
        return ModelSource(geometry, str(local), None, "directory", directory=local, config_sha256=sha256)
    if hub.is_hub_id(spec):
        snapshot = hub.cached(spec, revision)
        if snapshot is not None:
            return _from_snapshot(snapshot)
        entry = find_catalog_entry(spec) if revision is None else None
        if entry is not None:
            # The engine gets the id as typed (an alias may be another checkpoint of the same
            # geometry: a base model beside its instruct tune), in the catalog's spelling when it
            # is the entry's own id; the plan is named after it as a cached snapshot's would be,
            # so the served name and the cache namespace do not change once the model is cached.
            path = entry.repo_id if spec.lower() == entry.repo_id.lower() else spec
            geometry = entry.geometry().model_copy()
            geometry.name = path
            return ModelSource(geometry, path, None, "catalog")
        return _from_snapshot(hub.fetch(spec, revision))
    if revision is not None:
        raise ModelConfigError(
            f"--revision needs a Hugging Face id (org/name), not {spec!r}",
            hint="give the model's id, e.g. --model Qwen/Qwen2.5-0.5B-Instruct --revision main",
        )
    geometry, path = catalog_model(spec)  # a catalog name, or the error naming the choices
    return ModelSource(geometry, path, None, "catalog")
