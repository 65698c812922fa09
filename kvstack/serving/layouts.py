"""Servers that ``kvstack bench`` starts itself: one per layout, each stopped before the next.

A layout is an ``--offload`` choice (none, auto, lmcache, native, ...) applied to the same serve
options, so ``bench --compare none lmcache`` measures what the connector changes and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kvstack.errors import InputError
from kvstack.planning.schema import OFFLOAD_CHOICES
from kvstack.serving.prepare import prepare
from kvstack.serving.request import ServeRequest
from kvstack.serving.served_layout import Layout, StartLayout
from kvstack.serving.session import ServeEvents, launched


def check_layout_names(names: list[str]) -> None:
    unknown = [n for n in names if n not in OFFLOAD_CHOICES]
    if unknown:
        raise InputError(
            f"unknown layout {', '.join(map(repr, unknown))}: a layout is an --offload choice",
            hint=f"choose from {', '.join(OFFLOAD_CHOICES)}, e.g. --compare none lmcache",
        )


def layout_starter(base: ServeRequest, events: ServeEvents | None = None) -> StartLayout:
    """``start_layout(name)`` for the bench runner: serve ``base`` with ``--offload name``."""
    run_root = base.resolved_run_dir()

    @contextmanager
    def start(name: str) -> Iterator[Layout]:
        check_layout_names([name])
        request = base.model_copy(
            update={"offload": name, "run_dir": run_root / name, "validate_after_start": False}
        )
        launch = prepare(request)
        with launched(launch, events) as group:

            def check_alive() -> None:
                if group.poll_died() is not None:
                    raise group.death_error(during=f"the bench of layout {name}")

            spec = launch.replicas[0].spec
            yield Layout(name, spec.base_url, tuple(spec.metrics_urls), check_alive, spec.served_model_name)

    return start
