"""The one place errors become exit codes: run the real CLI in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys

from kvstack.cli import app as cli_app
from kvstack.errors import InputError, KvstackError


def kvstack(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstack", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_help_lists_commands() -> None:
    res = kvstack("--help")
    assert res.returncode == 0
    for command in ("doctor", "plan", "serve", "validate", "bench", "top"):
        assert command in res.stdout


def test_unknown_command_is_a_one_line_usage_error() -> None:
    res = kvstack("frobnicate")
    assert res.returncode == 2
    assert res.stderr.splitlines()[0].startswith("error: No such command")
    assert "Traceback" not in res.stderr


def test_unknown_option_names_the_option_and_help() -> None:
    res = kvstack("doctor", "--bogus")
    assert res.returncode == 2
    assert "--bogus" in res.stderr
    assert "kvstack doctor --help" in res.stderr


def test_error_tree_maps_to_exit_codes(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    def raise_input(*a: object, **k: object) -> None:
        raise InputError("the thing is wrong", hint="do this instead")

    monkeypatch.setattr(cli_app, "app", raise_input)
    assert cli_app.run([]) == 2
    err = capsys.readouterr().err
    assert err == "error: the thing is wrong\nhint: do this instead\n"

    def raise_runtime(*a: object, **k: object) -> None:
        raise KvstackError("engine died")

    monkeypatch.setattr(cli_app, "app", raise_runtime)
    assert cli_app.run([]) == 1


def test_bug_is_one_line_unless_debug(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    def bug(*a: object, **k: object) -> None:
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(cli_app, "app", bug)
    monkeypatch.delenv("KVSTACK_DEBUG", raising=False)
    assert cli_app.run([]) == 1
    err = capsys.readouterr().err
    assert "internal error: ZeroDivisionError: oops" in err
    assert "KVSTACK_DEBUG=1" in err
    monkeypatch.setenv("KVSTACK_DEBUG", "1")
    try:
        cli_app.run([])
    except ZeroDivisionError:
        pass
    else:
        raise AssertionError("KVSTACK_DEBUG=1 must let the traceback through")
