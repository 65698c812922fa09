"""Files kvstack writes: atomic (temp + rename), private where they may hold user data."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from kvstack.errors import PathError


def atomic_write(path: Path, data: str | bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (0700) or check an existing one is ours and not group/world-writable.

    KV blocks are derived from users' prompts, so a cache another user can read or replace
    is refused rather than silently used.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise PathError(
            f"cannot create directory {path}: {exc.strerror}",
            hint="choose a writable location with --cache-dir / --run-dir",
        ) from exc
    st = path.stat()
    if st.st_uid != os.getuid():
        raise PathError(
            f"directory {path} is owned by another user (uid {st.st_uid})",
            hint="use a directory you own",
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PathError(
            f"directory {path} is group- or world-writable",
            hint=f"chmod 700 {path} or choose another directory",
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    if not os.access(path, os.W_OK | os.X_OK):
        raise PathError(f"directory {path} is not writable", hint="choose a writable directory")
    return path
