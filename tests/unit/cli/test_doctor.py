"""`kvstack doctor` argument handling (the probing itself is covered in tests/integration)."""

from __future__ import annotations

import pytest

from kvstack.cli import app as cli_app


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_bad_fio_seconds_exit_2_with_a_hint(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_app.run(["doctor", f"--fio-seconds={value}"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: --fio-seconds must be a positive number")
    assert err[1].startswith("hint: ")


def test_non_number_fio_seconds_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_app.run(["doctor", "--fio-seconds", "ten"]) == 2
    assert "--fio-seconds" in capsys.readouterr().err


def test_path_that_is_a_file_exits_2(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    f = Path(str(tmp_path)) / "file"
    f.write_text("x")
    assert cli_app.run(["doctor", "--no-fio", "--json", "--path", str(f)]) == 2
    err = capsys.readouterr()
    assert err.out == ""  # no half-written JSON on stdout
    assert "is a file, not a directory" in err.err


def test_path_that_does_not_exist_exits_2(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    # Measuring the nearest existing ancestor instead would report another disk under this name.
    missing = f"{tmp_path}/nope"
    assert cli_app.run(["doctor", "--no-fio", "--json", "--path", missing]) == 2
    err = capsys.readouterr()
    assert err.out == ""
    assert f"--path {missing} does not exist" in err.err and "mkdir -p" in err.err


def test_help_lists_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_app.run(["doctor", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--json", "--path", "--fio-seconds", "--no-fio", "--strict"):
        assert option in out
