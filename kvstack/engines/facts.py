"""Gather the few machine facts rendering needs (read-only I/O), so rendering itself stays pure."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kvstack.engines.base import HostFacts
from kvstack.hardware.snapshot import MemoryInfo

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


def config_sha256(model_dir: Path) -> str | None:
    try:
        return hashlib.sha256((model_dir / "config.json").read_bytes()).hexdigest()
    except OSError:
        return None


def has_weights(model_dir: Path) -> bool:
    return any(next(model_dir.glob(pattern), None) is not None for pattern in WEIGHT_PATTERNS)


def gather_facts(model_path: str, memory: MemoryInfo | None = None) -> HostFacts:
    """Facts about ``model_path`` (a local directory or a hub id) and, when given, /dev/shm."""
    shm = None if memory is None else memory.shm_free_bytes
    model_dir = Path(model_path)
    if not model_dir.is_dir():
        return HostFacts(model_local=False, model_has_weights=True, shm_free_bytes=shm)
    return HostFacts(
        model_local=True,
        model_has_weights=has_weights(model_dir),
        model_config_sha256=config_sha256(model_dir),
        shm_free_bytes=shm,
    )
