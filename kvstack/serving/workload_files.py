"""Workload profiles on disk (profiles/workloads/*.yaml, or a YAML file given by path): found,
read and handed to planning's parser, which does no I/O."""

from __future__ import annotations

from pathlib import Path

import yaml

from kvstack.errors import WorkloadError
from kvstack.planning.schema import Workload
from kvstack.planning.workload import parse_workload
from kvstack.profiles import profiles_dir


def workloads_dir() -> Path:
    return profiles_dir() / "workloads"


def workload_names() -> list[str]:
    try:
        return sorted(p.stem for p in workloads_dir().glob("*.yaml"))
    except OSError:
        return []


def _path_for(name: str) -> Path:
    candidate = Path(name).expanduser()
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return candidate
    if candidate.suffix in (".yaml", ".yml") or "/" in name:  # meant as a file: say which is missing
        raise WorkloadError(
            f"workload file {candidate} does not exist",
            hint=f"fix the path, or use a profile name: {', '.join(workload_names()) or '(none found)'}",
        )
    path = workloads_dir() / f"{name}.yaml"
    if not name or "/" in name or not path.is_file():
        choices = ", ".join(workload_names()) or "(none found)"
        raise WorkloadError(
            f"unknown workload {name!r} (choices: {choices})",
            hint=f"use one of the profiles in {workloads_dir()} or a path to a YAML file",
        )
    return path


def load_workload(name: str) -> Workload:
    """A profile by name (``rag-long-doc``) or a path to a YAML file. Bad or unknown -> WorkloadError."""
    path = _path_for(name)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorkloadError(
            f"cannot read workload {path}: {exc.strerror}", hint="check the file's permissions"
        ) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        raise WorkloadError(
            f"workload {path} is not valid YAML{where}" + (f": {problem}" if problem else ""),
            hint="fix the file; see profiles/workloads/*.yaml for the format",
        ) from exc
    return parse_workload(data, str(path))
