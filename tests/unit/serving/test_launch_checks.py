"""What serve says and refuses once a launch is prepared: an SGLang too old to lock its admin routes.

Through the CLI (a dry run: rendering and the warnings, nothing started), with the software of a
hardware profile whose SGLang predates --config (0.5.23)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstack.cli import app as cli_app
from kvstack.engines.sglang import ADMIN_ROUTES, MIN_SGLANG_CONFIG
from tests.support.deps import ROOT

H100 = ROOT / "profiles" / "hardware" / "h100-sxm.json"


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")


def profile(tmp_path: Path, sglang: str) -> str:
    doc = json.loads(H100.read_text())
    doc["software"]["sglang"] = sglang
    doc["software"]["unknown"].pop("sglang", None)
    path = tmp_path / f"sglang-{sglang}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def serve(tmp_path: Path, sglang: str, *args: str) -> list[str]:
    return [
        "serve", "--engine", "sglang", "--hardware", profile(tmp_path, sglang),
        "--cache-dir", str(tmp_path / "c"), "--run-dir", str(tmp_path / "r"), "--dry-run", *args,
    ]  # fmt: skip


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning: ")]


def test_an_old_sglang_on_loopback_is_served_with_a_warning_naming_the_open_routes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_app.run(serve(tmp_path, "0.5.10")) == 0
    said = [w for w in warnings(capsys.readouterr().err) if "admin endpoints" in w]
    assert said == [
        f"warning: sglang 0.5.10 takes an admin key only on its command line: its admin endpoints "
        f"({', '.join(ADMIN_ROUTES)}, ...) stay open to every local user on this machine; "
        f"sglang >= {MIN_SGLANG_CONFIG} locks them to kvstack"
    ]


def test_an_sglang_that_locks_its_admin_routes_gets_no_such_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_app.run(serve(tmp_path, MIN_SGLANG_CONFIG)) == 0
    assert not [w for w in warnings(capsys.readouterr().err) if "admin endpoints" in w]


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::"])
def test_an_old_sglang_on_a_public_bind_is_refused_in_one_line_with_a_hint(
    tmp_path: Path, host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_app.run(serve(tmp_path, "0.5.10", "--host", host)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning: ")]
    at = next(i for i, line in enumerate(err) if line.startswith("error: "))
    assert err[at] == (
        f"error: sglang 0.5.10 on --host {host} would leave its admin endpoints "
        f"({', '.join(ADMIN_ROUTES)}, ...) open to anyone who reaches it"
    )
    assert (
        err[at + 1]
        == f"hint: upgrade to sglang >= {MIN_SGLANG_CONFIG} (kvstack locks them), or keep --host on loopback"
    )
    assert len(err) == at + 2 and "Traceback" not in "\n".join(err)
