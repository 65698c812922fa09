"""`kvstack serve --replicas N [--router]` argument handling and dry-run output (nothing started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstack.cli import app as cli_app
from tests.support.deps import ROOT

NO_GPU = str(ROOT / "profiles" / "hardware" / "no-gpu.json")


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")


def serve(tmp_path: Path, *args: str) -> list[str]:
    return [
        "serve",
        "--hardware",
        NO_GPU,
        "--cache-dir",
        str(tmp_path / "c"),
        "--run-dir",
        str(tmp_path / "r"),
        *args,
    ]


def test_help_lists_replicas_and_router(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_app.run(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--replicas" in out and "--router" in out


@pytest.mark.parametrize("value", ["0", "-2"])
def test_replicas_below_one_exit_2(tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_app.run(serve(tmp_path, "--replicas", value, "--dry-run")) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: --replicas must be at least 1, not {value}"
    assert err[1] == "hint: e.g. --replicas 2"


def test_a_layout_past_the_last_port_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_app.run(serve(tmp_path, "--replicas", "2", "--port", "65534", "--dry-run")) == 2
    err = capsys.readouterr().err.splitlines()
    at = err.index("error: --port 65534 with --replicas 2 needs ports 65534-65539, beyond 1-65535")
    assert err[at + 1] == "hint: choose a --port between 1 and 65530"


def test_dry_run_text_shows_each_replica_and_the_router(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_app.run(serve(tmp_path, "--replicas", "2", "--router", "--port", "8200", "--dry-run"))
    out = capsys.readouterr().out
    assert code == 0
    assert "ports: clients use http://127.0.0.1:8200; engines on ports [8201, 8202]" in out
    lines = out.splitlines()
    for i, port in ((0, 8201), (1, 8202)):
        at = lines.index(f"replica {i} engine command")
        assert f"--port {port} " in lines[at + 1] and "VLLM_CPU_KVCACHE_SPACE=1" in lines[at + 1]
    router = lines[lines.index("router command") + 1]
    assert router.startswith("KVSTACK_CONTROL_TOKEN=*** ")  # masked, and never in argv
    assert "-m kvstack.serving.router_front --host 127.0.0.1 --port 8200 -- --worker-urls" in router
    assert "http://127.0.0.1:8201 http://127.0.0.1:8202 --policy cache_aware" in router
    assert out.rstrip().endswith("(dry run: nothing was started or written)")
    assert not (tmp_path / "r").exists() and not (tmp_path / "c").exists()


def test_dry_run_json_keeps_the_single_engine_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_app.run(serve(tmp_path, "--replicas", "3", "--port", "8300", "--dry-run", "--json")) == 0
    doc = json.loads(capsys.readouterr().out)
    # Each replica: its engine port, then its LMCache cache server's two (the CPU plan's lmcache-mp).
    assert [r["ports"] for r in doc["replicas"]] == [
        [8300, 8303, 8304],
        [8301, 8305, 8306],
        [8302, 8307, 8308],
    ]
    assert doc["argv"] == doc["replicas"][0]["argv"] and doc["router"] is None
    assert doc["port_layout"]["lmcache_mp"] == [[8303, 8304], [8305, 8306], [8307, 8308]]
    assert len({r["fingerprint"] for r in doc["replicas"]}) == 1
    assert any(w.startswith("planned per replica: 3 replicas") for w in doc["plan"]["warnings"])


def test_one_replica_without_router_is_the_single_engine_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_app.run(serve(tmp_path, "--port", "8400", "--dry-run", "--json")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "replicas" not in doc and doc["base_url"] == "http://127.0.0.1:8400"
