"""The API key resolver serve, validate and bench share: precedence, key files, warnings, no leaks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvstack import apikey, secretfile
from kvstack.apikey import ARGV_WARNING, ApiKey, read_key_file, resolve_api_key
from kvstack.errors import InputError, PathError

KEY = "sk-file-key-5150"


@pytest.fixture(autouse=True)
def fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apikey, "_argv_warned", False)


def key_file(tmp_path: Path, text: str, mode: int = 0o600, name: str = "key") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def resolve(
    api_key: str | None = None, api_key_file: Path | None = None, **env: str
) -> tuple[ApiKey, list[str]]:
    warnings: list[str] = []
    return resolve_api_key(api_key, api_key_file, env, warnings.append), warnings


def test_precedence_file_then_argv_then_kvstack_then_vllm(tmp_path: Path) -> None:
    f = key_file(tmp_path, KEY + "\n")
    env = {"KVSTACK_API_KEY": "sk-kvstack-env", "VLLM_API_KEY": "sk-vllm-env"}
    assert resolve("sk-argv-key", f, **env)[0] == ApiKey(KEY, f"--api-key-file {f}")
    assert resolve("sk-argv-key", None, **env)[0] == ApiKey("sk-argv-key", "--api-key")
    assert resolve(None, None, **env)[0] == ApiKey("sk-kvstack-env", "KVSTACK_API_KEY")
    assert resolve(None, None, VLLM_API_KEY="sk-vllm-env")[0] == ApiKey("sk-vllm-env", "VLLM_API_KEY")
    assert resolve(None, None, KVSTACK_API_KEY="", VLLM_API_KEY="")[0] == ApiKey(None, "none")


def test_the_argv_key_warns_once_per_process(tmp_path: Path) -> None:
    _, first = resolve("sk-argv-key")
    _, second = resolve("sk-argv-key")
    assert first == [ARGV_WARNING] and second == []
    assert "sk-argv-key" not in first[0] and "ps" in first[0] and "--api-key-file" in first[0]


def test_the_argv_warning_says_a_key_file_wins(tmp_path: Path) -> None:
    key, warnings = resolve("sk-argv-key", key_file(tmp_path, KEY))
    assert key.value == KEY and warnings == [ARGV_WARNING + "; --api-key-file wins"]


def test_keys_from_files_and_variables_do_not_warn(tmp_path: Path) -> None:
    assert resolve(None, key_file(tmp_path, KEY))[1] == []
    assert resolve(None, None, KVSTACK_API_KEY=KEY)[1] == []


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (KEY, KEY),
        (KEY + "\n", KEY),
        (KEY + "\r\n", KEY),
        ("pass phrase with spaces\n", "pass phrase with spaces"),
    ],
)
def test_one_trailing_newline_is_stripped(tmp_path: Path, text: str, key: str) -> None:
    assert read_key_file(key_file(tmp_path, text)) == key


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "is empty"),
        ("\n", "is empty"),
        (KEY + "\n\n", "more than one line"),
        (KEY + "\nsecond\n", "more than one line"),
        (" " + KEY + "\n", "leading or trailing spaces"),
        ("abc\n", "at least 4"),
        ("clé-secrète-1234\n", "outside ASCII"),
    ],
)
def test_a_malformed_key_file_is_bad_input_and_never_shown(tmp_path: Path, text: str, words: str) -> None:
    path = key_file(tmp_path, text)
    with pytest.raises(InputError) as err:
        read_key_file(path)
    assert words in err.value.message and str(path) in err.value.message
    assert err.value.exit_code == 2 and err.value.hint
    if text.strip():
        assert text.strip().split()[0] not in err.value.message + err.value.hint


def test_a_missing_file_a_directory_and_a_fifo_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PathError, match="does not exist"):
        read_key_file(tmp_path / "nope")
    with pytest.raises(PathError, match="is a directory"):
        read_key_file(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(PathError, match="not a regular file"):
        read_key_file(fifo)  # and never blocks waiting for a writer


def test_a_symlink_to_a_key_file_is_fine(tmp_path: Path) -> None:
    # Kubernetes mounts secrets as symlinks into a ..data directory.
    link = tmp_path / "link"
    link.symlink_to(key_file(tmp_path, KEY + "\n"))
    assert read_key_file(link) == KEY


def test_large_or_binary_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PathError, match="too large"):
        read_key_file(key_file(tmp_path, "x" * (secretfile.MAX_BYTES + 1)))
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x00key")
    binary.chmod(0o600)
    with pytest.raises(PathError, match="not UTF-8"):
        read_key_file(binary)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o444])
def test_a_file_others_can_read_warns(tmp_path: Path, mode: int) -> None:
    warnings: list[str] = []
    assert read_key_file(key_file(tmp_path, KEY, mode), warnings.append) == KEY
    (warning,) = warnings
    assert f"mode {mode:04o}" in warning and "chmod 600" in warning and KEY not in warning


def test_a_private_file_does_not_warn(tmp_path: Path) -> None:
    warnings: list[str] = []
    read_key_file(key_file(tmp_path, KEY, 0o600), warnings.append)
    read_key_file(key_file(tmp_path, KEY, 0o400, "ro"), warnings.append)
    assert warnings == []


def test_argv_and_variable_keys_are_checked_too() -> None:
    with pytest.raises(InputError, match="--api-key is empty"):
        resolve("")
    with pytest.raises(InputError, match="KVSTACK_API_KEY variable holds more than one line"):
        resolve(None, None, KVSTACK_API_KEY="sk-a\nsk-b")


def test_the_repr_never_holds_the_key() -> None:
    assert KEY not in repr(ApiKey(KEY, "--api-key")) and KEY not in str(ApiKey(KEY, "--api-key"))
