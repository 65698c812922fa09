"""Where kvstack keeps its state, and the layout of a ``kvstack serve`` run dir: serving writes it,
``top``, ``validate`` and ``bench`` read it, so the names live here once.

A run dir (0700) holds ``plan.json`` and ``launch.json`` (what ran, secrets masked),
``validation.json`` (the last validation report), ``canary.json`` (the canary's state: checks by
tier and verdict, the share of prefill it took, a fallback) and ``events.jsonl`` (one line per canary
check and per action taken on wrong KV), ``control-token`` (0600, kvstack's key to the
engine's control routes) and ``<process>.log`` for each supervised process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PLAN_JSON = "plan.json"
LAUNCH_JSON = "launch.json"
VALIDATION_JSON = "validation.json"
CONTROL_TOKEN = "control-token"
CANARY_JSON = "canary.json"
EVENTS_JSONL = "events.jsonl"


def log_name(process: str) -> str:
    return f"{process}.log"


def xdg_dir(var: str, fallback: str) -> Path:
    """``$var`` when set and non-blank, else ``~/fallback`` (the XDG base-directory rule)."""
    base = os.environ.get(var, "").strip()
    return Path(base) if base else Path.home() / fallback


def default_runs_root() -> Path:
    return xdg_dir("XDG_STATE_HOME", ".local/state") / "kvstack" / "runs"


def new_run_dir(port: int) -> Path:
    """A fresh run's dir: named for when it started and the port it serves."""
    return default_runs_root() / f"{time.strftime('%Y%m%d-%H%M%S')}-{port}"


def default_cache_root() -> Path:
    return xdg_dir("XDG_CACHE_HOME", ".cache") / "kvstack"
