"""Giving back the disk an end-to-end module wrote, once the module is done.

Every serve of the end-to-end run writes its tiers' chunk files under pytest's temporary dirs
(the disk tier of one canary serve: ~1.6 GB; the fault stack's loop-mounted disk tier: ~3 GB), and
pytest keeps every one of them until the run ends: a whole run held ~8 GB at its end, and a CI
machine with less free than that failed its later modules with "No space left on device".
tests/e2e/conftest.py takes a listing of pytest's base temporary dir before each module and, after
it, removes what the module added (its fixtures' dirs and its tests' ``tmp_path``s) unless one of
its tests failed: a failed module's logs stay for reading.

The session's own dirs (the demo serve and its Redis) are in the listing taken before the first
module that uses them ends: pytest sets up a test's session-scoped fixtures before its module-scoped
ones, so they exist when the module's listing is taken.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path


def entries(root: Path) -> frozenset[Path]:
    """What ``root`` holds now (none if it does not exist)."""
    try:
        return frozenset(root.iterdir())
    except FileNotFoundError:
        return frozenset()


def size_of(path: Path) -> int:
    """Bytes of disk the files below ``path`` take: their allocated blocks, not their length (the
    fault stack's 16 GB loop image is sparse). Links are not followed; what vanishes while counted
    is not counted."""
    if path.is_symlink() or not path.is_dir():
        return _allocated(path)
    return sum(_allocated(Path(top, name)) for top, _dirs, files in os.walk(path) for name in files)


def _allocated(path: Path) -> int:
    try:
        return path.lstat().st_blocks * 512
    except FileNotFoundError:
        return 0


@dataclass
class DiskBack:
    """The bytes given back and kept, per module (pytest's summary prints them)."""

    freed: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)

    def after_module(self, module: str, root: Path, before: frozenset[Path], failed: bool) -> None:
        """Remove what ``module`` added under ``root`` since ``before`` was listed, or, if one of its
        tests failed, count it as kept."""
        added = sorted(entries(root) - before)
        size = sum(size_of(p) for p in added)
        if failed:
            self.kept[module] = size
            return
        for path in added:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        self.freed[module] = size

    def lines(self) -> list[str]:
        """One line a module, largest first, then the totals."""
        return [
            *_rows(self.freed, "given back"),
            *_rows(self.kept, "kept (failed)"),
            f"{_gib(sum(self.freed.values())):7.2f} GiB  given back in all",
        ]


def _rows(by_module: dict[str, int], what: str) -> list[str]:
    ranked = sorted(by_module.items(), key=lambda kv: -kv[1])
    return [f"{_gib(n):7.2f} GiB  {what}  {module}" for module, n in ranked]


def _gib(n: int) -> float:
    return n / 2**30
