"""`kvstack doctor --remote URL` against a real redis-server on loopback: figures, checks, no password."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kvstack.cli import app as cli_app
from kvstack.hardware.snapshot import parse_snapshot
from tests.integration.conftest import RedisFactory, free_port

pytestmark = pytest.mark.integration

PASSWORD = "doctor-pw-5e1b"


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at the terminal width: one value, one line


def doctor(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_app.run(["doctor", "--no-fio", "--path", str(tmp_path), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def remote_checks(out: str) -> dict[str, dict[str, str]]:
    snap = parse_snapshot(out)
    return {
        c.name: {"status": c.status, "message": c.message} for c in snap.checks if c.name.startswith("remote")
    }


def test_json_holds_the_probed_store_and_its_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_factory: RedisFactory
) -> None:
    server = redis_factory(password=PASSWORD)
    code, out, err = doctor(tmp_path, capsys, "--json", "--remote", server.url)
    assert code == 0, err
    assert PASSWORD not in out + err
    remote = parse_snapshot(out).remote
    assert remote is not None
    assert remote.url == f"redis://:***@127.0.0.1:{server.port}/0"
    assert remote.reachable and remote.error is None
    assert remote.server_version == server.client().info("server")["redis_version"]
    assert remote.maxmemory_bytes == 0 and remote.maxmemory_policy == "noeviction"
    assert remote.latency_s is not None and remote.read_bw_bytes_per_s and remote.write_bw_bytes_per_s
    checks = remote_checks(out)
    assert checks["remote"]["status"] == "ok"
    assert checks["remote"]["message"].startswith(f"{remote.url}: Redis {remote.server_version}, latency ")
    assert checks["remote.bandwidth"]["status"] == "ok"
    assert checks["remote.memory"]["status"] == "warn"
    assert "maxmemory 0 (no limit)" in checks["remote.memory"]["message"]
    assert "allkeys-lru" in checks["remote.memory"]["message"]
    # The key the bandwidth probe wrote is gone again.
    assert server.client().keys("kvstack:preflight:*") == []


def test_table_shows_the_store_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_factory: RedisFactory
) -> None:
    server = redis_factory(
        password=PASSWORD, extra_args=("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
    )
    code, out, err = doctor(tmp_path, capsys, "--remote", server.url)
    assert code == 0, err
    assert PASSWORD not in out + err
    lines = out.splitlines()
    assert any("Remote KV store" in line for line in lines)
    row = {
        cells[1].strip(): cells[2].strip() for cells in (line.split("│") for line in lines) if len(cells) == 4
    }
    assert row["url"] == f"redis://:***@127.0.0.1:{server.port}/0"
    assert row["reachable"] == "yes"
    assert row["maxmemory"] == "64.0 MiB" and row["eviction policy"] == "allkeys-lru"
    assert row["latency (median)"].endswith(" ms")
    assert "maxmemory 64.0 MiB, policy allkeys-lru" in out  # the remote.memory check, OK


def test_a_wrong_password_is_a_failed_check_and_strict_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_factory: RedisFactory
) -> None:
    server = redis_factory(password=PASSWORD)
    wrong = "not-the-pw-93c1"
    code, out, err = doctor(tmp_path, capsys, "--json", "--remote", server.url_with(wrong))
    assert code == 0, err
    assert wrong not in out + err and PASSWORD not in out + err
    checks = remote_checks(out)
    assert checks["remote"]["status"] == "fail"
    assert checks["remote"]["message"].startswith(
        f"redis://:***@127.0.0.1:{server.port}/0: authentication failed"
    )
    assert set(checks) == {"remote"}  # nothing else can be known
    code, out, err = doctor(tmp_path, capsys, "--strict", "--remote", server.url_with(wrong))
    assert code == 1
    assert wrong not in out + err
    assert (
        err.splitlines()[0].startswith("error: --strict: failed checks: ") and "remote" in err.splitlines()[0]
    )


def test_nothing_listening_is_a_failed_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    code, out, err = doctor(tmp_path, capsys, "--json", "--remote", f"redis://127.0.0.1:{port}")
    assert code == 0, err
    snap = parse_snapshot(out)
    assert snap.remote is not None and not snap.remote.reachable
    assert snap.remote.error is not None and snap.remote.error.startswith("cannot connect")
    assert remote_checks(out)["remote"]["status"] == "fail"


def test_a_malformed_url_exits_2_before_probing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    code, out, err = doctor(tmp_path, capsys, "--json", "--remote", "redis://:sekret-pw@cache")
    assert code == 2
    assert out == ""  # no half-written JSON
    assert err.startswith("error: ") and "sekret-pw" not in err
    assert "hint: " in err
    assert time.monotonic() - t0 < 5


def test_without_remote_the_snapshot_has_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = doctor(tmp_path, capsys, "--json")
    assert code == 0
    assert parse_snapshot(out).remote is None and remote_checks(out) == {}
    assert json.loads(out)["remote"] is None
