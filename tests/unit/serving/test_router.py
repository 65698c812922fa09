"""vllm-router: found or named with its install command; the version recorded in the spec."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest

from kvstack.errors import MissingProgramError
from kvstack.serving.ports import port_layout
from kvstack.serving.router import ROUTER_PACKAGE, render_router, require_router, router_version


def test_a_missing_interpreter_is_named_as_such_not_as_a_missing_router(tmp_path: Path) -> None:
    py = str(tmp_path / "no-python")
    with pytest.raises(MissingProgramError) as info:
        require_router(py)
    assert info.value.message == f"the engine's Python interpreter {py} does not exist"
    assert info.value.exit_code == 2


def test_installed_router_passes_and_its_version_is_recorded() -> None:
    try:
        installed = metadata.version(ROUTER_PACKAGE)
    except metadata.PackageNotFoundError:
        from tests.support.deps import missing

        missing("python package vllm-router", "pip install vllm-router (the test extra has it)")
        return
    require_router(sys.executable)
    assert router_version() == installed
    spec = render_router(
        port_layout(7000, 2, router=True),
        host="::1",
        python="py",
        worker_urls=["http://[::1]:7001", "http://[::1]:7002"],
        served_model_name="demo",
    )
    assert spec.engine_version == installed and spec.engine == "vllm-router"
    assert spec.base_url == "http://[::1]:7000" and spec.server.ready_url == "http://[::1]:7000/health"
    assert spec.notes == ["cache_aware routing over 2 replicas: http://[::1]:7001, http://[::1]:7002"]
    assert not spec.api_key_set and spec.secrets == []
