"""Every user mistake, through the real CLI: exit 2 (bad input) or 1 (runtime), a short `error:`
with a `hint:`, no traceback, nothing written, no process left behind.

Each case runs ``python -m kvstack`` in a subprocess whose cwd, HOME and XDG dirs are one tmp
dir; the whole tmp tree is compared before and after. Serve cases must fail in preflight, before
anything starts: they also carry ``--ready-timeout 5`` so that a regression that does launch the
engine is cut short (and then caught by the leftover-process check).

Unwritable cache dir: the tests run as root here, and root ignores mode bits (chmod 500 stops
nobody with CAP_DAC_OVERRIDE) while a read-only bind mount needs CAP_SYS_ADMIN and a mount
namespace. A path below a regular file cannot be created by any user, root included, so that is
the unwritable location used.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.integration.conftest import free_port
from tests.support.cli_run import CliResult, isolated_env, run_cli, tree_state
from tests.support.deps import ROOT

pytestmark = pytest.mark.integration

PROFILES = ROOT / "profiles"
H100 = PROFILES / "hardware" / "h100-sxm.json"
NOBODY_UID = 65534


@dataclass
class Scene:
    """One case's world: a tmp dir (cwd, HOME, every path the case names), env and placeholders."""

    tmp: Path
    env: dict[str, str]
    vars: dict[str, str]
    sockets: list[socket.socket] = field(default_factory=list)

    def file(self, rel: str, text: str) -> Path:
        path = self.tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def dir(self, rel: str, mode: int = 0o700) -> Path:
        path = self.tmp / rel
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)
        return path


Setup = Callable[[Scene], None]


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    code: int
    words: tuple[str, ...]  # the error line names the problem with these
    hint: tuple[str, ...] = ()  # a hint line exists and holds these
    setup: Setup | None = None
    xfail: str | None = None


# --- setups: files and servers a mistake needs ---------------------------------------------------


def demo_config() -> dict[str, object]:
    data = json.loads((PROFILES / "demo" / "config.json").read_text())
    assert isinstance(data, dict)
    return data


def writes(rel: str, text: str) -> Setup:
    def setup(s: Scene) -> None:
        s.file(rel, text)

    return setup


def private_key_file(s: Scene) -> None:
    s.file("api.key", "sk-bad-input-key\n").chmod(0o600)


def model_without_layers(s: Scene) -> None:
    cfg = demo_config()
    del cfg["num_hidden_layers"]
    s.file("model/config.json", json.dumps(cfg))


def model_layers_text(s: Scene) -> None:
    s.file("model/config.json", json.dumps({**demo_config(), "num_hidden_layers": "two"}))


def snapshot_with(mutate: Callable[[dict[str, object]], None]) -> Setup:
    def setup(s: Scene) -> None:
        data = json.loads(H100.read_text())
        mutate(data)
        s.file("hw.json", json.dumps(data))

    return setup


def gpu_memory_as_text(data: dict[str, object]) -> None:
    gpus = data["gpus"]
    assert isinstance(gpus, list)
    gpus[0]["memory_total_bytes"] = "80GB"


def profiles_with_workload(text: str) -> Setup:
    def setup(s: Scene) -> None:
        shutil.copytree(PROFILES, s.tmp / "profiles")
        s.file("profiles/workloads/rag-long-doc.yaml", text)
        s.env["KVSTACK_PROFILES"] = str(s.tmp / "profiles")

    return setup


def busy_port(s: Scene) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    s.sockets.append(sock)
    s.vars["busy"] = str(sock.getsockname()[1])


