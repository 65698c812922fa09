"""Workload profiles (kvstack/planning/workload.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import WorkloadError
from kvstack.planning.workload import parse_workload
from kvstack.serving.workload_files import load_workload, workload_names


@pytest.mark.parametrize(
    ("name", "context", "users", "reuse"),
    [
        ("chatbot-shared-prompt", 16 * 1024, 32, 1.0),
        ("rag-long-doc", 128 * 1024, 8, 4.0),
        ("agent-multi-turn", 64 * 1024, 16, 2.0),
    ],
)
def test_bundled_profiles(name: str, context: int, users: int, reuse: float) -> None:
    wl = load_workload(name)
    assert (wl.name, wl.context_tokens, wl.users, wl.reuse) == (name, context, users, reuse)
    assert wl.description


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(WorkloadError) as info:
        load_workload("batch-inference")
    assert info.value.exit_code == 2
    for name in workload_names():
        assert name in info.value.message


def test_a_path_to_a_yaml_file_works(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("context: 1m\nusers: 2\nreuse: 1.5\n")
    wl = load_workload(str(path))
    assert (wl.name, wl.context_tokens, wl.users, wl.reuse) == ("mine", 1024 * 1024, 2, 1.5)


@pytest.mark.parametrize("given", ["mine.yaml", "profiles/rag-long-doc"])
def test_a_missing_file_is_named_as_a_file(tmp_path: Path, given: str) -> None:
    path = tmp_path / given
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    assert info.value.message == f"workload file {path} does not exist"
    assert info.value.hint is not None and "rag-long-doc" in info.value.hint


def test_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("context: [32k\nusers: 2\n")
    with pytest.raises(WorkloadError, match="not valid YAML"):
        load_workload(str(path))


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (["a", "list"], "mapping"),
        ({"users": 2}, "missing 'context'"),
        ({"context": "lots"}, "token count"),
        ({"context": "32k", "users": 0}, "'users'"),
        ({"context": "32k", "reuse": 0.5}, "'reuse'"),
        ({"context": "32k", "contexts": 2}, "unknown field"),
        ({"context": "32k", "retain": 0.5}, "keeps less than the working set"),
        ({"context": "32k", "retain": "plenty"}, "multiple of the working set"),
    ],
)
def test_bad_fields(data: object, needle: str) -> None:
    with pytest.raises(WorkloadError, match=needle):
        parse_workload(data, "test.yaml")


@pytest.mark.parametrize(
    ("retain", "factor", "size"),
    [(20, 20.0, None), ("3x", 3.0, None), ("2TB", None, 2 * 10**12), ("512GiB", None, 512 << 30)],
)
def test_retain_is_a_multiple_or_a_size(retain: object, factor: float | None, size: int | None) -> None:
    wl = parse_workload({"context": "32k", "retain": retain}, "test.yaml")
    assert (wl.retain_factor, wl.retain_bytes) == (factor, size)
