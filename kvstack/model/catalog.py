"""The catalog in profiles/models.yaml: models a machine does not have, planned without a network."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvstack.errors import ModelConfigError
from kvstack.jsonvalue import JsonObject
from kvstack.model.geometry import ModelGeometry, geometry_from_config
from kvstack.profiles import profiles_dir


class CatalogEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    repo_id: str  # what the engine is given (resolved from its cache or the hub at serve time)
    aliases: list[str] = Field(default_factory=list)
    description: str = ""
    params: int | None = None  # published count, preferred over the estimate from shapes
    active_params: int | None = None
    config: JsonObject

    def names(self) -> list[str]:
        return [self.name, self.repo_id, *self.aliases]

    def geometry(self) -> ModelGeometry:
        geo = geometry_from_config(self.config, self.name, "catalog")
        if self.params is None:
            return geo
        active = self.active_params or (self.params if geo.active_params == geo.params else geo.active_params)
        out = geo.model_copy()
        out.params, out.active_params = self.params, active
        return out


def catalog_path() -> Path:
    return profiles_dir() / "models.yaml"


@lru_cache(maxsize=4)
def _catalog_at(path: Path, mtime_ns: int) -> tuple[CatalogEntry, ...]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ModelConfigError(
            f"cannot read the model catalog {path}: {exc}", hint="fix or restore it"
        ) from exc
    entries = data.get("models") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ModelConfigError(f"model catalog {path} has no 'models' list", hint="fix or restore it")
    try:
        return tuple(CatalogEntry.model_validate(e) for e in entries)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ModelConfigError(
            f"model catalog {path}: {where}: {first['msg']}", hint="fix that entry"
        ) from exc


def load_catalog() -> tuple[CatalogEntry, ...]:
    path = catalog_path()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return ()
    return _catalog_at(path, mtime)


def find_catalog_entry(spec: str) -> CatalogEntry | None:
    key = spec.strip().lower()
    return next((e for e in load_catalog() if key in (n.lower() for n in e.names())), None)


def catalog_names() -> list[str]:
    return [e.name for e in load_catalog()]


def catalog_model(spec: str) -> tuple[ModelGeometry, str]:
    """``(geometry, repo id)`` of a catalog name, alias or id; else the error naming the choices.

    ``kvstack.model.source.resolve_model`` is the way in for ``--model``: it tries a local directory
    and the Hugging Face cache first, and comes here last.
    """
    if not spec or not spec.strip():
        raise ModelConfigError("--model is empty", hint="give a model directory or a catalog name")
    entry = find_catalog_entry(spec)
    if entry is not None:
        return entry.geometry(), entry.repo_id
    choices = ", ".join(catalog_names()) or "(the catalog is empty)"
    if spec.startswith(("/", "./", "../", "~")) or Path(spec).expanduser().exists():
        raise ModelConfigError(
            f"model directory {spec} does not exist", hint=f"or use a catalog name: {choices}"
        )
    raise ModelConfigError(
        f"unknown model {spec!r}: not a local directory and not in the catalog (choices: {choices})",
        hint="download the model and pass its directory, or add it to profiles/models.yaml",
    )
