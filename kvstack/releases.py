"""Release numbers of installed packages: parse and compare (one rule for every version check).

Only the release part counts (``0.10.1.post1+cu128`` -> ``(0, 10, 1)``): a ``0.33.0rc1`` or a
local build carries the features and flags of the release it leads to, which is what every check
asks about. Trailing zeros do not count (``0.18.0 == 0.18``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RELEASE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


@dataclass(frozen=True, order=True)
class Version:
    release: tuple[int, ...]

    def __str__(self) -> str:
        return ".".join(str(p) for p in self.release)


def parse_version(text: str) -> Version:
    m = _RELEASE.match(text)
    if not m:
        raise ValueError(f"not a version: {text!r}")
    parts = [int(p) for p in m.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()  # 0.18.0 == 0.18
    return Version(tuple(parts))


def at_least(installed: str | None, minimum: str) -> bool:
    """True when ``installed`` is ``minimum`` or newer; an unknown/unparsable version is False."""
    if installed is None:
        return False
    try:
        return parse_version(installed) >= parse_version(minimum)
    except ValueError:
        return False
