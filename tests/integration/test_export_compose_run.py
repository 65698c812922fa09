"""The containers of an exported Compose project, started here as Docker would start them: the
exported files written by ``write_bundle``, compose.yaml interpolated with the exported .env
(tests/support/compose.py), each container's entrypoint + command run as one argv.

- The bundled Redis: through the redis image's own entrypoint (tests/fixtures/docker), the real
  redis-server. Its password works, and is in neither its argv nor its environment.
- SGLang: the exported entrypoint, with SGLang's own parser standing in for the server
  (sglang_launch_probe.py). It takes the key, which is in neither its argv nor its environment.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import redis
import yaml

from kvstack.export import ExportOptions, export_plan
from kvstack.export.write import write_bundle
from tests.support.compose import container_argv, healthcheck_argv, interpolate, read_dotenv
from tests.support.deps import ROOT, engine_python, missing, require_program
from tests.support.redis import free_port
from tests.unit.export.plans import make_plan

pytestmark = pytest.mark.integration

ENTRYPOINT = ROOT / "tests" / "fixtures" / "docker" / "redis-docker-entrypoint.sh"
PARSER_DIR = ROOT / ".sglang-parser"
# Quotes, '#', '$', a backslash, a space, '/' and a non-ASCII letter: each a way to get it wrong.
PASSWORD = 'p w"#$\\é/x-9'
CALLER_ENV = {"GRAFANA_ADMIN_PASSWORD": "grafana-admin-pw"}  # what the user sets before `compose up`
SECRETS_DIR = "/run/secrets"  # where Compose mounts a service's secrets


def _project(url: str, out: Path) -> tuple[dict[str, Any], Path]:
    """The interpolated project and the directory its files were written to."""
    bundle = export_plan("compose", make_plan(remote_gib=1), ExportOptions(remote_url=url))
    write_bundle(bundle, out)
    env = read_dotenv((out / ".env").read_text(encoding="utf-8"))
    return interpolate(
        yaml.safe_load((out / "compose.yaml").read_text(encoding="utf-8")), {**env, **CALLER_ENV}
    ), out


@pytest.fixture
def image_path() -> Iterator[Path]:
    """A directory standing in for the image's /usr/local/bin: its docker-entrypoint.sh and, for the
    root part of it, gosu (a one-line setpriv: become the user, its group and groups, then exec).
    Outside tmp_path (0700): the entrypoint re-runs itself as the redis user, who must reach it."""
    bin_dir = Path(tempfile.mkdtemp(prefix="kvstack-image-bin-"))
    try:
        bin_dir.chmod(0o755)
        shutil.copy(ENTRYPOINT, bin_dir / "docker-entrypoint.sh")
        (bin_dir / "docker-entrypoint.sh").chmod(0o755)
        gosu = bin_dir / "gosu"
        gosu.write_text(
            '#!/bin/sh\nu="$1"; shift\nexec setpriv --reuid="$u" --regid="$u" --init-groups -- "$@"\n'
        )
        gosu.chmod(0o755)
        yield bin_dir
    finally:
        shutil.rmtree(bin_dir)


def _wait_ready(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
        try:
            redis.Redis(port=port, password=PASSWORD, socket_timeout=1).ping()
            return
        except redis.ConnectionError:
            time.sleep(0.05)
    raise AssertionError(f"redis-server not ready: {log.read_text(errors='replace')[-2000:]}")


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:6379/0",
        f"redis://127.0.0.1:6379/0?socket_timeout=5&password={quote_plus(PASSWORD)}",
    ],
    ids=["userinfo", "query"],
)
def test_the_bundled_redis_takes_its_password_from_the_secret_file_not_its_argv(
    tmp_path: Path, image_path: Path, url: str
) -> None:
    server = require_program("redis-server")
    require_program("redis-cli")
    as_root = os.geteuid() == 0
    if as_root:
        require_program("setpriv")
        try:
            pwd.getpwnam("redis")
        except KeyError:
            missing("a 'redis' user (the image's)", "apt-get install redis-server creates it")
    doc, out = _project(url, tmp_path / "project")
    service = doc["services"]["redis"]
    # Compose mounts each of the service's secrets at /run/secrets/NAME: here, the written file.
    argv = container_argv(service)
    for name in service["secrets"]:
        host = out / doc["secrets"][name]["file"]
        argv = [a.replace(f"{SECRETS_DIR}/{name}", str(host)) for a in argv]
    conf = out / doc["secrets"][service["secrets"][0]]["file"]
    assert conf.stat().st_mode & 0o777 == 0o600
    # This machine's port, on loopback only; "-" (the configuration from stdin) stays last.
    port = free_port()
    argv = [str(port) if a == "6379" else a for a in argv]
    argv[-1:-1] = ["--bind", "127.0.0.1"]
    data = tmp_path / "data"  # the image's WORKDIR, /data
    data.mkdir()
    log = tmp_path / "redis.log"
    env = {"PATH": f"{image_path}:{Path(server).parent}:/usr/bin:/bin"}
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, cwd=data, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh)
    try:
        _wait_ready(port, proc, log)
        assert redis.Redis(port=port, password=PASSWORD, socket_timeout=2).ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, socket_timeout=2).ping()
        # sh, the entrypoint and gosu each exec'd: this pid is redis-server.
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace")
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
        assert "redis-server" in cmdline
        for form in (PASSWORD, quote(PASSWORD, safe=""), quote_plus(PASSWORD)):
            assert form not in " ".join(argv) and form not in cmdline and form not in environ
        if as_root:
            # It runs as the image's redis user, who cannot open the 0600 file by its path: the
            # entrypoint's root shell opened it as redis-server's stdin.
            assert (
                Path(f"/proc/{proc.pid}").stat().st_uid == pwd.getpwnam("redis").pw_uid != conf.stat().st_uid
            )
        # The healthcheck, as Docker runs a CMD-SHELL test inside the container (sh -c).
        test = healthcheck_argv(service)
        assert test[0] == "CMD-SHELL"
        check = test[1].replace("redis-cli", f"redis-cli -p {port}")
        assert subprocess.run(["sh", "-c", check], env=env, timeout=10).returncode == 0
        stopped = test[1].replace("redis-cli", f"redis-cli -p {free_port()}")
        assert subprocess.run(["sh", "-c", stopped], env=env, timeout=10).returncode != 0
    finally:
        proc.terminate()
        proc.wait(10)


def _run_sglang(tmp_path: Path, caller_env: dict[str, str]) -> dict[str, Any]:
    if not (PARSER_DIR / "sglang" / "srt" / "server_args.py").is_file():
        missing("SGLang's parser in .sglang-parser/", "scripts/test installs it")
    plan = make_plan(engine="sglang", connector="hicache", kv_dtype="fp8_e4m3", tp=1)
    bundle = export_plan("compose", plan, ExportOptions())
    doc = interpolate(yaml.safe_load(bundle.main.content), caller_env)
    service = doc["services"]["sglang"]
    argv = container_argv(service)
    assert argv[0] == "python3" and "sglang.launch_server" in argv
    # The image's python3 is the engine interpreter; the probe stands in for the server module.
    argv = [engine_python(), *("sglang_launch_probe" if a == "sglang.launch_server" else a for a in argv[1:])]
    out = tmp_path / "probe.json"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": f"{PARSER_DIR}:{Path(__file__).parent}",
        "KVSTACK_PROBE_OUT": str(out),
        "TMPDIR": str(tmp_path),  # the launcher's key file: in the container's /tmp, here the test's dir
        **service["environment"],
    }
    proc = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    assert result["model_path"] == plan.model.path
    return result


def test_sglang_takes_the_exported_key_from_a_0600_config_file_not_its_argv(tmp_path: Path) -> None:
    key = "sk-compose-key-4711"
    got = _run_sglang(tmp_path, {"KVSTACK_API_KEY": key})
    assert got["api_key"] == key  # SGLang's own parser read it, from --config
    assert got["config_mode"] == 0o600
    assert not [a for a in got["cmdline"] if key in a]
    assert not [k for k, v in got["environ"].items() if key in v] and "KVSTACK_API_KEY" not in got["environ"]


def test_sglang_without_a_key_starts_without_one(tmp_path: Path) -> None:
    got = _run_sglang(tmp_path, {})
    assert got["api_key"] is None and got["config_mode"] is None
