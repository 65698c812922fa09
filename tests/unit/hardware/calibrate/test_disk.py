"""Disk -> device reads through the real measurement code, on device cpu, in a temporary directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

from kvstack.hardware.calibrate.disk import drop_cache, measure_disk
from kvstack.hardware.calibrate.timing import Deadline
from tests.support.deps import require_program

CPU = torch.device("cpu")
KiB = 1024


def _resident_bytes(path: Path) -> int:
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


def test_every_method_reads_the_file_set_and_removes_it(tmp_path: Path) -> None:
    figures = measure_disk(tmp_path, CPU, 256 * KiB, 3, Deadline.after(5.0))
    assert (figures.path, figures.files, figures.file_bytes) == (str(tmp_path), 3, 256 * KiB)
    assert figures.plain_bytes_per_s is not None and figures.plain_bytes_per_s > 0
    assert figures.bounce_bytes_per_s is not None and figures.bounce_bytes_per_s > 0
    # O_DIRECT works on ext4/xfs; a file system that refuses it says so instead.
    assert (figures.direct_bytes_per_s or 0) > 0 or "direct_bytes_per_s" in figures.unknown
    assert figures.gds_bytes_per_s is None
    assert "not applicable on device cpu" in figures.unknown["gds_bytes_per_s"]
    assert figures.cache_drop.startswith("posix_fadvise")
    assert any("page-aligned" in n for n in figures.notes)
    assert list(tmp_path.iterdir()) == []


def test_file_size_is_rounded_to_whole_pages_for_o_direct(tmp_path: Path) -> None:
    figures = measure_disk(tmp_path, CPU, 10_000, 1, Deadline.after(5.0))
    assert figures.file_bytes == 8192


def test_a_spent_budget_reads_one_file_per_method_and_says_so(tmp_path: Path) -> None:
    figures = measure_disk(tmp_path, CPU, 64 * KiB, 8, Deadline(time.monotonic() - 1))
    assert figures.files == 1  # writing stopped after the first file too
    assert figures.plain_bytes_per_s is not None and figures.plain_bytes_per_s > 0
    assert list(tmp_path.iterdir()) == []


def test_too_little_free_space_measures_nothing(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    figures = measure_disk(tmp_path, CPU, free // 2, 4, Deadline.after(1.0))
    assert figures.files == 0 and figures.plain_bytes_per_s is None
    assert "free" in figures.unknown["path"]
    assert list(tmp_path.iterdir()) == []


def test_drop_cache_evicts_the_written_pages(tmp_path: Path) -> None:
    require_program("fincore")  # util-linux: a skip naming it locally, a failure in CI
    p = tmp_path / "chunk.bin"
    with open(p, "wb") as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    p.read_bytes()
    if _resident_bytes(p) == 0:
        pytest.skip("this file system keeps no page cache for the file (fincore reports 0 resident)")
    how = drop_cache([p])
    assert how.startswith("posix_fadvise")
    assert _resident_bytes(p) == 0
