"""Building every view from nothing (`mem replay`): the fold in this process, the history tables in another.

A rebuild folds the whole log into a new views file. Most of what it writes goes into tables that
nothing reads until the fold ends: `page_versions` (a row per wiki event), the shared layers' `entries` and the
search index (`search_docs`, `search_history`, their full-text indexes). `build` gives them to a `HistoryWriter`:
the fold hands each batch over in msgpack through a pipe to a child process (from the first batch on when more
are to come; a build of one batch writes it in process), which
writes them into the new file (binding rows, inserting, tokenising) on the other core, with no GIL shared
with the fold. A SQLite log is attached there too: what a page version's row holds as the log stores it (the
event's id, time and body) is read from it by seq rather than handed over (`FROM_LOG`). The fold itself writes
every other table into a scratch file beside it (two connections, two files: no lock shared), `log_entries` too
(the writer's child is the slower of the two: the fold's process binds those rows while it would wait for the
child, and SQLite copies them in a fifth of the time); at the end those tables, small beside the history, are
copied into the new file, and the indexes that a rebuild leaves out are made once
(page_versions'; the all-versions search index's entries of the versions still current: `search.bulk_end`).

While a catch-up still appends to the log, the fold runs in a process of its own too (`build_apart`),
reading the log through its own connection up to each head it is handed: the appends' checks, in
Python, keep their process's GIL to themselves.

Nobody reads the new file before the caller renames it into place, so both files are written
without a journal or syncing (journal_mode=OFF, synchronous=OFF): a crash leaves files that only the
next rebuild sees (and deletes), while the views in place are never touched. The caller fsyncs the
new file before the rename.
"""

import contextlib
import fcntl
import gc
import os
import queue
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import msgspec

from eventstore.envelope import CODEC_RAW
from eventstore.errors import StorageFailure
from eventstore.readonly import attachable
from eventstore.sqlite import SQLiteLog

from . import render, search, shared
from .fold import catch_up, unpacked_body
from .rows import insert_many
from .views import PAGE_VERSIONS_INDEX, Views


class Laps:
    """Where a rebuild's time goes, when the environment's MEM_REPLAY_TIMES names a file (bench/bench_replay.py
    --laps): each process adds up its laps' seconds by name (`lap`: the time since the last lap) and appends them
    there as it ends (`dump`)."""

    def __init__(self, who: str):
        self.file, self.who = os.environ.get("MEM_REPLAY_TIMES"), who
        self.begin()

    def begin(self) -> None:
        self.sums: dict[str, float] = {}
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        if self.file:
            now = time.perf_counter()
            self.sums[name] = self.sums.get(name, 0.0) + now - self.last
            self.last = now

    def dump(self) -> None:
        if self.file:
            with open(self.file, "a") as f:
                f.write(f"{self.who} ({time.process_time():.2f} CPU s): "
                        + ", ".join(f"{name} {seconds:.3f}" for name, seconds in self.sums.items()) + "\n")


LAPS = Laps("builder")
"""This process's laps (`build`'s, and a replay's after it)."""

BULK_FOLD_THRESHOLD = 20_000
"""Views at least this many events behind their log, and at least as many as they hold already, are built
from nothing (`worth_building`), not folded into batch by batch: a first pull, or the next command after a
catch-up that was cut off."""
BATCH = 20_000
"""Events a rebuild folds per batch. A build of one batch writes its history in process; a larger one hands every
batch to the writer's child process."""
HISTORY_TABLES = ("page_versions", "entries", *search.TABLES)
"""The tables only the writer writes in a rebuild (the search index's with their full-text indexes)."""
_ROOT = str(Path(__file__).resolve().parent.parent)
_CHILD = ("import os, sys; sys.path.insert(0, sys.argv[1]); from projections.bulk import serve; serve(*sys.argv[2:]); "
          "os._exit(0)")
_BUILDER = ("import os, sys; sys.path.insert(0, sys.argv[1]); from projections.bulk import serve_build; serve_build(); "
            "sys.stdout.flush(); os._exit(0)")
