"""Release numbers (kvstack/releases.py): the one rule every version check uses."""

from __future__ import annotations

import pytest

from kvstack.releases import at_least, parse_version


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("0.32.0", (0, 32)),
        ("0.10.1.post1", (0, 10, 1)),
        ("0.11.0rc2", (0, 11)),
        ("0.5.20rc1", (0, 5, 20)),
        ("0.5.6+cu128", (0, 5, 6)),
        ("v0.33.0.dev12+g1234abc", (0, 33)),
        ("1", (1,)),
    ],
)
def test_parse_version_keeps_the_release(text: str, release: tuple[int, ...]) -> None:
    assert parse_version(text).release == release


def test_parse_version_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a version"):
        parse_version("latest")


@pytest.mark.parametrize(
    ("installed", "minimum", "expected"),
    [("0.18.0", "0.18", True), ("0.17.9", "0.18", False), ("", "0.1", False), (None, "0.1", False)],
)
def test_at_least(installed: str | None, minimum: str, expected: bool) -> None:
    assert at_least(installed, minimum) is expected
