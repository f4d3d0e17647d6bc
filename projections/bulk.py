"""A rebuild's history tables, written on a second thread while the fold runs (`mem replay`).

A rebuild folds the whole log into a new views file. Most of its writing goes into three append-only
history tables that nothing reads until the fold ends: `page_versions` and `log_entries` (a row per
wiki event) and the wiki page versions of `search_history` with their full-text index. A
`HistoryWriter` takes them off the fold's thread: the fold hands over each batch as JSON arrays (and
the batch's bodies as one blob), and the writer's thread writes them with a few statements
(`INSERT ... SELECT ... FROM json_each(?)`) on its own connection to a scratch file of its own.
SQLite parses, inserts and tokenises without the GIL, on the other core, and the two connections share
no lock. At the end the tables are copied into the views file (SQLite copies a whole table record by
record when it is empty on the other side) and so are the full-text index's shadow tables, as they
are: the same FTS5 declaration on both sides, so the same bytes are the same index.

The scratch file is written like the rebuild itself, without journal or syncing: it is deleted by
`finish`, `abandon` or the next rebuild.
"""

import os
import queue
import sqlite3
import threading
from contextlib import contextmanager

import msgspec

from eventstore.layers import MIND

from . import search

TABLES = ("page_versions", "log_entries", "search_history")
"""What the writer writes (of search_history, the wiki page versions only)."""
_FTS_SHADOW = ("data", "idx", "docsize", "config")
"""The tables in which FTS5 keeps an external-content index (`search_history_fts_data`, ...)."""

_VERSIONS = ("INSERT INTO page_versions SELECT value ->> 0, value ->> 1, substr(?2, value ->> 2, value ->> 3), "
             "value ->> 4, value ->> 5, value ->> 6, value ->> 7, value ->> 8, "
             "CASE WHEN value ->> 9 IS NOT NULL THEN substr(?2, value ->> 2 + value ->> 3, value ->> 9) END "
             "FROM json_each(?1)")
"""page_versions rows given as JSON [slug, seq, id offset, id length, ts, deleted, parents, title, hook, doc length
or null] and one blob holding each row's id then its doc."""
_ENTRIES = "INSERT INTO log_entries SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?)"
_PAGES = (f"INSERT INTO search_history SELECT value ->> 0, 'page', '{MIND}', value ->> 1, value ->> 2, "
          "value ->> 3, value ->> 4, value ->> 5, value ->> 6, NULL, NULL, NULL, value ->> 7, value ->> 0 "
          "FROM json_each(?)")
"""search.PAGE_HISTORY_INSERT for a batch of `search.page_history_row`s given as one JSON array."""
_CLOSE = ("UPDATE search_history SET until = j.value ->> 1 FROM json_each(?) AS j "
          "WHERE search_history.id = j.value ->> 0")


@contextmanager
def history_in_bulk(db, path: str):
    """For a rebuild into a new file: yields the `HistoryWriter` that `catch_up` hands the history tables
    to. No full-text index follows the fold by trigger: search_docs' (the current versions: few) is
    dropped and built once after the fold, search_history's is the writer's."""
    search.disable_fts(db, "search_docs")
    triggers = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'search_history'"
                          ).fetchall()
    for name, _sql in triggers:
        db.execute(f'DROP TRIGGER "{name}"')
    writer = HistoryWriter(db, f"{path}-history")
    try:
        yield writer
    except BaseException:
        writer.abandon()
        raise
    writer.finish(db)
    for _name, sql in triggers:
        db.execute(sql)
    search.enable_fts(db, ["search_docs"])


