"""kvstack's guard inside vLLM's real app: every route the installed vLLM registers, with and
without VLLM_SERVER_DEV_MODE, asked from a loopback and a remote client, with and without the key.

Runs in the engine's interpreter (tests/integration/vllm_guard_probe.py) so that this process
never imports vLLM; no engine starts (a request let through meets a handler without one).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvstack.engines.vllm_guard import classify
from tests.support.deps import ROOT, require_engine_module
from tests.unit.engines.test_vllm_guard import CLIENT, CONTROL, DEV_ROUTES, PROBES

pytestmark = pytest.mark.integration

PROBE = Path(__file__).with_name("vllm_guard_probe.py")
KEY = "sk-guard-app-4242"
DENIED = (401, 403)


def probe(tmp_path: Path, dev: bool, token: str | None = None) -> dict[str, Any]:
    py = require_engine_module("vllm")
    out = tmp_path / f"guard-{dev}-{token is not None}.json"
    argv = [py, str(PROBE), str(ROOT / "profiles" / "demo"), KEY, str(out), "dev" if dev else "plain"]
    argv += [token] if token else []
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("guard")
    return {dev: probe(tmp, dev) for dev in (True, False)}


def test_vllm_loads_the_guard_outermost(apps: dict[bool, dict[str, Any]]) -> None:
    for doc in apps.values():
        assert doc["middleware"][0] == "ControlGuard", doc["middleware"]  # the last added runs first
        assert "AuthenticationMiddleware" in doc["middleware"]  # vLLM's own check stays


def test_the_route_lists_are_the_ones_the_guard_tests_name(apps: dict[bool, dict[str, Any]]) -> None:
    dev, plain = set(apps[True]["routes"]), set(apps[False]["routes"])
    assert dev - plain == set(DEV_ROUTES)
    named = set(PROBES) | set(CLIENT) | set(CONTROL)
    assert dev <= named, f"routes this vLLM registers that the guard's tests do not name: {dev - named}"


@pytest.mark.parametrize("dev", [True, False], ids=["dev-mode", "no-dev-mode"])
def test_no_route_but_the_probes_answers_without_the_key(apps: dict[bool, dict[str, Any]], dev: bool) -> None:
    results = apps[dev]["results"]
    for path, got in results.items():
        if classify(path) == "probe":
            assert got["local_nokey"] not in DENIED and got["remote_nokey"] not in DENIED, (path, got)
            continue
        assert got["local_nokey"] == 401, (path, got)
        assert got["remote_nokey"] == (403 if classify(path) == "control" else 401), (path, got)


@pytest.mark.parametrize("dev", [True, False], ids=["dev-mode", "no-dev-mode"])
def test_with_the_key_control_routes_answer_this_machine_only(
    apps: dict[bool, dict[str, Any]], dev: bool
) -> None:
    for path, got in apps[dev]["results"].items():
        assert got["local_key"] not in DENIED, (path, got)
        if classify(path) == "control":
            assert got["remote_key"] == 403, (path, got)
        else:
            assert got["remote_key"] not in DENIED, (path, got)


def test_without_the_guard_vllm_would_answer_these_without_a_key(apps: dict[bool, dict[str, Any]]) -> None:
    """Why the guard exists: vLLM's own check covers /v1, /v2, /inference and /cohere only."""
    unguarded = {p for p in apps[True]["routes"] if not p.startswith(("/v1", "/v2", "/inference", "/cohere"))}
    assert {"/invocations", "/scale_elastic_ep", "/tokenize", "/collective_rpc", "/sleep"} <= unguarded


TOKEN = "run-token-" + "r" * 32


def test_the_run_token_as_the_bearer_passes_vllms_own_key_check_on_client_routes(tmp_path: Path) -> None:
    """kvstack's router passes the run's token on as the bearer (serving/router_front.py): the guard
    takes it for the key and hands vLLM's own AuthenticationMiddleware the key, so the request is
    let through; on a control route it opens nothing without the X-Kvstack-Control header."""
    results = probe(tmp_path, dev=True, token=TOKEN)["results"]
    for path, got in results.items():
        kind = classify(path)
        if kind == "client":
            assert got["local_token"] not in DENIED, (path, got)
            assert got["remote_token"] not in DENIED, (path, got)
        elif kind == "control":
            assert got["local_token"] == 403 and got["remote_token"] == 403, (path, got)
