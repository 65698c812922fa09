"""What a checkpoint directory holds: weight files, and their size as stored (quantized or not).

The size the engine loads is the size of the files (a safetensors index's ``total_size`` when there
is one, else the files' own sizes), which beats any estimate from config.json's shapes. Files in a
Hugging Face cache snapshot are symlinks into ``blobs/``; ``stat`` follows them.
"""

from __future__ import annotations

import json
from pathlib import Path

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")
# The formats vLLM and SGLang load by default, each with its index, in their order of preference.
_FORMATS = (
    ("model.safetensors.index.json", "*.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model*.bin"),
)


def has_weights(model_dir: Path) -> bool:
    return any(next(model_dir.glob(pattern), None) is not None for pattern in WEIGHT_PATTERNS)


def index_total_size(index_file: Path) -> int | None:
    """``metadata.total_size`` of a weight index, or None when it is missing or malformed."""
    try:
        data = json.loads(index_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    meta = data.get("metadata") if isinstance(data, dict) else None
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if isinstance(total, bool) or not isinstance(total, int | float) or total <= 0:
        return None
    return int(total)


def _files_size(model_dir: Path, pattern: str) -> int | None:
    sizes = []
    for path in model_dir.glob(pattern):
        try:
            sizes.append(path.stat().st_size)
        except OSError:  # a dangling symlink: the blob is not there
            return None
    return sum(sizes) if sizes else None


def checkpoint_bytes(model_dir: Path) -> int | None:
    """The weights' size as stored: the index's total, else the files' sizes; None without either."""
    for index, pattern in _FORMATS:
        total = index_total_size(model_dir / index)
        if total is not None:
            return total
        size = _files_size(model_dir, pattern)
        if size is not None:
            return size
    return None
