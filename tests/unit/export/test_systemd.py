"""The systemd unit: parsed as an INI file, its ExecStart split the way systemd does for our
quoting, checked by systemd-analyze where it is installed, and free of secrets."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvstack.export import ExportOptions, export_plan
from kvstack.export.bundle import Bundle
from kvstack.export.systemd import API_KEY_ENV, REMOTE_URL_ENV, env_value, quote_arg, serve_argv
from kvstack.remote.source import resolve_remote
from tests.support.deps import missing
from tests.unit.export.plans import make_plan

PASSWORD = "hunter22-secret"


def unit_of(bundle: Bundle) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string(bundle.main.content)
    return parser


def exec_words(unit: configparser.ConfigParser) -> list[str]:
    # Our quoting only uses double quotes with \\ and \" escapes, which shlex reads the same way;
    # the %% and $$ escapes are systemd's, undone here.
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(unit["Service"]["ExecStart"])]


def test_unit_runs_kvstack_serve_with_the_plans_decisions() -> None:
    plan = make_plan(tp=4, kv_dtype="fp8")
    options = ExportOptions(
        kvstack_bin="/opt/kv/bin/kvstack", hardware_path="/srv/hw.json", workload_name="rag-long-doc"
    )
    bundle = export_plan("systemd", plan, options)
    unit = unit_of(bundle)
    assert set(unit.sections()) == {"Unit", "Service", "Install"}
    svc = unit["Service"]
    assert svc["Restart"] == "on-failure" and svc["PrivateTmp"] == "true"
    assert svc["EnvironmentFile"] == f"-{options.env_file}"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    words = exec_words(unit)
    assert words == serve_argv(plan, options)
    assert words[:2] == ["/opt/kv/bin/kvstack", "serve"]
    pairs = dict(zip(words[2::2], words[3::2], strict=False))
    assert pairs["--engine"] == plan.engine and pairs["--offload"] == plan.transfer.connector
    assert pairs["--tp"] == "4" and pairs["--kv-dtype"] == "fp8"
    assert pairs["--context"] == str(plan.workload.context_tokens) and pairs["--users"] == str(
        plan.workload.users
    )
    assert pairs["--hardware"] == "/srv/hw.json" and pairs["--workload"] == "rag-long-doc"
    assert pairs["--host"] == "127.0.0.1"


def test_remote_password_lives_only_in_the_environment_file() -> None:
    plan = make_plan(remote_gib=16)
    url = f"redis://kv:{PASSWORD}@10.0.0.5:6379/0"
    bundle = export_plan("systemd", plan, ExportOptions(remote_url=url))
    assert PASSWORD not in bundle.main.content
    exec_start = unit_of(bundle)["Service"]["ExecStart"]
    # Not even "--remote ${KVSTACK_REMOTE_URL}": systemd would expand it into the command line.
    assert "--remote" not in shlex.split(exec_start) and REMOTE_URL_ENV not in exec_start
    env = bundle.files[1]
    assert env.secret and env.mode == 0o600
    line = next(x for x in env.content.splitlines() if x.startswith(f"{REMOTE_URL_ENV}="))
    assert shlex.split(line.split("=", 1)[1]) == [url]
    # What kvstack serve, started by the unit with that environment, serves with.
    assert resolve_remote(None, None, env={REMOTE_URL_ENV: shlex.split(line.split("=", 1)[1])[0]}) == url
    assert API_KEY_ENV in env.content  # where the API key goes


def test_remote_without_password_is_inline() -> None:
    bundle = export_plan("systemd", make_plan(remote_gib=16), ExportOptions(remote_url="redis://cache:6379"))
    words = exec_words(unit_of(bundle))
    assert words[words.index("--remote") + 1] == "redis://cache:6379"
    assert not bundle.files[1].secret


@pytest.mark.parametrize("arg", ["plain", "/a b/c", 'say "hi"', "100%", "$HOME", "back\\slash", ""])
def test_quote_arg_round_trips(arg: str) -> None:
    quoted = quote_arg(arg)
    assert [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(quoted)] == [arg]


@pytest.mark.parametrize("value", ["plain", "redis://:p@h:1", "it's $x", "a%b"])
def test_env_value_round_trips(value: str) -> None:
    assert shlex.split(env_value(value)) == [value]


def test_systemd_analyze_accepts_the_unit(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        missing("program 'systemd-analyze'", "apt-get install systemd")
    assert tool is not None
    kvstack_bin = Path(sys.executable).with_name("kvstack")
    binary = str(kvstack_bin) if kvstack_bin.exists() else sys.executable
    bundle = export_plan(
        "systemd", make_plan(), ExportOptions(kvstack_bin=binary, env_file=str(tmp_path / "kvstack.env"))
    )
    path = tmp_path / bundle.main.name
    path.write_text(bundle.main.content, encoding="utf-8")
    res = subprocess.run([tool, "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert path.name not in res.stderr, res.stderr  # no complaint about our unit
