"""Reading a file that holds a secret (an API key, a remote store's URL with its password): one
way to open it, refuse what cannot be it, and read it, for ``--api-key-file`` and ``--remote-file``."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from kvstack.errors import PathError

MAX_BYTES = 64 * 1024  # a secret is a line; anything larger is the wrong file


@dataclass(frozen=True)
class SecretFile:
    text: str = ""  # as read: the caller strips its line ending
    mode: int = 0  # st_mode of the file read

    @property
    def shared(self) -> bool:
        """Group or others may read it (a warning, not a refusal: secret mounts default to 0644)."""
        return bool(self.mode & (stat.S_IRGRP | stat.S_IROTH))

    @property
    def mode_text(self) -> str:
        return f"{stat.S_IMODE(self.mode):04o}"


def read_secret_file(path: Path, flag: str, what: str, hint: str) -> SecretFile:
    """The UTF-8 text of ``path``, a regular file (a symlink to one is fine) of at most MAX_BYTES;
    ``flag`` and ``what`` ("key", "URL") name it in the errors, ``hint`` says how to write it."""
    try:
        # O_NONBLOCK: a FIFO given by mistake must not hang the open; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise PathError(f"{flag} {path} does not exist", hint=hint) from exc
    except OSError as exc:
        raise PathError(f"{flag} {path} cannot be read: {exc.strerror}", hint=hint) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory, not a regular file" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise PathError(f"{flag} {path} is {kind}", hint=f"give the file that holds the {what}")
        if st.st_size > MAX_BYTES:
            raise PathError(f"{flag} {path} is {st.st_size} bytes: too large to hold a {what}", hint=hint)
        data = os.read(fd, MAX_BYTES + 1)
    except OSError as exc:
        raise PathError(f"{flag} {path} cannot be read: {exc.strerror}", hint=hint) from exc
    finally:
        os.close(fd)
    try:
        return SecretFile(data.decode("utf-8"), st.st_mode)
    except UnicodeDecodeError as exc:
        raise PathError(f"{flag} {path} is not UTF-8 text", hint=hint) from exc
