"""Count the calls of one function wherever kvstack's modules bound it (``from m import f`` copies
the binding into each importer), for tests that say a fact is checked or parsed once."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest


def count_calls(
    monkeypatch: pytest.MonkeyPatch, fn: Callable[..., Any], seen: Counter[str], key: str
) -> None:
    """Every module-level binding of ``fn`` in a loaded ``kvstack`` module (its own module's
    included, so a module imported later binds the counting one) counts into ``seen[key]``."""

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen[key] += 1
        return fn(*args, **kwargs)

    for name, module in list(sys.modules.items()):
        if module is None or not (name == "kvstack" or name.startswith("kvstack.")):
            continue
        for attr, value in list(vars(module).items()):
            if value is fn:
                monkeypatch.setattr(module, attr, counted)
