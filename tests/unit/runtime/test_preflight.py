"""Checks before a launch, against real sockets, directories and interpreters."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from kvstack.errors import InputError, MissingProgramError, NetworkTargetError, PathError
from kvstack.runtime.preflight import (
    check_module_importable,
    check_port_free,
    preflight_launch,
)
from kvstack.runtime.specs import LaunchSpec, ProcessSpec, ServeOptions


@pytest.fixture
def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock  # type: ignore[misc]
    sock.close()


def test_port_in_use_names_port_owner_and_fix(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    with pytest.raises(NetworkTargetError) as info:
        check_port_free("127.0.0.1", port)
    err = info.value
    assert isinstance(err, InputError) and err.exit_code == 2
    assert f"port {port} on 127.0.0.1 is already in use" in err.message
    assert f"(pid {os.getpid()})" in err.message  # this test process holds it
    assert err.hint is not None and "--port" in err.hint


def test_free_port_passes() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    check_port_free("127.0.0.1", port)


def test_address_not_on_this_machine() -> None:
    with pytest.raises(NetworkTargetError, match="does not belong to this machine"):
        check_port_free("192.0.2.55", 8000)  # TEST-NET-1: never local


@pytest.fixture
def bare_python(tmp_path: Path) -> str:
    """An interpreter without site-packages: the standard library only, no engine."""
    path = tmp_path / "python-bare"
    path.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    path.chmod(0o755)
    return str(path)


def test_module_importable(bare_python: str) -> None:
    check_module_importable(bare_python, "json")
    with pytest.raises(MissingProgramError) as info:
        check_module_importable(bare_python, "vllm")
    assert info.value.message == f"vllm is not installed for {bare_python}"
    assert info.value.hint == f"install it: {bare_python} -m pip install vllm"
    with pytest.raises(MissingProgramError) as info:
        check_module_importable(bare_python, "lmcache")
    assert info.value.hint is not None and info.value.hint.endswith("-m pip install lmcache")


def test_missing_interpreter() -> None:
    with pytest.raises(MissingProgramError, match="does not exist"):
        check_module_importable("/nonexistent/bin/python", "vllm")


def _spec(port: int, connector: str = "none", disk: str | None = None) -> LaunchSpec:
    return LaunchSpec(
        engine="vllm",
        connector=connector,  # type: ignore[arg-type]
        server=ProcessSpec(name="engine", argv=["x"]),
        base_url=f"http://127.0.0.1:{port}",
        served_model_name="demo",
        cache_dirs={"disk": disk} if disk else {},
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_preflight_launch_stops_at_the_first_problem(tmp_path: Path, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    options = ServeOptions(
        port=port, cache_root=str(tmp_path / "cache"), run_dir=str(tmp_path), python=sys.executable
    )
    with pytest.raises(NetworkTargetError, match=f"port {port}"):
        preflight_launch(_spec(port), options)


def test_preflight_launch_finds_the_missing_engine(tmp_path: Path, bare_python: str) -> None:
    port = _free_port()
    spec = _spec(port, "lmcache", str(tmp_path / "kv"))
    options = ServeOptions(
        port=port, cache_root=str(tmp_path), run_dir=str(tmp_path / "run"), python=bare_python
    )
    with pytest.raises(MissingProgramError, match="vllm is not installed"):
        preflight_launch(spec, options)
    with pytest.raises(PathError, match="plan needs"):
        preflight_launch(spec, options, disk_need_bytes=1 << 60)


def test_preflight_launch_refuses_a_cache_dir_on_a_kernel_filesystem(tmp_path: Path) -> None:
    # The launch's directory check is serve's --cache-dir check (runtime/writable.py): as root,
    # access() allows /proc, so only the mount table tells that nothing can be written there.
    port = _free_port()
    options = ServeOptions(
        port=port, cache_root=str(tmp_path), run_dir=str(tmp_path / "run"), python="/bin/false"
    )
    with pytest.raises(PathError, match=r"^--cache-dir /proc/kvstack-kv is on /proc, a proc filesystem"):
        preflight_launch(_spec(port, disk="/proc/kvstack-kv"), options)
    assert not Path("/proc/kvstack-kv").exists()
