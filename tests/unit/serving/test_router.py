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


def test_the_routers_prefix_tree_holds_what_each_replica_holds() -> None:
    from kvstack.serving.router import CHARS_PER_TOKEN, replica_tree_tokens
    from tests.unit.engines.cases import make_plan

    plan = make_plan(
        connector="lmcache-mp", cpu_gib=10, disk_gib=100, remote_gib=500, remote_url="redis://r:1"
    )
    tokens = replica_tree_tokens(plan)
    assert tokens == sum(
        t.tokens for t in plan.cache.tiers if t.kind in ("gpu", "cpu", "disk")
    )  # not the shared one
    layout = port_layout(7000, 2, router=True)
    urls = ["http://127.0.0.1:7001", "http://127.0.0.1:7002"]
    spec = render_router(
        layout, host="127.0.0.1", python="py", worker_urls=urls, served_model_name="m", tree_tokens=tokens
    )
    argv = spec.server.argv
    assert argv[argv.index("--max-tree-size") + 1] == str(tokens * CHARS_PER_TOKEN)
    plain = render_router(layout, host="127.0.0.1", python="py", worker_urls=urls, served_model_name="m")
    assert "--max-tree-size" not in plain.server.argv
