"""The dashboard's Redis panels query names a real Redis exporter exports.

prometheus-redis-exporter (Debian's package of oliver006/redis_exporter 1.45, installed by
scripts/test) against a real redis-server with a password, both on loopback; its /metrics must
carry every redis_* name export/dashboard.py queries.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvstack.export.dashboard import dashboard, metric_names
from tests.support.deps import require_program
from tests.support.redis import RedisFactory, free_port
from tests.unit.export.plans import make_plan

pytestmark = pytest.mark.integration


def exporter_metrics(binary: str, redis_url: str, password: str, log: Path) -> set[str]:
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "--redis.addr", redis_url, "--web.listen-address", f"127.0.0.1:{port}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={"REDIS_PASSWORD": password, "PATH": "/usr/bin:/bin"},
        )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
                if "redis_up 1" in text:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_every_redis_metric_of_the_dashboard_is_exported(redis_factory: RedisFactory, tmp_path: Path) -> None:
    binary = require_program("prometheus-redis-exporter")
    server = redis_factory(password="s3cret-pw", extra_args=("--maxmemory", "64mb"))
    server.client().set("kv:chunk", b"x" * 100)
    board = dashboard(make_plan(remote_gib=1, remote_url="redis://cache:6379/0"), "x")
    wanted = {n for n in metric_names(board) if n.startswith("redis_")}
    assert {"redis_memory_used_bytes", "redis_keyspace_hits_total", "redis_db_keys"} <= wanted
    found = exporter_metrics(binary, f"redis://127.0.0.1:{server.port}", "s3cret-pw", tmp_path / "exp.log")
    assert not wanted - found, f"not exported: {sorted(wanted - found)}"