def closed_port(s: Scene) -> None:
    """{port} held bound but not listening for the whole run: a connect is refused, and no other
    test's server (xdist runs them beside this one) can take the port between choosing and use."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    s.sockets.append(sock)
    s.vars["port"] = str(sock.getsockname()[1])


def a_file(s: Scene) -> None:
    s.file("afile", "not a directory\n")


def shared_dir(s: Scene) -> None:
    s.dir("shared", 0o777)


def foreign_dir(s: Scene) -> None:
    if os.geteuid() == 0:
        os.chown(s.dir("theirs"), NOBODY_UID, NOBODY_UID)
        s.vars["theirs"] = str(s.tmp / "theirs")
    else:  # without root nothing can be given away; / is owned by root and not group-writable
        s.vars["theirs"] = "/"


def closed_redis_port(s: Scene) -> None:
    s.vars["redis_port"] = str(free_port())


def closed_redis_url_in_a_file(s: Scene) -> None:
    """A password-bearing URL of a closed port, given the way the README asks: --remote-file."""
    closed_redis_port(s)
    s.file("remote-url", f"redis://u:pw-7f3a@127.0.0.1:{s.vars['redis_port']}\n").chmod(0o600)


def bare_python(s: Scene) -> None:
    """A real interpreter without site-packages: the standard library only, no vllm."""
    path = s.file("python-bare", f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    path.chmod(0o755)
    s.env["KVSTACK_ENGINE_PYTHON"] = str(path)


def existing_export(s: Scene) -> None:
    s.file("out/compose.yaml", "# the user's own file\n")


def both(*setups: Setup) -> Setup:
    def setup(s: Scene) -> None:
        for one in setups:
            one(s)

    return setup


# --- the matrix -----------------------------------------------------------------------------------

PLAN = ("plan", "--hardware", "{hw}")
DEMO_PLAN = (*PLAN, "--model", "{demo}")


def serve(
    *extra: str, port: str = "{port}", cache: str = "{tmp}/cache", run: str = "{tmp}/run"
) -> tuple[str, ...]:
    """A serve that passes every check but the one under test (and never gets to start)."""
    return (
        "serve",
        "--model",
        "{demo}",
        "--hardware",
        "{hw}",
        "--kv-dtype",
        "auto",
        "--port",
        port,
        "--cache-dir",
        cache,
        "--run-dir",
        run,
        "--no-validate",
        "--ready-timeout",
        "5",
        *extra,
    )


CASES = [
    # model directory and config.json
    Case(
        "model-dir-missing",
        (*PLAN, "--model", "{tmp}/nope"),
        2,
        ("{tmp}/nope", "does not exist"),
        ("catalog",),
    ),
    Case("model-dir-without-config", (*PLAN, "--model", "{tmp}"), 2, ("no config.json",), ("--model",)),
    Case(
        "config-not-json",
        (*PLAN, "--model", "{tmp}/model"),
        2,
        ("config.json", "not JSON"),
        ("config.json",),
        writes("model/config.json", "{not json"),
    ),
    Case(
        "config-without-num-hidden-layers",
        (*PLAN, "--model", "{tmp}/model"),
        2,
        ("num_hidden_layers",),
        ("config.json",),
        model_without_layers,
    ),
    Case(
        "config-layers-not-a-number",
        (*PLAN, "--model", "{tmp}/model"),
        2,
        ("num_hidden_layers", "positive integer", "'two'"),
        ("config.json",),
        model_layers_text,
    ),
    Case(
        "catalog-model-unknown",
        (*PLAN, "--model", "llama-9"),
        2,
        ("unknown model 'llama-9'", "llama-3.1-8b"),
        ("models.yaml",),
    ),
    # hardware snapshot
    Case(
        "snapshot-missing",
        ("plan", "--model", "{demo}", "--hardware", "{tmp}/hw.json"),
        2,
        ("{tmp}/hw.json", "does not exist"),
        ("kvstack doctor --json",),
    ),
    Case(
        "snapshot-not-json",
        ("plan", "--model", "{demo}", "--hardware", "{tmp}/hw.json"),
        2,
        ("hw.json", "not JSON"),
        ("kvstack doctor --json",),
        writes("hw.json", "GPU: H100\n"),
    ),
    Case(
        "snapshot-wrong-type",
        ("plan", "--model", "{demo}", "--hardware", "{tmp}/hw.json"),
        2,
        ("field 'gpus.0.memory_total_bytes'", "integer"),
        ("fix that field",),
        snapshot_with(gpu_memory_as_text),
    ),
    Case(
        "snapshot-is-a-directory",
        ("plan", "--model", "{demo}", "--hardware", "{tmp}"),
        2,
        ("hardware snapshot", "Is a directory"),
        ("kvstack doctor --json",),
    ),
    # workload profile
    Case(
        "workload-unknown",
        (*DEMO_PLAN, "--workload", "rag"),
        2,
        ("unknown workload 'rag'", "rag-long-doc", "chatbot-shared-prompt"),
        ("profiles",),
    ),
    Case(
        "workload-file-missing",
        (*DEMO_PLAN, "--workload", "{tmp}/mine.yaml"),
        2,
        ("{tmp}/mine.yaml", "does not exist"),
        ("rag-long-doc",),
    ),
    Case(
        "workload-yaml-broken",
        (*DEMO_PLAN, "--workload", "rag-long-doc"),
        2,
        ("rag-long-doc.yaml", "not valid YAML", "at line 3"),
        ("fix the file",),
        profiles_with_workload("name: rag-long-doc\ncontext: [128k\nusers: 8\n"),
    ),
    Case(
        "workload-field-malformed",
        (*DEMO_PLAN, "--workload", "rag-long-doc"),
        2,
        ("rag-long-doc.yaml", "'lots'"),
        ("context: 32k",),
        profiles_with_workload("name: rag-long-doc\ncontext: lots\nusers: 8\n"),
    ),
    # numbers
    Case("context-negative", (*DEMO_PLAN, "--context", "-5"), 2, ("--context", "'-5'"), ("--context 128k",)),
    Case(
        "context-not-a-number", (*DEMO_PLAN, "--context", "lots"), 2, ("--context", "'lots'"), ("--context",)
    ),
    Case(
        "context-zero", (*DEMO_PLAN, "--context", "0"), 2, ("--context must be positive",), ("--context 32k",)
    ),
    Case(
        "context-above-model-max",
        (*DEMO_PLAN, "--context", "64k"),
        2,
        ("65536", "maximum context of 16384"),
        ("--context 16K",),
    ),
    Case("users-zero", (*DEMO_PLAN, "--users", "0"), 2, ("--users must be at least 1",), ("--users 1",)),
    Case("tp-zero", (*DEMO_PLAN, "--tp", "0"), 2, ("--tp must be at least 1",), ("--tp 1",)),
    Case(
        "gpu-memory-utilization-above-1",
        (*DEMO_PLAN, "--gpu-memory-utilization", "1.5"),
        2,
        ("--gpu-memory-utilization", "1.5"),
        ("0.9",),
    ),
    Case(
        "min-disk-bw-not-a-size",
        (*DEMO_PLAN, "--min-disk-bw", "fast"),
        2,
        ("--min-disk-bw", "'fast'"),
        ("--min-disk-bw 64GiB",),
    ),
    # unknown names (the message lists the choices)
    Case("engine-unknown", (*DEMO_PLAN, "--engine", "trt"), 2, ("'trt'", "vllm, sglang"), ("--engine vllm",)),
    Case(
        "connector-unknown",
        (*DEMO_PLAN, "--offload", "mooncake"),
        2,
        ("'mooncake'", "auto, lmcache, lmcache-mp, native, hicache, none"),
        ("--offload auto",),
    ),
    Case(
        "kv-dtype-unknown",
        (*DEMO_PLAN, "--kv-dtype", "int3"),
        2,
        ("'int3'", "fp8", "bfloat16"),
        ("--kv-dtype",),
    ),
    # impossible on this hardware
    Case(
        "kv-dtype-gpu-cannot-run",
        (*DEMO_PLAN, "--kv-dtype", "nvfp4"),
        2,
        ("NVFP4", "CC 9.0"),
        ("--kv-dtype fp8",),
    ),
    Case("tp-above-gpu-count", (*DEMO_PLAN, "--tp", "4"), 2, ("--tp 4 needs 4 GPUs", "has 1"), ("--tp 1",)),
    Case(
        "remote-malformed",
        (*DEMO_PLAN, "--remote", "http://x"),
        2,
        ("remote URL http://x is malformed", "redis://"),
        ("redis://[user:pass@]host:port",),
    ),
    Case(
        "remote-without-port",
        (*DEMO_PLAN, "--remote", "redis://cache"),
        2,
        ("remote URL redis://cache is malformed", "no port"),
        ("redis://[user:pass@]host:port",),
    ),
    # serve: everything is refused before anything is written or started
    Case("serve-port-out-of-range", serve(port="70000"), 2, ("--port 70000", "1-65535"), ("--port 8000",)),
    Case(
        "serve-port-in-use",
        serve(port="{busy}"),
        2,
        ("port {busy}", "already in use"),
        ("--port",),
        busy_port,
    ),
    Case(
        "serve-context-above-model-max",
        serve("--context", "1m"),
        2,
        ("maximum context of 16384",),
        ("--context 16K",),
    ),
    Case("serve-users-zero", serve("--users", "0"), 2, ("--users must be at least 1",), ("--users",)),
    Case("serve-engine-unknown", serve("--engine", "trt"), 2, ("'trt'", "vllm, sglang"), ("--engine",)),
    Case(
        "serve-connector-unknown",
        serve("--offload", "mooncake"),
        2,
        ("'mooncake'", "lmcache"),
        ("--offload",),
    ),
    Case("serve-tp-above-gpu-count", serve("--tp", "2"), 2, ("--tp 2 needs 2 GPUs",), ("--tp 1",)),
    # Engine arguments the tiers are sized from: refused with kvstack's flag (serving/engine_args.py)
    Case(
        "serve-engine-max-model-len",
        (*serve(), "--", "--max-model-len", "8192"),
        2,
        ("--max-model-len among the engine arguments",),
        ("--context",),
    ),
    Case(
        "serve-engine-kv-dtype-contradicts",
        (*serve(), "--", "--kv-cache-dtype", "fp8"),
        2,
        ("--kv-dtype auto and --kv-cache-dtype fp8",),
        ("give it once",),
    ),
    Case(
        "serve-engine-dtype-unknown",
        (*serve(), "--", "--dtype", "int3"),
        2,
        ("--dtype 'int3'",),
        ("float32",),
    ),
    Case(
        "serve-snapshot-not-json",
        (*serve(), "--hardware", "{tmp}/hw.json"),
        2,
        ("not JSON",),
        ("kvstack doctor --json",),
        writes("hw.json", "{"),
    ),
    Case(
        "serve-cache-dir-not-writable",
        serve(cache="{tmp}/afile/cache"),
        2,
        ("{tmp}/afile", "not a directory"),
        ("directory",),
        a_file,
    ),
    Case(
        "serve-cache-dir-world-writable",
        serve(cache="{tmp}/shared"),
        2,
        ("{tmp}/shared", "group- or world-writable"),
        ("chmod 700", "--cache-dir"),
        shared_dir,
    ),
    Case(
        "serve-cache-dir-owned-by-another-user",
        serve(cache="{theirs}"),
        2,
        ("owned by another user",),
        ("--cache-dir",),
        foreign_dir,
    ),
    Case(
        "serve-cache-dir-under-proc-dry-run-no-tier",  # refused even when no tier would use it
        serve("--dry-run", "--offload", "none", cache="/proc/kvstack-cache"),
        2,
        ("--cache-dir /proc/kvstack-cache", "proc filesystem"),
        ("--cache-dir",),
    ),
    Case(
        "serve-run-dir-under-sys",
        serve(run="/sys/kvstack-run"),
        2,
        ("--run-dir /sys/kvstack-run", "sysfs filesystem"),
        ("--run-dir",),
    ),
    Case(
        "serve-run-dir-world-writable",
        serve(run="{tmp}/shared"),
        2,
        ("group- or world-writable",),
        ("--run-dir",),
        shared_dir,
    ),
    Case(
        "serve-remote-malformed",
        serve("--remote", "http://x"),
        2,
        ("remote URL http://x is malformed", "redis://"),
        ("redis://",),
    ),
    Case(
        "serve-remote-unreachable",
        serve("--remote-file", "{tmp}/remote-url"),
        2,
        ("redis://u:***@127.0.0.1:{redis_port}", "cannot connect"),
        ("redis-cli",),
        closed_redis_url_in_a_file,
    ),
    Case(
        "serve-engine-not-installed",
        serve(),
        2,
        ("vllm is not installed",),
        ("-m pip install vllm",),
        bare_python,
    ),
    # API keys: a key file that cannot be one, a key on the engine's command line, a public router
    Case(
        "serve-api-key-file-missing",
        serve("--api-key-file", "{tmp}/nokey"),
        2,
        ("--api-key-file {tmp}/nokey", "does not exist"),
        ("chmod 600",),
    ),
    Case(
        "serve-api-key-in-engine-args",
        (*serve(), "--", "--api-key", "pw-7f3a-engine-key"),
        2,
        ("--api-key in the engine arguments", "command line"),
        ("--api-key-file",),
    ),
    Case(
        # The router reaches its engines with kvstack's run token, which a keyed SGLang refuses.
        "serve-router-before-keyed-sglang",
        serve("--engine", "sglang", "--replicas", "2", "--router", "--api-key-file", "{tmp}/api.key"),
        2,
        ("--router with --engine sglang and an API key", "SGLang refuses"),
        ("--engine vllm",),
        private_key_file,
    ),
    Case(
        "validate-api-key-file-empty",
        ("validate", "--url", "http://127.0.0.1:{port}", "--api-key-file", "{tmp}/api.key"),
        2,
        ("--api-key-file {tmp}/api.key", "is empty"),
        ("printf",),
        writes("api.key", "\n"),
    ),
    Case(
        "bench-api-key-file-is-a-directory",
        ("bench", "--url", "http://127.0.0.1:{port}", "--requests", "2", "--api-key-file", "{tmp}"),
        2,
        ("--api-key-file {tmp}", "is a directory"),
        ("the file that holds the key",),
    ),
    Case(
        "bench-api-key-file-two-lines",
        ("bench", "--url", "http://127.0.0.1:{port}", "--requests", "2", "--api-key-file", "{tmp}/api.key"),
        2,
        ("more than one line", "not shown"),
        ("one line",),
        writes("api.key", "pw-7f3a-line-one\npw-7f3a-line-two\n"),
    ),
    # validate and bench against a server
    Case(
        "validate-nothing-listening",
        ("validate", "--url", "http://127.0.0.1:{port}", "--out", "{tmp}/v.json"),
        2,
        ("nothing is listening", "127.0.0.1:{port}"),
        ("kvstack serve",),
        setup=closed_port,
    ),
    Case(
        "validate-remote-malformed",
        ("validate", "--url", "http://127.0.0.1:{port}", "--remote", "redis//:pw-7f3a@cache:6379"),
        2,
        ("malformed", "***@cache:6379"),
        ("redis://",),
    ),
    Case(
        "validate-url-not-a-url",
        ("validate", "--url", "notaurl"),
        2,
        ("--url", "'notaurl'"),
        ("http://127.0.0.1:8000",),
    ),
    Case(
        "bench-nothing-listening",
        ("bench", "--url", "http://127.0.0.1:{port}", "--requests", "2", "--out", "{tmp}/bench"),
        2,
        ("nothing is listening", "127.0.0.1:{port}"),
        ("kvstack serve",),
        setup=closed_port,
    ),
    Case(
        "bench-url-not-a-url",
        ("bench", "--url", "notaurl", "--requests", "2"),
        2,
        ("--url", "'notaurl'"),
        ("http://127.0.0.1:8000",),
    ),
    # doctor
    Case(
        "doctor-fio-seconds-negative",
        ("doctor", "--fio-seconds", "-1"),
        2,
        ("--fio-seconds", "-1"),
        ("--no-fio",),
    ),
    Case(
        "doctor-path-missing",
        ("doctor", "--no-fio", "--path", "{tmp}/nope"),
        2,
        ("--path {tmp}/nope does not exist",),
        ("mkdir -p",),
    ),
    Case(
        "doctor-path-is-a-file",
        ("doctor", "--no-fio", "--json", "--path", "{tmp}/afile"),
        2,
        ("is a file, not a directory",),
        ("directory",),
        a_file,
    ),
    # export
    Case(
        "export-format-unknown",
        ("export", "--format", "nope", "--model", "{demo}", "--hardware", "{hw}"),
        2,
        ("'nope'", "helm, compose, systemd"),
        ("--format helm",),
    ),
    Case(
        "export-out-exists-without-force",
        ("export", "--format", "compose", "--model", "{demo}", "--hardware", "{hw}", "--out", "{tmp}/out"),
        2,
        ("already holds compose.yaml",),
        ("--force",),
        existing_export,
    ),
    Case(
        "export-port-out-of-range",
        ("export", "--format", "systemd", "--model", "{demo}", "--hardware", "{hw}", "--port", "0"),
        2,
        ("--port", "65535"),
        ("--port 8000",),
    ),
    Case(
        "export-remote-malformed",
        ("export", "--format", "helm", "--model", "{demo}", "--hardware", "{hw}", "--remote", "redis://:pw@"),
        2,
        ("redis://:***@", "no host"),
        ("redis://[user:pass@]host:port",),
    ),
]


@dataclass
class Outcome:
    scene: Scene
    result: CliResult
    before: dict[str, str]
    after: dict[str, str]


def _scene(tmp: Path) -> Scene:
    home = tmp / "home"
    home.mkdir()
    return Scene(
        tmp=tmp,
        env=isolated_env(home),
        vars={"tmp": str(tmp), "demo": str(PROFILES / "demo"), "hw": str(H100), "port": str(free_port())},
    )


def _release(scene: Scene) -> None:
    for sock in scene.sockets:
        sock.close()
    theirs = scene.tmp / "theirs"
    if theirs.exists():  # give it back so that pytest can clean up
        os.chown(theirs, os.getuid(), os.getgid())


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every case run once, a few at a time (each is mostly interpreter start-up), in its own tmp dir."""
    scenes = {c.id: _scene(tmp_path_factory.mktemp(c.id)) for c in CASES}
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}

    def one(case: Case) -> Outcome:
        scene = scenes[case.id]
        if case.setup is not None:
            case.setup(scene)
        before = tree_state(scene.tmp)
        result = run_cli([a.format_map(scene.vars) for a in case.argv], scene.tmp, scene.env)
        return Outcome(scene, result, before, tree_state(scene.tmp))

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            done = dict(zip([c.id for c in CASES], pool.map(one, CASES), strict=True))
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in children_before]
        assert left == [], f"processes left running after the matrix: {left}"
        yield done
    finally:
        for scene in scenes.values():
            _release(scene)