"""The child processes run this very code (the tree this module was imported from). Done, each leaves at once: what
it wrote is committed and closed, and its parent waits for it to end (the interpreter's own clean-up of a build's
objects took tens of milliseconds, twice, after a catch-up's last page)."""


def worth_building(behind: int, folded: int, threshold: int = BULK_FOLD_THRESHOLD) -> bool:
    """Whether views `behind` events behind the log, having folded `folded`, are better built from nothing."""
    return behind >= max(threshold, folded)


def build(log, path: Path, *, contract=None, agent: str | None = None, upto: int | None = None,
          heads: Iterable[int] = (), progress=None, writer: subprocess.Popen | None = None,
          folded: Callable[[list[bytes]], None] | None = None, expected: int | None = None) -> Views:
    """Every view folded from the log (up to `upto`) into a new views database at `path`: the one way to
    build them from nothing (`mem replay`, `--check`, a first pull). Whatever is at `path` is deleted first.
    While the log still grows, `heads` are the heads to fold up to one after another first (catch_up).
    `writer`: the history writer's process, started ahead (`spawn_writer`). `folded` is called as soon as the
    fold ends, while the writer may still be writing, with mind/log.md's entries as the views will render
    them (`LogBlocks`, the callee's to close): a replay begins its files' checks there (`materialize.Prechecks`).
    `expected`: with `heads`, the seq the log is expected to reach (a catch-up's estimate), so that the writer merges
    the full-text indexes while the last batches are folded (HistoryWriter.near_end), as when the end is known."""
    path, fold_path = str(path), f"{path}-fold"
    remove_files(path)
    remove_files(fold_path)
    views = Views(path, fast=True)  # every table, empty: the writer fills the history
    blocks = LogBlocks(Path(path).parent) if folded is not None else None
    writer = HistoryWriter(views.db, path, apart=(log.head() if upto is None else upto) > BATCH, child=writer,
                           log=log.path if isinstance(log, SQLiteLog) else None, log_blocks=blocks)
    views.close()
    writer.start()
    try:
        fold = Views(fold_path, contract=contract, agent=agent, fast=True)
        writer.fold = fold.db
        try:
            search.defer_indexes(fold.db)  # the writer writes the search index: none here, nothing to copy
            end = (log.head() if upto is None else upto) if heads == () else expected
            if end is not None:  # the end known (or foreseen): the writer is told when it nears (HistoryWriter.near_end)
                progress = _nearing(writer, end - fold.checkpoint(), progress)
            catch_up(log, fold, upto=upto, batch=BATCH, progress=progress, writer=writer, heads=heads)
            LAPS.lap("fold")
        finally:
            fold.close()
        if folded is not None:
            blocks, handed = None, blocks
            folded(handed)
        writer.join()
        LAPS.lap("writer join")
        views = Views(path, contract=contract, agent=agent, fast=True)
        LAPS.lap("views open (page_versions' index)")
        try:
            writer.merge(views.db, fold_path)
            LAPS.lap("merge")
        except BaseException:
            views.close()
            raise
        return views
    except BaseException:
        writer.join(raise_error=False)
        remove_files(path)
        raise
    finally:
        if blocks is not None:
            blocks.close()
        remove_files(fold_path)


def _nearing(writer: "HistoryWriter", left: int, progress) -> Callable[[int], None]:
    """`progress` for catch_up that also tells the writer once at most MERGE_AHEAD batches of the `left` events
    are still to come."""
    def folded(events: int) -> None:
        nonlocal left
        left -= events
        if left <= MERGE_AHEAD * BATCH:
            writer.near_end()
        if progress:
            progress(events)
    return folded


