"""A Hugging Face hub cache laid out as huggingface_hub writes it, for tests.

    <cache>/models--<org>--<name>/
        blobs/<sha256 of the content>                 the files' bytes
        refs/<branch or tag>                          a commit hash
        snapshots/<commit>/<file> -> ../../blobs/...  relative symlinks, one per file

``cache`` is ``$HF_HOME/hub`` (or ``$HF_HUB_CACHE``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.support.deps import ROOT

DEMO_DIR = ROOT / "profiles" / "demo"
COMMIT = "a" * 40  # any 40-hex string is a commit to the cache


def repo_dir(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def add_snapshot(
    cache: Path,
    repo_id: str,
    files: Mapping[str, bytes | Path],
    commit: str = COMMIT,
    refs: Iterable[str] = ("main",),
    sizes: Mapping[str, int] | None = None,
) -> Path:
    """Write one commit of ``repo_id`` into ``cache`` and point ``refs`` at it; returns the snapshot dir.

    ``files`` maps a file name to its bytes or to a file to copy; ``sizes`` makes sparse blobs of
    that many bytes (weights the planner measures but no test reads).
    """
    repo = repo_dir(cache, repo_id)
    blobs, snapshot = repo / "blobs", repo / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    contents = {name: (data.read_bytes() if isinstance(data, Path) else data) for name, data in files.items()}
    for name, size in (sizes or {}).items():
        contents[name] = b""
        blob = blobs / hashlib.sha256(f"{repo_id}/{commit}/{name}".encode()).hexdigest()
        with blob.open("wb") as fh:
            fh.truncate(size)
        _link(snapshot / name, blob)
    for name, data in contents.items():
        if sizes and name in sizes:
            continue
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        _link(snapshot / name, blob)
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)  # no newline, as huggingface_hub writes it
    return snapshot


def _link(path: Path, blob: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(os.path.relpath(blob, path.parent))


def add_demo(
    cache: Path,
    repo_id: str = "kvstack/demo",
    weights: bool = True,
    commit: str = COMMIT,
    refs: Iterable[str] = ("main",),
) -> Path:
    """The bundled demo model (profiles/demo) as a cached hub repository."""
    files: dict[str, bytes | Path] = {
        p.name: p
        for p in sorted(DEMO_DIR.iterdir())
        if p.is_file() and (weights or p.suffix != ".safetensors")
    }
    return add_snapshot(cache, repo_id, files, commit=commit, refs=refs)
