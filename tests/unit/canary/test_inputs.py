"""The canary's inputs (`serve`'s canary flags): the budget, the metrics token file, and their
checks; the real CLI's answer to a bad one (a subprocess, as a user runs it)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvstack.canary.defaults import DEFAULT_BUDGET
from kvstack.canary.inputs import DEFAULT_BUDGET_TEXT, CanaryInputs, parse_budget, read_token
from kvstack.errors import InputError
from tests.support.deps import ROOT

NO_GPU = str(ROOT / "profiles" / "hardware" / "no-gpu.json")


@pytest.mark.parametrize(
    ("text", "share"),
    [("1%", 0.01), ("0.5%", 0.005), (" 2.5% ", 0.025), ("100%", 1.0), ("0.01", 0.01), ("1", 1.0)],
)
def test_a_budget_is_a_percentage_or_a_fraction(text: str, share: float) -> None:
    assert math.isclose(parse_budget(text), share)


@pytest.mark.parametrize("text", ["0", "0%", "150%", "1.5", "-1%", "abc", "", "%", "nan", "inf%"])
def test_a_budget_outside_0_to_100_percent_is_refused(text: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_budget(text)
    assert caught.value.exit_code == 2
    assert f"--canary-budget {text!r}" in caught.value.message
    assert caught.value.hint == "e.g. --canary-budget 1%"


def test_the_default_budget_reads_back_as_itself() -> None:
    assert parse_budget(DEFAULT_BUDGET_TEXT) == DEFAULT_BUDGET


def test_the_token_is_the_files_first_line(tmp_path: Path) -> None:
    assert read_token(None) is None  # no file: the run's control token
    path = tmp_path / "token"
    path.write_text("s3cret-scrape-token\n", encoding="utf-8")
    assert read_token(path) == "s3cret-scrape-token"
    path.write_text("\n  padded-token  \nsecond line\n", encoding="utf-8")
    assert read_token(path) == "padded-token"


def test_an_empty_or_missing_token_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    for content in ("", "\n  \n"):
        empty.write_text(content, encoding="utf-8")
        with pytest.raises(InputError, match=r"--metrics-token-file .* is empty") as caught:
            read_token(empty)
        assert caught.value.exit_code == 2
    missing = tmp_path / "missing"
    with pytest.raises(InputError) as caught:
        read_token(missing)
    assert str(missing) in caught.value.message and "does not exist" in caught.value.message
    assert caught.value.exit_code == 2
    with pytest.raises(InputError, match="cannot read"):
        read_token(tmp_path)  # a directory


def fields(**changes: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "no_canary": False,
        "canary_interval": 60.0,
        "canary_budget": "1%",
        "on_wrong_kv": "fallback",
        "metrics_port": 0,
        "metrics_token_file": None,
    }
    args.update(changes)
    return CanaryInputs(**args).fields()


def test_canary_fields_are_the_serve_requests(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok\n", encoding="utf-8")
    got = fields(
        canary_interval=30.0,
        canary_budget="0.5%",
        on_wrong_kv="warn",
        metrics_port=9400,
        metrics_token_file=token,
    )
    assert got == {
        "canary": True,
        "canary_interval_s": 30.0,
        "canary_budget": 0.005,
        "on_wrong_kv": "warn",
        "metrics_port": 9400,
        "metrics_token": "tok",
    }
    assert fields(no_canary=True)["canary"] is False
    for action in ("fallback", "stop", "warn"):
        assert fields(on_wrong_kv=action)["on_wrong_kv"] == action
    from kvstack.serving.request import ServeRequest

    for name in got:  # every field is one ServeRequest takes
        assert name in ServeRequest.model_fields


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"canary_interval": 0.0}, "--canary-interval must be positive"),
        ({"canary_interval": -5.0}, "--canary-interval must be positive"),
        ({"metrics_port": -1}, "--metrics-port -1 is not a port"),
        ({"metrics_port": 65536}, "--metrics-port 65536 is not a port"),
        ({"canary_budget": "200%"}, "--canary-budget '200%'"),
        ({"on_wrong_kv": "panic"}, "--on-wrong-kv must be one of fallback, stop, warn"),
    ],
)
def test_canary_fields_refuse_bad_values(changes: dict[str, Any], needle: str) -> None:
    with pytest.raises(InputError) as caught:
        fields(**changes)
    assert needle in caught.value.message and caught.value.exit_code == 2


def test_a_nan_interval_is_refused() -> None:
    with pytest.raises(InputError):
        fields(canary_interval=float("nan"))


def kvstack(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KVSTACK_DEBUG"}
    dirs = ("--hardware", NO_GPU, "--cache-dir", str(tmp_path / "c"), "--run-dir", str(tmp_path / "r"))
    return subprocess.run(
        [sys.executable, "-m", "kvstack", "serve", *dirs, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--canary-budget", "200%"), "--canary-budget '200%' is not a share of prefill"),
        (("--canary-interval", "0"), "--canary-interval must be positive, not 0"),
        (("--on-wrong-kv", "panic"), "--on-wrong-kv must be one of fallback, stop, warn"),
        (("--metrics-token-file", "no-such-file"), "--metrics-token-file no-such-file"),
    ],
)
def test_serve_refuses_a_bad_canary_option_in_one_line(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    proc = kvstack(tmp_path, *args, "--dry-run")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and needle in lines[0], lines
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), lines
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "r").exists() and not (tmp_path / "c").exists()  # nothing written
