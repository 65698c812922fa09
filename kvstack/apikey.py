"""Where the API key of a server comes from: one resolver for ``serve``, ``validate`` and ``bench``.

Precedence: ``--api-key-file PATH``, then ``--api-key KEY`` (argv: every local user can read it
in ``ps`` or /proc/PID/cmdline, so it warns once), then ``KVSTACK_API_KEY``, then
``VLLM_API_KEY`` (vLLM's own variable, passed through). The key never goes back on a command
line: vLLM gets it in its environment, SGLang in a 0600 config file (engines/sglang.py).

A key file must be a regular file (a symlink to one is fine: Kubernetes mounts secrets that
way). One trailing newline is stripped. A file that group or others can read is a warning, not a
refusal: Kubernetes secret volumes default to mode 0644 and Docker secrets to 0444, the
deployments ``kvstack export`` writes, where the mount itself keeps other users out.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field

from kvstack.errors import InputError
from kvstack.flags import Inputs, flag
from kvstack.secretfile import read_secret_file

ENV_VARS = ("KVSTACK_API_KEY", "VLLM_API_KEY")
MIN_KEY_CHARS = 4  # shorter values cannot be masked in output (redact.redact_text)
ARGV_WARNING = (
    "--api-key on the command line can be read by every local user (ps, /proc/PID/cmdline); "
    "use --api-key-file FILE or the KVSTACK_API_KEY variable instead"
)

_argv_warned = False  # the argv warning is printed once per process


@dataclass(frozen=True)
class ApiKey:
    value: str | None = None
    source: str = "none"  # "--api-key-file PATH", "--api-key", "KVSTACK_API_KEY", "VLLM_API_KEY", "none"

    def __repr__(self) -> str:  # never the value
        return f"ApiKey(source={self.source!r}, set={self.value is not None})"


def _warn_stderr(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")
    sys.stderr.flush()


def _check(key: str, where: str, hint: str) -> str:
    """The key as sent in an Authorization header: one line, nothing an HTTP stack would strip."""
    if not key:
        raise InputError(f"{where} is empty", hint=hint)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise InputError(
            f"{where} holds more than one line or a control character (the key is not shown)", hint=hint
        )
    if not key.isascii():
        # HTTP headers are Latin-1 on the wire: vLLM's check and kvstack's guard compare UTF-8
        # bytes, so such a key could never match, and clients refuse to send it.
        raise InputError(
            f"{where} holds characters outside ASCII, which an HTTP Authorization header cannot "
            "carry (the key is not shown)",
            hint=hint,
        )
    if key != key.strip():
        raise InputError(
            f"{where} has leading or trailing spaces, which HTTP drops from the header (not shown)",
            hint=hint,
        )
    if len(key) < MIN_KEY_CHARS:
        raise InputError(
            f"{where} is {len(key)} characters; kvstack needs at least {MIN_KEY_CHARS}", hint=hint
        )
    return key


def read_key_file(path: Path, warn: Callable[[str], None] = _warn_stderr) -> str:
    """The key in ``path``: a regular file, one line (one trailing newline stripped)."""
    hint = f"write the key alone on one line: printf '%s\\n' \"$KEY\" > {path}; chmod 600 {path}"
    secret = read_secret_file(path, "--api-key-file", "key", hint)
    text = secret.text
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    key = _check(text, f"--api-key-file {path}", hint)
    if secret.shared:
        mode = secret.mode_text
        warn(f"--api-key-file {path} is readable by group or others (mode {mode}): chmod 600 {path}")
    return key


def resolve_api_key(
    api_key: str | None,
    api_key_file: Path | None,
    env: Mapping[str, str] | None = None,
    warn: Callable[[str], None] = _warn_stderr,
) -> ApiKey:
    """The key to require (serve) or send (validate, bench), and where it came from."""
    global _argv_warned
    environ = os.environ if env is None else env
    if api_key is not None and not _argv_warned:
        _argv_warned = True
        warn(ARGV_WARNING + ("; --api-key-file wins" if api_key_file is not None else ""))
    if api_key_file is not None:
        return ApiKey(read_key_file(api_key_file, warn), f"--api-key-file {api_key_file}")
    if api_key is not None:
        return ApiKey(_check(api_key, "--api-key", "give the key, or use --api-key-file FILE"), "--api-key")
    for var in ENV_VARS:
        value = environ.get(var)
        if value:
            return ApiKey(_check(value, f"the {var} variable", f"set {var} to the key, or unset it"), var)
    return ApiKey()


class ApiKeyInputs(Inputs):
    """--api-key and --api-key-file, as every command that talks to a server takes them."""

    api_key: Annotated[
        str | None,
        flag(
            "--api-key",
            help="The server's API key. On the command line every local user can read it (ps): "
            "prefer --api-key-file or KVSTACK_API_KEY (then VLLM_API_KEY).",
            show_default=False,
        ),
    ] = Field(default=None, repr=False)
    api_key_file: Annotated[
        Path | None,
        flag(
            "--api-key-file",
            help="Read the server's API key from this file (one line; keep it chmod 600). "
            "Wins over --api-key, KVSTACK_API_KEY and VLLM_API_KEY.",
            show_default=False,
        ),
    ] = None

    def value(self) -> str | None:
        """The key (file, flag, then the environment), or None for a server without one."""
        return resolve_api_key(self.api_key, self.api_key_file).value or None
