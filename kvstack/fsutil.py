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


def make_out_dir(path: Path) -> Path:
    """Create an --out directory and its parents, or say in one line why it cannot be made."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PathError(
            f"cannot create --out {path}: {exc.strerror or exc}", hint="choose a writable --out directory"
        ) from exc
    return path


def existing_ancestor(path: Path) -> Path:
    """``path`` when it exists, else its nearest existing parent: what decides whether it can be made."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def may_write_in(directory: Path) -> bool:
    """This user may create files in ``directory``: a directory with write and search permission."""
    return directory.is_dir() and os.access(directory, os.W_OK | os.X_OK)


def check_private_dir(path: Path, flag: str = "--cache-dir") -> None:
    """Refuse an existing ``path`` that another user owns or may write; a missing one is fine.

    KV blocks are derived from users' prompts, so a cache another user can read or replace
    is refused rather than silently used. Nothing is created or changed here, so a launch can
    check every directory before it writes anything.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except NotADirectoryError as exc:
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        raise PathError(
            f"cannot use {path}: {blocker} is not a directory", hint=f"choose a directory path for {flag}"
        ) from exc
    except OSError as exc:
        raise PathError(
            f"cannot use directory {path}: {exc.strerror}", hint=f"choose another {flag}"
        ) from exc
    if not stat.S_ISDIR(st.st_mode):
        raise PathError(f"{path} is not a directory", hint=f"choose a directory path for {flag}")
    if st.st_uid != os.getuid():
        raise PathError(
            f"directory {path} is owned by another user (uid {st.st_uid})",
            hint=f"use a directory you own with {flag}",
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PathError(
            f"directory {path} is group- or world-writable",
            hint=f"chmod 700 {path} or choose another {flag}",
        )


def _mkdirs_private(path: Path) -> None:
    """mkdir -p where every directory created is 0700 (Path.mkdir gives parents the umask default)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)


def ensure_private_dir(path: Path, flag: str = "--cache-dir / --run-dir") -> Path:
    """Create ``path`` (and missing parents) 0700, or check an existing one is ours and private.

    An existing directory of ours with group/other read bits is tightened to 0700; one that
    another user owns or may write is refused (see ``check_private_dir``).
    """
    try:
        _mkdirs_private(path)
    except OSError as exc:
        raise PathError(
            f"cannot create directory {path}: {exc.strerror}",
            hint=f"choose a writable location with {flag}",
        ) from exc
    check_private_dir(path, flag)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    if not may_write_in(path):
        raise PathError(f"directory {path} is not writable", hint="choose a writable directory")
    return path
