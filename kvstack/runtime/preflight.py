"""Checks before a launch, so that a user mistake costs a second instead of a failed startup.

Each check raises an InputError subclass (exit 2) naming the problem and the fix; none of
them writes anything that outlives the check.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import subprocess
from pathlib import Path

import psutil

from kvstack.connectors import SPECS
from kvstack.errors import MissingProgramError, NetworkTargetError
from kvstack.netaddr import PORT_MAX
from kvstack.runtime.specs import LaunchSpec, ServeOptions
from kvstack.runtime.writable import require_room, require_writable_dir

# Python module to look for -> what to pip-install for it.
ENGINE_MODULES: dict[str, str] = {"vllm": "vllm", "sglang": "sglang[all]", "lmcache": "lmcache"}


def _listener(port: int) -> str | None:
    """Who listens on ``port``, as 'NAME (pid N)', when this user may see it."""
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                with contextlib.suppress(psutil.Error):
                    return f"{psutil.Process(conn.pid).name()} (pid {conn.pid})"
                return f"pid {conn.pid}"
    return None


def _bindable(host: str, port: int) -> OSError | None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # Servers set SO_REUSEADDR too: a port in TIME_WAIT is free for them.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


def check_port_free(host: str, port: int, flag: str = "--port") -> None:
    """``port`` can be bound on ``host`` now. Its range is the port layout's to check, once
    (serving/ports.py); this asks only what can change until the launch: who holds it."""
    exc = _bindable(host, port)
    if exc is None:
        return
    if exc.errno == errno.EADDRINUSE:
        who = _listener(port)
        alt = next(
            (p for p in range(port + 1, min(port + 50, PORT_MAX + 1)) if _bindable(host, p) is None), None
        )
        fix = f"or choose another port, e.g. {flag} {alt}" if alt else f"or choose another {flag}"
        raise NetworkTargetError(
            f"port {port} on {host} is already in use" + (f" by {who}" if who else ""),
            hint=f"stop {who or 'the process that holds it'} {fix}",
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        raise NetworkTargetError(
            f"cannot bind {host}: the address does not belong to this machine",
            hint="use --host 127.0.0.1 (local only) or an address of this machine",
        )
    if exc.errno == errno.EACCES:
        raise NetworkTargetError(
            f"port {port} needs root privileges to bind", hint=f"choose a port above 1023, e.g. {flag} 8000"
        )
    raise NetworkTargetError(f"cannot bind {host}:{port}: {exc.strerror}", hint=f"choose another {flag}")


def check_module_importable(python: str, module: str, package: str | None = None) -> None:
    """``module`` is importable by the interpreter ``python`` (found, not imported: fast)."""
    code = "import importlib.util,sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"
    pip = f"{python} -m pip install {package or ENGINE_MODULES.get(module, module)}"
    try:
        proc = subprocess.run(
            [python, "-c", code, module],
            capture_output=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise MissingProgramError(
            f"the engine's Python interpreter {python} does not exist",
            hint="point --python at a real interpreter",
        ) from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MissingProgramError(f"cannot run {python}: {exc}", hint="check the interpreter") from exc
    if proc.returncode != 0:
        raise MissingProgramError(f"{module} is not installed for {python}", hint=f"install it: {pip}")


def preflight_launch(spec: LaunchSpec, options: ServeOptions, disk_need_bytes: int = 0) -> None:
    """Every check a ``kvstack serve`` launch needs, in the order a user would fix them."""
    for port in spec.ports or [options.port]:  # the server's, then its helpers' (LMCache MP, ...)
        check_port_free(options.host, port)
    # Where each directory may be created was checked before the plan (serving/prepare.py); now
    # only what a launch can still hit: a write that fails (a full quota) and the disk tier's room.
    require_room(options.run_dir, "--run-dir")
    disk_dir = spec.cache_dirs.get("disk")
    if disk_dir is not None and not Path(disk_dir).is_relative_to(options.cache_root):
        # The disk the plan measured (Tier.path), outside --cache-dir: this is its first check.
        require_writable_dir(disk_dir, "--cache-dir")
    require_room(disk_dir or options.cache_root, "--cache-dir", need_bytes=disk_need_bytes)
    check_module_importable(options.python, spec.engine)
    package = SPECS[spec.connector].package  # the Python package the engine imports for it
    if package:
        check_module_importable(options.python, package)
