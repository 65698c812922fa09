"""Gather the few machine facts rendering needs (read-only I/O), so rendering itself stays pure."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kvstack.engines.base import HostFacts
from kvstack.hardware.snapshot import MemoryInfo
from kvstack.model import hub
from kvstack.model.checkpoint import WEIGHT_PATTERNS, has_weights
from kvstack.model.source import ModelSource

__all__ = ["WEIGHT_PATTERNS", "config_sha256", "gather_facts", "has_weights"]


def config_sha256(model_dir: Path) -> str | None:
    try:
        return hashlib.sha256((model_dir / "config.json").read_bytes()).hexdigest()
    except OSError:
        return None


def _from_resolved(model_path: str, resolved: ModelSource, shm: int | None) -> HostFacts:
    """The facts of a model resolved once (its directory or cache snapshot, its config.json's
    SHA-256, the snapshot's commit): nothing is read again, the hub is not asked again."""
    assert resolved.directory is not None
    if resolved.origin == "directory":
        return HostFacts(
            model_local=True,
            model_has_weights=has_weights(resolved.directory),
            model_config_sha256=resolved.config_sha256,
            shm_free_bytes=shm,
        )
    return HostFacts(
        model_local=True,
        model_has_weights=True,
        model_config_sha256=resolved.config_sha256,
        model_commit=resolved.commit,
        engine_model_name=str(resolved.directory) if hub.offline_variable() is not None else None,
        shm_free_bytes=shm,
        hub_token=hub.token(),  # the engine reads it too
    )


def _cached_snapshot(model_path: str, revision: str | None) -> tuple[Path, str] | None:
    """(directory, commit) of the Hugging Face cache snapshot a hub id resolves to, if cached."""
    if not hub.is_hub_id(model_path):
        return None
    snapshot = hub.cached(model_path, revision)
    return None if snapshot is None else (snapshot.path, snapshot.commit)


def gather_facts(
    model_path: str,
    memory: MemoryInfo | None = None,
    revision: str | None = None,
    resolved: ModelSource | None = None,
) -> HostFacts:
    """Facts about ``model_path`` (a local directory or a hub id) and, when given, /dev/shm.

    A local directory without weight files is served with dummy weights (the demo's way). A hub id
    always names real weights: a cached snapshot is judged by its config.json and commit, and the
    engine loads the weights from it or from the hub; serve's preflight
    (``hub.require_weights``) refuses a launch where it could do neither.
    """
    shm = None if memory is None else memory.shm_free_bytes
    if resolved is not None and resolved.directory is not None:
        return _from_resolved(model_path, resolved, shm)
    model_dir = Path(model_path)
    if model_dir.is_dir():
        return HostFacts(
            model_local=True,
            model_has_weights=has_weights(model_dir),
            model_config_sha256=config_sha256(model_dir),
            shm_free_bytes=shm,
        )
    token = hub.token() if hub.is_hub_id(model_path) else None  # the engine reads it too
    cached = _cached_snapshot(model_path, revision)
    if cached is None:
        return HostFacts(model_local=False, model_has_weights=True, shm_free_bytes=shm, hub_token=token)
    snapshot_dir, commit = cached
    return HostFacts(
        model_local=True,
        model_has_weights=True,
        model_config_sha256=config_sha256(snapshot_dir),
        model_commit=commit,
        engine_model_name=str(snapshot_dir) if hub.offline_variable() is not None else None,
        shm_free_bytes=shm,
        hub_token=token,
    )