class LogBlocks:
    """mind/log.md as a rebuild's log_entries rows render it (HistoryWriter.add), one block per batch
    (`render.log_block`), in UTF-8, kept in an unnamed temporary file beside the views (forty megabytes on a million
    events: not in memory): a replay hashes the file before the views are written (`encoded`). Rendered as the fold
    hands them over, the entries are not encoded, decoded and joined again (nine hundred thousand tuples on a million
    events, which also set the cycle collector off again and again in the thread that hashed them)."""

    def __init__(self, folder: Path):
        self.file = tempfile.TemporaryFile(dir=folder, prefix=".mem-log-")
        self.sizes: list[int] = []

    def add(self, entries: list[tuple]) -> None:
        """A batch's log_entries rows (seq, ts, entry), in seq order."""
        block = render.log_block([entry for _seq, _ts, entry in reversed(entries)]).encode()
        self.file.write(block)
        self.sizes.append(len(block))

    def encoded(self) -> Iterator[bytes]:
        """mind/log.md's bytes (`render.log`): its head, then the blocks, newest first."""
        self.file.flush()
        yield render.log_head().encode()
        fd, end = self.file.fileno(), sum(self.sizes)
        for size in reversed(self.sizes):
            end -= size
            yield os.pread(fd, size, end)

    def close(self) -> None:
        self.file.close()


