"""kvstack.engines.disk_bound: the disk tier stays within its cap across restarts (real files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

from kvstack.engines.disk_bound import (
    GIB,
    object_key,
    prepare,
    server_argv,
    server_remover,
    trim,
    with_capacity,
)
from tests.support.ports import free_block

CHUNK = 256 * 1024


def write(directory: Path, name: str, age_s: float, size: int = CHUNK) -> Path:
    path = directory / name
    path.write_bytes(b"\0" * size)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_trim_deletes_the_oldest_object_files_first(tmp_path: Path) -> None:
    files = [write(tmp_path, f"k{i}.data", age_s=100 - i) for i in range(10)]  # k0 oldest
    done = trim(tmp_path, 4 * CHUNK)
    assert done.removed_files == 6 and done.kept_bytes == 4 * CHUNK
    assert [p.exists() for p in files] == [False] * 6 + [True] * 4


def test_trim_never_deletes_a_file_that_is_not_an_object(tmp_path: Path) -> None:
    tmp = write(tmp_path, "k.data.tmp", age_s=1000)  # a store in progress
    obj = write(tmp_path, "k.data", age_s=1)
    done = trim(tmp_path, 0)
    assert tmp.exists() and not obj.exists() and done.kept_bytes == CHUNK


def test_earlier_runs_keep_half_the_cap_and_lmcache_gets_the_rest(tmp_path: Path) -> None:
    for i in range(8):
        write(tmp_path, f"k{i}.data", age_s=100 - i)
    adapter = {"type": "fs_native", "base_path": str(tmp_path), "max_capacity_gb": 8 * CHUNK / GIB}
    other = {"type": "resp", "host": "h", "port": 6379}
    argv = ["py", "--l2-adapter", json.dumps(adapter), "--l2-adapter", json.dumps(other), "--x", "1"]
    final, done = prepare(tmp_path, 8 * CHUNK, argv)
    assert done.kept_bytes == 4 * CHUNK and done.removed_files == 4
    fs, resp = json.loads(final[2]), json.loads(final[4])
    assert fs["max_capacity_gb"] * GIB == 4 * CHUNK
    assert resp == other and final[5:] == ["--x", "1"]


def test_with_capacity_leaves_other_adapters_alone() -> None:
    argv = ["--l2-adapter", '{"type":"resp","host":"h","port":1}']
    assert with_capacity(argv, "/x", GIB) == argv


def test_server_argv_is_what_follows_the_separator() -> None:
    assert server_argv(["py", "-m", "m", "--dir", "d", "--", "py", "-m", "lmcache.cli.main"]) == [
        "py",
        "-m",
        "lmcache.cli.main",
    ]


def test_the_launcher_becomes_the_server_and_its_watcher_holds_the_cap(tmp_path: Path) -> None:
    """A real launch: the server (here a Python that writes past the cap) keeps the launcher's
    PID, and the watcher it forked deletes the oldest files until the directory is within the cap."""
    disk = tmp_path / "disk"
    writer = (
        "import json,os,time\n"
        f"d={str(disk)!r}\n"
        "print('server', os.getpid(), flush=True)\n"
        "for i in range(12):\n"
        f"    open(os.path.join(d, f'k{{i:02d}}.data'), 'wb').write(bytes({CHUNK}))\n"
        "    time.sleep(0.05)\n"
        "time.sleep(2.0)\n"
        "print(json.dumps(sorted(os.listdir(d))), flush=True)\n"
    )
    launcher = [sys.executable, "-m", "kvstack.engines.disk_bound", "--dir", str(disk)]
    proc = subprocess.Popen(
        [*launcher, "--cap-bytes", str(4 * CHUNK), "--", sys.executable, "-c", writer],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    lines = out.splitlines()
    assert lines[0].startswith("kvstack disk bound: ") and "capped at 1048576 bytes" in lines[0]
    assert lines[1] == f"server {proc.pid}"  # exec'd: the supervisor's PID is the server's
    assert json.loads(lines[2]) == ["k08.data", "k09.data", "k10.data", "k11.data"]


# A file LMCache's fs_native adapter wrote on this machine (the demo model, rank bitmap 0x01000100).
REAL_NAME = (
    "-SEP-work-SEP-main-SEP-profiles-SEP-demo@0x01000100@0@"
    "1962d5621cd9258f7d2ea7808eb985e00da8bce924076504cff89b1c0a48ff95.data"
)


def test_object_keys_decode_lmcaches_file_names() -> None:
    assert object_key(REAL_NAME) == {
        "model_name": "/work/main/profiles/demo",
        "kv_rank": 0x01000100,
        "object_group_id": 0,
        "chunk_hash_hex": "1962d5621cd9258f7d2ea7808eb985e00da8bce924076504cff89b1c0a48ff95",
        "cache_salt": "",
    }
    assert object_key(REAL_NAME.replace(".data", "@salt1.data"))["cache_salt"] == "salt1"  # type: ignore[index]
    assert object_key("k.data.tmp") is None and object_key("a@zz@0@00.data") is None


class _Server(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, object]]] = []

    def do_DELETE(self) -> None:  # LMCache's DELETE /cache/objects: deletes the files it is named
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, **body})
        for key in body["keys"][:-1]:  # it leaves the last one (a locked key, say): the bound unlinks it
            model = key["model_name"].replace("/", "-SEP-")
            name = f"{model}@{key['kv_rank']:#010x}@0@{key['chunk_hash_hex']}.data"
            (Path(self.server.disk) / name).unlink()  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"deleted": 1, "skipped": 0, "ok": true}')

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_watcher_deletes_through_the_server_so_lmcache_counts_it(tmp_path: Path) -> None:
    names = [REAL_NAME.replace("1962d562", f"{i:08x}") for i in range(6)]
    for i, name in enumerate(names):
        write(tmp_path, name, age_s=100 - i)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    srv.disk = str(tmp_path)  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        argv = ["py", "--l2-adapter", json.dumps({"type": "fs_native", "base_path": str(tmp_path)})]
        argv += ["--http-host", "127.0.0.1", "--http-port", str(srv.server_address[1])]
        remove = server_remover(argv, str(tmp_path))
        assert remove is not None
        done = trim(tmp_path, 3 * CHUNK, remove)
    finally:
        srv.shutdown()
    (call,) = _Server.seen
    assert call["path"] == "/cache/objects" and call["tier"] == "l2" and call["adapter"] == "fs_native"
    assert [k["chunk_hash_hex"][:8] for k in call["keys"]] == ["00000000", "00000001", "00000002"]  # type: ignore[attr-defined]
    assert done.removed_files == 3 and sorted(p.name for p in tmp_path.iterdir()) == sorted(names[3:])


def test_without_a_server_the_watcher_deletes_directly(tmp_path: Path) -> None:
    for i in range(4):
        write(tmp_path, f"k{i}.data", age_s=10 - i)
    argv = ["py", "--http-port", str(free_block(1))]  # nothing listens there
    done = trim(tmp_path, 2 * CHUNK, server_remover(argv, str(tmp_path)))
    assert done.removed_files == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["k2.data", "k3.data"]
