"""A model directory on this machine: its config.json and its checkpoint's size."""

from __future__ import annotations

import json
from pathlib import Path

from kvstack.errors import ModelConfigError
from kvstack.model.checkpoint import checkpoint_bytes
from kvstack.model.geometry import ModelGeometry, geometry_from_config


def load_model_dir(path: Path, name: str | None = None) -> ModelGeometry:
    """Geometry from ``path``/config.json, its weight size from the checkpoint files when present.

    ``name`` (a hub id) overrides the config's ``_name_or_path`` and the directory's name.
    """
    cfg_file = path / "config.json"
    try:
        text = cfg_file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ModelConfigError(
            f"{path} has no config.json", hint="point --model at a model directory or use a catalog name"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ModelConfigError(
            f"cannot read {cfg_file}: {why}", hint="config.json must be a readable UTF-8 JSON file"
        ) from exc
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(
            f"{cfg_file} is not JSON ({exc.msg} at line {exc.lineno})", hint="fix or re-download config.json"
        ) from exc
    if not isinstance(config, dict):
        raise ModelConfigError(f"{cfg_file} must hold a JSON object", hint="fix or re-download config.json")
    if name is None:
        own = config.get("_name_or_path")
        name = own if isinstance(own, str) and own else path.name
    geometry = geometry_from_config(config, name, str(path))
    stored = checkpoint_bytes(path)
    return geometry if stored is None else geometry.model_copy(update={"checkpoint_bytes": stored})


def local_model_dir(spec: str) -> Path | None:
    """The directory ``spec`` names (a model directory or its config.json), resolved; else None."""
    path = Path(spec).expanduser()
    if path.is_file() and path.name == "config.json":
        path = path.parent
    return path.resolve() if path.is_dir() else None
