"""The consoles kvstack prints on, made here only: standard output for a command's result, standard
error for its progress, events and warnings."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def out_console(piped_width: int | None = 120, *, soft_wrap: bool = True, highlight: bool = False) -> Console:
    """Standard output. Pipes and CI logs get ``piped_width`` columns (wide enough for the command's
    tables; None: rich's default), terminals their own width."""
    from rich.console import Console

    width = None if sys.stdout.isatty() else piped_width
    return Console(soft_wrap=soft_wrap, highlight=highlight, width=width)


def err_console(*, soft_wrap: bool = True, highlight: bool = False) -> Console:
    """Standard error: progress, events, warnings and the files a command wrote."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=soft_wrap, highlight=highlight)
