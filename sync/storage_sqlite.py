"""Hub storage in SQLite (the default for `mem serve`): one file, one writer at a time.

Reads use one connection per thread (WAL lets them run beside a commit, so a pull never queues
behind an fsync); writes use the writer connection under a lock."""

import fcntl
import functools
import json
import os
import sqlite3
import threading
import time
from itertools import chain

from eventstore.errors import InvalidInput, NotFound
from eventstore.ids import now_ms
from eventstore.layers import CONTRACT_LAYER

from .storage import (AUTHORED_ROWS_SQL, AUTHORS_TABLE, HEADS_SQL, NAMED_SQL, PAGE_VERSIONS_COLUMN,
                      PAGE_VERSIONS_TABLE, REDACTION_ROWS_SQL, REDACTIONS_TABLE, TOKEN_HASHES, AgentInfo, Committed,
                      HubStorage, Stale, decode_stored, encode_stored, page_version_sql, plain_group, plan_group,
                      STORED_PAGE, record_page_versions, record_redactions, redacted_rows, refold_pages, refuse_loops,
                      request_token_hash, stored_page_versions, stored_redactions)

WATCH_INTERVAL = 0.002
WATCH_IDLE_INTERVAL = 0.05
WATCH_IDLE_AFTER = 1.0
"""The watcher's polls of `PRAGMA data_version`: every WATCH_INTERVAL seconds while other connections'
commits come, every WATCH_IDLE_INTERVAL once none came for WATCH_IDLE_AFTER (20 polls a second)."""
INSERT_ROWS = 500
TOKEN_CACHE_CALM = 0.05
"""Seconds after a token state may have changed (SQLiteHubStorage._bump) before cached ones are used again: a
hub whose file another process writes all the time (`mem serve` twice) reads each push's state, rather than
have most pushes checked twice (a cached check is sent back when another connection committed before it)."""

try:
    import ctypes

    _libc_flock = ctypes.PyDLL(None).flock  # a PyDLL's functions are called holding the GIL
    _libc_flock.argtypes, _libc_flock.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
except (ImportError, OSError, AttributeError):
    _libc_flock = None


def _live(batches: list, stale: set[int]) -> list:
    """The batches to write: each stale one (SQLiteHubStorage._stale) left empty."""
    return [[] if index in stale else batch for index, batch in enumerate(batches)] if stale else batches


def _cached(checked) -> bool:
    """Whether some batch of a group was checked with a cached token state (`checked`: its epochs, or None)."""
    return checked is not None and any(epoch is not None for epoch in checked)


def _stale_outcomes(outcomes: list, stale: set[int]) -> list:
    return [Stale() if index in stale else outcome for index, outcome in enumerate(outcomes)] if stale else outcomes


def _insert_sql(table: str, rows: int, columns: int) -> str:
    return f"INSERT INTO {table} VALUES {','.join(['(' + ','.join('?' * columns) + ')'] * rows)}"


@functools.cache
def _gated_insert_sql(rows: int) -> str:
    """An INSERT of `rows` events applied only while the connection's `PRAGMA data_version` is the last
    parameter: the check `_stale` makes, in the INSERT's own statement rather than one before it (a
    statement fewer, so a GIL hand-over fewer, per group)."""
    values = ",".join(["(" + ",".join("?" * 7) + ")"] * rows)
    return (f"INSERT INTO hub_events SELECT * FROM (VALUES {values}) "
            "WHERE (SELECT data_version FROM pragma_data_version) = ?")


def _flock(fd: int) -> None:
    """fcntl.flock(fd, LOCK_EX), first tried without blocking and without leaving the GIL (see
    `SQLiteHubStorage._one_statement` on what leaving it costs the commit thread)."""
    if _libc_flock is None or _libc_flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB) != 0:
        fcntl.flock(fd, fcntl.LOCK_EX)


def _unlock(fd: int) -> None:
    """fcntl.flock(fd, LOCK_UN), without leaving the GIL (it never blocks)."""
    if _libc_flock is None or _libc_flock(fd, fcntl.LOCK_UN) != 0:
        fcntl.flock(fd, fcntl.LOCK_UN)


