"""Errors the log and the write side raise. Every refusal is a MemError with a stable code."""


class MemError(Exception):
    """A refusal: `code` is stable (used as the problem type over HTTP), the message says why, and
    `field` (when known) names the part of the input at fault, like `body.slug`.

    Where the message names a way forward in a person's words (a command, a flag), `for_tools` is the
    same message in an MCP client's (its tools and their parameters); `told("tools")` picks it, so no
    edge rewords another's message."""

    code = "mem-error"
    status = 400
    field = ""
    for_tools: str | None = None

    def __init__(self, message: str, code: str | None = None, field: str | None = None,
                 for_tools: str | None = None):
        super().__init__(message)
        if code:
            self.code = code
        if field:
            self.field = field
        if for_tools is not None:
            self.for_tools = for_tools

    def told(self, surface: str) -> str:
        """The message for `surface`: "cli" (a person in a shell, and every other edge) or "tools" (MCP)."""
        return self.for_tools if surface == "tools" and self.for_tools is not None else str(self)


def for_each(reason: str, cli: str, tools: str, **options) -> dict:
    """A refusal's message and `for_tools`, where they differ only by the way forward each names at the end."""
    return {"message": reason + cli, "for_tools": reason + tools, **options}


class InvalidInput(MemError):
    code = "invalid-input"


class UnsafePath(MemError):
    code = "unsafe-path"


class TooLarge(MemError):
    code = "too-large"
    status = 413


class DigestMismatch(MemError):
    code = "digest-mismatch"
    status = 409


class IdConflict(MemError):
    """An event id already in the log with a different digest."""

    code = "id-conflict"
    status = 409


class UnknownKind(MemError):
    code = "unknown-kind"


class NotFound(MemError):
    code = "not-found"
    status = 404


class HandEdited(MemError):
    """A materialised file differs from what mindlog last wrote there; `paths` names such files (each caller
    says what can be done about them in its own words: a command, a tool)."""

    code = "hand-edited"
    status = 409

    def __init__(self, message: str, paths=(), for_tools: str | None = None):
        super().__init__(message, for_tools=for_tools)
        self.paths = list(paths)


class Stale(MemError):
    """A write based on a version of a page that is no longer its current one (optimistic concurrency): nothing
    was written, so the writer can read the current version and redo its change."""

    code = "stale-version"
    status = 409


class NoWorkspace(MemError):
    code = "no-workspace"


class Held(MemError):
    """A change to a page under `governance: hold`, before `mem page release` lifted it. `refused` says what
    was refused; given the page's `slug` (and `layer`, for a page of a shared layer) the message adds how
    to release it, in each surface's words."""

    code = "held"
    status = 409

    def __init__(self, refused: str, slug: str | None = None, layer: str | None = None, **options):
        if slug is None:
            return super().__init__(refused, **options)
        on_layer = f" --layer {layer}" if layer else ""
        super().__init__(**for_each(
            f"{refused} Release it first: ", f"`mem page release {slug}{on_layer} --note \"why\"`",
            f"call page_release with slug {slug!r}" + (f", layer {layer!r}" if layer else "") + " and a note saying why",
            **options))


class StorageFailure(MemError):
    """The storage underneath failed (disk full, a database locked or read-only): nothing the input did."""

    code = "storage-failure"
    status = 503


class StorageUnavailable(StorageFailure):
    """The database underneath does not answer (stopped, restarting, unreachable): retry later."""

    code = "storage-unavailable"


class Damaged(StorageFailure):
    """A database file that is not one, or is corrupt: named, with what to do about it."""

    code = "damaged"


def is_damaged(exc: BaseException) -> bool:
    """Whether a SQLite error says the file itself is bad (not a database, or corrupt)."""
    return str(getattr(exc, "sqlite_errorname", "")).startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT"))


def storage_exceptions() -> tuple[type[BaseException], ...]:
    """The exception classes of the storage underneath: SQLite, the file system, and PostgreSQL once loaded."""
    import sqlite3
    import sys

    psycopg = sys.modules.get("psycopg")
    return (sqlite3.Error, OSError) + ((psycopg.Error,) if psycopg else ())


TRY_LATER = "; try again once its database does"
"""What a refusal of a log whose database does not answer ends with: a long-running process says its own instead."""


def unavailable(exc: BaseException) -> bool:
    """Whether a failure is a database that does not answer (stopped, restarting): what a long-running process (a
    follower, a watcher) waits out rather than ends on."""
    import sys

    psycopg = sys.modules.get("psycopg")
    return isinstance(exc, StorageUnavailable) or (psycopg is not None and isinstance(exc, psycopg.OperationalError))


def storage_failure(exc: BaseException, where: str = "") -> StorageFailure:
    """One line for a storage failure, the common causes named first; `where` (what was being done, a
    file named) leads the line."""
    import errno

    detail = " ".join(str(exc).split()) or type(exc).__name__
    lead = f"{where}: " if where else ""
    name = getattr(exc, "sqlite_errorname", None)
    text = detail.lower()
    number = getattr(exc, "errno", None)
    # SQLite cannot grow its shared-memory file only when the disk has no room left for it.
    if (number == errno.ENOSPC or name in ("SQLITE_FULL", "SQLITE_IOERR_SHMSIZE") or "disk is full" in text
            or "no space left" in text or "could not extend" in text):
        cause = "the disk is full"
    elif number == errno.EROFS or "readonly" in text or "read-only" in text:
        cause = "the storage is read-only"
    elif number in (errno.EACCES, errno.EPERM):
        cause = "permission denied"
    elif number == errno.EBUSY:  # a rename onto a mount point (a file bind-mounted alone): no database is locked
        cause = "the file is in use or a mount point"
    elif "locked" in text or "busy" in text:
        cause = "the database is locked by another process"
    elif text.startswith("could not decode to utf-8 column"):  # its detail quotes the column's bytes: not shown
        column = detail.split("'")[1] if detail.count("'") >= 2 else "a"
        return StorageFailure(f"{lead}a stored row's {column} column is not the UTF-8 text mindlog wrote: the file "
                              "was changed outside mindlog (`mem verify` names the first bad seq)")
    else:
        return StorageFailure(lead + (f"{detail} ({name})" if name else detail))
    return StorageFailure(f"{lead}{cause} ({name or detail})")
