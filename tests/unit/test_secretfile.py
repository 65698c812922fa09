from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import PathError
from kvstack.secretfile import read_secret_file


def test_text_and_mode_come_back_as_read(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("abc\r\n")
    path.chmod(0o644)
    got = read_secret_file(path, "--x-file", "key", "hint")
    assert (got.text, got.shared, got.mode_text) == ("abc\r\n", True, "0644")
    path.chmod(0o600)
    assert not read_secret_file(path, "--x-file", "key", "hint").shared


def test_a_directory_is_named_as_one(tmp_path: Path) -> None:
    with pytest.raises(PathError, match=r"--x-file .* is a directory, not a regular file"):
        read_secret_file(tmp_path, "--x-file", "URL", "hint")
