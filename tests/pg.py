"""A pg_ctl that pytest-postgresql can run as root: PostgreSQL refuses root, so as root the tests
run it as the `postgres` user through a small wrapper (CI runs as root)."""

import glob
import os
import shutil
import stat
import tempfile
from pathlib import Path

WRAPPER = """#!/bin/sh
# Gives the postgres user the directories pytest made, then runs pg_ctl as that user.
prev=""
for arg in "$@"; do
  case "$prev" in
    -D|--pgdata|-l) dir=$(dirname "$arg"); chown -R postgres "$dir"
       while [ "$dir" != "/" ]; do chmod o+x "$dir"; dir=$(dirname "$dir"); done ;;
  esac
  case "$arg" in --pgdata=*) d="${arg#--pgdata=}"; chown -R postgres "$(dirname "$d")" ;; esac
  prev="$arg"
done
exec runuser -u postgres -- "%s" "$@"
"""


def real_pg_ctl() -> str | None:
    found = shutil.which("pg_ctl")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return candidates[-1] if candidates else None


def pg_ctl() -> str | None:
    real = real_pg_ctl()
    if real is None or os.geteuid() != 0:
        return real
    folder = Path(tempfile.gettempdir()) / "mindlog-pg-wrapper"
    folder.mkdir(exist_ok=True)
    wrapper = folder / "pg_ctl"
    wrapper.write_text(WRAPPER % os.path.realpath(real))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(wrapper)


def url(proc) -> str:
    password = f":{proc.password}" if proc.password else ""
    return f"postgresql://{proc.user}{password}@{proc.host}:{proc.port}/{proc.dbname}"


def table_bytes(url: str, table: str) -> bytes:
    """What the files of TABLE (its heap and its TOAST table) hold on disk, after a CHECKPOINT has written every
    changed page there: what anyone with the data directory or a base backup reads."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        folder = conn.execute("SHOW data_directory").fetchone()[0]
        files = conn.execute("SELECT pg_relation_filepath(oid), pg_relation_filepath(NULLIF(reltoastrelid, 0)) "
                             "FROM pg_class WHERE oid = %s::regclass", (table,)).fetchone()
    return b"".join(Path(folder, file).read_bytes() for file in files if file)


def url_of(server) -> str:
    """The URL of a server `own_postgres` (conftest) started."""
    return f"postgresql://{server.user}@127.0.0.1:{server.port}/postgres"


def started(server) -> None:
    """Starts SERVER and returns once it takes connections (pg_ctl -w returns while it may still be "starting up")."""
    import time

    import psycopg

    server.start()
    for _ in range(300):
        try:
            psycopg.connect(url_of(server)).close()
            return
        except psycopg.OperationalError:
            time.sleep(0.1)
    raise AssertionError(f"PostgreSQL on port {server.port} did not take connections within 30 s")
