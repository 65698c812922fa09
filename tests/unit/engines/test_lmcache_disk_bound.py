"""kvstack.engines.disk_bound: the disk tier stays within its cap across restarts (real files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kvstack.engines.disk_bound import GIB, prepare, server_argv, trim, with_capacity

CHUNK = 256 * 1024


def write(directory: Path, name: str, age_s: float, size: int = CHUNK) -> Path:
    path = directory / name
    path.write_bytes(b"\0" * size)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_trim_deletes_the_oldest_object_files_first(tmp_path: Path) -> None:
    files = [write(tmp_path, f"k{i}.data", age_s=100 - i) for i in range(10)]  # k0 oldest
    done = trim(tmp_path, 4 * CHUNK)
    assert done.removed_files == 6 and done.kept_bytes == 4 * CHUNK
    assert [p.exists() for p in files] == [False] * 6 + [True] * 4


def test_trim_never_deletes_a_file_that_is_not_an_object(tmp_path: Path) -> None:
    tmp = write(tmp_path, "k.data.tmp", age_s=1000)  # a store in progress
    obj = write(tmp_path, "k.data", age_s=1)
    done = trim(tmp_path, 0)
    assert tmp.exists() and not obj.exists() and done.kept_bytes == CHUNK


def test_earlier_runs_keep_half_the_cap_and_lmcache_gets_the_rest(tmp_path: Path) -> None:
    for i in range(8):
        write(tmp_path, f"k{i}.data", age_s=100 - i)
    adapter = {"type": "fs_native", "base_path": str(tmp_path), "max_capacity_gb": 8 * CHUNK / GIB}
    other = {"type": "resp", "host": "h", "port": 6379}
    argv = ["py", "--l2-adapter", json.dumps(adapter), "--l2-adapter", json.dumps(other), "--x", "1"]
    final, done = prepare(tmp_path, 8 * CHUNK, argv)
    assert done.kept_bytes == 4 * CHUNK and done.removed_files == 4
    fs, resp = json.loads(final[2]), json.loads(final[4])
    assert fs["max_capacity_gb"] * GIB == 4 * CHUNK
    assert resp == other and final[5:] == ["--x", "1"]


def test_with_capacity_leaves_other_adapters_alone() -> None:
    argv = ["--l2-adapter", '{"type":"resp","host":"h","port":1}']
    assert with_capacity(argv, "/x", GIB) == argv


def test_server_argv_is_what_follows_the_separator() -> None:
    assert server_argv(["py", "-m", "m", "--dir", "d", "--", "py", "-m", "lmcache.cli.main"]) == [
        "py",
        "-m",
        "lmcache.cli.main",
    ]


def test_the_launcher_becomes_the_server_and_its_watcher_holds_the_cap(tmp_path: Path) -> None:
    """A real launch: the server (here a Python that writes past the cap) keeps the launcher's
    PID, and the watcher it forked deletes the oldest files until the directory is within the cap."""
    disk = tmp_path / "disk"
    writer = (
        "import json,os,time\n"
        f"d={str(disk)!r}\n"
        "print('server', os.getpid(), flush=True)\n"
        "for i in range(12):\n"
        f"    open(os.path.join(d, f'k{{i:02d}}.data'), 'wb').write(bytes({CHUNK}))\n"
        "    time.sleep(0.05)\n"
        "time.sleep(2.0)\n"
        "print(json.dumps(sorted(os.listdir(d))), flush=True)\n"
    )
    launcher = [sys.executable, "-m", "kvstack.engines.disk_bound", "--dir", str(disk)]
    proc = subprocess.Popen(
        [*launcher, "--cap-bytes", str(4 * CHUNK), "--", sys.executable, "-c", writer],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    lines = out.splitlines()
    assert lines[0].startswith("kvstack disk bound: ") and "capped at 1048576 bytes" in lines[0]
    assert lines[1] == f"server {proc.pid}"  # exec'd: the supervisor's PID is the server's
    assert json.loads(lines[2]) == ["k08.data", "k09.data", "k10.data", "k11.data"]
