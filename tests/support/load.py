"""Requests in flight for an e2e test: kvstack's own load streams (kvstack/validation/load.py) run in
a thread's event loop while the test goes on."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

from kvstack.validation.load import Load, LoadReport
from kvstack.validation.report import ValidationTarget
from kvstack.validation.server_api import ServerApi


class BackgroundLoad:
    """``with BackgroundLoad(url, streams, tokens):`` streams of fresh prompts until the block ends."""

    def __init__(self, base_url: str, streams: int, prompt_tokens: int, output_tokens: int = 32) -> None:
        self.base_url = base_url
        self.streams = streams
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.report: LoadReport | None = None
        self._stop = threading.Event()
        self._started = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._error: BaseException | None = None

    async def _run(self) -> None:
        try:
            async with ServerApi(ValidationTarget(base_url=self.base_url), None) as api:
                await api.discover()
                load = Load(
                    self.base_url,
                    api.model,
                    None,
                    self.streams,
                    self.prompt_tokens,
                    tokenizer=api.tokenize,
                    output_tokens=self.output_tokens,
                )
                async with load:
                    self._started.set()
                    while not self._stop.is_set():
                        await asyncio.sleep(0.2)
                self.report = load.report()
        except BaseException as exc:  # the test reads it on exit
            self._error = exc
            self._started.set()

    def __enter__(self) -> BackgroundLoad:
        self._thread.start()
        self._started.wait(60)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(60)
        if self._error is not None and exc is None:
            raise self._error
