from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.rundir import default_runs_root, new_run_dir, xdg_dir


def test_runs_live_under_xdg_state_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_runs_root() == tmp_path / "kvstack" / "runs"
    run = new_run_dir(8123)
    assert run.parent == tmp_path / "kvstack" / "runs"
    assert run.name.endswith("-8123")


def test_blank_xdg_variable_falls_back_to_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "  ")
    assert xdg_dir("XDG_CACHE_HOME", ".cache") == tmp_path / ".cache"