class HistoryWriter:
    """The history tables of a rebuild, written on a thread of its own (see the module's docstring)."""

    def __init__(self, db, path: str):
        self.path = path
        self.error: BaseException | None = None
        remove_files(path)
        self.schema = [sql for (sql,) in db.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name IN (?, ?, ?, 'search_history_fts') AND sql IS NOT NULL "
            "AND name NOT LIKE 'search_history_fts_%' ORDER BY type DESC, name", TABLES)]
        self.queue: queue.Queue = queue.Queue(maxsize=4)
        self.thread = threading.Thread(target=self._run, name="history-writer", daemon=True)
        self.thread.start()

    def add(self, versions: list[tuple], entries: list[tuple], pages: list[list], closed: list[tuple[int, int]]) -> None:
        """A batch: its page_versions and log_entries rows, its wiki pages' `search.page_history_row`s (ids
        rising, past every earlier batch's) and the (id, until) of the earlier versions they closed."""
        if not (versions or entries or pages or closed):
            return
        rows, parts, offset = [], [], 1
        for slug, seq, version_id, ts, deleted, parents, title, hook, doc in versions:
            parts.append(version_id)
            rows.append((slug, seq, offset, len(version_id), ts, deleted, parents, title, hook,
                         None if doc is None else len(doc)))
            offset += len(version_id)
            if doc is not None:
                parts.append(doc)
                offset += len(doc)
        encode = msgspec.json.encode
        self.queue.put((encode(rows) if rows else None, b"".join(parts), encode(entries) if entries else None,
                        encode(pages) if pages else None, pages[0][0] if pages else 0, pages[-1][0] if pages else 0,
                        encode(closed) if closed else None))

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                self._write(db)
            finally:
                db.close()
        except BaseException as exc:  # kept for `finish`; the fold must never wait on a full queue
            self.error = exc
            while self.queue.get() is not None:
                pass

    def _write(self, db) -> None:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        for sql in self.schema:
            db.execute(sql)
        db.execute("BEGIN")
        while (batch := self.queue.get()) is not None:
            versions, blob, entries, pages, first, last, closed = batch
            if versions is not None:
                db.execute(_VERSIONS, (versions, blob))
            if entries is not None:
                db.execute(_ENTRIES, (entries,))
            if pages is not None:
                db.execute(_PAGES, (pages,))
                db.execute("INSERT INTO search_history_fts (rowid, title, body) SELECT id, title, body "
                           "FROM search_history WHERE id BETWEEN ? AND ?", (first, last))
            if closed is not None:
                db.execute(_CLOSE, (closed,))
        db.execute("COMMIT")

    def _stop(self) -> None:
        self.queue.put(None)
        self.thread.join()

    def abandon(self) -> None:
        self._stop()
        remove_files(self.path)

    def finish(self, db) -> None:
        """Copies the tables and the index into the views (the caller holds no transaction), then indexes
        the other search_history rows there. A wiki page version wins over another row of its id, as in
        the fold, where it came first."""
        self._stop()
        if self.error is not None:
            remove_files(self.path)
            raise self.error
        db.execute("ATTACH DATABASE ? AS built", (self.path,))
        try:
            db.execute("BEGIN IMMEDIATE")
            others = db.execute("SELECT 1 FROM main.search_history LIMIT 1").fetchone() is not None
            for table in TABLES:
                if table == "search_history" and others:
                    db.execute("DELETE FROM main.search_history WHERE id IN (SELECT id FROM built.search_history)")
                db.execute(f"INSERT INTO main.{table} SELECT * FROM built.{table}")
            for suffix in _FTS_SHADOW:
                db.execute(f"DELETE FROM main.search_history_fts_{suffix}")
                db.execute(f"INSERT INTO main.search_history_fts_{suffix} SELECT * FROM built.search_history_fts_{suffix}")
            if others:
                db.execute("INSERT INTO search_history_fts (rowid, title, body) "
                           "SELECT id, title, body FROM search_history WHERE kind != 'page' ORDER BY id")
            db.execute("COMMIT")
        finally:
            if db.in_transaction:
                db.execute("ROLLBACK")
            db.execute("DETACH DATABASE built")
            remove_files(self.path)


def remove_files(path) -> None:
    """A SQLite file and what SQLite may have left beside it."""
    for name in (str(path), f"{path}-wal", f"{path}-shm", f"{path}-journal"):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
