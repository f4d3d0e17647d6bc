import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from projections.memory import Memory

# Every test runs `mem` in a subprocess, thousands in all: with PYTHONDONTWRITEBYTECODE set (as on the CI machine)
# each one compiled mindlog's modules from source again, a tenth of a second per command. The bytecode goes to
# __pycache__ (ignored by git), written once.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

PAGE = b"---\ntype: procedure\ndescription: staging first\n---\n# Deploy procedure\n\nStaging first.\n"


def mem_command() -> list[str]:
    exe = shutil.which("mem")
    return [exe] if exe else [sys.executable, "-c", "from cli import main; main()"]


def run_mem(*args, cwd=None, input=None, check=False, env=None):
    """Runs the real `mem` command in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("MEM_WORKSPACE", None)
    result = subprocess.run([*mem_command(), *map(str, args)], cwd=cwd, input=input, capture_output=True,
                            env=full_env, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"mem {' '.join(map(str, args))} failed ({result.returncode}):\n"
                             f"{result.stdout.decode()}\n{result.stderr.decode()}")
    return result


def log_rows(root: Path) -> list[tuple]:
    """Every row of the event log, for checking that a refusal left it exactly as it was."""
    import sqlite3

    db = sqlite3.connect(root / ".mem" / "log.db")
    try:
        return db.execute("SELECT * FROM events ORDER BY seq").fetchall()
    finally:
        db.close()


def damage_table(db, table: str) -> None:
    """Overwrites the first page of one table's b-tree: the file still opens (its header and schema are
    intact), and only a query that reaches the table finds the damage."""
    import sqlite3

    connection = sqlite3.connect(db)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = connection.execute("PRAGMA page_size").fetchone()[0]
        root = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    finally:
        connection.close()
    with open(db, "r+b") as file:
        file.seek((root - 1) * size)
        file.write(b"\xff" * size)


@pytest.fixture
def workspace(tmp_path) -> Path:
    root = tmp_path / "ws"
    Memory.init(root, "alice").close()
    return root


@pytest.fixture
def memory(workspace):
    with Memory.open(workspace) as mem:
        yield mem


# --- PostgreSQL, started by the tests (pytest-postgresql) -----------------------------------------

from pytest_postgresql import factories  # noqa: E402

import pg  # noqa: E402

postgresql_proc = factories.postgresql_proc(executable=pg.pg_ctl(), port=None)
postgresql = factories.postgresql("postgresql_proc")


@pytest.fixture
def own_postgres(tmp_path):
    """A PostgreSQL server of this test's own, to stop and start under what uses it (the session's server is shared
    by the other tests)."""
    import tempfile

    from pytest_postgresql.executors import PostgreSQLExecutor

    from sync.server import free_port

    folder = tmp_path / "pg"
    folder.mkdir()
    server = PostgreSQLExecutor(executable=pg.pg_ctl(), host="127.0.0.1", port=free_port(),
                                datadir=str(folder / "data"), unixsocketdir=tempfile.gettempdir(),
                                logfile=str(folder / "server.log"), startparams="-w", dbname="postgres")
    try:
        pg.started(server)
        yield server
    finally:
        if server.running():  # stopped by a test that failed before starting it again
            server.stop()
        server.clean_directory()


@pytest.fixture
def pg_url(postgresql) -> str:
    """A fresh, empty database on the test server, as a URL."""
    info = postgresql.info
    password = f":{info.password}" if info.password else ""
    return f"postgresql://{info.user}{password}@{info.host}:{info.port}/{info.dbname}"
