"""Which Recorder holds a log: the one place that maps a location to a backend.

A location is a path (the SQLite log, the default) or a `postgresql://` URL. PostgreSQL is imported
only when a URL asks for it, so the CLI starts without loading psycopg.
"""

from pathlib import Path

from .errors import InvalidInput
from .recorder import Recorder

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(location: str | Path) -> bool:
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def check_location(location: str) -> str:
    """A log location as `mem init --log` accepts it: a postgresql:// URL (a path needs no option)."""
    if not is_postgres(location):
        raise InvalidInput(f"--log takes a postgresql:// URL, not {location!r} (the SQLite log is the default)")
    return location


def open_log(location: str | Path, *, synchronous: str = "FULL", trusted: bool = True) -> Recorder:
    """The log at `location`; `synchronous` is SQLite's durability setting (PostgreSQL has its own)."""
    if is_postgres(location):
        from .postgres import PostgresLog

        return PostgresLog(str(location), trusted=trusted)
    from .sqlite import SQLiteLog

    return SQLiteLog(location, synchronous=synchronous, trusted=trusted)


def place(url: str) -> str:
    """Where a PostgreSQL URL's database is, fit to print anywhere: host:port/name, no user, no password (nor
    the query, which may hold one)."""
    return url.partition("://")[2].rpartition("@")[2].partition("?")[0]


def shown(location: str | Path) -> str:
    """A location fit to print: a URL's password replaced by *** (any URL's: a mistyped scheme's too)."""
    text = str(location)
    if "://" not in text:
        return text
    scheme, _, rest = text.partition("://")
    credentials, at, host = rest.rpartition("@")
    if at and ":" in credentials:
        credentials = credentials.split(":", 1)[0] + ":***"
    return f"{scheme}://{credentials}{at}{host}"
