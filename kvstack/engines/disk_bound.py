"""Start LMCache's cache server with its disk tier inside the planned size, across restarts too.

LMCache (0.5.6) bounds the disk tier itself while it runs: the ``fs_native`` L2 adapter with
``max_capacity_gb`` and an ``eviction`` block (fs_native_l2_adapter.py) is watched by its
L2EvictionController, which once a second (storage_controllers/eviction_controller.py) evicts
the least recently used 20% of its keys whenever usage passes 80% of the capacity. What it does
not do is count the files an earlier server left in the directory: the adapter starts with a
usage of zero and never lists the directory (no recovery, unlike raw_block), so each restart
would add up to one more capacity of files on top of the old ones.

This launcher closes that gap and then becomes the server (``os.execv``: same process, so the
supervisor's PID, logs and signals are the server's): it deletes the oldest files (by mtime)
until those kept fill at most half the cap, and gives LMCache the rest of the cap as its
``max_capacity_gb``. The kept files stay readable (a restart stays warm) and LMCache evicts what
it writes. Before the exec it forks a watcher (same process group, so the supervisor's stop ends
it too; it also exits once its parent, the server, is gone) that deletes the oldest ``.data``
files whenever the directory passes the cap: a backstop for when LMCache's pass (20% of its
objects a second) is slower than the engine writes, which happens with caps of a few megabytes,
not gigabytes. The watcher deletes through the server (``DELETE /cache/objects`` on its HTTP
port, with the run's control token from KVSTACK_CONTROL_TOKEN, which the server's guard asks for:
engines/lmcache_guard.py; the file names decoded as fs_l2_adapter._filename_to_object_key does),
so LMCache's usage and LRU order drop the objects too; a file LMCache did not take (the server not up yet) is
unlinked directly, which LMCache sees as a miss at lookup, never an error. Imports only the
standard library (and the stdlib-only guard's names): it runs in the engine's interpreter.

    python -m kvstack.engines.disk_bound --dir D --cap-bytes N -- \
        python -m kvstack.engines.lmcache_guard server ...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvstack.engines.vllm_guard import CONTROL_ENV, CONTROL_HEADER

GIB = 1024**3
KEEP_FRACTION = 0.5  # of the cap, at most, for the files an earlier server left
ADAPTER_FLAG = "--l2-adapter"


@dataclass(frozen=True)
class Trimmed:
    kept_bytes: int
    removed_files: int
    removed_bytes: int


WATCH_INTERVAL_S = 0.5
DATA_SUFFIX = ".data"  # LMCache's object files; anything else (a store's temp file) is counted, not deleted


def _files(directory: Path) -> list[tuple[float, int, Path]]:
    out: list[tuple[float, int, Path]] = []
    for root, _dirs, names in os.walk(directory):
        for name in names:
            path = Path(root) / name
            try:
                st = path.lstat()
            except OSError:
                continue  # removed meanwhile
            if path.is_file() and not path.is_symlink():
                out.append((st.st_mtime, st.st_size, path))
    return out


Remove = Callable[[list[Path]], None]


def trim(directory: Path, keep_bytes: int, remove: Remove | None = None) -> Trimmed:
    """Delete the oldest object files until all the files fill at most ``keep_bytes``:
    through ``remove`` (the server) first, then directly what is still there."""
    files = sorted(_files(directory), key=lambda f: (f[0], str(f[2])))
    total = sum(size for _, size, _ in files)
    victims: list[Path] = []
    removed_bytes = 0
    for _, size, path in files:
        if total <= keep_bytes:
            break
        if not path.name.endswith(DATA_SUFFIX):
            continue
        victims.append(path)
        total -= size
        removed_bytes += size
    if victims and remove is not None:
        with contextlib.suppress(OSError, ValueError):  # the server is not up: delete directly
            remove(victims)
    for path in victims:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return Trimmed(kept_bytes=total, removed_files=len(victims), removed_bytes=removed_bytes)


def object_key(name: str) -> dict[str, object] | None:
    """LMCache's wire key (EncodedObjectKey) of a file the fs adapters wrote:
    ``<model, / as -SEP->@0x<kv_rank>@<group hex>@<chunk hash hex>[@<cache salt>].data``."""
    if not name.endswith(DATA_SUFFIX):
        return None
    parts = name[: -len(DATA_SUFFIX)].split("@")
    if len(parts) not in (4, 5):
        return None
    try:
        return {
            "model_name": parts[0].replace("-SEP-", "/"),
            "kv_rank": int(parts[1], 16),
            "object_group_id": int(parts[2], 16),
            "chunk_hash_hex": bytes.fromhex(parts[3]).hex(),
            "cache_salt": parts[4] if len(parts) == 5 else "",
        }
    except ValueError:
        return None


def server_remove(http_url: str, adapter: str, token: str | None = None, batch: int = 1000) -> Remove:
    """Delete files through LMCache's ``DELETE /cache/objects`` (its accounting follows), with the
    run's control token: kvstack's guard lets nothing else through (engines/lmcache_guard.py)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
    headers = {"Content-Type": "application/json"}
    if token:
        headers[CONTROL_HEADER] = token

    def remove(paths: list[Path]) -> None:
        keys = [k for k in (object_key(p.name) for p in paths) if k is not None]
        for at in range(0, len(keys), batch):
            body = json.dumps({"keys": keys[at : at + batch], "tier": "l2", "adapter": adapter}).encode()
            req = urllib.request.Request(
                http_url + "/cache/objects",
                data=body,
                method="DELETE",
                headers=headers,
            )
            with opener.open(req, timeout=10) as resp:
                resp.read()

    return remove


