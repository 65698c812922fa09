"""A model directory on this machine: its config.json and its checkpoint's size."""

from __future__ import annotations

from pathlib import Path

from kvstack.errors import ModelConfigError
from kvstack.jsonvalue import JsonObject
from kvstack.model.checkpoint import checkpoint_bytes
from kvstack.model.geometry import ModelGeometry, geometry_from_config
from kvstack.userfile import read_json_object, read_json_object_sha256


def load_model_dir(path: Path, name: str | None = None) -> ModelGeometry:
    """Geometry from ``path``/config.json, its weight size from the checkpoint files when present.

    ``name`` (a hub id) overrides the config's ``_name_or_path`` and the directory's name.
    """
    return read_model_dir(path, name)[0]


def read_model_dir(path: Path, name: str | None = None) -> tuple[ModelGeometry, str]:
    """``load_model_dir``'s geometry and the SHA-256 of the config.json it read (one read)."""
    cfg_file = path / "config.json"
    hint = "fix or re-download config.json"
    missing = f"{path} has no config.json"
    if not cfg_file.exists():
        hint = "point --model at a model directory or use a catalog name"
    config, sha256 = read_json_object_sha256(cfg_file, ModelConfigError, hint, missing=missing)
    config = with_modelopt_file(path, config)
    if name is None:
        own = config.get("_name_or_path")
        name = own if isinstance(own, str) and own else path.name
    geometry = geometry_from_config(config, name, str(path))
    stored = checkpoint_bytes(path)
    if stored is not None:
        geometry = geometry.with_checkpoint_bytes(stored)
    return geometry, sha256


MODELOPT_FILE = "hf_quant_config.json"


def with_modelopt_file(path: Path, config: JsonObject) -> JsonObject:
    """``config`` with the quantization ModelOpt 0.29 and older saved beside it: vLLM reads
    hf_quant_config.json where config.json has no quantization_config
    (vllm/transformers_utils/config.py), its scheme under "quantization"."""
    file = path / MODELOPT_FILE
    if "quantization_config" in config or not file.is_file():
        return config
    saved = read_json_object(file, ModelConfigError, f"fix or re-download {MODELOPT_FILE}")
    scheme = saved.get("quantization")
    if not isinstance(scheme, dict):
        return config
    return {**config, "quantization_config": {"quant_method": "modelopt", **scheme}}


def local_model_dir(spec: str) -> Path | None:
    """The directory ``spec`` names (a model directory or its config.json), resolved; else None."""
    path = Path(spec).expanduser()
    if path.is_file() and path.name == "config.json":
        path = path.parent
    return path.resolve() if path.is_dir() else None
