"""The event log in SQLite: WAL mode, synchronous=FULL by default, one writer at a time."""

import functools
import queue
import sqlite3
import threading
import time
from time import time_ns
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter
from pathlib import Path

from .envelope import CODEC_RAW, COMPRESS_THRESHOLD, Event, check_event
from .kinds import ImportGap, Redaction
from .errors import IdConflict, InvalidInput
from .layers import MIND
from .readonly import connect
from .recorder import (_EMPTY, PLAIN_TAGS, ROW_WIDTH, ZERO_CHAIN, Recorder, StateRows, VerifyReport, _link_input,
                       id_bytes, id_text, kind_condition, plan_rows, recording_times, redaction_updates, row_to_event,
                       small_sha256, stored_form, verify_rows)

body_of = attrgetter("body")


FORMAT = 2
"""The log's storage format, kept in `PRAGMA user_version`. 0 is the format before it: the same table
with a twelfth column, `body_hash`, which `SQLiteLog` drops when it opens such a log (see `upgrade`)."""

TABLE = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    id BLOB NOT NULL UNIQUE,
    ts INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    agent TEXT NOT NULL,
    layer TEXT NOT NULL,
    kind TEXT NOT NULL,
    codec INTEGER NOT NULL,
    body BLOB NOT NULL,
    digest BLOB NOT NULL,
    chain BLOB NOT NULL
)"""
SCHEMA = (TABLE, "CREATE TABLE IF NOT EXISTS sync_state (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

COLUMNS = "seq, id, ts, recorded_at, agent, layer, kind, codec, body, digest, chain"
VERIFY_COLUMNS = ("seq, CAST(id AS BLOB), ts, recorded_at, CAST(agent AS BLOB), CAST(layer AS BLOB), "
                  "CAST(kind AS BLOB), codec, CASE typeof(body) WHEN 'blob' THEN body ELSE typeof(body) END, "
                  "CAST(digest AS BLOB), CAST(chain AS BLOB)")
"""COLUMNS as stored bytes, whatever their type now: a row changed outside mindlog (a body rewritten as TEXT that is
not UTF-8) is a problem at its seq, not sqlite3's failure to decode it, which names no seq. A body that is no longer
bytes reads as the name of its type (`text`), which `verify_rows` reports: every other reader fails on it."""


def _text(value: bytes) -> str:
    """A text column read as bytes (VERIFY_COLUMNS): bytes that are not UTF-8 were changed, and fail the digest."""
    return value.decode("utf-8", "replace")

# One statement appends one event after the head this connection believes is the log's last seq: the
# row goes in at that seq + 1 only if no row has that seq or a later one, read inside the statement (under
# its write lock): otherwise its id is NULL, which the column refuses (STALE_HEAD), and the caller reads the
# head again. The head remembered is a seq this connection committed or read and no row ever leaves the log,
# so "no row at or after head + 1" is "the head is still the last seq"; "seq + 1 is still free" would not do:
# another connection's import gap skips the seqs after the head and lands beyond them. Check and insert are
# one statement, one write transaction, so the seq, the recording time that never goes backwards and the
# chain link computed from that head are right. What the check costs (callgrind, instructions per append):
# this seek ~2,100; the aggregate `max(seq)` it replaced ~2,850; no INSERT ... SELECT (SQLite staged the row
# in a temporary table); an explicit transaction to read `PRAGMA data_version` in would be three statements
# more, ~16,000.
APPEND_AFTER = (f"INSERT INTO events ({COLUMNS}) VALUES (?1, CASE WHEN NOT EXISTS "
                "(SELECT 1 FROM events WHERE seq >= ?1) THEN ?2 END, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")
STALE_HEAD = "NOT NULL constraint failed: events.id"
BUSY_MS = 60000
"""How long a connection waits for another's write lock (or a checkpoint for readers) before it fails."""
SCRUB_PENDING = "scrub-pending"
"""The state key a redaction writes and a completed `scrub` deletes: the redacted text may still be on disk."""
SCRUB_WAIT = 3.0
SCRUB_BUSY_MS = 50
ONE_ROW_TAGS = {cls: tag for cls, tag in PLAIN_TAGS.items() if cls is not Redaction}
"""The stored kind of each body that one INSERT stores alone (see _append_one): not a `Redacted` stand-in (stored as
its original's kind), a redaction (it rewrites its targets too) or an import gap (it skips seqs)."""
WIDEST_INSERT = 128


