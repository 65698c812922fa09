"""``kvstack top``'s own flags (the remote store's and the API key's are theirs), checked when made:
which servers to watch, and how often."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Self

from pydantic import Field, model_validator

from kvstack.errors import InputError
from kvstack.flags import Inputs, Json, flag

MIN_INTERVAL_S = 0.2
MAX_INTERVAL_S = 3600


class TopInputs(Inputs):
    urls: Annotated[
        list[str],
        flag(
            "--url",
            help="A server to watch, e.g. http://127.0.0.1:8000 (repeatable; default: the run dir's)",
        ),
    ] = Field(default_factory=list)
    lmcache: Annotated[
        list[str],
        flag(
            "--lmcache",
            help="LMCache's cache server HTTP address (lmcache server --http-port), e.g. "
            "http://127.0.0.1:8002 (repeatable: one per --url, in the same order, or one shared)",
            show_default=False,
        ),
    ] = Field(default_factory=list)
    run_dir: Annotated[
        Path | None,
        flag(
            "--run-dir",
            help="A kvstack serve run dir to read the URLs from (default: the latest run, without --url)",
        ),
    ] = None
    disk_dir: Annotated[
        Path | None,
        flag("--disk-dir", help="The disk tier's directory (default: the run dir's)", show_default=False),
    ] = None
    capacity: Annotated[
        str | None,
        flag(
            "--capacity",
            help="Set the live load against the capacity a sweep measured: a bench --sweep --out DIR "
            "(PATH#LAYOUT for one of several layouts) or a tune --objective capacity --out DIR "
            "(default: the tune behind serve --tuned, if it measured one)",
            metavar="PATH",
            show_default=False,
        ),
    ] = None
    interval: Annotated[float, flag("--interval", help="Seconds between scrapes: the window")] = 2.0
    once: Annotated[bool, flag("--once", help="One window (two scrapes --interval apart), then exit")] = False
    as_json: Json

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not self.interval >= MIN_INTERVAL_S or self.interval > MAX_INTERVAL_S:
            raise InputError(
                f"--interval must be between {MIN_INTERVAL_S} and {MAX_INTERVAL_S} seconds, "
                f"not {self.interval:g}",
                hint="e.g. --interval 2",
            )
        if self.as_json and not self.once:
            raise InputError("--json prints one window: it needs --once", hint="kvstack top --once --json")
        return self
