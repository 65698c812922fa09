"""Start-up (issue 48): `kvstack --help` lists the commands from kvstack.cli.app's table without
importing any command's module (nor pydantic, the flag models, an HTTP client or an engine), and a
command's own --help or run imports its module alone. Nothing here is timed: scripts/bench-startup
measures it."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvstack.cli.app import COMMANDS, app
from kvstack.cli.lazy import build_command
from tests.support.cli_run import modules_loaded_by

COMMAND_MODULES = tuple(c.module for c in COMMANDS.values())
ENGINES = ("vllm", "sglang", "lmcache", "torch")
# What only some commands need: the inputs models (pydantic), the API key's, HTTP clients.
HEAVY = ("pydantic", "kvstack.flags", "kvstack.cli.flags", "kvstack.apikey", "httpx", "aiohttp", "numpy")
ENV = {"COLUMNS": "200"}


def test_the_table_names_each_command_its_module_declares_with_its_own_help() -> None:
    for name, entry in COMMANDS.items():
        command = build_command(name, entry.module, rich_markup_mode="rich", pretty_exceptions_short=True)
        assert command.name == name
        assert command.help == entry.help, f"COMMANDS[{name!r}].help is not {name}'s docstring"
        assert inspect.cleandoc(entry.help) == entry.help


def test_the_lazy_group_is_the_commands_typer_would_build() -> None:
    group = typer.main.get_command(app)
    commands = getattr(group, "commands", {})
    assert list(commands) == list(COMMANDS)
    assert commands.get("nope") is None
    canary = commands.get("canary")
    assert canary is not None and "--interval" in {o for p in canary.params for o in p.opts}


def test_help_lists_every_command_with_its_help() -> None:
    shown = CliRunner().invoke(app, ["--help"], env={**ENV, "NO_COLOR": "1"}).output
    for name, entry in COMMANDS.items():
        assert f" {name} " in shown and entry.help.splitlines()[0] in shown


def test_help_imports_no_command_module_no_flag_model_no_http_client_and_no_engine() -> None:
    assert modules_loaded_by(["--help"], (*COMMAND_MODULES, *HEAVY, *ENGINES)) == []


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_commands_help_imports_its_module_alone_and_no_engine(name: str) -> None:
    loaded = modules_loaded_by([name, "--help"], (*COMMAND_MODULES, *ENGINES))
    assert loaded == [COMMANDS[name].module]


def test_a_plan_imports_no_other_commands_module_and_no_http_client() -> None:
    from kvstack.profiles import profiles_dir

    hardware = str(profiles_dir() / "hardware" / "h100-sxm.json")
    argv = ["plan", "--model", "llama-3.1-8b", "--hardware", hardware, "--json"]
    loaded = modules_loaded_by(argv, (*COMMAND_MODULES, *ENGINES, "kvstack.apikey", "httpx", "aiohttp"))
    assert loaded == ["kvstack.cli.plan"]


def test_a_plan_that_asks_the_engine_imports_no_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine spec is asked in a subprocess (kvstack/engines/vllm_kv_spec.py); here its answer
    comes from the cache, so that the plan goes the whole way without starting it."""
    from kvstack.engines.vllm_kv_spec import SpecJob, cache_key, vllm_version
    from kvstack.profiles import profiles_dir

    demo = profiles_dir() / "demo"
    monkeypatch.setenv("KVSTACK_ENGINE_SPEC", "on")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("KVSTACK_ENGINE_PYTHON", sys.executable)
    version = vllm_version(sys.executable)
    if version is not None:
        cache = tmp_path / "kvstack" / "engine-spec"
        cache.mkdir(parents=True, mode=0o700)
        recorded = Path(__file__).resolve().parents[2] / "fixtures" / "engine_spec" / "demo.json"
        (cache / f"{cache_key(SpecJob(model=str(demo)), version)}.json").write_text(recorded.read_text())
    hardware = str(profiles_dir() / "hardware" / "no-gpu.json")
    loaded = modules_loaded_by(["plan", "--model", str(demo), "--hardware", hardware], ENGINES)
    assert loaded == []
