"""A real redis-server on loopback, on a free port, with no persistence: ``RedisServer`` and the
``redis_factory`` / ``redis_server`` fixtures (re-exported by the conftests that use them)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from tests.support.deps import missing

REDIS_FIX = "install redis-server (scripts/test does)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    """One redis-server process; ``stop``/``start`` keep the port, so a test can restart it."""

    binary: str
    port: int
    log: Path
    password: str | None = None
    extra_args: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        cred = f":{self.password}@" if self.password else ""
        return f"redis://{cred}127.0.0.1:{self.port}/0"

    def url_with(self, password: str | None) -> str:
        cred = f":{password}@" if password else ""
        return f"redis://{cred}127.0.0.1:{self.port}/0"

    def argv(self) -> list[str]:
        argv = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        if self.password:
            argv += ["--requirepass", self.password]
        return [*argv, *self.extra_args]

    def client(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=2, decode_responses=True
        )

    def start(self, timeout_s: float = 10.0) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited {self.proc.returncode}: {self.log.read_text()[-2000:]}"
                )
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} not ready after {timeout_s} s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


RedisFactory = Callable[..., RedisServer]


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[RedisFactory]:
    """``redis_factory(password=None, extra_args=())`` starts a server; all are stopped at teardown."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing("redis-server", REDIS_FIX)
    assert binary is not None
    started: list[RedisServer] = []

    def start(password: str | None = None, extra_args: tuple[str, ...] = ()) -> RedisServer:
        port = free_port()
        server = RedisServer(binary, port, tmp_path / f"redis-{port}.log", password, tuple(extra_args))
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def redis_server(redis_factory: RedisFactory) -> RedisServer:
    """A plain redis-server (no password, defaults: maxmemory 0, noeviction)."""
    return redis_factory()
