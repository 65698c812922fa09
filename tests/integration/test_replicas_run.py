"""`serve --replicas N [--router]` end to end with real processes, without vLLM's startup cost.

The replicas are what kvstack renders for the demo model, with the engine's command swapped
for a real OpenAI-compatible HTTP server (tests/support/stream_server.py in a child process,
on the port, API key and metrics vLLM would have). Everything else is kvstack's own path:
preflight, run dirs, the SupervisorGroup, the real vllm-router, validation, stopping.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sys
import textwrap
import threading
import venv
from pathlib import Path

import httpx
import psutil
import pytest

from kvstack.clients.metrics import parse_metrics
from kvstack.errors import NetworkTargetError
from kvstack.hardware.snapshot import load_snapshot
from kvstack.names import CONTROL_ENV, CONTROL_HEADER
from kvstack.runtime.specs import ProcessSpec
from kvstack.runtime.supervisor import ProcessFailed
from kvstack.serving.lifecycle import ServeEvents, launched
from kvstack.serving.lifecycle import run as run_launch
from kvstack.serving.prepare import Launch, prepare
from kvstack.serving.request import ServeRequest
from tests.support.cli_run import isolated_env, run_cli
from tests.support.deps import ROOT, missing, require_engine_module
from tests.support.other_user import can_read_as_other_user, send_as_other_user
from tests.support.ports import free_block
from tests.support.stream_server import tokenize

pytestmark = pytest.mark.integration

NO_GPU = ROOT / "profiles" / "hardware" / "no-gpu.json"
API_KEY = "sk-replicas-test"

FAKE_ENGINE = """
import os, sys, threading
sys.path.insert(0, {root!r})
from tests.support.stream_server import ServerKnobs, StreamServer, _QuietServer
port, die_after = int(sys.argv[1]), float(sys.argv[2])
# The key where vLLM reads it: kvstack passes it in the environment, never in argv.
# ... and the run's control token, which its guard takes in place of the key (the router's bearer).
srv = StreamServer(ServerKnobs(
    model="demo", api_key=os.environ.get("VLLM_API_KEY"),
    control_token=os.environ.get("KVSTACK_CONTROL_TOKEN"),
))
handler = srv.httpd.RequestHandlerClass
srv.httpd.server_close()
srv.httpd = _QuietServer(("127.0.0.1", port), handler)
print("fake engine listening on", port, flush=True)
if die_after > 0:
    threading.Timer(die_after, lambda: os._exit(3)).start()
srv.httpd.serve_forever()
"""


def fake_set(
    tmp_path: Path, replicas: int = 2, router: bool = False, die: dict[int, float] | None = None
) -> Launch:
    """prepare() for the demo model, each engine's argv replaced by the fake engine."""
    engine = tmp_path / "fake_engine.py"
    engine.write_text(textwrap.dedent(FAKE_ENGINE.format(root=str(ROOT))))
    req = ServeRequest(
        cache_dir=tmp_path / "cache",
        run_dir=tmp_path / "run",
        port=free_block(replicas * 3 + 2),
        replicas=replicas,
        router=router,
        api_key=API_KEY,
        exit_after_validate=True,
        prompt_tokens=512,
    )
    # Without LMCache in the snapshot the CPU plan has no cache server: only the (fake) engines run.
    snapshot = load_snapshot(NO_GPU)
    snapshot = snapshot.model_copy(
        update={"software": snapshot.software.model_copy(update={"lmcache": None})}
    )
    rs = prepare(req, snapshot, env={})
    swapped = []
    for i, p in enumerate(rs.replicas):
        argv = [sys.executable, str(engine), str(p.options.port), str((die or {}).get(i, 0))]
        server: ProcessSpec = p.spec.server.model_copy(update={"argv": argv})
        swapped.append(p.__class__(**{**p.__dict__, "spec": p.spec.model_copy(update={"server": server})}))
    return Launch(**{**rs.__dict__, "replicas": tuple(swapped)})


def serving_only(rs: Launch) -> Launch:
    """The set with validation off: kvstack serves until a signal or a death."""
    update = {"validate_after_start": False, "exit_after_validate": False}
    return Launch(**{**rs.__dict__, "request": rs.request.model_copy(update=update)})


def recording_events() -> tuple[ServeEvents, list[psutil.Process], list[str]]:
    """Events that note every process kvstack runs once it is ready, and every message."""
    tree: list[psutil.Process] = []
    said: list[str] = []

    def ready(url: str) -> None:
        tree.extend(psutil.Process().children(recursive=True))
        said.append(f"ready {url}")

    return ServeEvents(ready=ready, message=said.append, warning=said.append), tree, said


