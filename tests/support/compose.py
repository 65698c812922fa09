"""What Docker Compose makes of an exported project before it starts a container: ``.env`` read and
``${VAR}`` interpolated (compose-spec interpolation.md), so that a test sees each container's
command line as the container gets it, not as the YAML spells it.

No Compose binary is installed here; these are the rules the exports use, and a form outside them
fails the test rather than being guessed at:
- ``.env``: ``NAME=VALUE`` lines; ``#`` starts a comment line; a single-quoted value is literal.
- ``$$`` is a literal ``$``; ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}``,
  ``${NAME:?error}`` and ``${NAME?error}`` read the environment, ``.env`` filling what it lacks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_VAR = re.compile(
    r"\$(?:(?P<dollar>\$)|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})"
)


def read_dotenv(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, eq, value = line.partition("=")
        assert eq, f"not a NAME=VALUE line: {line!r}"
        if value.startswith("'"):
            assert value.endswith("'") and len(value) >= 2, f"unclosed quote in {name}"
            value = value[1:-1]
        else:
            assert not value.startswith('"'), f"double-quoted .env values are not used: {name}"
        out[name.strip()] = value
    return out


def interpolate_text(text: str, env: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group("dollar"):
            return "$"
        name, op, arg = m.group("name"), m.group("op"), m.group("arg") or ""
        value = env.get(name)
        unset_or_empty = value is None or (value == "" and op is not None and op.startswith(":"))
        if op in (":-", "-") and unset_or_empty:
            return arg
        if op in (":?", "?") and unset_or_empty:
            raise AssertionError(f"Compose refuses to start: {name}: {arg}")
        return value or ""

    out = _VAR.sub(one, text)
    rest = _VAR.sub("", text).replace("$$", "")
    assert "$" not in rest, f"a $ form these rules do not cover: {text!r}"
    return out


def interpolate(doc: Any, env: Mapping[str, str]) -> Any:
    """Every string of a parsed compose.yaml, interpolated as Compose does."""
    if isinstance(doc, str):
        return interpolate_text(doc, env)
    if isinstance(doc, list):
        return [interpolate(x, env) for x in doc]
    if isinstance(doc, dict):
        return {k: interpolate(v, env) for k, v in doc.items()}
    return doc


def container_argv(service: Mapping[str, Any]) -> list[str]:
    """The argv the service's container starts with: its entrypoint, then its command (the image's
    own entrypoint, unknown here, is named as such)."""
    entrypoint = service.get("entrypoint", ["<image entrypoint>"])
    command = service.get("command", [])
    assert isinstance(entrypoint, list) and isinstance(command, list)
    return [*entrypoint, *command]


def healthcheck_argv(service: Mapping[str, Any]) -> list[str]:
    test = service.get("healthcheck", {}).get("test", [])
    assert isinstance(test, list)
    return test
