"""The e2e run's disk given back after each module (tests/support/disk_back.py), on real files: what a
module added goes, what was there before stays, and a failed module's files stay for reading."""

from __future__ import annotations

from pathlib import Path

from tests.support.disk_back import DiskBack, entries, size_of


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    return path


def test_what_a_passed_module_added_is_removed_and_what_was_there_stays(tmp_path: Path) -> None:
    session_dir = write(tmp_path / "demo0" / "cache" / "chunk.data", 1000).parent.parent
    before = entries(tmp_path)
    added = [
        write(tmp_path / "canary-disk0" / "cache" / "a.data", 3000),
        write(tmp_path / "canary-disk0" / "cache" / "b.data", 2000),
        write(tmp_path / "test_one0" / "out.json", 500),
    ]
    taken = sum(size_of(p) for p in added)
    back = DiskBack()
    back.after_module("tests/e2e/test_canary_disk.py", tmp_path, before, failed=False)
    assert entries(tmp_path) == {session_dir}
    assert (session_dir / "cache" / "chunk.data").read_bytes() == b"\0" * 1000
    assert back.freed == {"tests/e2e/test_canary_disk.py": taken} and taken >= 5500
    assert back.lines()[-1].endswith("given back in all")


def test_a_failed_modules_files_are_kept_and_counted(tmp_path: Path) -> None:
    before = entries(tmp_path)
    log = write(tmp_path / "faults0" / "serve.out", 700)
    back = DiskBack()
    back.after_module("tests/e2e/test_serve_faults.py", tmp_path, before, failed=True)
    assert log.read_bytes() == b"\0" * 700
    assert back.kept == {"tests/e2e/test_serve_faults.py": size_of(log)} and back.freed == {}
    assert any("kept (failed)" in line and "test_serve_faults.py" in line for line in back.lines())


def test_a_sparse_file_counts_the_blocks_it_takes_not_its_length(tmp_path: Path) -> None:
    image = tmp_path / "disk.img"
    with image.open("wb") as f:
        f.truncate(1 << 30)  # as the fault stack's loop image: long, nearly nothing on disk
    assert size_of(image) < 1 << 20
    write(tmp_path / "data" / "chunk.data", 1 << 20)
    assert size_of(tmp_path / "data") >= 1 << 20


def test_a_link_is_removed_not_followed(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside" / "keep.data", 100)
    root = tmp_path / "base"
    root.mkdir()
    before = entries(root)
    (root / "link").symlink_to(outside.parent, target_is_directory=True)
    DiskBack().after_module("m", root, before, failed=False)
    assert not (root / "link").exists() and outside.read_bytes() == b"\0" * 100