def spawn_builder() -> subprocess.Popen:
    """A child process for `build_apart`, started ahead of it: it imports what it runs meanwhile (while the
    first page of a catch-up is on its way), then waits to be told what to build. One left unused is ended
    with `discard`."""
    return subprocess.Popen([sys.executable, "-c", _BUILDER, _ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def spawn_writer() -> subprocess.Popen:
    """A writer's child process (`serve`) started ahead of its build: it imports what it runs meanwhile, then waits
    to be told its file (HistoryWriter's `child`). Its stdin closed first, it stops."""
    return subprocess.Popen([sys.executable, "-c", _CHILD, _ROOT], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def discard(child: subprocess.Popen) -> None:
    """Ends a child of `spawn_builder` that was never told what to build."""
    child.kill()
    child.wait()
    for pipe in (child.stdin, child.stdout, child.stderr):
        pipe.close()


def build_apart(root: Path, path: Path, *, contract=None, agent: str | None = None, upto: int | None = None,
                heads: Iterable[int] = (), progress=None, child: subprocess.Popen | None = None,
                expected: int | None = None) -> Views:
    """`build` in a child process of its own (`child`, else one started now), which reads the workspace's log
    itself: for a log still growing (a catch-up), whose appends, in this process, then have its GIL to
    themselves. `heads` are handed over as they come; the child reports progress, and an error as `serve`
    does. Should `heads` raise (the catch-up gave up), the child is told to stop and that error is raised.
    `expected`: see `build`."""
    spec = msgspec.json.encode({"root": str(root), "path": str(path), "agent": agent, "upto": upto,
                                "contract": contract, "expected": expected})
    child = child or spawn_builder()
    failed: list[BaseException] = []

    def hand_over() -> None:
        try:
            child.stdin.write(spec + b"\n")
            child.stdin.flush()
            for head in heads:
                child.stdin.write(b"%d\n" % head)
                child.stdin.flush()
            child.stdin.write(b"end\n")
        except BrokenPipeError:
            pass
        except BaseException as exc:  # the heads' own error: the child stops without building
            failed.append(exc)
        finally:
            try:
                child.stdin.close()
            except BrokenPipeError:
                pass

    feeder = threading.Thread(target=hand_over, name="heads", daemon=True)
    feeder.start()
    try:
        for line in child.stdout:
            if progress:
                progress(int(line))
        said = child.stderr.read().decode("utf-8", "replace").strip()
        code = child.wait()
    except BaseException:
        child.kill()
        child.wait()
        raise
    finally:
        child.stdout.close()
        child.stderr.close()
    if code == 0:
        feeder.join()  # it handed `end` over: done
    if failed:  # told before the child was (stdin closed): known once it stopped
        raise failed[0]
    if code:
        raise _child_error(said)
    return Views(path, contract=contract, agent=agent, fast=True)


def serve_build() -> None:
    """The child process of `build_apart`: reads what to build, then the heads one line each up to `end`
    (stdin closed before it: the builder gave up, nothing is built), and writes each batch's progress to
    stdout. It stops too when its parent is gone (`_orphaned`)."""
    from eventstore.layers import Contract
    from eventstore.workspace import Workspace

    stdin, parent = sys.stdin.buffer, os.getppid()
    unshared_sqlite()
    writer = spawn_writer()  # a catch-up's log grows past a batch: its writer starts while the first page comes
    try:
        spec = msgspec.json.decode(stdin.readline())
        workspace = Workspace(spec["root"])
        log = workspace.open_log(workspace.config())
        contract = msgspec.convert(spec["contract"], Contract) if spec["contract"] is not None else None

        def heads():
            for line in stdin:
                if line.strip() == b"end":
                    return
                yield int(line)
            _orphaned()

        def progress(n: int) -> None:
            if os.getppid() != parent:
                _orphaned()
            sys.stdout.write(f"{n}\n")
            sys.stdout.flush()

        try:
            build(log, Path(spec["path"]), contract=contract, agent=spec["agent"], upto=spec["upto"], heads=heads(),
                  progress=progress, writer=writer, expected=spec["expected"]).close()
            LAPS.who = "apart builder"
            LAPS.dump()
        finally:
            log.close()
    except Exception as exc:
        _tell(exc)
        sys.exit(1)
    finally:
        with contextlib.suppress(BrokenPipeError):
            writer.stdin.close()  # a writer never told its file: it stops without writing
        writer.wait()


def _orphaned() -> None:
    """The builder is gone (killed): stop at once, removing nothing. Its files are the next build's to delete,
    and by now that build may have made new ones at the same paths."""
    os._exit(1)


class HistoryWriter:
    """The history tables of a rebuild (see the module's docstring), written by a child process (`serve`) fed
    through a pipe, so that SQLite's work and the rows' binding run on the other core, without the GIL the fold
    holds; but the first batch of a build that may need no second one is written here."""

    def __init__(self, db, path: str, apart: bool = False, child: subprocess.Popen | None = None,
                 log: str | None = None, log_blocks: "LogBlocks | None" = None):
        """Takes the new file's page_versions index and search triggers away until `merge`: the index is built
        once, sorted, at the end, and search_history's full-text entries as its versions close (search.bulk_begin,
        bulk_end). `apart`: more than a batch is to come, so the child process starts at once (its start-up
        beside the fold's first batch), or is `child`, started ahead (`spawn_writer`) and told the file now.
        `log`: the path of a SQLite log, which the writer attaches to read what page_versions rows take from it
        as stored (`FROM_LOG`): less to hand over, bind and decode. `log_blocks` is given each batch's log entries."""
        self.path = path
        self.log_blocks = log_blocks
        self.log = log
        self.from_log = log is not None
        self.mark = secrets.randbelow(2**31 - 1) + 1  # this build's file, told apart from an earlier build's
        db.execute(f"PRAGMA application_id = {self.mark}")
        db.execute("DROP INDEX page_versions_by_slug")
        self.triggers = search.bulk_begin(db)
        self.db: sqlite3.Connection | None = None
        self.fold: sqlite3.Connection | None = None  # the fold's scratch views (`build`), which take log_entries
        self.child: subprocess.Popen | None = None
        self.batches = 0
        self.nearing = False
        self.apart = apart or child is not None
        self.ahead = child

    def start(self) -> None:
        if self.apart:
            self._spawn()
        else:
            self.db = _connect(self.path, self.log)
            _defer_merges(self.db)

    def _spawn(self) -> None:
        if self.ahead is not None:
            self.child, self.ahead = self.ahead, None
            self.child.stdin.write(msgspec.json.encode([self.path, self.mark, self.log]) + b"\n")
            self.child.stdin.flush()
        else:
            self.child = subprocess.Popen([sys.executable, "-c", _CHILD, _ROOT, self.path, str(self.mark),
                                           self.log or ""],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _widen(self.child.stdin)

    def add(self, versions: list[tuple], entries: list[tuple], search_batch: tuple, shared_entries: list) -> None:
        """A batch: its wiki page versions' rows (search.VERSION_COLUMNS), the search index's (SearchFold.flush's)
        and the shared layers' entries (SharedFold.flush's), for the new file; and its log_entries rows, which go
        into the fold's scratch views (`fold`, in the fold's transaction) once the rest is handed over."""
        self.batches += 1
        if self.child is None and self.batches == 1:
            write_batch(self.db, versions, search_batch, shared_entries, from_log=self.from_log)
        else:
            if self.child is None:
                self.db.execute("COMMIT")  # a second batch after all (a log still growing): the child from here on
                self.db.close()
                self.db = None
                self._spawn()
            frame = msgspec.msgpack.encode((versions, search_batch, shared_entries))
            try:
                self.child.stdin.write(len(frame).to_bytes(4, "little"))
                self.child.stdin.write(frame)
            except BrokenPipeError:
                self.join()  # raises the child's error
                raise
        if entries:
            insert_many(self.fold, LOG_ENTRIES, entries)
            if self.log_blocks is not None:
                self.log_blocks.add(entries)

    def near_end(self) -> None:
        """At most MERGE_AHEAD batches are still to come (told once): the writer's child merges the full-text
        index's segments now (`_merge`), while the fold ends, rather than after the last batch."""
        if self.nearing or self.child is None:
            return
        self.nearing = True
        try:
            self.child.stdin.write(_MERGE_NOW.to_bytes(4, "little"))
        except BrokenPipeError:
            self.join()  # raises the child's error
            raise

    def join(self, raise_error: bool = True) -> None:
        """Waits until everything handed over is written and committed (on error, ends the writer: nothing
        it wrote is kept)."""
        if self.db is not None:
            db, self.db = self.db, None
            try:
                if raise_error:
                    _commit_last(db)
            finally:
                db.close()
        if self.child is not None:
            child, self.child = self.child, None
            try:
                if raise_error:
                    child.stdin.write(bytes(4))  # the end: commit
                child.stdin.close()
            except BrokenPipeError:
                pass
            error = child.stderr.read().decode("utf-8", "replace").strip()
            child.stderr.close()
            if child.wait() and raise_error:
                raise _child_error(error)

    def merge(self, db, fold_path: str) -> None:
        """Copies every table the fold wrote into the new file (`db`, holding no transaction), and makes the
        index taken away. A fold whose writer read the log (`from_log`) read no ids of the mind layer's events
        (`Recorder.fold_rows`): the `pages` rows take theirs from the versions they name."""
        db.execute("ATTACH DATABASE ? AS fold", (fold_path,))
        try:
            db.execute("BEGIN IMMEDIATE")
            tables = [name for (name,) in db.execute(
                "SELECT name FROM fold.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                f"AND name NOT IN ({','.join('?' * len(HISTORY_TABLES))}) ORDER BY name",
                HISTORY_TABLES)]
            for table in tables:
                db.execute(f'DELETE FROM main."{table}"')
                db.execute(f'INSERT INTO main."{table}" SELECT * FROM fold."{table}"')
            db.execute(PAGE_VERSIONS_INDEX)
            if self.from_log:  # the fold read no ids of the wiki's events: its pages take their versions'
                db.execute("UPDATE pages SET version_id = (SELECT v.version_id FROM page_versions AS v "
                           "WHERE v.slug = pages.slug AND v.seq = pages.seq)")
            search.bulk_end(db, self.triggers)
            db.execute("COMMIT")
        finally:
            if db.in_transaction:
                db.execute("ROLLBACK")
            db.execute("DETACH DATABASE fold")


VersionRow = tuple[str, int, bytearray | int, int, int, str, str, str, bytearray | int | None, str, str, str | int,
                   str | int, int]
"""A wiki page version's row (search.VERSION_COLUMNS) as the writer's child decodes it: its blobs as bytearrays,
which sqlite3 binds directly (bytes, like None, go through its adapter lookup first: a fifth of the cost of the
row). The version id, ts and doc are 0 where the writer reads them from the log (FROM_LOG)."""
_Text = str | int | None  # 0 for NULL (search.DOCS_INSERT)
SearchRow = tuple[int, str, str, str, str, str, _Text, _Text, _Text, _Text, _Text, _Text]
"""A search_docs row (search.COLUMNS)."""
SearchHistoryRow = tuple[int, str, str, str, str, str, _Text, _Text, _Text, _Text, _Text, _Text, int, int]
"""A search_history row (search.COLUMNS, until, since)."""
EntryRow = tuple[str, str, int, str, str, str, str, _Text]
"""A shared layer's `entries` row (shared.ENTRIES_INSERT)."""
Frame = tuple[list[VersionRow],
              tuple[list, list[SearchRow], list, list, list[SearchHistoryRow], list, list, list, list], list[EntryRow]]
"""A batch of HistoryWriter.add (its rows of a million events are decoded twice as fast typed); the search
batch's page versions are the batch's version rows (SearchFold.flush)."""

LOG_ENTRIES = "INSERT INTO log_entries VALUES (?,?,?)"
PAGE_VERSIONS = ("INSERT INTO page_versions SELECT slug, seq, version_id, ts, deleted, parents, title, hook, doc "
                 "FROM temp.versions")
"""page_versions rows from the staged version rows (search.stage_versions), as they are."""
FROM_LOG = ("INSERT INTO page_versions SELECT v.slug, v.seq, e.id, e.ts, v.deleted, v.parents, v.title, v.hook, "
            "iif(v.doc IS 0, e.body, v.doc) FROM temp.versions AS v CROSS JOIN log.events AS e ON e.seq = v.seq "
            f"WHERE v.doc IS NOT 0 OR e.codec = {CODEC_RAW}")
"""page_versions rows from the staged version rows, completed by the log attached as `log`: the version id and ts
of the event at their seq, and its body where the doc is 0. That body was stored as it was written (CODEC_RAW)
when the fold read it; one the log no longer stores so (redacted since) leaves its row out, for `_insert_versions`."""


def _insert_versions(db, count: int) -> None:
    """The `count` staged version rows into page_versions (FROM_LOG); a row left out because the log's body at its
    seq is stored otherwise now (a redaction came in meanwhile) gets that body as the fold would read it
    (`fold.unpacked_body`)."""
    if db.execute(FROM_LOG).rowcount == count:
        return
    for slug, seq, id, ts, deleted, parents, title, hook, codec, body in db.execute(
            "SELECT v.slug, v.seq, e.id, e.ts, v.deleted, v.parents, v.title, v.hook, e.codec, e.body FROM "
            "temp.versions AS v CROSS JOIN log.events AS e ON e.seq = v.seq "
            f"WHERE v.doc IS 0 AND e.codec != {CODEC_RAW}").fetchall():
        db.execute("INSERT INTO page_versions VALUES (?,?,?,?,?,?,?,?,?)",
                   (slug, seq, id, ts, deleted, parents, title, hook, unpacked_body(codec, body)))


def write_batch(db, versions: list, search_batch: tuple, shared_entries: list, *,
                from_log: bool = False) -> None:
    """One batch of HistoryWriter.add into the new file (its transaction open); `from_log`: the log is attached,
    and the version rows take from it what they leave out (FROM_LOG)."""
    search.stage_versions(db, versions)
    if from_log:
        _insert_versions(db, len(versions))
    else:
        db.execute(PAGE_VERSIONS)
    if shared_entries:
        shared.stage_entries(db, shared_entries)
    gone, rows, _versions, *rest = search_batch
    search.write_batch(db, gone, rows, versions, *rest, bulk=True, staged=True, staged_entries=bool(shared_entries))


def _connect(path: str, log: str | None = None) -> sqlite3.Connection:
    """The writer's connection to the new file (see the module's docstring), its one transaction begun; with the
    SQLite log at `log` attached as `log` (only read)."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, uri=True)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    db.execute("PRAGMA temp_store = MEMORY")  # the batch's version rows (search.stage_versions)
    if log is not None:
        db.execute("ATTACH DATABASE ? AS log", (attachable(log),))  # a check on read-only storage reads it there
    db.execute("BEGIN")
    return db


MERGES_DEFERRED = (("hashsize", 16 << 20), ("automerge", 0), ("crisismerge", 1000))
"""FTS5's settings in the writer, for both full-text indexes (BUILT_FTS): a batch's entries written out as one segment
at its commit (`hashsize`: the bytes of entries held, 1 MB by default), and no segments merged as they come
(`automerge` 0, and `crisismerge` far off: FTS5 merges a level that many segments reach); `_merge` merges them all at
once ('optimize'), as the last batches come (MERGE_AHEAD), else at the end. FTS5 by default merges four segments of a
level into one of the next as they come: every entry rewritten at each of three or four levels on a million events,
against once here, into one segment (and the last batches' few), which searches read faster than the nine or ten
automerge leaves. search_history_fts takes every version; search_docs_fts every entry of a team's layers (a version
of a page only once the page's last one is known, `index_open`). FTS5 keeps the settings in each index's `_config`
table: `_commit_last` takes them out, so the views hold FTS5's defaults, as a fold's."""
BUILT_FTS = ("search_history_fts", "search_docs_fts")
MERGE_AHEAD = 10
"""Batches still to come when the writer merges the full-text index's segments (HistoryWriter.near_end): the fold's
last batches take about as long as the merge, which the writer, as fast as the fold or faster, makes meanwhile."""
_MERGE_NOW = 0xFFFFFFFF
"""The header of no batch (`serve`): the writer merges now (HistoryWriter.near_end)."""


def _defer_merges(db) -> None:
    for table in BUILT_FTS:
        for key, value in MERGES_DEFERRED:
            db.execute(f"INSERT INTO {table} ({table}, rank) VALUES (?, ?)", (key, value))


def _merge(db) -> None:
    for table in BUILT_FTS:
        db.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")


def _commit_last(db, merged: bool = False) -> None:
    """The writer's last commit: every segment of each full-text index merged into one (unless `merged` already, as
    the last batches came), and FTS5's settings back to their defaults (MERGES_DEFERRED)."""
    if merged:  # the segments of the batches since, at their level only (FTS5's `usermerge`, 4, and more)
        for table in BUILT_FTS:
            db.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('merge', 1000000)")
    else:
        _merge(db)
    for table in BUILT_FTS:
        db.execute(f"DELETE FROM {table}_config WHERE k IN ({', '.join('?' * len(MERGES_DEFERRED))})",
                   [key for key, _value in MERGES_DEFERRED])
    db.execute("PRAGMA application_id = 0")  # the build's mark (HistoryWriter) gone: the views hold SQLite's default
    db.execute("COMMIT")


_SQLITE_CONFIG_MULTITHREAD = 2
_SQLITE_CONFIG_MEMSTATUS = 9


def unshared_sqlite() -> None:
    """Sets SQLite up, in a child process that has opened no connection yet and uses each of its connections
    from one thread at a time (`serve`, `serve_build`), without the mutexes its sqlite3 module builds it with: no
    lock per connection (SQLITE_CONFIG_MULTITHREAD: taken on every bind, step and column read otherwise) and no
    count of the memory it holds (SQLITE_CONFIG_MEMSTATUS off: a lock on every allocation). A tenth of the
    instructions of the writer's batches went into those locks. Only where sqlite3_config can be called the plain
    way (Linux: its variadic arguments passed as others are), else SQLite is left as it is."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import _sqlite3
        import ctypes

        lib = ctypes.CDLL(_sqlite3.__file__)
        if lib.sqlite3_shutdown() != 0:  # nothing open yet: undoes an initialisation the module may have made
            return
        if lib.sqlite3_config(_SQLITE_CONFIG_MULTITHREAD) == 0:
            lib.sqlite3_config(_SQLITE_CONFIG_MEMSTATUS, ctypes.c_int(0))
        lib.sqlite3_initialize()
    except (ImportError, OSError, AttributeError):
        pass


def serve(path: str | None = None, mark: str | int | None = None, log: str | None = None) -> None:
    """The writer's child process: writes each batch read from stdin (a 4-byte length, then the batch in
    msgpack) into the new file at `path`, and commits at an empty one. Should the builder go away first
    (its end of the pipe closed early), nothing is committed: its files are deleted by the next build. It
    writes nothing either when the file at `path` is no longer the builder's: a builder killed just before,
    whose file the next build has made anew. The file is told by the random `mark` its builder set as its
    `PRAGMA application_id` (HistoryWriter), not by its inode: a file made at the same path just after
    another was deleted often gets the same inode number (ext4), and a writer left over from a build cut off
    wrote that build's batches into the next one's file. Started ahead (`spawn_writer`), it reads `path`,
    `mark` and `log` first, a JSON line.

    With the SQLite log at `log` (FROM_LOG), each batch is committed: the log's rows are read in the batch's
    transaction, whose snapshot of the log must be taken after the fold read them (a log still growing)."""
    stdin, decode = sys.stdin.buffer, msgspec.msgpack.Decoder(Frame).decode
    unshared_sqlite()
    gc.disable()  # each batch decodes a million objects, freed by refcounting alone (fold.no_cyclic_gc)
    try:
        if path is None:
            told = stdin.readline()
            if not told:
                sys.exit(1)
            path, mark, log = msgspec.json.decode(told)
        log = log or None
        db = _connect(path, log)
        if db.execute("PRAGMA application_id").fetchone()[0] != int(mark):
            sys.exit(1)
        _defer_merges(db)
        frames, merged = _frames(stdin), False
        laps = Laps("writer")
        while frame := frames.get():
            laps.lap("wait")
            if frame is _MERGING:
                _merge(db)
                laps.lap("merge")
                merged = True
                continue
            batch = decode(frame)
            laps.lap("decode")
            write_batch(db, *batch, from_log=log is not None)
            del batch
            laps.lap("write")
            if log is not None:
                db.execute("COMMIT")
                db.execute("BEGIN")
        laps.lap("wait")
        if frame is None:
            sys.exit(1)
        _commit_last(db, merged)
        db.close()
        laps.lap("last commit")
        laps.dump()
    except Exception as exc:
        _tell(exc)
        sys.exit(1)


PIPE_SIZE = 1 << 20
"""The bytes the pipe to the writer's child holds (Linux's most for a process without privileges; 64 KB by default):
a batch of a few megabytes crosses in a few writes, each of which waits for the child's reader thread to wake and
take its GIL (`_frames`), not in fifty."""


def _widen(pipe) -> None:
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or a limit set lower: the default pipe
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)


READ_AHEAD = 2
"""Batches the writer's child reads ahead of the one it writes: the builder's hand-over returns once its batch is
read, not once the batch before it is written, so a batch slower to write than to fold does not hold the fold up."""


_MERGING = b"merge"


def _frames(stdin) -> queue.Queue:
    """The batches on `stdin` (`serve`), read by a thread of their own as they come (READ_AHEAD at most waiting):
    each batch's bytes (or _MERGING, told to merge), then b"" at the end, or None when the builder went away first."""
    frames: queue.Queue = queue.Queue(READ_AHEAD)

    def read() -> None:
        while len(header := stdin.read(4)) == 4:
            if not (size := int.from_bytes(header, "little")):
                frames.put(b"")
                return
            frames.put(_MERGING if size == _MERGE_NOW else stdin.read(size))
        frames.put(None)

    threading.Thread(target=read, name="batches", daemon=True).start()
    return frames


def _tell(exc: Exception) -> None:
    """A child process's error, one line on stderr: its parent raises it as its own (`_child_error`)."""
    sys.stderr.write("\t".join((type(exc).__name__, str(getattr(exc, "sqlite_errorname", "")),
                                " ".join(str(exc).split()))))


def _child_error(said: str) -> Exception:
    """The writer child's error (`serve`), as the builder raises it: a SQLite or file-system failure as
    such, so that the edges name it as they name their own."""
    name, _, rest = said.partition("\t")
    errorname, _, message = rest.partition("\t")
    kind = getattr(sqlite3, name, None)
    if isinstance(kind, type) and issubclass(kind, sqlite3.Error):
        exc = kind(message)
        exc.sqlite_errorname = errorname
        return exc
    if name in ("OSError", "FileNotFoundError", "PermissionError"):
        return OSError(message)
    return StorageFailure(f"the views' history writer failed: {said or 'its process stopped'}; nothing recorded "
                          "was lost: run the command again")


def remove_files(path) -> None:
    """A SQLite file and what SQLite may have left beside it."""
    for name in (str(path), f"{path}-wal", f"{path}-shm", f"{path}-journal"):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
