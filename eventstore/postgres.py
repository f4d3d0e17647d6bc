"""The event log in PostgreSQL: the same Recorder as the SQLite log, for logs that live on a server.

Seqs come from a counter row locked at the start of every append and updated in the same
transaction, so they are gapless and commit-ordered with any number of writers.

A log made before the body hash was dropped from the row (see eventstore.sqlite.upgrade for why that
is as safe) loses the column when it is opened: the schema's ALTER runs under the advisory lock, and
PostgreSQL drops a column without rewriting the table.
"""

import functools
import threading
from collections.abc import Iterable, Iterator, Sequence

import psycopg

from .envelope import Event, check_event
from .errors import TRY_LATER, InvalidInput, StorageUnavailable
from .layers import MIND
from .recorder import (ROW_WIDTH, ZERO_CHAIN, Recorder, StateRows, VerifyReport, id_bytes, id_text, plan_rows,
                       kind_condition, recording_times, redaction_updates, row_to_event, rows_of, verify_rows)
from .sqlite import COLUMNS

SCHEMA = """
CREATE TABLE IF NOT EXISTS log_counter (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), seq BIGINT NOT NULL,
                                        chain BYTEA NOT NULL, recorded_at BIGINT NOT NULL);
INSERT INTO log_counter VALUES (TRUE, 0, '\\x0000000000000000000000000000000000000000000000000000000000000000', 0)
    ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS events (
    seq BIGINT PRIMARY KEY, id BYTEA NOT NULL UNIQUE, ts BIGINT NOT NULL, recorded_at BIGINT NOT NULL,
    agent TEXT NOT NULL, layer TEXT NOT NULL, kind TEXT NOT NULL, codec SMALLINT NOT NULL, body BYTEA NOT NULL,
    digest BYTEA NOT NULL, chain BYTEA NOT NULL);
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
               AND table_name = 'events' AND column_name = 'body_hash') THEN
        ALTER TABLE events DROP COLUMN body_hash;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS events_recorded_at ON events(recorded_at);
CREATE TABLE IF NOT EXISTS sync_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


INSERT = f"INSERT INTO events ({COLUMNS}) VALUES ({', '.join(['%s'] * len(COLUMNS.split(',')))})"
UPSERT_STATE = "INSERT INTO sync_state VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value"


def vacuum(conn: psycopg.Connection, tables: Iterable[str]) -> None:
    """A plain VACUUM of each of TABLES, after the commit of a redaction that rewrote rows of theirs: the UPDATE
    leaves the old row version, the redacted text, dead in the table's file (and its TOAST table's), readable
    there and in a base backup until a vacuum frees its space, which autovacuum may never do for a small table.
    VACUUM runs only outside a transaction block: `conn` is in autocommit for its while."""
    was = conn.autocommit
    conn.autocommit = True
    try:
        for table in tables:
            conn.execute(f"VACUUM {table}")
    finally:
        conn.autocommit = was


def _again(method):
    """Runs `method` once more, on connections opened anew, when the database closed the one it used (a restart, an
    administrator's pg_terminate_backend): a long-running process (`mem mcp`, `mem pull --follow`) goes on once the
    database answers again (nc34b: every call failed with "the connection is closed" until it was restarted). An
    append run again is safe: the ids it committed already are found there and not appended twice. A reader (a
    generator) is not run again: the next one reads through a new connection."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except psycopg.OperationalError:
            if self._inside == threading.get_ident() or not self._reopened():  # inside an append: it runs again
                raise
        return method(self, *args, **kwargs)
    return run


def _row(row) -> tuple:
    seq, id, ts, recorded_at, agent, layer, kind, codec, body, digest, chain = row
    return seq, bytes(id), ts, recorded_at, agent, layer, kind, codec, bytes(body), bytes(digest), bytes(chain)


class PostgresLog(Recorder):
    def __init__(self, url: str, *, trusted: bool = True):
        self.trusted = trusted
        self.url = url
        self.conn = self._connect()
        # Writes go through `conn`, one at a time (a statement of another thread's would run inside an open
        # append's transaction); reads through a connection of their own (`_reader`).
        self._writing = threading.Lock()
        self._reading: psycopg.Connection | None = None
        self._opening = threading.Lock()
        self.conn.execute("SELECT pg_advisory_lock(727273)")
        others = []
        try:
            if self.conn.execute("SELECT to_regclass('log_counter') IS NULL").fetchone()[0]:
                others = [name for (name,) in self.conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")]
            if not others:
                self.conn.execute(SCHEMA)
        finally:
            self.conn.execute("SELECT pg_advisory_unlock(727273)")
        if others:  # a new log in a hub's database, say: its tables would mix with the log's
            self.conn.close()
            from .backends import shown

            raise InvalidInput(f"the database {shown(url)} holds other tables ({', '.join(others)}): an event log "
                               "needs a database of its own")

    def close(self) -> None:
        if self._reading is not None:
            self._reading.close()
        self.conn.close()

    def _reopened(self) -> bool:
        """Opens anew each connection the database closed; whether there was one. One that cannot be opened (the
        database still down) is a StorageUnavailable naming the log."""
        lost = False
        with self._writing:
            if self.conn.broken or self.conn.closed:
                self.conn = self._connect()
                lost = True
        with self._opening:
            if self._reading is not None and (self._reading.broken or self._reading.closed):
                self._reading = None
                lost = True
        return lost

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.url, autocommit=True)
        except psycopg.OperationalError as exc:
            from .backends import shown

            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0].strip()
            raise StorageUnavailable(f"the event log {shown(self.url)} does not answer ({reason}){TRY_LATER}") from None

    def _reader(self) -> psycopg.Connection:
        """The connection reads go through: not `conn`, on which another thread's open append would show its rows
        before they are committed (see eventstore.sqlite.SQLiteLog._reader); psycopg lets threads share it, each
        statement its own transaction. The thread running an append's `state` function reads inside it. One the
        database closed (a restart) is opened anew."""
        if self._inside == threading.get_ident():
            return self.conn
        reading = self._reading
        if reading is not None and (reading.broken or reading.closed):
            self._reopened()
        if self._reading is None:
            with self._opening:
                if self._reading is None:
                    self._reading = self._connect()
        return self._reading

    @_again
    def append(self, events: Sequence[Event], *, state: StateRows = None,
               verify: bool = False, recorded_at: int | Sequence[int] | None = None,
               unsent: Iterable[str] = ()) -> list[int]:
        if verify or not self.trusted:
            for event in events:
                check_event(event)
        with self._writing, self.conn.transaction():
            seq, chain, last_recorded = self.conn.execute(
                "SELECT seq, chain, recorded_at FROM log_counter WHERE one FOR UPDATE").fetchone()
            chain = bytes(chain) or ZERO_CHAIN
            known = {id_text(bytes(i)): (bytes(d).hex(), s) for i, d, s in self.conn.execute(
                "SELECT id, digest, seq FROM events WHERE id = ANY(%s)", ([id_bytes(e.id) for e in events],))}
            values, seqs, seq, chain = plan_rows(events, known, seq, chain, recording_times(recorded_at, last_recorded))
            if values:
                with self.conn.cursor() as cursor:
                    cursor.executemany(INSERT, rows_of(values))
                self.conn.execute("UPDATE log_counter SET seq = %s, chain = %s, recorded_at = %s WHERE one",
                                  (seq, chain, values[3 - ROW_WIDTH]))
            updates = redaction_updates(events, self._stored, unsent)
            if updates:
                with self.conn.cursor() as cursor:
                    cursor.executemany("UPDATE events SET codec = %s, body = %s WHERE id = %s", updates)
            state = self._state_rows(state, seqs)
            if state:
                with self.conn.cursor() as cursor:
                    cursor.executemany(UPSERT_STATE, list(state.items()))
        if updates:
            with self._writing:
                vacuum(self.conn, ["events"])
        return seqs

    @_again
    def state(self, key: str) -> str | None:
        row = self._reader().execute("SELECT value FROM sync_state WHERE key = %s", (key,)).fetchone()
        return row[0] if row else None

    @_again
    def set_state(self, key: str, value: str) -> None:
        with self._writing:
            self.conn.execute(UPSERT_STATE, (key, value))

    def read_rows(self, after=0, upto=None, *, kinds=None, layers=None, agent=None, since_ms=None, limit=None,
                  newest_first=False) -> Iterator[tuple]:
        where, params = ["seq > %s"], [after]
        for column, value in (("seq <=", upto), ("agent =", agent), ("recorded_at >=", since_ms)):
            if value is not None:
                where.append(f"{column} %s")
                params.append(value)
        if kinds:
            condition, stored = kind_condition(kinds, "%s")
            where.append(condition)
            params.extend(stored)
        if layers:
            where.append("layer = ANY(%s)")
            params.append(list(layers))
        sql = (f"SELECT {COLUMNS} FROM events WHERE {' AND '.join(where)} "
               f"ORDER BY seq {'DESC' if newest_first else 'ASC'}")
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        for row in self._reader().execute(sql, params):
            yield _row(row)

    def _stored(self, id: bytes):
        return self.conn.execute("SELECT kind, codec, body, layer FROM events WHERE id = %s", (id,)).fetchone()

    def chain_rows(self, after: int, upto: int) -> Iterator[tuple]:
        for seq, digest, recorded_at, chain in self._reader().execute(
                "SELECT seq, digest, recorded_at, chain FROM events WHERE seq >= (SELECT coalesce(max(seq), 0) FROM "
                "events WHERE seq <= %s) AND seq <= %s ORDER BY seq", (after, upto)):
            yield seq, bytes(digest), recorded_at, bytes(chain)

    def fold_rows(self, after: int, upto: int, *, mind_ids: bool = True) -> Iterator[tuple]:
        with self._reader().cursor() as cursor:
            cursor.execute("SELECT seq, id, ts, layer, codec, body, agent FROM events "
                           "WHERE seq > %s AND seq <= %s ORDER BY seq", (after, upto))
            for seq, id, ts, layer, codec, body, agent in cursor:
                mind = layer == MIND
                yield seq, bytes(id), ts, None if mind else layer, codec, bytes(body), None if mind else agent

    @_again
    def get(self, id: str) -> Event | None:
        row = self._reader().execute(f"SELECT {COLUMNS} FROM events WHERE id = %s", (id_bytes(id),)).fetchone()
        return row_to_event(_row(row)) if row else None

    @_again
    def get_by_seq(self, seq: int) -> Event | None:
        row = self._reader().execute(f"SELECT {COLUMNS} FROM events WHERE seq = %s", (seq,)).fetchone()
        return row_to_event(_row(row)) if row else None

    @_again
    def head(self) -> int:
        return self._reader().execute("SELECT seq FROM log_counter").fetchone()[0]

    @_again
    def count(self, upto: int | None = None) -> int:
        if upto is None:
            return self._reader().execute("SELECT count(*) FROM events").fetchone()[0]
        return self._reader().execute("SELECT count(*) FROM events WHERE seq <= %s", (upto,)).fetchone()[0]

    @_again
    def seq_after(self, after: int, count: int) -> int | None:
        row = self._reader().execute("SELECT seq FROM events WHERE seq > %s ORDER BY seq LIMIT 1 OFFSET %s",
                                (after, count - 1)).fetchone()
        return row[0] if row else None

    @_again
    def recorded_at(self, seq: int) -> int | None:
        row = self._reader().execute("SELECT recorded_at FROM events WHERE seq >= %s ORDER BY seq LIMIT 1",
                                (seq,)).fetchone()
        return row[0] if row else None

    @_again
    def seq_at(self, recorded_at_ms: int) -> int:
        row = self._reader().execute("SELECT MAX(seq) FROM events WHERE recorded_at <= %s", (recorded_at_ms,)).fetchone()
        return row[0] or 0

    @_again
    def verify(self, progress=None) -> VerifyReport:
        """`verify_rows` up to the counter's seq, then the counter against the rows: the last row is the counter's
        seq with its chain (rows deleted at the end leave a chain that verifies on its own), and no row lies past
        the counter (one added outside mindlog, which reads list but appends never reach)."""
        reader = self._reader()
        head = self.head()  # first: rows appended after it are not checked, so not counted as checked
        rows = (_row(r) for r in reader.execute(f"SELECT {COLUMNS} FROM events WHERE seq <= %s ORDER BY seq", (head,)))
        report = verify_rows(((seq, id_text(id), *rest) for seq, id, *rest in rows), head, progress)
        if not report.ok:
            return report
        bad = functools.partial(VerifyReport, ok=False, checked=report.checked, head=head, redacted=report.redacted)
        last = reader.execute("SELECT seq, chain FROM events WHERE seq <= %s ORDER BY seq DESC LIMIT 1",
                              (head,)).fetchone()
        last_seq = last[0] if last else 0
        if last_seq != head:
            return bad(first_bad_seq=last_seq + 1,
                       problem=f"the log's counter says it ends at seq {head} but its last event is seq {last_seq}: "
                               f"{head - last_seq} seq(s) at its end are missing")
        counter, head_chain = reader.execute("SELECT seq, chain FROM log_counter").fetchone()
        if last is not None and counter == head and bytes(last[1]) != bytes(head_chain):  # (an append since moved it)
            return bad(first_bad_seq=head, problem="the last event's chain is not the one the log's counter holds: "
                                                   "events at its end were changed or replaced")
        counter, past = reader.execute(  # one statement, one snapshot: an append committed meanwhile moved both
            "SELECT seq, (SELECT min(seq) FROM events WHERE seq > log_counter.seq) FROM log_counter").fetchone()
        if past is not None:
            return bad(first_bad_seq=past, problem=f"a row past the log's head (seq {counter}, its counter): it was "
                                                   "added outside mindlog")
        return report