def with_capacity(argv: Sequence[str], base_path: str, capacity_bytes: int) -> list[str]:
    """``argv`` with the ``max_capacity_gb`` of the L2 adapter at ``base_path`` set to the bytes given."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg != ADAPTER_FLAG:
            continue
        try:
            spec = json.loads(out[i + 1])
        except ValueError:
            continue
        if isinstance(spec, dict) and spec.get("base_path") == base_path:
            spec["max_capacity_gb"] = capacity_bytes / GIB
            out[i + 1] = json.dumps(spec, separators=(",", ":"))
    return out


def prepare(directory: Path, cap_bytes: int, server_argv: Sequence[str]) -> tuple[list[str], Trimmed]:
    """Trim ``directory`` and return the server's argv with the capacity left to LMCache."""
    directory.mkdir(parents=True, exist_ok=True)
    done = trim(directory, int(cap_bytes * KEEP_FRACTION))
    left = max(cap_bytes - done.kept_bytes, 1)
    return with_capacity(server_argv, str(directory), left), done


def watch(directory: Path, cap_bytes: int, server_pid: int, remove: Remove | None = None) -> None:
    """Hold ``directory`` within ``cap_bytes`` until the server is gone."""
    while os.getppid() == server_pid:
        with contextlib.suppress(OSError):  # the directory went away (a cleanup): keep watching
            trim(directory, cap_bytes, remove)
        time.sleep(WATCH_INTERVAL_S)


def _flag(argv: Sequence[str], name: str) -> str | None:
    args = list(argv)
    return args[args.index(name) + 1] if name in args[:-1] else None


def server_remover(argv: Sequence[str], base_path: str) -> Remove | None:
    """Deletion through the server that ``argv`` starts (its --http-host/--http-port and the type of
    the L2 adapter at ``base_path``), or None when it has no HTTP API."""
    port = _flag(argv, "--http-port")
    if port is None:
        return None
    host = _flag(argv, "--http-host") or "127.0.0.1"
    adapter = "fs_native"
    for i, arg in enumerate(argv[:-1]):
        if arg == ADAPTER_FLAG:
            with contextlib.suppress(ValueError):
                spec = json.loads(argv[i + 1])
                if isinstance(spec, dict) and spec.get("base_path") == base_path:
                    adapter = str(spec.get("type", adapter))
    return server_remove(f"http://{host}:{port}", adapter, os.environ.get(CONTROL_ENV) or None)


def server_argv(argv: Sequence[str]) -> list[str]:
    """The server's own command line inside a launcher argv (everything after ``--``)."""
    args = list(argv)
    return args[args.index("--") + 1 :] if "--" in args else args


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        sys.exit("kvstack.engines.disk_bound: usage: --dir D --cap-bytes N -- SERVER ARGV...")
    at = args.index("--")
    parser = argparse.ArgumentParser(prog="kvstack.engines.disk_bound")
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--cap-bytes", required=True, type=int)
    opts = parser.parse_args(args[:at])
    server = args[at + 1 :]
    if not server or opts.cap_bytes <= 0:
        sys.exit("kvstack.engines.disk_bound: a positive --cap-bytes and a server command are needed")
    final, done = prepare(opts.dir, opts.cap_bytes, server)
    print(
        f"kvstack disk bound: {opts.dir} capped at {opts.cap_bytes} bytes; kept {done.kept_bytes} bytes "
        f"from earlier runs (removed {done.removed_files} files, {done.removed_bytes} bytes); "
        f"LMCache evicts beyond {opts.cap_bytes - done.kept_bytes} bytes",
        flush=True,
    )
    pid = os.getpid()
    if os.fork() == 0:  # the watcher: the parent becomes the server below
        try:
            watch(opts.dir, opts.cap_bytes, pid, server_remover(final, str(opts.dir)))
        finally:
            os._exit(0)
    os.execv(final[0], final)


if __name__ == "__main__":
    main()
