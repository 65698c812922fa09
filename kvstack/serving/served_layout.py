"""ServedLayout: a layout that bench, replay and tune measure, running behind a URL.

One ``--offload`` choice served by kvstack with the plan it runs (serving/start_layout.py starts
it), or a server given with ``--url`` (no plan). Not planning's KvLayout, serving's PortLayout or
planning's TunedLayout. The types live in serving, below bench, replay and tune, so the starter
never imports those packages.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from kvstack.planning.schema import Plan


@dataclass(frozen=True)
class ServedLayout:
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
StartLayout = Callable[[str], AbstractContextManager[ServedLayout]]
