"""The remote store's table in `kvstack doctor` (rendering/doctor.py's remote_table)."""

from __future__ import annotations

from rich.console import Console

from kvstack.hardware.snapshot import HardwareSnapshot, RemoteInfo
from kvstack.rendering.doctor import remote_table, render


def rows(info: RemoteInfo) -> dict[str, str]:
    console = Console(width=200, record=True)
    console.print(remote_table(info))
    lines = console.export_text().splitlines()
    return {c[1].strip(): c[2].strip() for c in (line.split("│") for line in lines) if len(c) == 4}


def test_a_probed_redis() -> None:
    info = RemoteInfo(
        url="redis://kv:***@cache:6379/0",
        reachable=True,
        server_version="7.2.4",
        maxmemory_bytes=64 << 30,
        maxmemory_policy="allkeys-lru",
        latency_s=0.00042,
        read_bw_bytes_per_s=1.2e9,
        write_bw_bytes_per_s=9e8,
    )
    assert rows(info) == {
        "url": "redis://kv:***@cache:6379/0",
        "reachable": "yes",
        "server": "Redis 7.2.4",
        "latency (median)": "0.42 ms",
        "read / write": "1.2 GB/s / 900 MB/s",
        "maxmemory": "64.0 GiB",
        "eviction policy": "allkeys-lru",
    }


def test_an_unreachable_store_says_why_and_what_is_unknown() -> None:
    info = RemoteInfo(url="redis://cache:6379", reachable=False, error="cannot connect: Connection refused")
    got = rows(info)
    assert got["reachable"] == "no" and got["error"] == "cannot connect: Connection refused"
    assert got["server"] == got["maxmemory"] == got["latency (median)"] == "unknown"
    assert got["read / write"] == "unknown / unknown"


def test_no_limit_and_markup_in_values_is_shown_as_text() -> None:
    info = RemoteInfo(url="lm://[::1]:65432", reachable=True, maxmemory_bytes=0, error="refused: [bold]x")
    got = rows(info)
    assert got["maxmemory"] == "0 (no limit)" and got["url"] == "lm://[::1]:65432"
    assert got["error"] == "refused: [bold]x"


def test_doctor_report_includes_the_table_only_with_a_remote() -> None:
    def text(snap: HardwareSnapshot) -> str:
        console = Console(width=200, record=True)
        render(snap, console)
        return console.export_text()

    assert "Remote KV store" not in text(HardwareSnapshot())
    with_remote = HardwareSnapshot(remote=RemoteInfo(url="redis://cache:6379", reachable=True))
    assert "Remote KV store" in text(with_remote)
