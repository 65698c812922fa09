from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstack.hardware import fio

from .fixtures import FIO


def _read(name: str) -> str:
    return (FIO / name).read_text()


@pytest.mark.parametrize("name", ["seqread_io_uring_ok.json", "seqread_psync_ok.json"])
def test_parse_real_successful_runs(name: str) -> None:
    run = fio.parse_fio_output(_read(name))
    expected = json.loads(_read(name))["jobs"][0]["read"]["bw_bytes"]
    assert run.ok and run.error == 0
    assert run.bw_bytes_per_s == float(expected) > 0


def test_parse_real_failed_run_with_messages_before_the_json() -> None:
    stdout = _read("seqread_failed_missing_file.json")
    assert not stdout.startswith("{")  # fio printed "fio: ..." lines first
    run = fio.parse_fio_output(stdout, _read("seqread_failed_missing_file.stderr"))
    assert not run.ok
    assert run.error == 2  # ENOENT, as the job reported it
    assert run.bw_bytes_per_s == 0.0
    assert any("No such file or directory" in m for m in run.messages)
    assert "errno 2" in run.why()


def test_parse_engine_failure_without_json() -> None:
    run = fio.parse_fio_output(_read("seqread_failed_engine.json"), _read("seqread_failed_engine.stderr"))
    assert not run.ok and run.error == -1
    assert "fio: failed to load engine" in run.messages


def test_parse_nothing() -> None:
    run = fio.parse_fio_output("", "")
    assert not run.ok and run.messages == ["fio printed no JSON result"]


def test_file_size_respects_budget_and_free_space() -> None:
    mib = fio.MIB
    assert fio._file_size(10.0, None) == 640 * mib
    assert fio._file_size(100.0, None) == 1024 * mib
    assert fio._file_size(0.1, None) == 64 * mib
    assert fio._file_size(10.0, 1000 * mib) == 100 * mib
    assert fio._file_size(10.0, 100 * mib) is None  # a tenth of free space is under 64 MiB


def test_missing_fio_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without fio
    result = fio.measure_read_bw(tmp_path, 1.0)
    assert result.bw_bytes_per_s is None
    assert result.reason is not None and "apt-get install fio" in result.reason
    assert list(tmp_path.iterdir()) == []


def test_colons_in_paths_are_escaped_for_fio() -> None:
    assert fio._escape(Path("/mnt/a:b/t")) == "/mnt/a\\:b/t"
