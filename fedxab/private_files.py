"""Files that hold secrets or private data: created owner-only, replaced atomically.

Keys, checkpoints (the reports a server accepted), privacy ledgers and results (what each
client observed of its private objective) are readable by their owner only: mode 0o600 from
the moment they exist, whatever the umask (a file created 0o644 and narrowed afterwards can be
opened in between). A replaced file is written beside its target and moved over it with
:func:`os.replace` after an fsync, so a reader or a crash never sees half of it.

The directories that hold them are the owner's too (:func:`private_dir`): those fedxab creates
are 0o700 whatever the umask, and an existing one that every user may write into (world
writable without the sticky bit) is refused, since whoever can write a directory can swap the
files in it (a lifetime ledger replaced by an empty one starts every budget afresh). A group
writable one is taken: under the umask 002 of user private groups every directory is, and
its group is its owner's alone.
A read-only path, a full disk or a missing permission is one line naming the path
(:class:`~fedxab.errors.StorageError`), and nothing half-written is left behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from fedxab.errors import StorageError

__all__ = [
    "OWNER_ONLY",
    "PRIVATE_DIR",
    "create_owner_only",
    "private_dir",
    "storage_error",
    "write_atomically",
]

OWNER_ONLY = 0o600
"""The mode of every private file fedxab writes."""

PRIVATE_DIR = 0o700
"""The mode of every directory fedxab creates for private files."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def storage_error(path: str | Path, exc: OSError, doing: str = "write") -> StorageError:
    """A one-line :class:`StorageError` for ``exc`` raised while fedxab tried to ``doing``
    ``path``."""
    why = exc.strerror or str(exc)
    return StorageError(f"{path}: cannot {doing} it ({why}); choose a writable path with room")


def private_dir(path: str | Path, mode: int = PRIVATE_DIR) -> Path:
    """``path`` as a directory for private files: each missing directory on the way is created
    with ``mode`` (0o700 by default; a mode never gives others write access) whatever the umask,
    and the directory itself, if it existed, must not be world writable unless its sticky bit
    is set (as /tmp's is). Raises :class:`StorageError` naming the path."""
    target = Path(path)
    mode &= ~_OTHERS_WRITE
    missing = []
    for p in (target, *target.parents):
        if os.path.lexists(p):
            break
        missing.append(p)
    for p in reversed(missing):
        try:
            os.mkdir(p, mode)
            os.chmod(p, mode)  # the umask took bits away; nothing else can have added any
        except FileExistsError:
            pass  # another process made it meanwhile: checked below if it is the target
        except OSError as exc:
            raise storage_error(p, exc, "create the directory") from None
    try:
        info = os.stat(target)
    except OSError as exc:
        raise storage_error(target, exc, "use the directory") from None
    if not stat.S_ISDIR(info.st_mode):
        raise StorageError(f"{target}: not a directory; give a directory for fedxab's files")
    if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
        raise StorageError(
            f"{target}: directory writable by every user (mode {stat.S_IMODE(info.st_mode):o}); "
            f"anyone could swap fedxab's files in it. Run `chmod o-w {target}` or choose "
            "another directory"
        )
    return target


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
    directory, fsynced, then :func:`os.replace`). A path that cannot be written (read-only,
    disk full) raises :class:`StorageError` naming it, with ``path`` as it was and no
    temporary file left."""
    target = Path(path)
    try:
        _write_atomically(target, data)
    except OSError as exc:
        raise storage_error(target, exc) from None


def _write_atomically(target: Path, data: bytes) -> None:
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