def _params() -> list[object]:
    marks = {c.id: [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else [] for c in CASES}
    return [pytest.param(c, id=c.id, marks=marks[c.id]) for c in CASES]


def test_the_matrix_is_wide_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)
    commands = {c.argv[0] for c in CASES}
    assert commands == {"plan", "serve", "validate", "bench", "doctor", "export"}


@pytest.mark.parametrize("case", _params())
def test_user_mistake(case: Case, outcomes: dict[str, Outcome]) -> None:
    got = outcomes[case.id]
    assert_clean_failure(got.result, case, got.scene)
    assert got.after == got.before, "the failed command wrote or changed files"


def assert_clean_failure(res: CliResult, case: Case, scene: Scene) -> None:
    shown = f"exit {res.code}\nstdout: {res.stdout[-500:]!r}\nstderr: {res.stderr!r}"
    assert res.code == case.code, shown
    assert "Traceback" not in res.stderr + res.stdout, shown
    assert "pw-7f3a" not in res.stderr + res.stdout, shown  # the password the Redis cases use
    lines = res.err_lines
    assert lines and lines[0].startswith("error: "), shown
    assert len(lines) <= 4, shown
    assert sum(line.startswith("error:") for line in lines) == 1, shown
    assert "internal error" not in lines[0], shown
    for word in case.words:
        assert word.format_map(scene.vars) in lines[0], f"{word!r} missing\n{shown}"
    hints = [line for line in lines if line.startswith("hint: ")]
    assert len(hints) == 1, shown
    for word in case.hint:
        assert word.format_map(scene.vars) in hints[0], f"{word!r} missing from the hint\n{shown}"
    assert res.stdout == "", shown  # no half-printed report or JSON
    assert res.survivors == [], f"processes left running: {res.survivors}"


