"""scripts/test's exit status is its checks' own: the EXIT trap that ends the setup's background jobs
(scripts/_setup.sh) neither replaces it nor leaves a job running. A passing CI run once exited 2 because
the trap's `kill` found no job left (stop 59)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.deps import ROOT


def run_script(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = f'source "{ROOT}/scripts/_setup.sh"\nend_background_jobs_at_exit\n{body}\n'
    return subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.parametrize("status", [0, 3])
def test_the_exit_status_stays_the_scripts_with_no_job_left(status: int, tmp_path: Path) -> None:
    done = run_script(f"(true) &\nwait $!\nexit {status}", tmp_path)
    assert done.returncode == status, done.stderr


@pytest.mark.parametrize("status", [0, 3])
def test_a_job_still_running_is_ended_and_the_status_kept(status: int, tmp_path: Path) -> None:
    leftover = tmp_path / "log"
    leftover.write_text("mypy's output")
    done = run_script(
        f'SETUP_TEMP_FILES+=("{leftover}")\nsleep 300 &\necho $! > pid\nexit {status}', tmp_path
    )
    assert done.returncode == status, done.stderr
    pid = int((tmp_path / "pid").read_text())
    assert not alive(pid), "the background job outlived the script"
    assert not leftover.exists()


def test_a_failing_command_still_fails_the_script(tmp_path: Path) -> None:
    done = run_script("false\nexit 0", tmp_path)
    assert done.returncode == 1
