"""A measurement's hold on a server's canary: written while it runs, gone after, dead holders ignored."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvstack.clients import quiet

URL = "http://127.0.0.1:8000"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path / "kvstack" / "quiet"


def test_a_hold_lasts_as_long_as_its_block(state: Path) -> None:
    assert quiet.holder(URL) is None
    with quiet.hold(URL):
        assert quiet.holder(URL) == os.getpid()
        assert quiet.holder("http://localhost:8000") == os.getpid()  # the same server, spelled otherwise
        assert quiet.holder("http://127.0.0.1:8001") is None  # another server
        (entry,) = state.iterdir()
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert quiet.holder(URL) is None
    assert not state.parent.exists(), "the directories the hold made are gone with it"


def test_a_hold_whose_process_died_is_ignored_and_removed(state: Path) -> None:
    held = f"h = quiet.hold({URL!r}); h.__enter__()"  # kept in h: a collected hold would let go
    code = f"from kvstack.clients import quiet; {held}; import os; os._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))
    assert len(list(state.iterdir())) == 1  # it died holding
    assert quiet.holder(URL) is None
    assert not list(state.iterdir())


def test_no_state_dir_means_no_hold_and_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))  # a file where the directory would go
    with quiet.hold(URL):
        assert quiet.holder(URL) is None


def test_a_canary_sees_a_hold_and_a_hold_waits_for_the_canarys_requests(state: Path) -> None:
    with quiet.busy(URL) as free:
        assert free  # nobody measures: the canary may send
    with quiet.hold(URL), quiet.busy(URL) as free:
        assert not free  # a measurement holds the server: the canary sends nothing
    # A canary (another process) in the middle of its requests: the hold starts once it is done.
    code = f"from kvstack.clients import quiet; import time\nwith quiet.busy({URL!r}): time.sleep(1.5)"
    child = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ))
    try:
        deadline = time.monotonic() + 30
        while not any(p.name.startswith(quiet.server_key(URL) + ".busy") for p in state.glob("*")):
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.02)
        with quiet.hold(URL):
            assert child.poll() is not None or not list(state.glob("*.busy-*")), "held while it was busy"
    finally:
        child.wait(30)
