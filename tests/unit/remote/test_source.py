"""The remote store URL: --remote-file, --remote (a password warns once), KVSTACK_REMOTE_URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import InputError, PathError
from kvstack.remote import source
from kvstack.remote.source import REMOTE_URL_ENV, resolve_remote

URL = "redis://kv:s3cret-pw@127.0.0.1:6379"


@pytest.fixture(autouse=True)
def fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "_argv_warned", False)


def test_a_file_wins_and_its_url_is_read_whole(tmp_path: Path) -> None:
    f = tmp_path / "remote"
    f.write_text(URL + "\n")
    f.chmod(0o600)
    said: list[str] = []
    assert resolve_remote(None, f, env={REMOTE_URL_ENV: "redis://other:1"}, warn=said.append) == URL
    assert said == []


def test_a_file_others_can_read_warns(tmp_path: Path) -> None:
    f = tmp_path / "remote"
    f.write_text(URL)
    f.chmod(0o644)
    said: list[str] = []
    assert resolve_remote(None, f, env={}, warn=said.append) == URL
    assert len(said) == 1 and "chmod 600" in said[0] and "s3cret" not in said[0]


def test_a_password_on_the_command_line_works_and_warns_once() -> None:
    said: list[str] = []
    assert resolve_remote(URL, None, env={}, warn=said.append) == URL
    assert resolve_remote(URL, None, env={}, warn=said.append) == URL
    assert len(said) == 1 and "--remote-file" in said[0] and REMOTE_URL_ENV in said[0]
    assert "s3cret" not in said[0]
    assert (
        resolve_remote("redis://127.0.0.1:6379", None, env={}, warn=said.append) == "redis://127.0.0.1:6379"
    )
    assert len(said) == 1


def test_a_password_or_token_in_the_query_on_the_command_line_warns_too(tmp_path: Path) -> None:
    said: list[str] = []
    url = "redis://127.0.0.1:6379/0?password=q-s3cret-pw"
    assert resolve_remote(url, None, env={}, warn=said.append) == url
    assert len(said) == 1 and "--remote-file" in said[0] and "q-s3cret" not in said[0]
    f = tmp_path / "remote"
    f.write_text("rediss://cache:6380/0?token=q-s3cret-tk\n")
    f.chmod(0o644)
    assert resolve_remote(None, f, env={}, warn=said.append) == "rediss://cache:6380/0?token=q-s3cret-tk"
    assert len(said) == 2 and "chmod 600" in said[1] and "q-s3cret" not in said[1]


def test_the_environment_is_last() -> None:
    assert resolve_remote(None, None, env={REMOTE_URL_ENV: URL}) == URL
    assert resolve_remote(None, None, env={REMOTE_URL_ENV: ""}) is None
    assert resolve_remote(None, None, env={}) is None


def test_bad_files_and_both_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PathError, match="does not exist"):
        resolve_remote(None, tmp_path / "nope", env={})
    with pytest.raises(PathError, match="not a regular file"):
        resolve_remote(None, tmp_path, env={})
    two = tmp_path / "two"
    two.write_text(URL + "\n" + URL + "\n")
    with pytest.raises(InputError, match="one URL on one line") as err:
        resolve_remote(None, two, env={})
    assert "s3cret" not in err.value.message
    with pytest.raises(InputError, match="--remote and --remote-file"):
        resolve_remote(URL, two, env={})