# --- missing programs that are not fatal --------------------------------------------------------


def test_missing_fio_is_a_check_with_the_install_command(tmp_path: Path) -> None:
    fio = shutil.which("fio")
    if fio is None:
        pytest.fail("fio must be installed for this test to hide it (scripts/test installs it)")
    # Every PATH entry that holds fio goes (/bin and /usr/bin are often the same directory).
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    path = os.pathsep.join(d for d in dirs if d and not (Path(d) / "fio").exists())
    assert shutil.which("fio", path=path) is None
    home = tmp_path / "home"
    home.mkdir()
    env = isolated_env(home, {"PATH": path})
    disk = tmp_path / "disk"
    disk.mkdir()
    argv = ["doctor", "--json", "--fio-seconds", "1", "--path", str(disk)]

    res = run_cli(argv, tmp_path, env)
    assert res.code == 0, res.stderr
    assert "Traceback" not in res.stderr
    snap = json.loads(res.stdout)
    (check,) = [c for c in snap["checks"] if c["name"] == "fio"]
    assert "apt-get install fio" in check["message"]
    assert "fio is not installed" in snap["disks"][0]["unknown"]["read_bw_bytes_per_s"]
    assert res.survivors == []

    strict = run_cli([*argv, "--strict"], tmp_path, env)
    assert strict.code == 1, strict.stderr
    assert "Traceback" not in strict.stderr
    assert list(disk.iterdir()) == []  # no fio test file or anything else left behind
