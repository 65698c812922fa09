"""Where the remote store's URL comes from: one resolver for serve, validate, top and bench.

A Redis URL may hold a password (``user:pw@`` or ``?password=``: redact.url_secrets says which parts
are credentials), and argv is world-readable (ps, /proc/PID/cmdline). So:
``--remote-file FILE`` (the URL alone on one line), then ``--remote URL`` (warns once when it holds
a credential), then the ``KVSTACK_REMOTE_URL`` variable (what ``kvstack export``'s systemd unit sets
through its EnvironmentFile). The URL is never put back on a command line: the engines and LMCache's
server get the password in their environment or a 0600 file (engines/lmcache.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated

from pydantic import Field

from kvstack.errors import InputError, KvstackError
from kvstack.flags import Inputs, flag
from kvstack.redact import has_url_secret
from kvstack.remoteurl import RemoteURL, parse_remote_url
from kvstack.secretfile import read_secret_file

REMOTE_URL_ENV = "KVSTACK_REMOTE_URL"
ARGV_WARNING = (
    "the password or token in --remote can be read by every local user (ps, /proc/PID/cmdline); "
    f"use --remote-file FILE or the {REMOTE_URL_ENV} variable instead"
)

_argv_warned = False  # the argv warning is printed once per process


def _warn_stderr(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")
    sys.stderr.flush()


def read_remote_file(path: Path, warn: Callable[[str], None] = _warn_stderr) -> str:
    """The URL in ``path``: a regular file, one line (one trailing newline stripped)."""
    hint = f"write the URL alone on one line: printf '%s\\n' \"$URL\" > {path}; chmod 600 {path}"
    secret = read_secret_file(path, "--remote-file", "URL", hint)
    text = secret.text
    url = text[:-1] if text.endswith("\n") else text
    url = url[:-1] if url.endswith("\r") else url
    if not url.strip() or any(ord(c) < 0x20 for c in url):
        raise InputError(f"--remote-file {path} must hold one URL on one line (not shown)", hint=hint)
    if has_url_secret(url) and secret.shared:
        warn(
            f"--remote-file {path} holds a password and is readable by group or others "
            f"(mode {secret.mode_text}): chmod 600 {path}"
        )
    return url


def _parses(url: str) -> bool:
    try:
        parse_remote_url(url)
    except KvstackError:
        return False
    return True


def _warn_argv_once(warn: Callable[[str], None]) -> None:
    global _argv_warned
    if not _argv_warned:
        _argv_warned = True
        warn(ARGV_WARNING)


def resolve_remote(
    remote: str | None,
    remote_file: Path | None,
    env: Mapping[str, str] | None = None,
    warn: Callable[[str], None] | None = _warn_stderr,
) -> str | None:
    """The remote store URL (credentials included) the user gave, or None; ``warn`` None: the
    caller says the argv warning itself (``RemoteInputs.parsed``)."""
    if remote is not None and remote_file is not None:
        raise InputError("--remote and --remote-file both give the remote store", hint="keep one of them")
    if remote_file is not None:
        return read_remote_file(remote_file, warn or _warn_stderr)
    if remote is not None:
        # A malformed URL is the caller's error to name (with its flag), not a warning's subject.
        if warn is not None and has_url_secret(remote) and _parses(remote):
            _warn_argv_once(warn)
        return remote
    value = (os.environ if env is None else env).get(REMOTE_URL_ENV, "").strip()
    return value or None


class RemoteInputs(Inputs):
    """--remote and --remote-file: the remote store as every command that reaches it takes it."""

    remote: Annotated[
        str | None,
        flag(
            "--remote",
            help="The remote KV store: a redis://, rediss://, redis-sentinel:// or lm:// URL. One with a "
            "password: use --remote-file or KVSTACK_REMOTE_URL instead (every local user reads argv).",
            show_default=False,
        ),
    ] = Field(default=None, repr=False)
    remote_file: Annotated[
        Path | None,
        flag(
            "--remote-file",
            help="A file holding the remote store's URL (password included) on one line; keep it 0600.",
            show_default=False,
        ),
    ] = None

    def url(self, *, check: bool = False, from_env: bool = True) -> str | None:
        """The URL (--remote-file, --remote, then KVSTACK_REMOTE_URL unless not ``from_env``), or
        None. ``check``: a malformed URL is refused here (exit 2, naming the accepted forms)."""
        url = resolve_remote(self.remote, self.remote_file, env=None if from_env else {})
        if check and url is not None:
            parse_remote_url(url)
        return url

    def parsed(self, *, from_env: bool = True) -> RemoteURL | None:
        """The URL as ``url`` finds it, parsed once (malformed: exit 2, naming the accepted forms):
        what serve, plan and export carry from here on."""
        text = resolve_remote(self.remote, self.remote_file, env=None if from_env else {}, warn=None)
        if text is None:
            return None
        parsed = parse_remote_url(text)
        if self.remote is not None and parsed.has_secret:  # on the command line: every user reads argv
            _warn_argv_once(_warn_stderr)
        return parsed
