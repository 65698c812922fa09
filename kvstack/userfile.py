"""Files a user points kvstack at: read whole, every failure one of our errors naming the file.

One place decides how an unreadable, missing, non-UTF-8 or non-JSON file is reported, so the
snapshot, the model's config.json, a bench result, a plan and a run's launch record all fail alike:
a one-line message that names the file and a hint that names the fix.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from kvstack.errors import InputError
from kvstack.jsonvalue import JsonObject

M = TypeVar("M", bound=BaseModel)


def read_text(
    path: Path,
    error: type[InputError],
    hint: str,
    *,
    what: str = "",
    missing: str | None = None,
) -> str:
    """The file's text. ``what`` names the file's role ("hardware snapshot"); ``missing`` is the
    message for a file that does not exist (default: the same "cannot read" line as other failures)."""
    label = f"{what} {path}" if what else str(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise error(missing or f"cannot read {label}: it does not exist", hint=hint) from exc
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise error(f"cannot read {label}: {why}", hint=hint) from exc


def read_json_object_sha256(
    path: Path, error: type[InputError], hint: str, *, what: str = "", missing: str | None = None
) -> tuple[JsonObject, str]:
    """The file as a JSON object and the SHA-256 of its bytes, from one read."""
    label = f"{what} {path}" if what else str(path)
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except FileNotFoundError as exc:
        raise error(missing or f"cannot read {label}: it does not exist", hint=hint) from exc
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise error(f"cannot read {label}: {why}", hint=hint) from exc
    return parse_json_object(text, label, error, hint), hashlib.sha256(raw).hexdigest()


def parse_json_object(text: str, label: str, error: type[InputError], hint: str) -> JsonObject:
    """``text`` as a JSON object; anything else raises ``error`` naming ``label`` and the line."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{label} is not JSON ({exc.msg} at line {exc.lineno})", hint=hint) from exc
    if not isinstance(doc, dict):
        raise error(f"{label} must hold a JSON object", hint=hint)
    return doc


def read_json_object(
    path: Path, error: type[InputError], hint: str, *, what: str = "", missing: str | None = None
) -> JsonObject:
    """The file as a JSON object (see ``read_text`` for ``what`` and ``missing``)."""
    text = read_text(path, error, hint, what=what, missing=missing)
    return parse_json_object(text, f"{what} {path}" if what else str(path), error, hint)


def read_model(path: Path, model: type[M], kind: str, hint: str, *, what: str = "") -> M:
    """The file validated as ``model``; ``kind`` says what it should have been ("a kvstack plan")."""
    text = read_text(path, InputError, hint, what=what)
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        label = f"{what} {path}" if what else str(path)
        raise InputError(f"{label} is not {kind} ({exc.error_count()} problems)", hint=hint) from exc
