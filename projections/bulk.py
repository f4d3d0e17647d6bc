"""Building every view from nothing (`mem replay`): the fold on one thread, the history tables on another.

A rebuild folds the whole log into a new views file. Most of what it writes goes into three
append-only history tables that nothing reads until the fold ends: `page_versions` and `log_entries`
(a row per wiki event) and the wiki page versions of `search_history`.
`build` gives them to a `HistoryWriter`: the fold hands over each batch as JSON arrays (and the batch's
bodies as one blob), and the writer's thread writes them into the new file with a few statements
(`INSERT ... SELECT ... FROM json_each(?)`). SQLite parses, inserts and tokenises without the GIL, on
the other core. The fold itself writes every other table into a scratch file beside it (two
connections, two files: no lock shared); at the end those tables, small beside the history, are
copied into the new file, and the indexes that a rebuild leaves out are made once (the all-versions
search index among them: `search.index_history`).

Nobody reads the new file before the caller renames it into place, so both files are written
without a journal or syncing (journal_mode=OFF, synchronous=OFF): a crash leaves files that only the
next rebuild sees (and deletes), while the views in place are never touched. The caller fsyncs the
new file before the rename.
"""

import os
import queue
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

import msgspec

from eventstore.layers import MIND

from . import search
from .fold import catch_up
from .views import PAGE_VERSIONS_INDEX, Views

HISTORY_TABLES = ("page_versions", "log_entries")
"""The tables only the writer writes in a rebuild (and, of search_history, the wiki page versions)."""

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


def build(log, path: Path, *, contract=None, agent: str | None = None, upto: int | None = None,
          heads: Iterable[int] = (), progress=None) -> Views:
    """Every view folded from the log (up to `upto`) into a new views database at `path`: the one way to
    build them from nothing (`mem replay`, `--check`, a first pull). Whatever is at `path` is deleted first.
    While the log still grows, `heads` are the heads to fold up to one after another first (catch_up)."""
    path, fold_path = str(path), f"{path}-fold"
    remove_files(path)
    remove_files(fold_path)
    views = Views(path, fast=True)  # every table, empty: the writer fills the history
    writer = HistoryWriter(views.db, path)
    views.close()
    writer.start()
    try:
        fold = Views(fold_path, contract=contract, agent=agent, fast=True)
        try:
            search.defer_indexes(fold.db)
            catch_up(log, fold, upto=upto, batch=20000, progress=progress, writer=writer, heads=heads)
        finally:
            fold.close()
        writer.join()
        views = Views(path, contract=contract, agent=agent, fast=True)
        try:
            writer.merge(views.db, fold_path)
        except BaseException:
            views.close()
            raise
        return views
    except BaseException:
        writer.join(raise_error=False)
        remove_files(path)
        raise
    finally:
        remove_files(fold_path)


class HistoryWriter:
    """The history tables of a rebuild, written on a thread of its own (see the module's docstring)."""

    def __init__(self, db, path: str):
        """Takes the new file's page_versions index away until `merge`: it is built once, sorted, at the end."""
        self.path = path
        self.error: BaseException | None = None
        db.execute("DROP INDEX page_versions_by_slug")
        self.queue: queue.Queue = queue.Queue(maxsize=4)
        self.thread = threading.Thread(target=self._run, name="history-writer", daemon=True)

    def start(self) -> None:
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
                        encode(pages) if pages else None,
                        encode(closed) if closed else None))

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                self._write(db)
            finally:
                db.close()
        except BaseException as exc:  # kept for `join`; the fold must never wait on a full queue
            self.error = exc
            while self.queue.get() is not None:
                pass

    def _write(self, db) -> None:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("BEGIN")
        while (batch := self.queue.get()) is not None:
            versions, blob, entries, pages, closed = batch
            if versions is not None:
                db.execute(_VERSIONS, (versions, blob))
            if entries is not None:
                db.execute(_ENTRIES, (entries,))
            if pages is not None:
                db.execute(_PAGES, (pages,))
            if closed is not None:
                db.execute(_CLOSE, (closed,))
        db.execute("COMMIT")

    def join(self, raise_error: bool = True) -> None:
        """Waits for the thread to write everything handed over."""
        if self.thread.is_alive():
            self.queue.put(None)
            self.thread.join()
        if self.error is not None and raise_error:
            raise self.error

    def merge(self, db, fold_path: str) -> None:
        """Copies every table the fold wrote into the new file (`db`, holding no transaction), and makes the
        indexes left out. A wiki page version wins over another search_history row of its id, as in the
        fold, where it came first; search_docs' FTS triggers index its rows as they come in."""
        db.execute("ATTACH DATABASE ? AS fold", (fold_path,))
        try:
            db.execute("BEGIN IMMEDIATE")
            tables = [name for (name,) in db.execute(
                "SELECT name FROM fold.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                "AND name NOT IN (?, ?) ORDER BY name", HISTORY_TABLES)]
            for table in tables:
                if table == "search_history":
                    db.execute("INSERT OR IGNORE INTO main.search_history SELECT * FROM fold.search_history")
                else:
                    db.execute(f'DELETE FROM main."{table}"')
                    db.execute(f'INSERT INTO main."{table}" SELECT * FROM fold."{table}"')
            db.execute(PAGE_VERSIONS_INDEX)
            search.index_history(db)
            db.execute("COMMIT")
        finally:
            if db.in_transaction:
                db.execute("ROLLBACK")
            db.execute("DETACH DATABASE fold")


def remove_files(path) -> None:
    """A SQLite file and what SQLite may have left beside it."""
    for name in (str(path), f"{path}-wal", f"{path}-shm", f"{path}-journal"):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