@functools.cache
def insert_rows(count: int) -> str:
    """One INSERT of `count` rows, cheaper than a row-by-row executemany. A batch goes in as at most
    three of these (`insert_counts`), so that only a few dozen sizes are ever prepared in the
    connection's statement cache (preparing one costs about half a millisecond)."""
    row = "(" + ",".join("?" * ROW_WIDTH) + ")"
    return f"INSERT INTO events ({COLUMNS}) VALUES " + ",".join([row] * count)


def insert_counts(total: int, widest: int) -> Iterator[int]:
    """How a batch of `total` rows is split into INSERTs: as many of `widest` rows as fit, then one of
    the largest multiple of 4 left, then 2 and 1 for what remains. Each statement costs its own call
    and reset, so a batch of 100 goes in as one (not 64 + 32 + 4: about 0.15 µs a row less)."""
    while total:
        count = min(widest, total & ~3 or total & 2 or 1)
        yield count
        total -= count


FOLD_ROWS = (f"SELECT seq, id, ts, CASE WHEN layer != '{MIND}' THEN layer END, codec, body, "
             f"CASE WHEN layer != '{MIND}' THEN agent END FROM events WHERE seq > ? AND seq <= ? ORDER BY seq")
FOLD_ROWS_NO_MIND_IDS = FOLD_ROWS.replace("SELECT seq, id,", f"SELECT seq, CASE WHEN layer != '{MIND}' THEN id END,")
"""Recorder.fold_rows: the id column costs a replay a third of its reading (a bytes object a row)."""
CHAIN_ROWS = ("SELECT seq, CAST(digest AS BLOB), recorded_at, CAST(chain AS BLOB) FROM events WHERE seq >= "
              "(SELECT coalesce(max(seq), 0) FROM events WHERE seq <= %s) AND seq <= %s ORDER BY seq")
"""Recorder.chain_rows (the byte columns as stored bytes, whatever their type now: see VERIFY_COLUMNS)."""
READ_HEAD = "SELECT seq, chain, recorded_at FROM events ORDER BY seq DESC LIMIT 1"


