"""serve's checks around the key and the bind address: what a public bind exposes, the guard's
importability in the engine's interpreter, and a router nobody should reach unauthenticated."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvstack.errors import InputError, MissingProgramError
from kvstack.serving.request import ServeRequest
from kvstack.serving.request_checks import exposure_warning, refuse_public_router, require_guard


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_exposes_nothing_to_warn_about(host: str) -> None:
    assert exposure_warning(ServeRequest(host=host)) is None


def test_a_key_means_no_exposure_warning() -> None:
    assert exposure_warning(ServeRequest(host="0.0.0.0", api_key="sk-some-key")) is None


def test_vllm_public_without_a_key_names_what_is_open_and_what_is_not() -> None:
    text = exposure_warning(ServeRequest(host="0.0.0.0", port=8123))
    assert text is not None
    for words in (
        "0.0.0.0",
        "port 8123",
        "/v1/*",
        "/invocations",
        "/metrics",
        "development endpoints stay off",
    ):
        assert words in text
    assert "--api-key-file" in text and "KVSTACK_API_KEY" in text


def test_sglang_public_without_a_key_names_its_admin_routes() -> None:
    text = exposure_warning(ServeRequest(host="10.0.0.5", engine="sglang"))
    assert text is not None and "/flush_cache" in text and "/update_weights_from_disk" in text
    assert "random admin key" in text


def test_a_router_is_refused_on_a_public_address_only() -> None:
    refuse_public_router(ServeRequest(host="127.0.0.1", replicas=2, router=True))
    refuse_public_router(ServeRequest(host="0.0.0.0", replicas=2))  # no router: each engine has its guard
    with pytest.raises(InputError, match="/add_worker"):
        refuse_public_router(ServeRequest(host="0.0.0.0", replicas=2, router=True))


def fake_python(tmp_path: Path, importable: str) -> str:
    """An 'interpreter' for check_module_importable (python -c CODE MODULE): exit 0 for ``importable``."""
    path = tmp_path / "python"
    path.write_text(f'#!/bin/sh\n[ "$3" = "{importable}" ] && exit 0\nexit 1\n')
    path.chmod(0o755)
    return str(path)


def test_the_guard_check_costs_nothing_for_kvstacks_own_interpreter() -> None:
    require_guard(sys.executable)


def test_an_engine_interpreter_without_kvstack_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MissingProgramError) as err:
        require_guard(fake_python(tmp_path, "vllm"))
    assert "kvstack.engines.vllm_guard" in err.value.message
    assert err.value.hint is not None and "pip install kvstack" in err.value.hint


def test_an_engine_interpreter_without_vllm_is_left_to_the_launch_preflight(tmp_path: Path) -> None:
    require_guard(fake_python(tmp_path, "nothing"))  # the preflight says "vllm is not installed"
