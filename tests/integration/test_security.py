"""Security properties of what kvstack prints, writes and runs.

Secrets stay out of every output; a public bind without a key warns; no shell is ever invoked;
serve's write path makes private dirs 0700 and config files 0600; KV caches of different
fingerprints (dummy vs real weights) never share a directory.
"""

from __future__ import annotations

import ast
import json
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstack.hardware.snapshot import HardwareSnapshot, load_snapshot
from kvstack.redact import MASK
from kvstack.serving.launch_files import record_run, write_launch_files
from kvstack.serving.prepare import PreparedServe, prepare
from kvstack.serving.request import ServeRequest
from tests.support.cli_run import isolated_env, run_cli, tree_state
from tests.support.deps import ROOT

pytestmark = pytest.mark.integration

PROFILES = ROOT / "profiles"
H100 = PROFILES / "hardware" / "h100-sxm.json"
LLAMA_8B_CONFIG = ROOT / "tests" / "fixtures" / "configs" / "Llama-3.1-8B.json"

API_KEY = "sk-secret-123"
REDIS_PASSWORD = "hunter2pw"
ENV_SECRETS = {
    "HF_TOKEN": "hf_envsecret4242",
    "OPENAI_API_KEY": "sk-envsecret77",
    "DB_PASSWORD": "pw-env-9931",
}
ARGV_SECRET = "hf_argvsecret5150"
FILE_KEY = "sk-from-a-file-8086"


