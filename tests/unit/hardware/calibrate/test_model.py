"""The Calibration record round trip through a snapshot file."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import SnapshotError
from kvstack.hardware.calibrate import Calibration, calibration_of, store_calibration
from kvstack.hardware.calibrate.model import CopyFigures, DiskFigures, PrefillPoint
from kvstack.hardware.snapshot import HardwareSnapshot, load_snapshot
from tests.support.calibration import h100_calibration, llama8b_prefill


def sample() -> Calibration:
    return h100_calibration(
        effective_tflops=520.0,
        host_copy=CopyFigures(transfer_bytes=32 << 20, runs=10, method="m", h2d_pinned_bytes_per_s=5.1e10),
        disks=[DiskFigures(path="/nvme", files=32, file_bytes=32 << 20, bounce_bytes_per_s=6e9)],
        prefill=llama8b_prefill(
            [PrefillPoint(prompt_tokens=1024, seconds=0.1, tokens_per_s=10240, achieved_tflops=170)]
        ),
    )


def test_round_trip_through_a_snapshot_file(tmp_path: Path) -> None:
    snap = HardwareSnapshot(hostname="gpu1")
    assert calibration_of(snap) is None
    cal = sample()
    store_calibration(snap, cal)
    assert isinstance(snap.calibration, dict) and snap.calibration["source"] == "measured"
    path = tmp_path / "hw.json"
    path.write_text(snap.to_json(), encoding="utf-8")
    back = calibration_of(load_snapshot(path))
    assert back == cal
    assert back is not None and back.disks[0].bounce_bytes_per_s == 6e9


def test_a_malformed_calibration_names_the_field() -> None:
    snap = HardwareSnapshot(calibration={"source": "measured", "device": "cpu"})
    with pytest.raises(SnapshotError, match=r"'calibration\.device_name' field required"):
        calibration_of(snap)
    snap = HardwareSnapshot(calibration={**sample().model_dump(mode="json"), "source": "guessed"})
    with pytest.raises(SnapshotError, match=r"calibration\.source"):
        calibration_of(snap)
