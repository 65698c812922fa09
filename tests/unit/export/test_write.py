from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kvstack.errors import PathError
from kvstack.export.bundle import Bundle, ExportFile
from kvstack.export.write import write_bundle


def bundle(version: str = "1") -> Bundle:
    return Bundle(
        format="compose",
        files=[
            ExportFile(name="compose.yaml", content=f"services: {{}}  # {version}\n"),
            ExportFile(name=".env", content=f"PW='x{version}'\n", mode=0o644, secret=True),
        ],
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_every_file_with_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "deploy" / "nested"
    paths = write_bundle(bundle(), out)
    assert [p.name for p in paths] == ["compose.yaml", ".env"]
    assert mode(out / "compose.yaml") == 0o644
    assert mode(out / ".env") == 0o600  # a secret is private whatever mode it asked for
    assert (out / ".env").read_text() == "PW='x1'\n"
    assert sorted(p.name for p in out.iterdir()) == [".env", "compose.yaml"]  # no temp files left


def test_refuses_to_overwrite_without_force_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("mine\n")
    with pytest.raises(PathError) as err:
        write_bundle(bundle(), tmp_path)
    assert ".env" in err.value.message and err.value.hint and "--force" in err.value.hint
    assert (tmp_path / ".env").read_text() == "mine\n"
    assert not (tmp_path / "compose.yaml").exists()  # checked before the first write


def test_force_replaces(tmp_path: Path) -> None:
    write_bundle(bundle("1"), tmp_path)
    write_bundle(bundle("2"), tmp_path, force=True)
    assert "# 2" in (tmp_path / "compose.yaml").read_text()
    assert mode(tmp_path / ".env") == 0o600


def test_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(PathError):
        write_bundle(bundle(), target)


def test_a_directory_in_the_way_is_refused_even_with_force(tmp_path: Path) -> None:
    (tmp_path / "compose.yaml").mkdir()
    with pytest.raises(PathError):
        write_bundle(bundle(), tmp_path, force=True)


def test_uncreatable_directory_is_a_path_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(PathError) as err:
        write_bundle(bundle(), tmp_path / "file" / "sub")  # a parent is a regular file
    assert err.value.hint and "--out" in err.value.hint
