"""Files that hold secrets or private data: created owner-only, replaced atomically.

Keys, checkpoints (the reports a server accepted), privacy ledgers and results (what each
client observed of its private objective) are readable by their owner only: mode 0o600 from
the moment they exist, whatever the umask (a file created 0o644 and narrowed afterwards can be
opened in between). A replaced file is written beside its target and moved over it with
:func:`os.replace` after an fsync, so a reader or a crash never sees half of it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["OWNER_ONLY", "create_owner_only", "write_atomically"]

OWNER_ONLY = 0o600
"""The mode of every private file fedxab writes."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _open_owner_only(path: Path, flags: int) -> int:
    fd = os.open(path, flags | _NOFOLLOW, OWNER_ONLY)
    if hasattr(os, "fchmod"):
        os.fchmod(fd, OWNER_ONLY)  # whatever the umask took away or a reused file had
    return fd


def create_owner_only(path: str | Path) -> None:
    """Create ``path`` empty and owner-only unless it exists (an existing file keeps its mode):
    e.g. before SQLite opens a new database, whose journal files then take its mode."""
    try:
        fd = _open_owner_only(Path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return
    os.close(fd)


def write_atomically(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, owner-only, atomically (a temporary file in the same
    directory, fsynced, then :func:`os.replace`)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = _open_owner_only(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