SCHEMA = """
CREATE TABLE IF NOT EXISTS hub_events (
    position INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, digest TEXT NOT NULL, agent TEXT NOT NULL,
    layer TEXT NOT NULL, recorded_at INTEGER NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS hub_events_layer ON hub_events(layer, position);
CREATE TABLE IF NOT EXISTS hub_agents (
    name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, created_at INTEGER NOT NULL, revoked_at INTEGER);
CREATE TABLE IF NOT EXISTS hub_pulls (agent TEXT NOT NULL, cursor INTEGER NOT NULL, at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS hub_pulls_agent ON hub_pulls(agent, at);
""" + PAGE_VERSIONS_TABLE + REDACTIONS_TABLE.format(position="INTEGER")
HEADS = HEADS_SQL.format(p="?")
HEAD = "SELECT IFNULL(MAX(position), 0) FROM hub_events"
REQUEST_ROWS = ("SELECT name, token_hash, revoked_at, (SELECT IFNULL(MAX(position), 0) FROM hub_events WHERE layer = ?), "
                "(" + HEAD + ") FROM hub_agents WHERE token_hash IN ({hashes})")
"""(name, token_hash, revoked_at, the contract's position, the head) of the agents holding these token hashes."""
REQUEST_ROW = REQUEST_ROWS.format(hashes="?")
IDS = "SELECT value FROM json_each(?)"
NAMED = NAMED_SQL.format(ids=IDS)
REDACTION_ROWS = REDACTION_ROWS_SQL.format(p="?", ids=IDS)
AUTHORED_ROWS = AUTHORED_ROWS_SQL.format(p="?", ids=IDS)


PULL_SCAN = 2
"""How many positions per event asked a pull of several layers reads in position order (SQLiteHubStorage.pull)."""


