"""The running disk tier's free-space warning (kvstack/runtime/disk_space.py)."""

from __future__ import annotations

from pathlib import Path

from kvstack.runtime.disk_space import low_disk_warning


def test_low_disk_warning(tmp_path: Path) -> None:
    assert low_disk_warning(tmp_path, min_free_bytes=0) is None
    warning = low_disk_warning(tmp_path / "not" / "yet", min_free_bytes=1 << 60)
    assert warning is not None and "below the" in warning and str(tmp_path / "not" / "yet") in warning
