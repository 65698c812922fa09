"""Put an export Bundle on disk: all files or none, atomically, 0600 for secrets."""

from __future__ import annotations

from pathlib import Path

from kvstack.errors import PathError
from kvstack.export.bundle import Bundle
from kvstack.fsutil import atomic_write, make_out_dir


def write_bundle(bundle: Bundle, out_dir: Path, force: bool = False) -> list[Path]:
    """Write every file of ``bundle`` into ``out_dir``; refuse to replace files unless ``force``.

    Every target is checked before the first write, so a refusal leaves nothing half-written.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise PathError(f"--out {out_dir} exists and is not a directory", hint="name a directory")
    targets = [out_dir / f.name for f in bundle.files]
    for f in bundle.files:
        if "/" in f.name or f.name in ("", ".", ".."):
            raise PathError(f"export file name {f.name!r} is not a plain file name")
    existing = [p for p in targets if p.exists() or p.is_symlink()]
    if existing and not force:
        names = ", ".join(p.name for p in existing)
        raise PathError(
            f"{out_dir} already holds {names}",
            hint="add --force to replace them, or choose another --out directory",
        )
    not_files = [p for p in existing if p.is_dir()]
    if not_files:
        raise PathError(f"{not_files[0]} is a directory", hint="choose another --out directory")
    make_out_dir(out_dir)
    for f, path in zip(bundle.files, targets, strict=True):
        mode = 0o600 if f.secret else f.mode
        try:
            atomic_write(path, f.content, mode=mode)
        except OSError as exc:
            raise PathError(
                f"cannot write {path}: {exc.strerror}", hint="choose a writable --out directory"
            ) from exc
    return targets