@pytest.fixture
def quiet_listener() -> Iterator[socket.socket]:
    """A port that accepts connections, so that a dry run that contacted it would be seen."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        yield sock


def _dry_run(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> list[str]:
    return [
        "serve",
        "--dry-run",
        "--model",
        str(PROFILES / "demo"),
        "--hardware",
        str(H100),
        "--kv-dtype",
        "auto",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--run-dir",
        str(tmp_path / "run"),
        *extra,
    ]


@pytest.mark.parametrize("json_mode", [True, False], ids=["json", "text"])
def test_dry_run_prints_no_secret_and_touches_nothing(
    tmp_path: Path, quiet_listener: socket.socket, json_mode: bool
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    port = quiet_listener.getsockname()[1]
    remote = f"redis://u:{REDIS_PASSWORD}@127.0.0.1:{port}"
    argv = _dry_run(tmp_path, "--api-key", API_KEY, "--remote", remote, *(["--json"] if json_mode else []))
    argv += ["--", "--hf-token", ARGV_SECRET]
    before = tree_state(tmp_path)

    res = run_cli(argv, tmp_path, isolated_env(home, ENV_SECRETS))

    assert res.code == 0, res.stderr
    everything = res.stdout + res.stderr
    for secret in (API_KEY, REDIS_PASSWORD, ARGV_SECRET, *ENV_SECRETS.values()):
        assert secret not in everything
    # The secrets are there, masked: the key in the child's env, the password in the URL.
    assert f"redis://u:{MASK}@127.0.0.1:{port}" in everything
    if json_mode:
        doc = json.loads(res.stdout)
        assert doc["env"]["VLLM_API_KEY"] == MASK
        assert doc["argv"][-2:] == ["--hf-token", MASK]
    else:
        assert f"VLLM_API_KEY={MASK}" in res.stdout
        assert f"--hf-token {MASK}" in res.stdout
        assert "nothing was started or written" in res.stdout
    assert tree_state(tmp_path) == before  # no run dir, no cache dir, no config file
    assert res.survivors == []
    with pytest.raises(BlockingIOError):
        quiet_listener.accept()  # the dry run never contacted the remote store


def test_dry_run_masks_a_password_in_the_remote_urls_query(
    tmp_path: Path, quiet_listener: socket.socket
) -> None:
    """redis-py (LMCache's Redis connector) sends ?password= as AUTH: a credential like user:pw@."""
    home = tmp_path / "home"
    home.mkdir()
    port = quiet_listener.getsockname()[1]
    remote = f"redis://127.0.0.1:{port}/0?socket_timeout=5&password={REDIS_PASSWORD}"
    # In-process LMCache takes a URL's query (LMCache's server takes plain redis:// only).
    argv = _dry_run(tmp_path, "--remote", remote, "--offload", "lmcache", "--json")
    res = run_cli(argv, tmp_path, isolated_env(home, {}))
    assert res.code == 0, res.stderr
    assert REDIS_PASSWORD not in res.stdout + res.stderr
    assert f"redis://127.0.0.1:{port}/0?socket_timeout=5&password={MASK}" in res.stdout
    assert "--remote-file" in res.stderr  # the argv warning, as for user:pw@
    with pytest.raises(BlockingIOError):
        quiet_listener.accept()


def _prepared(tmp_path: Path, model: Path, **kw: object) -> PreparedServe:
    """A real prepare() of a Llama-3.1-8B-shaped local model, sized so that it gets a disk tier."""
    snap: HardwareSnapshot = load_snapshot(H100)
    # The recorded disk, placed where this test may write: the cache root is on it.
    snap.disks = [snap.disks[0].model_copy(update={"path": str(tmp_path), "mount": str(tmp_path)})]
    request = ServeRequest(
        model=str(model),
        hardware=H100,
        context="128k",
        users=16,
        kv_dtype="auto",
        cache_dir=tmp_path / "cache",
        run_dir=tmp_path / "run",
        **kw,  # type: ignore[arg-type]
    )
    (one,) = prepare(request, snap).replicas
    return one


def _model_dir(tmp_path: Path) -> Path:
    model = tmp_path / "llama-3.1-8b"
    model.mkdir()
    (model / "config.json").write_text(LLAMA_8B_CONFIG.read_text())
    return model


def test_secret_env_values_are_masked_in_dry_run_env(tmp_path: Path) -> None:
    # In-process LMCache: its config file's path sits in the engine's environment.
    prepared = _prepared(tmp_path, _model_dir(tmp_path), api_key=API_KEY, offload="lmcache")
    server = prepared.spec.server.model_copy(update={"env": {**prepared.spec.server.env, **ENV_SECRETS}})
    spec = prepared.spec.model_copy(update={"server": server})
    doc = spec.public()
    for name in ENV_SECRETS:
        assert doc["env"][name] == MASK
    assert doc["env"]["VLLM_API_KEY"] == MASK
    assert doc["env"]["LMCACHE_CONFIG_FILE"] == str(tmp_path / "run" / "lmcache.yaml")  # not a secret
    text = json.dumps(doc)
    for secret in (API_KEY, *ENV_SECRETS.values()):
        assert secret not in text
    # The real values still reach the child: only the printed form is masked.
    assert spec.server.env["HF_TOKEN"] == ENV_SECRETS["HF_TOKEN"]
    assert spec.server.env["VLLM_API_KEY"] == API_KEY


@pytest.mark.parametrize(
    ("extra", "env", "warned"),
    [
        (["--host", "0.0.0.0"], {}, True),
        (["--host", "0.0.0.0", "--api-key", API_KEY], {}, False),
        (["--host", "0.0.0.0"], {"KVSTACK_API_KEY": API_KEY}, False),
        (["--host", "0.0.0.0"], {"VLLM_API_KEY": API_KEY}, False),
        ([], {}, False),  # the default bind is loopback
    ],
    ids=[
        "public-no-key",
        "public-with-key",
        "public-kvstack-env-key",
        "public-vllm-env-key",
        "default-loopback",
    ],
)
def test_public_bind_without_api_key_warns(
    tmp_path: Path, extra: list[str], env: dict[str, str], warned: bool
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    res = run_cli([*_dry_run(tmp_path, *extra), "--json"], tmp_path, isolated_env(home, env))
    assert res.code == 0, res.stderr
    warning = [line for line in res.err_lines if line.startswith("warning:") and "without an API key" in line]
    assert bool(warning) == warned, res.stderr
    if warned:  # it names what is open, and what is not
        for words in ("/v1/*", "/invocations", "development endpoints stay off", "--api-key-file"):
            assert words in warning[0], warning[0]
    doc = json.loads(res.stdout)
    argv = doc["argv"]
    assert argv[argv.index("--host") + 1] == (extra[1] if extra else "127.0.0.1")
    assert argv[argv.index("--middleware") + 1] == "kvstack.engines.vllm_guard.ControlGuard"
    public = bool(extra)
    assert ("VLLM_SERVER_DEV_MODE" in doc["env"]) is not public
    assert doc["reset_cache_path"] == (None if public else "/reset_prefix_cache")
    assert (doc["env"].get("VLLM_API_KEY") == MASK) is (bool(env) or API_KEY in extra)
    assert API_KEY not in res.stdout + res.stderr


def _key_file(tmp_path: Path, mode: int = 0o600) -> Path:
    path = tmp_path / "api.key"
    path.write_text(FILE_KEY + "\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("source", ["file", "kvstack-env", "vllm-env", "argv"])
def test_a_key_reaches_vllm_only_through_its_environment(tmp_path: Path, source: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    key_args = {"file": ["--api-key-file", str(_key_file(tmp_path))], "argv": ["--api-key", FILE_KEY]}
    env = {"kvstack-env": {"KVSTACK_API_KEY": FILE_KEY}, "vllm-env": {"VLLM_API_KEY": FILE_KEY}}
    res = run_cli(
        [*_dry_run(tmp_path, *key_args.get(source, [])), "--json"],
        tmp_path,
        isolated_env(home, env.get(source)),
    )
    assert res.code == 0, res.stderr
    assert FILE_KEY not in res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["env"]["VLLM_API_KEY"] == MASK and "--api-key" not in doc["argv"]
    assert "KVSTACK_API_KEY" in doc["unset_env"]  # kvstack's variable does not travel on
    argv_warnings = [line for line in res.err_lines if "every local user" in line]
    assert len(argv_warnings) == (source == "argv"), res.stderr


def test_a_key_file_others_can_read_warns(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    path = _key_file(tmp_path, 0o644)
    res = run_cli([*_dry_run(tmp_path, "--api-key-file", str(path)), "--json"], tmp_path, isolated_env(home))
    assert res.code == 0, res.stderr
    assert [line for line in res.err_lines if "readable by group or others" in line] == [
        f"warning: --api-key-file {path} is readable by group or others (mode 0644): chmod 600 {path}"
    ]


def test_sglang_gets_its_key_in_a_private_file_and_its_admin_routes_locked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    argv = [
        *_dry_run(
            tmp_path, "--engine", "sglang", "--host", "0.0.0.0", "--api-key-file", str(_key_file(tmp_path))
        )
    ]
    res = run_cli([*argv, "--json"], tmp_path, isolated_env(home))
    assert res.code == 0, res.stderr
    assert FILE_KEY not in res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert "--api-key" not in doc["argv"]
    config = doc["argv"][doc["argv"].index("--config") + 1]
    # A start file: written just before SGLang starts, removed once it is ready; shown masked whole.
    assert [f for f in doc["files"] if f["path"] == config] == []
    assert doc["start_files"] == [
        {"path": str(tmp_path / "run" / "sglang-auth.yaml"), "content": MASK, "mode": "0o600"}
    ]
    assert doc["reset_cache_path"] is None


def test_a_router_on_a_public_address_serves_behind_kvstacks_guard_with_no_secret_shown(
    tmp_path: Path,
) -> None:
    """vllm-router's admin routes have no authentication; kvstack serves it behind its guard
    (serving/router_front.py), so a public --host is served: the key and the run's token reach the
    front through its environment, masked in what is shown."""
    home = tmp_path / "home"
    home.mkdir()
    argv = _dry_run(tmp_path, "--replicas", "1", "--router", "--host", "0.0.0.0", "--json")
    res = run_cli(argv, tmp_path, isolated_env(home, {"KVSTACK_API_KEY": API_KEY}))
    assert res.code == 0, res.stderr
    router = json.loads(res.stdout)["router"]
    assert router["argv"][1:5] == ["-m", "kvstack.serving.router_front", "--host", "0.0.0.0"]
    assert router["env"] == {"KVSTACK_CONTROL_TOKEN": MASK, "VLLM_API_KEY": MASK}
    assert API_KEY not in res.stdout + res.stderr


def test_a_router_in_front_of_sglang_with_a_key_is_refused_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    argv = _dry_run(tmp_path, "--engine", "sglang", "--replicas", "1", "--router")
    res = run_cli(argv, tmp_path, isolated_env(home, {"KVSTACK_API_KEY": API_KEY}))
    assert res.code == 2, res.stderr
    error = [line for line in res.err_lines if line.startswith(("error:", "hint:"))]
    assert error[0].startswith("error: --router with --engine sglang and an API key"), res.stderr
    assert error[1].startswith("hint: ") and len(error) == 2 and "Traceback" not in res.stderr
    assert API_KEY not in res.stdout + res.stderr


def _shell_calls(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    banned_attrs = {
        ("os", "system"),
        ("os", "popen"),
        ("subprocess", "getoutput"),
        ("subprocess", "getstatusoutput"),
        ("asyncio", "create_subprocess_shell"),
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and (func.value.id, func.attr) in banned_attrs
        ):
            found.append((node.lineno, f"{func.value.id}.{func.attr}()"))
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                found.append((node.lineno, "shell=..."))
    for node in ast.walk(tree):  # `from os import system` would dodge the attribute check
        if isinstance(node, ast.ImportFrom) and node.module in {"os", "subprocess", "asyncio"}:
            for alias in node.names:
                if (node.module, alias.name) in banned_attrs:
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
    return found


def test_no_shell_is_ever_invoked() -> None:
    sources = sorted((ROOT / "kvstack").rglob("*.py"))
    assert len(sources) > 50  # the whole package, not an empty glob
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sources
        for line, what in _shell_calls(ast.parse(path.read_text(), str(path)))
    ]
    assert offenders == []


def test_the_shell_scan_finds_what_it_looks_for() -> None:
    code = (
        "import os, subprocess\nfrom os import popen\nos.system('x')\n"
        "subprocess.run('x', shell=True)\nsubprocess.run(['x'], shell=False)\n"
    )
    assert [what for _, what in _shell_calls(ast.parse(code))] == [
        "os.system()",
        "shell=...",
        "from os import popen",
    ]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_path_makes_private_dirs_and_files(tmp_path: Path) -> None:
    remote = f"redis://u:{REDIS_PASSWORD}@127.0.0.1:6390"
    # In-process LMCache writes its config (the Redis URL in it) as a file.
    prepared = _prepared(tmp_path, _model_dir(tmp_path), api_key=API_KEY, remote=remote, offload="lmcache")
    spec = prepared.spec
    assert spec.private_dirs and spec.files, "the case must exercise both: a disk tier and a connector config"

    write_launch_files(spec)
    record_run(prepared)

    cache_root = tmp_path / "cache"
    for directory in map(Path, spec.private_dirs):
        # The tier directory and every directory kvstack created above it, up to the cache root.
        for d in (directory, *directory.parents):
            assert _mode(d) == 0o700, d
            if d == cache_root:
                break
        else:
            pytest.fail(f"{directory} is not under the cache root {cache_root}")
    assert _mode(prepared.run_dir) == 0o700
    written = [Path(f.path) for f in spec.files] + [
        prepared.run_dir / "plan.json",
        prepared.run_dir / "launch.json",
    ]
    for path in written:
        assert _mode(path) == 0o600, path
    # The connector config holds the real password (LMCache must log in) and is 0600 for that reason;
    # what kvstack records for people to read holds no secret.
    config = next(Path(f.path) for f in spec.files if f.path.endswith("lmcache.yaml"))
    assert REDIS_PASSWORD in config.read_text()
    for record in ("plan.json", "launch.json"):
        text = (prepared.run_dir / record).read_text()
        assert REDIS_PASSWORD not in text and API_KEY not in text
    leftovers = [p.name for p in prepared.run_dir.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_dummy_and_real_weights_never_share_a_cache_dir(tmp_path: Path) -> None:
    model = _model_dir(tmp_path)
    dummy = _prepared(tmp_path, model)
    (model / "model-00001-of-00001.safetensors").write_bytes(b"")  # now the same model has weights
    real = _prepared(tmp_path, model)

    dummy_argv = dummy.spec.server.argv
    assert dummy_argv[dummy_argv.index("--load-format") + 1] == "dummy"
    assert "dummy" not in real.spec.server.argv
    assert dummy.spec.fingerprint != real.spec.fingerprint
    dummy_dir, real_dir = dummy.spec.cache_dirs["disk"], real.spec.cache_dirs["disk"]
    assert dummy_dir != real_dir
    for prepared, directory in ((dummy, dummy_dir), (real, real_dir)):
        rel = Path(directory).relative_to(tmp_path / "cache")
        assert rel.parts[0].endswith(f"-{prepared.spec.fingerprint}")
    # Neither directory is inside the other: one run can never read the other's blocks.
    assert not Path(dummy_dir).is_relative_to(real_dir) and not Path(real_dir).is_relative_to(dummy_dir)


@pytest.mark.parametrize("source", ["--remote-file", "KVSTACK_REMOTE_URL", "--remote"])
def test_the_redis_password_can_stay_off_kvstacks_command_line(
    tmp_path: Path, quiet_listener: socket.socket, source: str
) -> None:
    """The same remote tier from a file, the environment or argv; only argv warns (once)."""
    home = tmp_path / "home"
    home.mkdir()
    url = f"redis://u:{REDIS_PASSWORD}@127.0.0.1:{quiet_listener.getsockname()[1]}"
    env = isolated_env(home)
    if source == "--remote-file":
        url_file = tmp_path / "remote"
        url_file.write_text(url + "\n")
        url_file.chmod(0o600)
        extra = ["--remote-file", str(url_file)]
    elif source == "KVSTACK_REMOTE_URL":
        env["KVSTACK_REMOTE_URL"] = url
        extra = []
    else:
        extra = ["--remote", url]
    res = run_cli([*_dry_run(tmp_path, "--json", *extra)], tmp_path, env)
    assert res.code == 0, res.stderr
    assert REDIS_PASSWORD not in res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["plan"]["remote_url"] == url.replace(REDIS_PASSWORD, MASK)
    warnings = [line for line in res.err_lines if "--remote can be read by every local user" in line]
    assert len(warnings) == (1 if source == "--remote" else 0), res.stderr
