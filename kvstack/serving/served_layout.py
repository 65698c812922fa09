"""A layout as the bench measures it: one ``--offload`` choice running behind a URL.

Bench starts layouts through serving (serving/start_layout.py) and runs requests against them; the types
live here, below bench, so serving never imports bench for them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from kvstack.planning.schema import Plan


@dataclass(frozen=True)
class Layout:
    name: str
    base_url: str
    metrics_urls: tuple[str, ...] = ()
    # Raises (EngineError) when the server behind the layout has died; None for --url servers.
    check_alive: Callable[[], None] | None = None
    served_model: str | None = None  # the name requests must use, when the launcher knows it
    # What kvstack knows of a layout it serves itself (serving/start_layout.py): LMCache's HTTP API, the
    # tier directories and the plan it runs. None/empty for --url servers.
    cache_server_url: str | None = None
    cache_dirs: dict[str, str] = field(default_factory=dict)
    plan: Plan | None = None


# start_layout(name): a context manager that yields the running layout and stops it on exit.
StartLayout = Callable[[str], AbstractContextManager[Layout]]
