"""calibrate() end to end on device cpu, device resolution, and the lazy torch import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kvstack.errors import InputError, MissingProgramError, UnsupportedError
from kvstack.hardware.calibrate.run import (
    CPU_SIZES,
    ENV_DEVICE,
    cache_paths,
    calibrate,
    resolve_device,
)
from kvstack.hardware.snapshot import DiskInfo, HardwareSnapshot


def test_calibrate_on_cpu_fills_every_section(tmp_path: Path) -> None:
    cal = calibrate(HardwareSnapshot(), "cpu", budget_s=10, paths=[tmp_path])
    assert (cal.source, cal.device, cal.cuda_version) == ("measured", "cpu", None)
    assert cal.torch_version == torch.__version__
    assert cal.unknown == {}
    assert cal.host_copy is not None and (cal.host_copy.h2d_pageable_bytes_per_s or 0) > 0
    assert cal.host_copy.transfer_bytes == CPU_SIZES.transfer_bytes
    (disk,) = cal.disks
    assert disk.path == str(tmp_path) and (disk.bounce_bytes_per_s or 0) > 0
    assert cal.prefill is not None and cal.prefill.scaled_down
    assert [p.prompt_tokens for p in cal.prefill.points] == list(CPU_SIZES.prompt_lengths)
    assert cal.sanity is not None and (cal.sanity.matmul_tflops or 0) > 0
    assert cal.effective_tflops is None  # a CPU's rate never replaces a GPU estimate
    assert 0 < cal.elapsed_s < 10 and cal.started_at <= cal.finished_at
    assert list(tmp_path.iterdir()) == []


def test_cache_paths_skip_tmpfs_and_read_only_and_walk_up(tmp_path: Path) -> None:
    snap = HardwareSnapshot(
        disks=[
            DiskInfo(path=str(tmp_path / "not" / "yet"), writable=True),
            DiskInfo(path="/dev/shm", tmpfs=True, writable=True),
            DiskInfo(path="/ro", writable=False),
            DiskInfo(path=str(tmp_path), writable=True),
        ]
    )
    paths, notes = cache_paths(snap)
    assert paths == [tmp_path]
    assert notes == ["/dev/shm: not read (tmpfs is memory)", "/ro: not read (not writable)"]


def test_device_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_DEVICE, "cpu")
    assert resolve_device() == "cpu"
    monkeypatch.setenv(ENV_DEVICE, "tpu")
    with pytest.raises(InputError, match="must be cpu, cuda or cuda:N, not 'tpu'"):
        resolve_device()
    assert resolve_device("CPU") == "cpu"  # an explicit device wins over the environment


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_no_cuda_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_DEVICE, raising=False)
    with pytest.raises(UnsupportedError, match="needs an NVIDIA GPU with a CUDA build of torch") as info:
        resolve_device()
    assert info.value.exit_code == 2 and info.value.hint and ENV_DEVICE in info.value.hint


def test_bad_budget_is_an_input_error() -> None:
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(InputError, match="budget must be a positive number"):
            calibrate(HardwareSnapshot(), "cpu", budget_s=bad)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_missing_torch_names_the_install() -> None:
    res = _run(
        "import sys\n"
        "sys.modules['torch'] = None  # what an environment without torch looks like to import\n"
        "from kvstack.errors import MissingProgramError\n"
        "from kvstack.hardware.calibrate.run import resolve_device\n"
        "try:\n"
        "    resolve_device('cpu')\n"
        "except MissingProgramError as exc:\n"
        "    print(exc.exit_code, exc.message, '|', exc.hint)\n"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("2 calibration needs torch, which is not installed | pip install torch")
    assert issubclass(MissingProgramError, InputError)


def test_importing_the_record_and_the_planner_helpers_never_imports_torch() -> None:
    res = _run(
        "import sys\n"
        "import kvstack.hardware.calibrate, kvstack.hardware.calibrate.run\n"
        "import kvstack.planning.predict.calibrated, kvstack.rendering.doctor\n"
        "print('torch' in sys.modules)\n"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"