def gone(tree: list[psutil.Process]) -> list[int]:
    _, alive = psutil.wait_procs(tree, timeout=10)
    return [p.pid for p in alive]


@pytest.fixture(autouse=True)
def _engine_module() -> None:
    # Preflight checks that the engine's interpreter has vllm, as it would for a real launch.
    require_engine_module("vllm")


def test_two_replicas_validate_on_replica_0_and_all_stop(tmp_path: Path) -> None:
    rs = fake_set(tmp_path)
    events, tree, said = recording_events()
    assert run_launch(rs, events) == 0
    assert len(tree) >= 2 + 2  # two engines and their watchdogs
    assert gone(tree) == []
    report = json.loads((tmp_path / "run" / "validation.json").read_text())
    assert report["overall"] == "PASS", report
    assert report["base_url"] == rs.replicas[0].spec.base_url
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["warm"]["verdict"] == "pass"
    assert steps["replicas:shared-tier"]["verdict"] == "skip"
    assert steps["replicas:shared-tier"]["reason"].startswith("no offload tier on a CPU platform")
    # The plan's warnings once the preflight passed, then the engines ready.
    warned = len(rs.plan.warnings)
    assert said[:warned] == rs.plan.warnings and warned >= 1
    assert said[warned] == f"ready {rs.replicas[0].spec.base_url}"
    # What ran is on disk: the whole set at the top, each replica below, secrets masked.
    run = tmp_path / "run"
    launch = json.loads((run / "launch.json").read_text())
    assert [r["base_url"] for r in launch["replicas"]] == [p.spec.base_url for p in rs.replicas]
    for i in (0, 1):
        assert (run / f"replica-{i}" / "engine.log").read_text().count("fake engine listening") == 1
        assert json.loads((run / f"replica-{i}" / "launch.json").read_text())["env"]["VLLM_API_KEY"] == "***"
    assert API_KEY not in (run / "launch.json").read_text()
    assert json.loads((run / "plan.json").read_text())["platform"] == "cpu"


def test_one_engine_takes_the_same_path_with_its_files_at_the_top_of_the_run_dir(tmp_path: Path) -> None:
    rs = fake_set(tmp_path, replicas=1)
    rs = Launch(**{**rs.__dict__, "request": rs.request.model_copy(update={"min_tier_speedup": 1.3})})
    assert not rs.multi and rs.replicas[0].run_dir == tmp_path / "run"
    events, tree, said = recording_events()
    assert run_launch(rs, events) == 0
    assert len(tree) >= 2 and gone(tree) == []  # the engine and its watchdog
    run_dir = tmp_path / "run"
    launch = json.loads((run_dir / "launch.json").read_text())
    assert "replicas" not in launch and launch["base_url"] == rs.replicas[0].spec.base_url
    assert (run_dir / "engine.log").read_text().count("fake engine listening") == 1
    assert not (run_dir / "replica-0").exists()
    report = json.loads((run_dir / "validation.json").read_text())
    assert report["overall"] == "PASS" and "replicas:shared-tier" not in {s["name"] for s in report["steps"]}
    assert report["min_tier_speedup"] == 1.3  # serve's --min-tier-speedup reaches the pass
    assert f"ready {rs.replicas[0].spec.base_url}" in said


