"""The disk-space policy for a running disk tier: warn before the connector's stores start failing."""

from __future__ import annotations

import os
from pathlib import Path

from kvstack.units import GIB, fmt_bytes


def low_disk_warning(
    path: str | Path, min_free_bytes: int | None = None, min_free_fraction: float = 0.05
) -> str | None:
    """A warning when the filesystem under ``path`` has less than the margin free, else None.

    The default margin is 5% of the filesystem, at least 1 GiB and at most 50 GiB: a KV disk
    tier writes until its cap, and a full disk makes stores fail silently in the connector.
    """
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return None
    total = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    margin = (
        min_free_bytes
        if min_free_bytes is not None
        else min(max(GIB, int(total * min_free_fraction)), 50 * GIB)
    )
    if free >= margin:
        return None
    return (
        f"the disk tier at {path} has {fmt_bytes(free)} free (below the {fmt_bytes(margin)} margin): "
        "stores will start failing; free space or lower the disk tier size"
    )
