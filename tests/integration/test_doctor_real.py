"""`kvstack doctor` against this machine's real parts: fio, /proc, cgroups, the CLI process."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kvstack.hardware import checks, fio
from kvstack.hardware.disk import probe_disks
from kvstack.hardware.memory import probe_memory
from kvstack.hardware.snapshot import HardwareSnapshot, parse_snapshot
from tests.support.cli_run import modules_loaded_by
from tests.support.deps import ROOT, require_program

pytestmark = pytest.mark.integration

H100_SNAPSHOT = str(ROOT / "profiles" / "hardware" / "h100-sxm.json")
# The engines, and the streaming transport only bench and validate need.
HEAVY = ("torch", "vllm", "sglang", "lmcache", "aiohttp")


@pytest.fixture
def real_fio() -> str:
    return require_program("fio")  # a skip naming it locally, a failure in CI


needs_fio = pytest.mark.usefixtures("real_fio")


def kvstack(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstack", *args], capture_output=True, text=True, timeout=timeout
    )


@needs_fio
def test_real_fio_measures_within_the_bound(tmp_path: Path) -> None:
    bound = 3.0
    # Laying out the 192 MiB test file gets 60% of the bound; beside the other test workers' writes
    # (CI's unit stage runs three on two cores) it can run past it, and measure_read_bw then says so
    # instead of measuring. That is the bound working, not fio failing: try again, at most twice.
    for _attempt in range(3):
        start = time.monotonic()
        result = fio.measure_read_bw(tmp_path, bound)
        elapsed = time.monotonic() - start
        if result.reason is None or not result.reason.startswith("writing a "):
            break
    assert result.reason is None, result.reason
    assert result.bw_bytes_per_s is not None and result.bw_bytes_per_s > 0
    assert result.method is not None and "1 MiB sequential reads" in result.method
    assert elapsed < bound + 0.5
    assert list(tmp_path.iterdir()) == []  # the test file is gone


def test_real_meminfo_cgroup_memlock_shm() -> None:
    mem = probe_memory()
    assert mem.total_bytes == psutil.virtual_memory().total
    assert mem.available_bytes is not None and 0 < mem.available_bytes <= mem.total_bytes
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY:
        assert mem.memlock_unlimited and mem.memlock_limit_bytes is None
    else:
        assert (mem.memlock_unlimited, mem.memlock_limit_bytes) == (False, soft)
    st = os.statvfs("/dev/shm")
    assert mem.shm_bytes == st.f_blocks * st.f_frsize
    assert mem.cgroup_version in (1, 2, None)
    if mem.cgroup_version is None:
        assert "cgroup_limit_bytes" in mem.unknown
    elif mem.cgroup_limit_bytes is not None:
        assert mem.cgroup_limit_bytes > 0
    nodes = [p for p in Path("/sys/devices/system/node").glob("node[0-9]*")]
    assert mem.numa_nodes == (len(nodes) or None)


def test_real_disks_resolve_to_the_right_mount(tmp_path: Path) -> None:
    (disk,), (where,) = probe_disks([tmp_path / "cache" / "kv"])
    assert disk.mount is not None and where == tmp_path
    assert os.stat(disk.mount).st_dev == os.stat(tmp_path).st_dev
    assert disk.writable and disk.total_bytes and disk.free_bytes is not None
    defaults, dirs = probe_disks()
    assert defaults, "this machine has at least one writable real filesystem"
    assert not any(d.tmpfs for d in defaults)
    for d, w in zip(defaults, dirs, strict=True):
        assert d.mount is not None and os.stat(w).st_dev == os.stat(d.mount).st_dev


def _timed_doctor(path: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    res = kvstack("doctor", "--json", "--path", str(path), "--fio-seconds", "3")
    return res, time.monotonic() - start


@needs_fio
def test_doctor_json_end_to_end(tmp_path: Path) -> None:
    res, elapsed = _timed_doctor(tmp_path)
    assert res.returncode == 0, res.stderr
    snap = parse_snapshot(res.stdout, "stdout")
    (disk,) = snap.disks
    laying_out = str(disk.unknown.get("read_bw_bytes_per_s", ""))
    if disk.read_bw_bytes_per_s is None and "test file took over" in laying_out:
        # Laying out the 192 MiB file within its 1.8 s bound takes ~107 MB/s of buffered writes: once,
        # with the other test workers writing, it did not (CI, stop 59). doctor said so, as it should;
        # the claim here is a measurement end to end, so a second try on a quieter disk must make one.
        res, elapsed = _timed_doctor(tmp_path)
        assert res.returncode == 0, res.stderr
        snap = parse_snapshot(res.stdout, "stdout")
        (disk,) = snap.disks
    assert disk.path == str(tmp_path)
    assert disk.read_bw_bytes_per_s is not None and disk.read_bw_bytes_per_s > 0, disk.unknown
    assert snap.summary and snap.checks
    assert elapsed < 3.0 + 5.0  # the fio bound plus interpreter start-up and the other probes
    assert list(tmp_path.iterdir()) == []


def test_doctor_no_fio_and_strict_agree_with_the_checks() -> None:
    res = kvstack("doctor", "--no-fio", "--json", "--strict")
    snap = HardwareSnapshot.model_validate(json.loads(res.stdout))
    assert all(d.unknown.get("read_bw_bytes_per_s") == checks.FIO_SKIPPED for d in snap.disks)
    assert res.returncode == (1 if checks.any_failed(snap.checks) else 0)


def test_doctor_rich_report() -> None:
    res = kvstack("doctor", "--no-fio")
    assert res.returncode == 0, res.stderr
    for words in ("Memory", "Disks", "Software", "Checks", "Summary:"):
        assert words in res.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["doctor", "--no-fio", "--json"],
        ["plan", "--model", "llama-3.1-8b", "--hardware", H100_SNAPSHOT, "--json"],
    ],
)
def test_cli_never_imports_engines(argv: list[str]) -> None:
    assert modules_loaded_by(argv, HEAVY) == []


def test_doctor_imports_no_other_commands_module() -> None:
    """Issue 48: the CLI imports the module of the command it runs, and none of the others'."""
    from kvstack.cli.app import COMMANDS

    modules = tuple(c.module for c in COMMANDS.values())
    argv = ["doctor", "--no-fio", "--json"]
    assert modules_loaded_by(argv, (*modules, "kvstack.apikey", "httpx")) == ["kvstack.cli.doctor"]
