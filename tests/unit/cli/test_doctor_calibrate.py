"""`kvstack doctor --calibrate` through the CLI: on device cpu via the env override, and without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kvstack.cli import app as cli_app
from kvstack.hardware.calibrate import calibration_of
from kvstack.hardware.calibrate.run import ENV_DEVICE
from kvstack.hardware.snapshot import parse_snapshot


def kvstack(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstack", *args], capture_output=True, text=True, timeout=120, env=env
    )


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (ENV_DEVICE, "KVSTACK_DEBUG")}
    return {**env, **extra}


def test_doctor_json_calibrate_on_cpu(tmp_path: Path) -> None:
    res = kvstack(
        "doctor", "--json", "--no-fio", "--calibrate", "--calibrate-seconds", "20", "--path", str(tmp_path),
        env=_env(**{ENV_DEVICE: "cpu"}),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    snap = parse_snapshot(res.stdout, "stdout")
    assert snap.calibration is not None and snap.calibration["source"] == "measured"
    cal = calibration_of(snap)
    assert cal is not None and cal.device == "cpu"
    assert cal.host_copy is not None and (cal.host_copy.h2d_pageable_bytes_per_s or 0) > 0
    (disk,) = cal.disks
    assert disk.path == str(tmp_path) and (disk.bounce_bytes_per_s or 0) > 0
    assert cal.prefill is not None and all(p.tokens_per_s > 0 for p in cal.prefill.points)
    assert cal.prefill.points
    assert cal.sanity is not None and (cal.sanity.memory_bw_bytes_per_s or 0) > 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_calibrate_without_a_gpu_exits_2_with_one_line() -> None:
    res = kvstack("doctor", "--json", "--no-fio", "--calibrate", env=_env())
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert lines[0].startswith("error: calibration needs an NVIDIA GPU with a CUDA build of torch")
    assert lines[1].startswith("hint: ") and ENV_DEVICE in lines[1]
    assert len(lines) == 2  # no traceback, no probe output first


def test_rich_report_has_the_calibration_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV_DEVICE, "cpu")
    monkeypatch.setenv("COLUMNS", "200")
    argv = ["doctor", "--no-fio", "--calibrate", "--calibrate-seconds", "10", "--path", str(tmp_path)]
    assert cli_app.run(argv) == 0
    out = capsys.readouterr().out
    assert "Calibration (measured on cpu" in out
    for words in ("host->device, pageable", "pinned bounce", "prefill llama-3.1-8b", "matmul 128^3"):
        assert words in out


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_bad_calibrate_seconds_exit_2(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_app.run(["doctor", "--no-fio", "--calibrate", f"--calibrate-seconds={value}"]) == 2
    assert capsys.readouterr().err.startswith("error: --calibrate-seconds must be a positive number")


def test_help_lists_the_calibration_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_app.run(["doctor", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--calibrate" in out and "--calibrate-seconds" in out
