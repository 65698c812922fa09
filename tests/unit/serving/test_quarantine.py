"""Tier directories whose KV served a wrong answer: marked by serving, refused by the next serve."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from kvstack.canary.state import CheckRecord
from kvstack.errors import InputError, PathError
from kvstack.serving.quarantine import MARKER, mark_dirs, quarantined

MARKER_NAME = "KVSTACK-WRONG-KV.json"


def failed_check() -> CheckRecord:
    return CheckRecord(
        at=1_790_000_000.0,
        probe="Harbor-3fa91c0d2e5b",
        age_s=312.0,
        served_from="disk",
        hit_tokens={"disk": 3840.0, "offload": 3840.0},
        prompt_tokens=4096,
        verdict="fail",
        typical=2.7,
        gate=0.4,
        detail="typical disagreement 2.700 nats over the 0.400-nat gate",
    )


def tier_dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    disk, other = tmp_path / "cache" / "disk", tmp_path / "cache" / "hicache-disk"
    for d in (disk, other):
        d.mkdir(parents=True)
        (d / "chunk-0001.kv").write_bytes(b"\0" * 64)
    return disk, other, tmp_path / "runs" / "r1"


def test_mark_dirs_leaves_a_private_marker_naming_the_failed_check(tmp_path: Path) -> None:
    disk, other, run_dir = tier_dirs(tmp_path)
    record = failed_check()
    assert mark_dirs([str(disk), str(other)], record, run_dir) == [str(disk), str(other)]
    for d in (disk, other):
        marker = d / MARKER_NAME
        assert stat.S_IMODE(marker.stat().st_mode) == 0o600
        doc = json.loads(marker.read_text(encoding="utf-8"))
        assert doc["probe"] == record.probe and doc["served_from"] == "disk" and doc["verdict"] == "fail"
        assert doc["detail"] == record.detail and doc["run_dir"] == str(run_dir)
        assert isinstance(doc["at"], str) and doc["at"][:2] == "20"  # a readable date, for a person
        assert (d / "chunk-0001.kv").exists()  # the tier's files are left as they are
    assert MARKER == MARKER_NAME


def test_a_directory_that_cannot_hold_a_marker_is_skipped(tmp_path: Path) -> None:
    disk, _, run_dir = tier_dirs(tmp_path)
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("x", encoding="utf-8")
    assert mark_dirs([str(not_a_dir), str(disk)], failed_check(), run_dir) == [str(disk)]
    assert (disk / MARKER_NAME).is_file()


def test_a_marked_directory_is_refused_naming_it_and_the_fix(tmp_path: Path) -> None:
    disk, _, run_dir = tier_dirs(tmp_path)
    mark_dirs([str(disk)], failed_check(), run_dir)
    with pytest.raises(PathError) as caught:
        quarantined(disk)
    err = caught.value
    assert isinstance(err, InputError) and err.exit_code == 2
    assert str(disk) in err.message and "wrong KV" in err.message
    assert str(run_dir) in err.message  # which run found it
    assert err.hint is not None and f"rm -rf {disk}/*" in err.hint and MARKER_NAME in err.hint
    assert "--cache-dir" in err.hint


def test_the_fix_the_hint_gives_clears_it(tmp_path: Path) -> None:
    disk, _, run_dir = tier_dirs(tmp_path)
    mark_dirs([str(disk)], failed_check(), run_dir)
    for p in disk.iterdir():  # rm -rf DIR/*
        p.unlink()
    quarantined(disk)  # nothing raised: the directory may serve again


def test_an_unreadable_marker_still_refuses(tmp_path: Path) -> None:
    disk, _, _ = tier_dirs(tmp_path)
    for content in ("{not json", "[1, 2]"):
        (disk / MARKER_NAME).write_text(content, encoding="utf-8")
        with pytest.raises(PathError) as caught:
            quarantined(disk)
        assert str(disk) in caught.value.message and "served wrong KV:" in caught.value.message


def test_no_marker_no_refusal(tmp_path: Path) -> None:
    disk, other, _ = tier_dirs(tmp_path)
    quarantined(disk)
    quarantined(tmp_path / "not-created-yet")
    (other / MARKER_NAME).mkdir()  # a directory of that name is not a marker
    quarantined(other)
    assert not (disk / MARKER_NAME).exists()  # checking writes nothing
