"""Where ``kvstack serve`` keeps its runs and what each run dir holds: serving writes them, top
reads them, so the names live here once."""

from __future__ import annotations

import os
import time
from pathlib import Path

PLAN_JSON = "plan.json"
LAUNCH_JSON = "launch.json"
VALIDATION_JSON = "validation.json"


def xdg_dir(var: str, fallback: str) -> Path:
    """``$var`` when set and non-blank, else ``~/fallback`` (the XDG base-directory rule)."""
    base = os.environ.get(var, "").strip()
    return Path(base) if base else Path.home() / fallback


def default_runs_root() -> Path:
    return xdg_dir("XDG_STATE_HOME", ".local/state") / "kvstack" / "runs"


def new_run_dir(port: int) -> Path:
    """A fresh run's dir: named for when it started and the port it serves."""
    return default_runs_root() / f"{time.strftime('%Y%m%d-%H%M%S')}-{port}"
