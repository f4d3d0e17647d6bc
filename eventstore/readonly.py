"""SQLite files on storage this process cannot write (a read-only mount, a directory without write permission, a
full disk).

SQLite reads a WAL database through its -shm file beside it, which it makes (or writes) on opening, so
on such storage a plain open fails with only SQLITE_CANTOPEN, even to read, and on a full disk with
SQLITE_IOERR_SHMSIZE (the -shm cannot grow). There the file is opened read-only instead: `mode=ro` (which reads
through a -shm a writer left there), else `immutable=1` (no -shm needed: the file is taken as it is, as nothing can
change it on a read-only mount, nor append to it on a full disk). Reads then work; every write is refused by SQLite
as `attempt to write a readonly database`, and a change by `Memory.lock` first, saying why (`ReadOnlyConnection.why`).
"""

import os
import sqlite3
from pathlib import Path


class ReadOnlyConnection(sqlite3.Connection):
    """A connection opened read-only because the storage is not writable (`read_only(db)`); `why` says so."""

    why = "the storage is read-only"


class FullDiskConnection(ReadOnlyConnection):
    """A connection opened read-only because the disk had no room for the database's -shm file."""

    why = "the disk is full"


FULL_DISK = ("SQLITE_IOERR_SHMSIZE", "SQLITE_FULL")
"""What SQLite says when a database on a full disk cannot be opened to read: no room for its -shm file."""


def unwritable(path: Path) -> bool:
    """Whether `path` is an existing file this process may not write (read-only, immutable: `chattr +i`), or in a
    directory it may not write into."""
    try:
        return path.is_file() and (bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
                                   or not os.access(path.parent, os.W_OK) or not os.access(path, os.W_OK))
    except OSError:
        return False


def connect(path: str | Path, **options) -> sqlite3.Connection:
    """`sqlite3.connect(path, **options)`, or a ReadOnlyConnection when the file is on unwritable storage, a
    FullDiskConnection when it is on a full disk (found by reading its schema: what makes its -shm)."""
    path = Path(path)
    if unwritable(path):
        return sqlite3.connect(_read_only_uri(path), uri=True, factory=ReadOnlyConnection, **options)
    db = sqlite3.connect(str(path), **options)
    try:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError as exc:
        db.close()
        if getattr(exc, "sqlite_errorname", None) not in FULL_DISK or not path.is_file():
            raise
        return sqlite3.connect(_read_only_uri(path), uri=True, factory=FullDiskConnection, **options)
    return db


def attachable(path: str | Path) -> str:
    """What to ATTACH to read `path` (on a connection opened with uri=True): the file, or on unwritable storage
    the read-only URI `connect` opens it by."""
    path = Path(path)
    return _read_only_uri(path) if unwritable(path) else str(path)


def _read_only_uri(path: Path) -> str:
    """`mode=ro` (which reads through a -shm a writer left there), else `immutable=1`."""
    uri = path.absolute().as_uri()
    probe = sqlite3.connect(f"{uri}?mode=ro", uri=True)
    try:
        probe.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return f"{uri}?mode=ro"
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorname", None) not in ("SQLITE_CANTOPEN", *FULL_DISK) or _wal_written(path):
            raise
    finally:
        probe.close()
    return f"{uri}?mode=ro&immutable=1"


def _wal_written(path: Path) -> bool:
    """Whether `path`'s WAL holds frames, which `immutable=1` would not read (a closed database has none)."""
    try:
        return Path(f"{path}-wal").stat().st_size > 0
    except OSError:
        return False


def read_only(db: sqlite3.Connection) -> bool:
    return isinstance(db, ReadOnlyConnection)


def full_disk(db: sqlite3.Connection) -> bool:
    return isinstance(db, FullDiskConnection)
