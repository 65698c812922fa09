"""serve's checks around the key and the bind address: what a public bind exposes, the guard's
importability in the engine's interpreter, and a router its engines would refuse."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvstack.errors import InputError, MissingProgramError
from kvstack.serving.request import ServeRequest
from kvstack.serving.request_checks import (
    check_request,
    exposure_warning,
    refuse_keyed_sglang_router,
    require_guard,
)


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


def test_a_router_is_served_on_any_bind_behind_the_guard_but_not_before_keyed_sglang() -> None:
    for host in ("127.0.0.1", "0.0.0.0"):  # its front is kvstack's guard, its own port the token's
        for engine in ("vllm", "sglang"):
            check_request(ServeRequest(host=host, engine=engine, replicas=2, router=True), dry_run=True)
    check_request(ServeRequest(api_key="sk-k", replicas=2, router=True), dry_run=True)
    check_request(ServeRequest(engine="sglang", api_key="sk-k", replicas=2), dry_run=True)  # no router
    with pytest.raises(InputError) as err:
        refuse_keyed_sglang_router(ServeRequest(engine="sglang", api_key="sk-k", replicas=2, router=True))
    assert "sk-k" not in err.value.message + str(err.value.hint) and "\n" not in err.value.message
    assert err.value.message.startswith("--router with --engine sglang and an API key")
    assert err.value.exit_code == 2


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