def _made_private(path: str) -> None:
    """Makes a new hub file readable by this user alone (SQLite's -wal and -shm take its mode): it holds every
    layer, which the hub's API and pages show each agent only as the contract allows."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except OSError:  # there already (its mode is the operator's), or an unwritable place: connecting says why
        pass


class SQLiteHubStorage(HubStorage):
    reads_wait = False  # WAL: a read is local and never waits for the writer, microseconds for the hub's lookups

    def __init__(self, path: str, synchronous: str = "FULL"):
        self.path = str(path)
        _made_private(self.path)
        self.db = self._connect()
        self._refuse_another_database()
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute(f"PRAGMA synchronous = {synchronous}")
        self.db.execute("PRAGMA secure_delete = ON")  # a redacted body's bytes are overwritten, not just freed
        self._lock = threading.Lock()
        self._writers = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)  # flock'ed around each write (_write)
        self._head: int | None = None  # the head after this connection's last commit (see _commit_group)
        self._tokens: dict[str, tuple[int, str, int]] = {}  # token hash -> (epoch, agent, contract position)
        self._epoch = 0  # of the token states cached (push_state): moved on whenever one may have changed
        self._version = self.db.execute("PRAGMA data_version").fetchone()[0]  # the writer's, when it last moved
        self._bumped_at = float("-inf")  # monotonic time of the last `_bump`
        self._versions = page_version_sql("?", IDS, json.dumps, self.db.executemany,
                                          lambda sql, params: self.db.execute(sql, params).fetchall(), self._stored)
        self._write(self._create)
        self._readers = threading.local()
        self._readers_lock = threading.Lock()
        self._all_readers: list[sqlite3.Connection] = []
        self._closed = False

    def _refuse_another_database(self) -> None:
        """A file holding tables but no hub's is another program's database: refused before anything
        (WAL mode, the hub's tables) is written into it. An empty or new file becomes a hub."""
        tables = [row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                    "ORDER BY name")]
        if tables and "hub_events" not in tables:
            self.db.close()
            from pathlib import Path

            raise InvalidInput(f"{Path(self.path).absolute()} is not a hub database (it holds {', '.join(tables)}); "
                               "a hub needs a file of its own")

    def _create(self) -> None:
        columns = [row[1] for row in self.db.execute("PRAGMA table_info(hub_page_versions)")]
        authors = self.db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (AUTHORS_TABLE,)).fetchone()
        if columns and PAGE_VERSIONS_COLUMN not in columns:
            self.db.execute("DROP TABLE hub_page_versions")  # made before its newest column: filled again
        for statement in SCHEMA.split(";"):
            if statement.strip():
                self.db.execute(statement)
        if PAGE_VERSIONS_COLUMN not in columns:
            stored_page_versions(self._versions, STORED_PAGE.format(p="?"))
        if authors is None:
            stored_redactions(self._versions, STORED_PAGE.format(p="?"))

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=60, check_same_thread=False)
        db.execute("PRAGMA busy_timeout = 60000")
        return db

    def close(self) -> None:
        self._closed = True  # a watcher started by an earlier `watch` ends on its own (_watch_loop)
        self._stop_watching()
        with self._lock, self._readers_lock:
            for reader in self._all_readers:
                reader.close()
            self._all_readers.clear()
            self.db.close()
            if self._writers >= 0:
                os.close(self._writers)
                self._writers = -1

    def _write(self, fn, bump: bool = False):
        """`fn()` in one write transaction. The hub processes on one file (`mem serve` twice, and `mem hub`
        commands) queue for it on an flock of the file first: a writer that finds SQLite's write lock
        taken sleeps in its busy handler (1, 2, 5, 10 ms...) and tries again, where one blocked on
        the flock wakes the moment the other lets go. (SQLite's own locks are fcntl locks, which an
        flock neither takes nor waits for; a writer that takes no flock still meets the busy handler.)"""
        with self._lock:
            _flock(self._writers)
            try:
                self.db.execute("BEGIN IMMEDIATE")
                try:
                    result = fn()
                    self.db.execute("COMMIT")
                    if bump:
                        self._bump()
                    return result
                except BaseException:
                    if self.db.in_transaction:
                        self.db.execute("ROLLBACK")
                    raise
            finally:
                _unlock(self._writers)

    def _read(self, sql, params=()):
        return self._reader().execute(sql, params).fetchall()

    def _reader(self) -> sqlite3.Connection:
        """This thread's connection for reads."""
        reader = getattr(self._readers, "db", None)
        if reader is None:
            reader = self._readers.db = self._connect()
            with self._readers_lock:
                self._all_readers.append(reader)
        return reader

    def _insert_agent(self, name, token_hash, at):
        def insert():
            if self.db.execute("SELECT 1 FROM hub_agents WHERE name = ?", (name,)).fetchone():
                raise InvalidInput(f"agent {name!r} exists already (revoke it to issue a new token)")
            self.db.execute("INSERT INTO hub_agents VALUES (?,?,?,NULL)", (name, token_hash, at))
        self._write(insert)

    def _agent_row(self, token_hash):
        rows = self._read("SELECT name, token_hash, revoked_at FROM hub_agents WHERE token_hash = ?", (token_hash,))
        return rows[0] if rows else None

    def _request_row(self, token_hash):
        rows = self._read(REQUEST_ROW, (CONTRACT_LAYER, token_hash))
        return rows[0] if rows else None

    def _request_rows(self, token_hashes):
        rows = []
        for start in range(0, len(token_hashes), 500):
            chunk = token_hashes[start:start + 500]
            rows += self._read(REQUEST_ROWS.format(hashes=",".join("?" * len(chunk))), (CONTRACT_LAYER, *chunk))
        return rows

    def revoke_agent(self, name):
        def revoke():
            found = self.db.execute("SELECT revoked_at FROM hub_agents WHERE name = ?", (name,)).fetchone()
            if found is None:
                raise NotFound(f"no agent {name!r} on this hub")
            # Freed for a new registration: the old row keeps the history, under a dated name.
            self.db.execute("UPDATE hub_agents SET revoked_at = ?, name = ? WHERE name = ?",
                            (now_ms(), f"{name}#revoked-{now_ms()}", name))
        self._write(revoke, bump=True)

    def push_state(self, token):
        """`request_state` for a push, from a cache of token states: a hit is answered with the epoch it was
        read in, and the push's commit applies it only if no token state may have changed since (`_stale`,
        inside the writer's lock), else it is sent back to be checked again from a fresh read (`Stale`). So
        a revocation or a contract change, by this process or another, holds for every push committed after
        it, as with a read per push, without the read (about a tenth of a small push's CPU on the hub's
        event loop, and a hand-over of the GIL to the commit thread)."""
        digest = request_token_hash(token)
        epoch = self._epoch
        cached = self._tokens.get(digest)
        if cached is not None and cached[0] == epoch and time.monotonic() - self._bumped_at > TOKEN_CACHE_CALM:
            contract, position = self._contract_at(cached[2])
            return cached[1], contract, position, epoch
        agent, contract, position, _head = self.request_state(token)
        if agent is not None:
            tokens = self._tokens
            if len(tokens) >= TOKEN_HASHES:
                tokens.clear()
            tokens[digest] = (epoch, agent, position)
        return agent, contract, position, None

    def _bump(self) -> None:
        """A token state may have changed: every cached one is read again, and every push checked with one
        before now is checked again. Under the writer's lock."""
        self._epoch += 1
        self._tokens = {}
        self._bumped_at = time.monotonic()

    def _stale(self, checked) -> set[int]:
        """Under the writer's lock, before a group is written: the indexes of its batches checked with a
        cached token state from before a change that another connection committed (the writer's
        `PRAGMA data_version` moved: it moves with every other connection's commit, never with its own) or
        this one made (`_bump`). One statement per group, only when some batch used the cache."""
        if not _cached(checked):
            return set()
        version = self.db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            self._version = version
            self._bump()
        return self._older(checked)

    def _older(self, checked) -> set[int]:
        """The indexes of the batches checked with a cached token state from an epoch before this one."""
        return {index for index, epoch in enumerate(checked) if epoch is not None and epoch != self._epoch}

    def agents(self):
        return [AgentInfo(name=n.split("#")[0], created_at=c, revoked_at=r)
                for n, c, r in self._read("SELECT name, created_at, revoked_at FROM hub_agents ORDER BY created_at")]

    def _commit_group(self, batches, pulls, checked=None):
        if not pulls and self._head is not None:
            committed = self._one_statement(batches, checked)
            if committed is not None:
                return committed
        return self._transaction_group(batches, pulls, checked)

    def _one_statement(self, batches, checked) -> Committed | None:
        """The common group (new events, none a page version or a redaction, no pull record) as one INSERT
        in autocommit: its own transaction and fsync, with one statement where BEGIN, INSERT and COMMIT
        were three. Each statement leaves the GIL and must win it back from a busy event loop: measured
        under bench/bench_hub_load.py, those hand-overs cost the commit thread more than its SQLite work.
        None when the group is not of that kind or the INSERT is refused (another process appended, a
        push resends a stored event): then the transaction's way, planned against what is stored."""
        head = self._head
        with self._lock:
            _flock(self._writers)
            try:
                cached = _cached(checked)
                stale = self._older(checked) if cached else set()
                planned = plain_group(_live(batches, stale), head + 1)
                if planned is None or not planned[0] or len(planned[0]) > INSERT_ROWS:
                    return None
                rows, outcomes, layers = planned
                now = now_ms()
                values = [(head + 1 + i, e.id, e.digest, e.agent, e.layer, now, encode_stored(e))
                          for i, e in enumerate(rows)]
                if cached:  # applied only if no other connection committed since `_version` (see `_stale`)
                    inserted = self.db.execute(_gated_insert_sql(len(values)),
                                               [*chain.from_iterable(values), self._version]).rowcount
                    if inserted != len(values):
                        self._stale(checked)  # reads the version that moved: every cached state is read again
                        return None
                else:
                    self.db.execute(_insert_sql("hub_events", len(values), 7), list(chain.from_iterable(values)))
                if CONTRACT_LAYER in layers:
                    self._bump()
            except sqlite3.IntegrityError:
                self._head = None
                return None
            except BaseException:
                self._head = None
                raise
            finally:
                _unlock(self._writers)
        self._head = head + len(rows)
        return Committed(outcomes=_stale_outcomes(outcomes, stale), head=self._head, layers=layers)

    def _transaction_group(self, batches, pulls, checked=None):
        """Optimistic first: every id new and the head this connection committed last (`_head`), so the
        transaction is the INSERTs alone; the position's primary key or the id's unique index refuses
        the INSERT when another process appended since or when a push resends a stored event, and the
        group is planned again against what is stored (known ids, the head read), in a new transaction.
        Each query skipped is a GIL hand-over skipped: the commit thread needs the GIL back after every
        statement, from an event loop that is busy whenever the hub is."""
        def append(careful):
            stale = self._stale(checked)
            live = _live(batches, stale)
            known, head = {}, self._head
            if careful or head is None:
                ids = list({e.id for events in live for e in events})
                for i in range(0, len(ids), 500):
                    chunk = ids[i:i + 500]
                    known.update((id, (digest, pos)) for id, digest, pos in self.db.execute(
                        f"SELECT id, digest, position FROM hub_events WHERE id IN ({','.join('?' * len(chunk))})",
                        chunk))
                head = self.db.execute(HEAD).fetchone()[0]
            rows, outcomes, layers = plan_group(live, known, head + 1)
            now = now_ms()
            self._insert("hub_events", [(head + 1 + i, e.id, e.digest, e.agent, e.layer, now, encode_stored(e))
                                        for i, e in enumerate(rows)])
            record_page_versions(self._versions, rows)
            refuse_loops(self._versions, rows)
            record_redactions(self._versions, rows, head + 1)
            updates = redacted_rows(rows, self._stored)
            if updates:
                self.db.executemany("UPDATE hub_events SET data = ? WHERE id = ?", updates)
                refold_pages(self._versions, [id for _data, id in updates])
            self._insert("hub_pulls", [(p.agent, p.cursor, p.at) for p in pulls])
            if any(event.layer == CONTRACT_LAYER for event in rows):
                self._bump()
            return Committed(outcomes=_stale_outcomes(outcomes, stale), head=head + len(rows), layers=layers)
        try:
            try:
                committed = self._write(lambda: append(False))
            except sqlite3.IntegrityError:
                if self._head is None:
                    raise  # it was the careful plan already
                self._head = None
                committed = self._write(lambda: append(True))
        except BaseException:
            self._head = None
            raise
        self._head = committed.head
        if any(e.kind == "redaction" for events in batches for e in events):
            with self._lock:
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the old pages leave the WAL too
        return committed

    def _insert(self, table: str, rows: list[tuple]) -> None:
        """Many rows in one statement per INSERT_ROWS (in the writer's transaction): each statement step
        leaves the GIL and must get it back from a busy event loop, so a row each would cost a wait each."""
        for start in range(0, len(rows), INSERT_ROWS):
            chunk = rows[start:start + INSERT_ROWS]
            self.db.execute(_insert_sql(table, len(chunk), len(chunk[0])), list(chain.from_iterable(chunk)))

    def _stored(self, id):
        return self.db.execute("SELECT layer, data FROM hub_events WHERE id = ?", (id,)).fetchone()

    def stored(self, id):
        rows = self._read("SELECT layer, data FROM hub_events WHERE id = ?", (id,))
        return rows[0] if rows else None

    def page_heads(self, layer, slug):
        return [(id, bool(held)) for id, held in self._read(HEADS, (layer, slug))]

    def named_versions(self, ids):
        return {id for (id,) in self._read(NAMED, (json.dumps(ids),))} if ids else set()

    def pull_rows(self, after, layers, limit):
        """Several layers: the next PULL_SCAN * limit positions first, in position order, then (when they held
        fewer than `limit` of the layers' events) the layer index from there. SQLite reads several layers'
        ranges of that index in one order only by sorting them, about five times the cost of the scan when
        the layers hold most of the hub's events."""
        if not layers:
            return []
        marks = ",".join("?" * len(layers))
        if len(layers) == 1:
            return self._read(f"SELECT position, recorded_at, data FROM hub_events WHERE position > ? AND layer IN "
                              f"({marks}) ORDER BY position LIMIT ?", (after, *layers, limit))
        after_scan = after + PULL_SCAN * limit
        reader = self._reader()
        reader.execute("BEGIN")  # both reads in one snapshot: what commits between them must not fall in the scanned range
        try:
            rows = reader.execute(f"SELECT position, recorded_at, data FROM hub_events WHERE position > ? AND "
                                  f"position <= ? AND +layer IN ({marks}) ORDER BY position LIMIT ?",
                                  (after, after_scan, *layers, limit)).fetchall()
            if len(rows) < limit:
                rows += reader.execute(f"SELECT position, recorded_at, data FROM hub_events WHERE position > ? AND "
                                       f"layer IN ({marks}) ORDER BY position LIMIT ?",
                                       (after_scan, *layers, limit - len(rows))).fetchall()
        finally:
            reader.execute("COMMIT")
        return rows

    def redaction_rows(self, after, upto, layers):
        return self._read(REDACTION_ROWS, (after, upto, json.dumps(layers))) if layers else []

    def redactions_apart_rows(self, agent, after, upto, limit, besides, layers=()):
        return self._read(AUTHORED_ROWS, (agent, after, upto, json.dumps(list(layers)), after, upto,
                                          json.dumps(besides), limit))

    def head(self):
        return self._read(HEAD)[0][0]

    def layers_of(self, ids):
        return self._column_of(ids, "layer")

    def positions_of(self, ids):
        return self._column_of(ids, "position")

    def _column_of(self, ids, column: str) -> dict:
        found = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            found.update(self._read(f"SELECT id, {column} FROM hub_events WHERE id IN ({','.join('?' * len(chunk))})",
                                    chunk))
        return found

    def _watch_loop(self, callback, stop):
        """Commits by another process (another hub on the same file) reach this one's long-polls within
        a few ms. The writer connection's `PRAGMA data_version` changes when another connection has
        committed, never for its own commits, and reads no page: a hub alone on its file polls it and
        nothing else (every 50 ms once idle); the head and the layers are read only after a change.
        The watcher reads on a connection of its own, opened and closed here, and ends when the
        storage closes (also one that a second `watch` left running): `close` never closes a
        connection under a watcher still polling."""
        db = self._connect()
        try:
            seen, version = db.execute(HEAD).fetchone()[0], None
            interval, changed_at = WATCH_INTERVAL, time.monotonic()
            while not stop.wait(interval):
                try:
                    with self._lock:
                        if self._closed:
                            return
                        now = self.db.execute("PRAGMA data_version").fetchone()[0]
                        if now != self._version:  # another connection committed: cached token states read again
                            self._version = now
                            self._bump()
                    if now == version:
                        if interval != WATCH_IDLE_INTERVAL and time.monotonic() - changed_at > WATCH_IDLE_AFTER:
                            interval = WATCH_IDLE_INTERVAL
                        continue
                    version, interval, changed_at = now, WATCH_INTERVAL, time.monotonic()
                    head = db.execute(HEAD).fetchone()[0]
                    if head > seen:
                        layers = {row[0] for row in db.execute(
                            "SELECT DISTINCT layer FROM hub_events WHERE position > ? AND position <= ?", (seen, head))}
                        seen = head
                        callback(head, layers)
                except sqlite3.Error:
                    if stop.is_set() or self._closed:
                        return
        finally:
            db.close()

    def watch_redactions(self, callback):
        """`mem hub redact` from another process scrubs the mirror beside the hub, or the one `--ui-dir` names; a
        running `mem serve` whose pages read another (`mem serve --ui-dir`) learns of it here, as a PostgreSQL hub's
        processes do through NOTIFY: every redaction past the last head seen, the administrator's and those pushed
        to any `mem serve` on this file (two processes, a mirror each), polled on a connection of its own when
        `PRAGMA data_version` says something was committed. The redactions are read from hub_redactions, so the
        thread decodes none of a busy hub's events; a callback for a redaction this process committed itself finds
        its mirror scrubbed already (a no-op)."""
        self._stop_redactions = threading.Event()
        self._redactions = threading.Thread(target=self._redactions_loop, args=(callback, self._stop_redactions),
                                            daemon=True, name="hub-redactions")
        self._redactions.start()

    def _redactions_loop(self, callback, stop):
        db = self._connect()
        try:
            seen, version = db.execute(HEAD).fetchone()[0], None
            while not stop.wait(WATCH_IDLE_INTERVAL):
                try:
                    now = db.execute("PRAGMA data_version").fetchone()[0]
                    if now == version:
                        continue
                    version = now
                    head = db.execute(HEAD).fetchone()[0]
                    redacted = db.execute("SELECT 1 FROM hub_redactions WHERE position > ? AND position <= ? LIMIT 1",
                                          (seen, head)).fetchone()
                    seen = head
                    if redacted:
                        callback()
                except sqlite3.Error:
                    if stop.is_set() or self._closed:
                        return
        finally:
            db.close()

    def latest_position(self, layer):
        return self._read("SELECT IFNULL(MAX(position), 0) FROM hub_events WHERE layer = ?", (layer,))[0][0]

    def latest_of_layer(self, layer, at_ms):
        rows = self._read("SELECT position, recorded_at, data FROM hub_events WHERE layer = ? AND recorded_at <= ? "
                          "ORDER BY position DESC LIMIT 1", (layer, at_ms if at_ms is not None else 1 << 62))
        return decode_stored(rows[0][2], rows[0][0], rows[0][1]) if rows else None

    def received_by(self, agent, at_ms):
        rows = self._read("SELECT MAX(cursor) FROM hub_pulls WHERE agent = ? AND at <= ?",
                          (agent, at_ms if at_ms is not None else 1 << 62))
        return rows[0][0] or 0