def test_the_router_routes_by_prefix_and_passes_the_key(tmp_path: Path) -> None:
    try:
        import vllm_router  # noqa: F401
    except ImportError:
        missing("python package vllm-router", "pip install vllm-router (the test extra has it)")
    rs = fake_set(tmp_path, router=True)
    assert rs.router is not None
    events, tree, _ = recording_events()
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with launched(rs, events) as group:
        assert (tmp_path / "run" / "router.log").exists()
        url = rs.router.base_url
        assert httpx.get(url + "/v1/models", headers=headers).json()["data"][0]["id"] == "demo"
        prompts = [f"{word} " + "shared document text " * 300 for word in ("alpha", "beta", "gamma")]
        for _ in range(3):
            for prompt in prompts:
                body = {"model": "demo", "prompt": prompt, "max_tokens": 2}
                assert (
                    httpx.post(url + "/v1/completions", json=body, headers=headers, timeout=30).status_code
                    == 200
                )
        refused = httpx.post(url + "/v1/completions", json={"model": "demo", "prompt": "x"}, timeout=30)
        assert refused.status_code == 401  # the key, as the engines ask for it
        hits = [
            parse_metrics(httpx.get(p.spec.base_url + "/metrics").text).value("vllm:prefix_cache_hits")
            for p in rs.replicas
        ]
        # Cache-aware: each prompt went back to the replica that had it, so every repeat hit
        # all of its whole blocks but the last token (the toy engine's rule, like vLLM's).
        cached = [(len(tokenize(prompt)) - 1) // 16 * 16 for prompt in prompts]
        assert sum(hits) == 2 * sum(cached), hits
        metrics = httpx.get(rs.router.metrics_urls[0]).text
        assert "vllm_router_requests_total" in metrics
        assert group.poll_died() is None
    assert gone(tree) == []


# vllm-router 0.1.17's routes besides the OpenAI ones (read in its binary and answered by it,
# run against a worker on this machine), and one a later version may add.
ROUTER_ADMIN = [
    ("POST", "/add_worker?url=http://127.0.0.1:9"),
    ("POST", "/remove_worker?url=http://127.0.0.1:9"),
    ("GET", "/list_workers"),
    ("POST", "/flush_cache"),
    ("GET", "/get_loads"),
    ("GET", "/workers"),
    ("POST", "/workers"),
    ("DELETE", "/workers/http%3A%2F%2F127.0.0.1%3A9"),
    ("POST", "/start_profile"),
    ("POST", "/stop_profile"),
    ("POST", "/finish_session?session_id=s"),
    ("GET", "/get_server_info"),
    ("GET", "/get_model_info"),
    ("GET", "/health_generate"),
    ("GET", "/liveness"),
    ("GET", "/readiness"),
    ("GET", "/scheduling/diagnostics"),
    ("POST", "/generate"),
    ("GET", "/"),
    ("POST", "/a_route_a_later_router_adds"),
]


def test_the_routers_admin_routes_answer_only_kvstack_its_openai_routes_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-router behind kvstack's guard (serving/router_front.py): every admin route refused
    without the run's token, from this user and from another local user, at the front and at the
    router's own port; the OpenAI routes with the key; kvstack's readiness through it works."""
    try:
        import vllm_router  # noqa: F401
    except ImportError:
        missing("python package vllm-router", "pip install vllm-router (the test extra has it)")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # serve's control index, this test's
    rs = fake_set(tmp_path, router=True)
    assert rs.router is not None
    token = rs.replicas[0].options.control_token
    assert token and {p.options.control_token for p in rs.replicas} == {token}  # one per launch
    assert token not in " ".join(rs.router.server.argv) and rs.router.server.env[CONTROL_ENV] == token
    key = {"Authorization": f"Bearer {API_KEY}"}
    with launched(rs, recording_events()[0]) as group:  # ready: its /health answered through the guard
        front = rs.router.base_url
        log = (tmp_path / "run" / "router.log").read_text()
        found = re.search(r"kvstack: vllm-router on 127\.0\.0\.1:(\d+) ", log)
        assert found, log
        inside = f"http://127.0.0.1:{found.group(1)}"
        # A body each handler would take (without one, the JSON routes answer 415 before anything).
        body = {"url": "http://127.0.0.1:9", "text": "x", "model": "demo", "prompt": "x"}

        def ask(client: httpx.Client, base: str) -> dict[tuple[str, str], int]:
            return {
                (m, p): client.request(
                    m, base + p, headers=key, json=body if m != "GET" else None
                ).status_code
                for m, p in ROUTER_ADMIN
            }

        # A connection per request: a refusal may answer before reading the body, and a connection
        # reused after it can meet the server closing it (seen once under load on 2 cores).
        fresh = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(trust_env=False, timeout=30, limits=fresh) as client:
            mine, direct = ask(client, front), ask(client, inside)
            guessed = client.get(inside + "/list_workers", headers={"Authorization": "Bearer guess"})
            listed = client.get(front + "/list_workers", headers={**key, CONTROL_HEADER: token})
            completion = client.post(
                front + "/v1/completions",
                json={"model": "demo", "prompt": "a b c", "max_tokens": 2},
                headers=key,
            )
            health = client.get(front + "/health")
        assert set(mine.values()) == {403}, mine  # the front: this machine and the token
        assert set(direct.values()) == {401}, direct  # the router's own port: the token as the bearer
        assert guessed.status_code == 401
        assert listed.status_code == 200 and len(listed.json()["urls"]) == 2  # kvstack, with the token
        assert completion.status_code == 200 and health.status_code == 200
        sent = json.dumps(body)
        theirs = send_as_other_user(
            [
                (m, base + p, {**key, "Content-Type": "application/json"}, sent if m != "GET" else None)
                for base in (front, inside)
                for m, p in ROUTER_ADMIN
            ]
            + [("GET", front + "/list_workers", {CONTROL_HEADER: "guess"}, None)]
        )
        n = len(ROUTER_ADMIN)
        assert set(theirs[:n]) == {403} and set(theirs[n : 2 * n]) == {401} and theirs[-1] == 403, theirs
        assert not can_read_as_other_user(str(tmp_path / "run" / "control-token"))
        names = []
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                names.append(" ".join(proc.cmdline()))
                assert token not in names[-1] and API_KEY not in names[-1]
        assert any(n.startswith("vllm::router") for n in names)  # vllm-router's own process name
        assert group.poll_died() is None


def test_a_replica_dying_while_serving_stops_everything_and_names_it(tmp_path: Path) -> None:
    rs = fake_set(tmp_path, die={1: 3.0})
    rs = serving_only(rs)
    events, tree, _ = recording_events()
    with pytest.raises(ProcessFailed) as info:
        run_launch(rs, events)
    err = info.value
    assert err.message.startswith("replica 1 engine exited with code 3 during serving")
    assert "fake engine listening" in "\n".join(err.tail)
    assert str(tmp_path / "run" / "replica-1" / "engine.log") in err.message
    assert gone(tree) == []


def test_sigterm_stops_every_replica(tmp_path: Path) -> None:
    rs = fake_set(tmp_path)
    rs = serving_only(rs)
    events, tree, said = recording_events()
    before = signal.getsignal(signal.SIGTERM)

    def ready(url: str) -> None:
        tree.extend(psutil.Process().children(recursive=True))
        # SIGTERM to ourselves once serving: the group's handler stops all and returns 0.
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()

    events.ready = ready
    assert run_launch(rs, events) == 0
    assert "stopped" in said
    assert gone(tree) == []
    assert signal.getsignal(signal.SIGTERM) == before  # kvstack's handler is gone again


def test_a_busy_port_in_the_layout_is_refused_before_anything_starts(tmp_path: Path) -> None:
    rs = fake_set(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", rs.replicas[1].options.port))
        busy.listen()
        with pytest.raises(
            NetworkTargetError, match=f"port {rs.replicas[1].options.port} on 127.0.0.1 is already in use"
        ):
            run_launch(rs)
    assert not (tmp_path / "run").exists()


def test_router_missing_exits_2_with_the_install_command_before_anything_starts(tmp_path: Path) -> None:
    bare = tmp_path / "bare-venv"
    venv.EnvBuilder(with_pip=False).create(bare)  # an interpreter without vllm-router
    py = str(bare / "bin" / "python")
    home = tmp_path / "home"
    home.mkdir()
    run_dir = tmp_path / "run"
    env = isolated_env(home, {"KVSTACK_ENGINE_PYTHON": py})
    argv = ["serve", "--replicas", "2", "--router", "--hardware", str(NO_GPU), "--run-dir", str(run_dir)]
    argv += ["--port", str(free_block(8)), "--no-validate"]
    res = run_cli(argv, ROOT, env, timeout=120)
    assert res.code == 2, res.stderr
    assert f"error: --router needs the vllm-router package, which is not installed for {py}" in res.err_lines
    assert f"hint: install it: {py} -m pip install vllm-router, or drop --router" in res.err_lines
    assert not run_dir.exists() and res.survivors == []


def test_dry_run_json_shows_every_replica(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    argv = ["serve", "--replicas", "2", "--router", "--hardware", str(NO_GPU), "--dry-run", "--json"]
    argv += ["--port", "9100", "--api-key", API_KEY, "--run-dir", str(tmp_path / "run")]
    res = run_cli(argv, ROOT, isolated_env(home), timeout=120)
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [r["base_url"] for r in doc["replicas"]] == ["http://127.0.0.1:9101", "http://127.0.0.1:9102"]
    assert doc["argv"] == doc["replicas"][0]["argv"] and doc["base_url"] == "http://127.0.0.1:9101"
    assert doc["router"]["base_url"] == doc["front_url"] == "http://127.0.0.1:9100"
    assert API_KEY not in res.stdout + res.stderr
    assert not (tmp_path / "run").exists()
