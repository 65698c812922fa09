"""The e2e tests' disk adversary (tests/support/kv_tamper.py) on real files: a flip negates every bf16
value, the scoring requests' chunks are left alone, and BadDisk's tamper is whole when its block
starts (a CI run's disk canary once read chunk files the old byte-loop sweep had not reached)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from kvstack.validation.scoring import SCORE_SALT_PREFIX
from tests.support import kv_tamper
from tests.support.kv_tamper import BadDisk, chunk_files, flip_signs

CHUNK = "model@0x01000100@0@{:064x}.data"


def write_bf16(path: Path, values: list[float]) -> None:
    as_f32 = np.asarray(values, dtype=np.float32)
    (as_f32.view(np.uint32) >> 16).astype(np.uint16).tofile(path)  # bf16: a float32's high half


def read_bf16(path: Path) -> list[float]:
    halves = np.fromfile(path, dtype=np.uint16).astype(np.uint32) << 16
    return [float(v) for v in halves.view(np.float32)]


def test_a_flip_negates_every_value_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / CHUNK.format(1)
    write_bf16(path, [1.0, -2.0, 0.5, 0.0])
    flip_signs(path)
    assert read_bf16(path) == [-1.0, 2.0, -0.5, -0.0]
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    flip_signs(path)
    assert read_bf16(path) == [1.0, -2.0, 0.5, 0.0]


def test_scoring_chunks_are_not_a_prompts_chunk_files(tmp_path: Path) -> None:
    prompt = tmp_path / CHUNK.format(2)
    scored = tmp_path / CHUNK.format(3).replace(".data", f"@{SCORE_SALT_PREFIX}{'ab' * 16}.data")
    for path in (prompt, scored):
        write_bf16(path, [1.0])
    (tmp_path / "in-flight.tmp").write_bytes(b"\0\0")  # LMCache's file before its rename
    assert list(chunk_files(tmp_path)) == [str(prompt)]


def test_bad_disk_flips_what_is_there_on_entry_and_what_lands_later_once(tmp_path: Path) -> None:
    first = [tmp_path / CHUNK.format(i) for i in range(40)]
    for path in first:
        write_bf16(path, [3.0] * 1024)
    with BadDisk(tmp_path, every_s=0.05) as bad:
        assert bad.flipped == 40
        assert all(read_bf16(p)[0] == -3.0 for p in first)
        late = tmp_path / CHUNK.format(99)
        write_bf16(late, [3.0] * 1024)
        deadline = time.monotonic() + 30  # a bound on a hang, not a speed claim
        while bad.flipped < 41 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert read_bf16(late)[0] == -3.0
        assert bad.sweep() == 0  # nothing flipped twice: a second flip would restore the KV
    assert all(read_bf16(p)[0] == -3.0 for p in [*first, late])


def test_chunks_the_tier_writes_during_the_entry_sweep_are_flipped_before_the_block_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tier goes on storing while a sweep runs: the block starts only once a sweep finds nothing new."""
    write_bf16(tmp_path / CHUNK.format(0), [3.0])
    written = iter(range(1, 4))

    def flip_while_the_tier_writes(path: Path) -> None:
        flip_signs(path)
        n = next(written, None)
        if n is not None:
            write_bf16(tmp_path / CHUNK.format(n), [3.0])

    monkeypatch.setattr(kv_tamper, "flip_signs", flip_while_the_tier_writes)
    bad = BadDisk(tmp_path, every_s=3600)  # the thread's own sweeps would come too late to matter
    with bad:
        assert bad.flipped == 4
        assert [read_bf16(Path(p)) for p in sorted(chunk_files(tmp_path))] == [[-3.0]] * 4