def upgrade(db: sqlite3.Connection) -> None:
    """Brings the log at `db` to FORMAT in one write transaction: a new file gets the schema; a log of
    format 0 loses its `body_hash` column (the whole table is rewritten without it, atomically: a
    crash leaves the old format, which the next open upgrades again).

    Why the log is as safe without the stored body hash: it was redundant. The digest covers the
    header and sha256 of the body; `verify` now computes that hash from the stored body (or takes it
    from the `Redacted` stand-in that replaced a redacted body, as before) and checks the digest and
    the chain with it, so a body changed after it was appended still fails verify at its own seq,
    reported as a digest mismatch instead of a body-hash mismatch. What the column cost was 33 bytes
    and one bound value per event on every append (see bench/bench_append.py)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        found = db.execute("PRAGMA user_version").fetchone()[0]
        if found > FORMAT:
            raise InvalidInput(f"the event log {db.execute('PRAGMA database_list').fetchone()[2]} is in format "
                               f"{found}, newer than this mindlog's {FORMAT}: upgrade mindlog")
        if found < FORMAT:
            columns = [row[1] for row in db.execute("PRAGMA table_info(events)")]
            if "body_hash" in columns:
                db.execute("ALTER TABLE events DROP COLUMN body_hash")
            for statement in SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {FORMAT}")
        db.execute("COMMIT")
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")


class SQLiteLog(Recorder):
    def __init__(self, path: str | Path, *, synchronous: str = "FULL", trusted: bool = True):
        """`synchronous` is SQLite's: FULL survives power loss, NORMAL only a process crash.

        `trusted=False` recomputes every appended event's digest (for events from elsewhere).
        """
        self.path = str(path)
        self.trusted = trusted
        self._head: tuple[int, bytes, int] | None = None  # (seq, chain, recorded_at) as last seen here
        self.db = connect(self.path, isolation_level=None, timeout=60, check_same_thread=False)
        self.db.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute(f"PRAGMA synchronous = {synchronous}")
        self.db.execute("PRAGMA secure_delete = ON")  # a redacted body's bytes are overwritten, not just freed
        # Appends are serialized here: the connection is shared by threads (check_same_thread=False) but a
        # transaction is the connection's, so two threads' appends would mix in one (an event lost, a false
        # IntegrityError), and two executing on one cursor crash the interpreter. The lock is one token in a
        # SimpleQueue, taken (`get` waits while another thread holds it) and put back: uncontended, two list
        # operations. A threading.Lock entered by `with` (which looks up and calls __enter__ and __exit__; its
        # acquire parses its arguments and calls into the semaphore) cost a single durable append ~3% more:
        # that work runs from cold caches after each fsync.
        self._turn = queue.SimpleQueue()
        self._turn.put(True)
        self._cursor = self.db.cursor()  # the appends' own (`db.execute` makes and frees a Cursor object per call)
        self._idle: list[sqlite3.Connection] = []  # read connections not in use (see _reader)
        self._readers: list[sqlite3.Connection] = []
        variables = self.db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        self._widest = max(1, min(WIDEST_INSERT, 1 << ((variables // ROW_WIDTH).bit_length() - 1)))
        if self.db.execute("PRAGMA user_version").fetchone()[0] != FORMAT:
            try:
                upgrade(self.db)
            except BaseException:
                self.db.close()
                raise
        self.unscrubbed = self.db.execute("SELECT 1 FROM sync_state WHERE key = ?",
                                          (SCRUB_PENDING,)).fetchone() is not None

    def close(self) -> None:
        self._idle = None  # no more readers: reading a closed log fails as it did on the one connection
        for reader in self._readers:
            reader.close()
        self.db.close()

    # --- read connections ---------------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        """A connection to read the log as last committed, for this read alone (give it back with `_done`).

        Reads do not go through `self.db`: the appends of every thread write through it, and a read on it from
        another thread while an append is open (between its BEGIN and its COMMIT) saw that append's rows, which
        could still be rolled back. Connections are kept for reuse (one per read at once, so a few): opening one
        costs ~0.1 ms. The thread running an append's `state` function reads inside that transaction, as it did."""
        if self._inside == threading.get_ident():
            return self.db
        try:
            return self._idle.pop()
        except IndexError:
            pass
        except AttributeError:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.") from None
        reader = connect(self.path, isolation_level=None, timeout=60, check_same_thread=False)
        reader.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
        reader.execute("PRAGMA query_only = ON")
        self._readers.append(reader)
        return reader

    def _done(self, reader: sqlite3.Connection) -> None:
        idle = self._idle
        if reader is not self.db and idle is not None:
            idle.append(reader)

    def _one(self, sql: str, params=()) -> tuple | None:
        reader = self._reader()
        try:
            return reader.execute(sql, params).fetchone()
        finally:
            self._done(reader)

    def _rows(self, sql: str, params=()) -> Iterator[tuple]:
        reader = self._reader()
        try:
            cursor = reader.execute(sql, params)
            try:
                yield from cursor
            finally:
                cursor.close()  # before the connection goes back: no statement left holding a read snapshot
        finally:
            self._done(reader)

    # --- write --------------------------------------------------------------------------------

    def append(self, events: Sequence[Event], *, state: StateRows = None,
               verify: bool = False, recorded_at: int | Sequence[int] | None = None,
               unsent: Iterable[str] = ()) -> list[int]:
        """Appends atomically. `state` rows (a sync cursor) commit in the same transaction (see Recorder);
        `verify` recomputes every digest first (events from elsewhere); `recorded_at` see Recorder."""
        turn = self._turn.get()
        try:
            if self.unscrubbed:  # before the append: a redaction whose own scrub just gave up is not retried at once
                self.scrub(wait=0)
            seq = None
            if len(events) == 1 and not state and not verify and recorded_at is None and self.trusted:
                seq = self._append_one(events[0])
            return [seq] if seq is not None else self._append(events, state, verify, recorded_at, unsent)
        finally:
            self._turn.put(turn)

    def _append(self, events, state, verify, recorded_at, unsent) -> list[int]:
        if verify or not self.trusted:
            for event in events:
                check_event(event)
        redacting = Redaction in map(type, map(body_of, events))
        db, execute = self.db, self._cursor.execute
        for check_known in (False, True):
            execute("BEGIN IMMEDIATE")
            try:
                seqs = self._append_locked(events, check_known, recorded_at)
                if redacting:
                    db.executemany("UPDATE events SET codec = ?, body = ? WHERE id = ?",
                                   redaction_updates(events, self._stored, unsent))
                rows = self._state_rows(state, seqs)
                if redacting:
                    rows = {**(rows or {}), SCRUB_PENDING: str(seqs[-1])}
                if rows:
                    db.executemany("INSERT OR REPLACE INTO sync_state VALUES (?, ?)", list(rows.items()))
                execute("COMMIT")
                if redacting:
                    self.scrub()
                return seqs
            except sqlite3.IntegrityError:
                self._head = None
                db.execute("ROLLBACK")  # some ids are known already: the careful path sorts them out
            except BaseException:
                self._head = None
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        raise AssertionError("unreachable: the careful path never violates the id constraint")

    def scrub(self, wait: float = SCRUB_WAIT) -> bool:
        """Moves every committed page into the database file and empties the WAL, so that the old
        versions of pages a redaction rewrote are gone from the WAL too (secure_delete zeroed them
        in the file). True once done.

        A checkpoint cannot move pages past the snapshot of a read still open in another connection (another
        process's `mem log | less`): it waits at most `wait` seconds for such readers, not the connection's
        busy timeout per try. Until it is done the log keeps SCRUB_PENDING (written with the redaction) and
        every append made through this object tries again (`unscrubbed`)."""
        deadline = time.monotonic() + wait
        self.db.execute(f"PRAGMA busy_timeout = {SCRUB_BUSY_MS}")
        try:
            while self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                if time.monotonic() >= deadline:
                    self.unscrubbed = True
                    return False
                time.sleep(0.05)
            self.db.execute("DELETE FROM sync_state WHERE key = ?", (SCRUB_PENDING,))
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the delete's own frames: nothing redacted in them
        except sqlite3.OperationalError:
            # another writer held its lock past SCRUB_BUSY_MS: the append this precedes goes ahead, the next tries again
            self.unscrubbed = True
            return False
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
        self.unscrubbed = False
        return True

    def _stored(self, id: bytes):
        return self.db.execute("SELECT kind, codec, body, layer FROM events WHERE id = ?", (id,)).fetchone()

    def _append_one(self, event: Event) -> int | None:
        """The common append: one trusted event made here (`new_event` left its id and digest bytes and its
        encoded body on it), stored as is; one statement (see APPEND_AFTER), no explicit transaction; the
        head is this connection's memory of it. Anything else, and any failure of the statement (a stale
        head, a known id, a lock), goes the careful way
        (`_append_one_careful`), which starts again from the log. None: a redaction, an import gap or an
        event without a digest, which only the general path appends.

        Why it is written this way (bench/bench_append.py, README "Benchmarks"): at synchronous=FULL the
        process sleeps in every commit's fsync, the vCPU goes idle, and the next append's work runs from
        cold caches, TLBs and branch predictors: the same Python and SQLite work costs 4-5 times what it
        costs warm, and what it costs is per distinct function, object and code path touched, not per
        instruction. So the path touches as little as it can: one dict lookup gives the stored kind and
        rules out the bodies one row does not store alone (ONE_ROW_TAGS), the rare cases are not tested
        here one by one but fall through to the careful path, and the INSERT runs on a cursor kept for it
        (`_cursor`). The chain link is hashed by CPython's own sha256
        (`small_sha256`): OpenSSL's, through its EVP layer, costs about 25 µs more from cold caches,
        though it is faster in a warm loop, where plan_rows uses it. The keys are unpacked once, and the
        checks are of locals. With the caches emptied before each append (an 8 MB copy; synchronous=OFF),
        the share of this path's parts: the chain hash ~6%, the stale-head check ~2%, the lock ~2%, the clock
        ~1.5%; binding `bytes` instead of the bytearray copies would add ~9%, a pre-made OpenSSL context ~5%."""
        try:
            text_id, text_digest, id, digest = event.__dict__["_keys"]
            stored = event.__dict__["_raw"]
            kind = ONE_ROW_TAGS[type(event.body)]
        except KeyError:
            text_id = None
        if (text_id is not event.id or text_digest is not event.digest or id is None
                or len(stored) > COMPRESS_THRESHOLD):
            cls = type(event.body)
            if cls is Redaction or cls is ImportGap or not event.digest:
                return None  # the general path's (see append)
            return self._append_one_careful(event)
        last, last_chain, last_recorded = self._head or self._read_head()
        seq, recorded_at = last + 1, time_ns() // 1_000_000
        if recorded_at < last_recorded:
            recorded_at = last_recorded
        chain = small_sha256(_link_input(last_chain, digest, seq, recorded_at)).digest()  # chain_link
        try:
            # byte columns as bytearrays: bound without the sqlite3 module's adapter lookup (see plan_rows)
            self._cursor.execute(APPEND_AFTER, (seq, _EMPTY + id, event.ts, recorded_at, event.agent, event.layer,
                                                kind, CODEC_RAW, _EMPTY + stored, _EMPTY + digest, _EMPTY + chain))
        except sqlite3.Error:
            self._head = None
            return self._append_one_careful(event)
        self._head = (seq, chain, recorded_at)
        return seq

    def _append_one_careful(self, event: Event) -> int:
        """One trusted event, any body (a `Redacted` stand-in keeps its original kind, a large body is
        compressed), after the head read again whenever the statement finds it stale."""
        id, digest, kind, codec, stored, _skipped = stored_form(event)
        id, stored, digest_blob = _EMPTY + id, _EMPTY + stored, _EMPTY + digest
        execute = self.db.execute
        for attempt in range(10_000):
            last, last_chain, last_recorded = self._head or self._read_head()
            seq, recorded_at = last + 1, time_ns() // 1_000_000
            if recorded_at < last_recorded:
                recorded_at = last_recorded
            chain = small_sha256(_link_input(last_chain, digest, seq, recorded_at)).digest()
            try:
                execute(APPEND_AFTER, (seq, id, event.ts, recorded_at, event.agent, event.layer, kind, codec, stored,
                                      digest_blob, _EMPTY + chain))
            except sqlite3.IntegrityError as exc:
                self._head = None
                if str(exc) == STALE_HEAD:
                    continue  # another connection appended since: read the head again
                known = self._existing([event.id]).get(event.id)
                if known is None:
                    raise
                if known[0] != event.digest:
                    raise IdConflict(f"event {event.id} is already in the log with a different digest") from None
                return known[1]
            except sqlite3.OperationalError as exc:
                # Another process committed between this statement's read and its write (WAL
                # snapshot conflicts are reported at once, without the busy handler): try again.
                self._head = None
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                time.sleep(min(0.0005 * attempt, 0.01))
                continue
            self._head = (seq, chain, recorded_at)
            return seq
        raise TimeoutError("the event log stayed locked")

    def _read_head(self) -> tuple[int, bytes, int]:
        last = self._cursor.execute(READ_HEAD).fetchone()
        return last if last else (0, ZERO_CHAIN, 0)

    def _append_locked(self, events, check_known: bool, at: int | None = None) -> list[int]:
        """Inserts a batch inside the caller's write transaction. Without `check_known` it assumes
        every id is new (the common case) and lets the unique index object otherwise.

        The head is read here, under the write lock, rather than taken from this connection's memory:
        checking that memory would itself take a statement (PRAGMA data_version), and reading the
        last row of the seq b-tree costs no more — one statement per batch, not per event."""
        seq, chain, last_recorded = self._read_head()
        known = self._existing([event.id for event in events]) if check_known else None
        values, seqs, seq, chain = plan_rows(events, known, seq, chain, recording_times(at, last_recorded))
        if values:
            self._insert(values)
            self._head = (seq, chain, values[3 - ROW_WIDTH])
        return seqs

    def _insert(self, values: list) -> None:
        done, execute, total = 0, self._cursor.execute, len(values) // ROW_WIDTH
        for count in insert_counts(total, self._widest):
            execute(insert_rows(count),
                    values if count == total else values[done * ROW_WIDTH:(done + count) * ROW_WIDTH])
            done += count

    def _existing(self, ids: list[str]) -> dict[str, tuple[str, int]]:
        """(digest, seq) of each of these ids already in the log, in one query per 500 ids."""
        found = {}
        for i in range(0, len(ids), 500):
            chunk = [id_bytes(id) for id in ids[i:i + 500]]
            if len(chunk) == 1:
                rows = self.db.execute("SELECT id, digest, seq FROM events WHERE id = ?", chunk)
            else:
                rows = self.db.execute(f"SELECT id, digest, seq FROM events WHERE id IN ({','.join('?' * len(chunk))})",
                                       chunk)
            found.update((id_text(id), (digest.hex(), seq)) for id, digest, seq in rows)
        return found

    # --- read ---------------------------------------------------------------------------------

    def read_rows(self, after: int = 0, upto: int | None = None, *, kinds=None, layers=None, agent=None,
                  since_ms=None, limit=None, newest_first=False) -> Iterator[tuple]:
        where, params = ["seq > ?"], [after]
        if agent is not None:
            where.append("agent = ?")
            params.append(agent)
        if upto is not None:
            where.append("seq <= ?")
            params.append(upto)
        if kinds:
            condition, stored = kind_condition(kinds, "?")
            where.append(condition)
            params.extend(stored)
        if layers:
            where.append(f"layer IN ({','.join('?' * len(layers))})")
            params.extend(layers)
        if since_ms is not None:
            where.append("recorded_at >= ?")
            params.append(since_ms)
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY seq {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return self._rows(sql, params)

    def activity_rows(self, after: int, upto: int) -> Iterator[tuple]:
        return self._rows("SELECT seq, recorded_at, agent, layer, kind FROM events WHERE seq > ? AND seq <= ? "
                          "ORDER BY seq", (after, upto))

    def chain_rows(self, after: int, upto: int) -> Iterator[tuple]:
        return self._rows(CHAIN_ROWS.replace("%s", "?"), (after, upto))

    def fold_rows(self, after: int, upto: int, *, mind_ids: bool = True) -> Iterator[tuple]:
        return self._rows(FOLD_ROWS if mind_ids else FOLD_ROWS_NO_MIND_IDS, (after, upto))

    def get(self, id: str) -> Event | None:
        row = self._one(f"SELECT {COLUMNS} FROM events WHERE id = ?", (id_bytes(id),))
        return row_to_event(row) if row else None

    def state(self, key: str) -> str | None:
        row = self._one("SELECT value FROM sync_state WHERE key = ?", (key,))
        return row[0] if row else None

    def set_state(self, key: str, value: str) -> None:
        turn = self._turn.get()
        try:
            self.db.execute("INSERT OR REPLACE INTO sync_state VALUES (?, ?)", (key, value))
        finally:
            self._turn.put(turn)

    def get_by_seq(self, seq: int) -> Event | None:
        row = self._one(f"SELECT {COLUMNS} FROM events WHERE seq = ?", (seq,))
        return row_to_event(row) if row else None

    def seq_after(self, after: int, count: int) -> int | None:
        row = self._one("SELECT seq FROM events WHERE seq > ? ORDER BY seq LIMIT 1 OFFSET ?", (after, count - 1))
        return row[0] if row else None

    def head(self) -> int:
        row = self._one("SELECT MAX(seq) FROM events")
        return row[0] or 0

    def count(self, upto: int | None = None) -> int:
        """All rows counted on the id index (a tenth of the pages of the table's), less those after `upto`."""
        if upto is None:
            return self._one("SELECT count(*) FROM events")[0]
        return self._one("SELECT (SELECT count(*) FROM events) - (SELECT count(*) FROM events WHERE seq > ?)",
                         (upto,))[0]

    def seq_at(self, recorded_at_ms: int) -> int:
        """A binary search over seq: recorded_at never decreases along the log, so no index is needed."""
        low, high = 0, self.head()
        while low < high:
            middle = (low + high + 1) // 2
            if self.recorded_at(middle) <= recorded_at_ms:
                low = middle
            else:
                high = middle - 1
        return low

    def recorded_at(self, seq: int) -> int | None:
        """When seq was recorded; a seq an ImportGap skipped counts as recorded with that ImportGap."""
        row = self._one("SELECT recorded_at FROM events WHERE seq >= ? ORDER BY seq LIMIT 1", (seq,))
        return row[0] if row else None

    def verify(self, progress=None) -> VerifyReport:
        head = self.head()
        rows = self._rows(f"SELECT {VERIFY_COLUMNS} FROM events WHERE seq <= ? ORDER BY seq", (head,))
        return verify_rows(((seq, id_text(id), ts, recorded_at, _text(agent), _text(layer), _text(kind), *rest)
                            for seq, id, ts, recorded_at, agent, layer, kind, *rest in rows), head, progress)
