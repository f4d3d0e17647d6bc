"""Hub storage in PostgreSQL, for hubs that outgrow one machine: several hub processes, one database.

Positions come from a counter row locked at the start of every push and updated in the same
transaction, so they are gapless and commit-ordered (a bare sequence would let a reader skip a
position whose transaction commits late). Each commit NOTIFYs its new head and layers; every hub
process LISTENs on one connection of its own (`watch`), so long-polls in any process wake at once.

A database that stops answering under a running hub (stopped, restarting, unreachable) is a
StorageUnavailable for every request at once (a 503 problem, `_run`), said once in the hub's log when
it begins and once when it ends; the first request after it answers again is served.
"""

import logging
import threading
import time

import psycopg
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from eventstore.backends import place
from eventstore.errors import InvalidInput, NotFound, StorageUnavailable
from eventstore.ids import now_ms
from eventstore.layers import CONTRACT_LAYER
from eventstore.postgres import vacuum

from .storage import (AUTHORED_ROWS_SQL, AUTHORS_TABLE, HEADS_SQL, NAMED_SQL, PAGE_VERSIONS_COLUMN,
                      PAGE_VERSIONS_TABLE, REDACTION_ROWS_SQL, REDACTIONS_TABLE, AgentInfo, Committed, HubStorage,
                      decode_stored, encode_stored, page_version_sql, plan_group, STORED_PAGE, record_page_versions,
                      record_redactions, redacted_rows, refold_pages, refuse_loops, stored_page_versions,
                      stored_redactions)

CHANNEL = "mindlog_hub"
REDACTIONS = "mindlog_hub_redactions"
"""NOTIFYed by a commit whose redaction removed a body (its head): `watch_redactions`."""
SCHEMA = """
CREATE TABLE IF NOT EXISTS hub_counter (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), position BIGINT NOT NULL);
INSERT INTO hub_counter VALUES (TRUE, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS hub_events (
    position BIGINT PRIMARY KEY, id TEXT NOT NULL UNIQUE, digest TEXT NOT NULL, agent TEXT NOT NULL,
    layer TEXT NOT NULL, recorded_at BIGINT NOT NULL, data BYTEA NOT NULL);
CREATE INDEX IF NOT EXISTS hub_events_layer ON hub_events(layer, position);
CREATE TABLE IF NOT EXISTS hub_agents (
    name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, created_at BIGINT NOT NULL, revoked_at BIGINT);
CREATE TABLE IF NOT EXISTS hub_pulls (agent TEXT NOT NULL, cursor BIGINT NOT NULL, at BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS hub_pulls_agent ON hub_pulls(agent, at);
""" + PAGE_VERSIONS_TABLE + REDACTIONS_TABLE.format(position="BIGINT")
HEADS = HEADS_SQL.format(p="%s")
IDS = "SELECT unnest(%s::text[])"
REDACTION_ROWS = REDACTION_ROWS_SQL.format(p="%s", ids=IDS)
AUTHORED_ROWS = AUTHORED_ROWS_SQL.format(p="%s", ids=IDS)
NAMED = NAMED_SQL.format(ids=IDS)
CONNECTION_WAIT = 5.0
"""Seconds a request waits for a pooled connection (psycopg_pool's default, 30, kept clients waiting that long
for an answer while the database was down); then the database is asked whether it answers at all."""
PROBE_SECONDS = 2
"""connect_timeout of the connection that asks whether the database answers (libpq's smallest)."""
log = logging.getLogger("mindlog.hub")


class _Lost(Exception):
    """A pooled connection that broke under its work, or none to be had: the database may have gone away."""


class PostgresHubStorage(HubStorage):
    def __init__(self, url: str, pool_size: int = 4):
        self.url, self.where, self.pool_size = url, place(url), pool_size
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(727272)")
            try:
                columns = [name for (name,) in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = 'hub_page_versions' "
                    "AND table_schema = current_schema()")]
                authors = conn.execute("SELECT to_regclass(%s)", (AUTHORS_TABLE,)).fetchone()[0]
                with conn.transaction():
                    if columns and PAGE_VERSIONS_COLUMN not in columns:
                        conn.execute("DROP TABLE hub_page_versions")  # made before its newest column: filled again
                    conn.execute(SCHEMA)
                    if PAGE_VERSIONS_COLUMN not in columns:
                        stored_page_versions(self._versions(conn), STORED_PAGE.format(p="%s"))
                    if authors is None:
                        stored_redactions(self._versions(conn), STORED_PAGE.format(p="%s"))
            finally:
                conn.execute("SELECT pg_advisory_unlock(727272)")
        # The pool would log each failed connection and each broken one it drops: an outage is said once, here.
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        self._outage = threading.Lock()
        self._down_since: float | None = None  # monotonic time the database stopped answering
        self.pool = self._new_pool()

    def _new_pool(self) -> ConnectionPool:
        return ConnectionPool(self.url, min_size=1, max_size=self.pool_size, timeout=CONNECTION_WAIT, open=True)

    def close(self) -> None:
        self._stop_watching()
        self.pool.close()

    def _run(self, work):
        """`work(conn)` on a pooled connection. A connection that broke since it was pooled (the database
        restarted) is dropped with every other broken one and the work done again once; a database that does
        not answer is a StorageUnavailable at once (while it is down, without waiting on the pool).

        No check runs at checkout: a round trip more for each of a push's two connections, for a failure that
        costs one retry here."""
        if self._down_since is not None:
            self._check_answers()
        try:
            return self._once(work)
        except _Lost as lost:
            self._check_answers(lost.__cause__)
        try:
            return self._once(work)
        except _Lost as lost:
            raise self._went_down(lost.__cause__) from None

    def _once(self, work):
        try:
            with self.pool.connection() as conn:
                try:
                    return work(conn)
                except psycopg.OperationalError as exc:
                    if conn.broken or conn.closed:
                        raise _Lost() from exc
                    raise
        except (PoolTimeout, PoolClosed) as exc:
            raise _Lost() from exc

    def _check_answers(self, cause: BaseException | None = None) -> None:
        """Asks the database, on a connection of its own, whether it answers: if not, StorageUnavailable. If it
        answers after an outage, the outage ends, with a new pool (the old one's connections were made before it
        and its reconnections back off for minutes); after a broken connection (`cause`), the pool drops its
        broken ones."""
        try:
            psycopg.connect(self.url, connect_timeout=PROBE_SECONDS).close()
        except psycopg.Error as exc:
            raise self._went_down(exc) from None
        with self._outage:
            down_since, self._down_since = self._down_since, None
            if down_since is not None:
                old, self.pool = self.pool, self._new_pool()
        if down_since is not None:
            old.close(timeout=0)
            log.warning("the hub's database %s answers again (it did not for %.1f s)", self.where,
                        time.monotonic() - down_since)
        elif cause is not None:
            self.pool.check()

    def _went_down(self, exc: BaseException) -> StorageUnavailable:
        """The refusal of every request while the database does not answer; its first one logs the outage and
        closes the pool (whose reconnections would go on failing)."""
        with self._outage:
            began = self._down_since is None
            if began:
                self._down_since = time.monotonic()
                pool = self.pool
        if began:
            pool.close(timeout=0)
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0].strip()  # not libpq's hint below it
            log.warning("the hub's database %s does not answer (%s): requests are answered 503 until it does",
                        self.where, reason)
        return StorageUnavailable("the hub's database does not answer; retry later")

    def _insert_agent(self, name, token_hash, at):
        def insert(conn):
            try:
                conn.execute("INSERT INTO hub_agents VALUES (%s, %s, %s, NULL)", (name, token_hash, at))
            except psycopg.errors.UniqueViolation:
                raise InvalidInput(f"agent {name!r} exists already (revoke it to issue a new token)") from None

        self._run(insert)

    def _agent_row(self, token_hash):
        return self._run(lambda conn: conn.execute(
            "SELECT name, token_hash, revoked_at FROM hub_agents WHERE token_hash = %s", (token_hash,)).fetchone())

    def _request_row(self, token_hash):
        return self._run(lambda conn: conn.execute(
            "SELECT name, token_hash, revoked_at, (SELECT COALESCE(MAX(position), 0) FROM hub_events WHERE layer = %s), "
            "(SELECT position FROM hub_counter) FROM hub_agents WHERE token_hash = %s",
            (CONTRACT_LAYER, token_hash)).fetchone())

    def revoke_agent(self, name):
        now = now_ms()
        updated = self._run(lambda conn: conn.execute(
            "UPDATE hub_agents SET revoked_at = %s, name = %s WHERE name = %s", (now, f"{name}#revoked-{now}", name)
        ).rowcount)
        if not updated:
            raise NotFound(f"no agent {name!r} on this hub")

    def agents(self):
        rows = self._run(lambda conn: conn.execute(
            "SELECT name, created_at, revoked_at FROM hub_agents ORDER BY created_at").fetchall())
        return [AgentInfo(name=n.split("#")[0], created_at=c, revoked_at=r) for n, c, r in rows]

    @classmethod
    def _versions(cls, conn):
        """hub_page_versions' statements, run on `conn` (in its transaction)."""

        def many(sql, rows):
            if rows:
                with conn.cursor() as cursor:
                    cursor.executemany(sql, rows)

        return page_version_sql("%s", IDS, list, many, lambda sql, params: conn.execute(sql, params).fetchall(),
                                lambda id: cls._stored(conn, id))

    def _commit_group(self, batches, pulls, checked=None):  # no token cache (push_state reads): none is stale
        committed, redacted = self._run(lambda conn: self._commit_on(conn, batches, pulls))
        if redacted:
            self._run(lambda conn: vacuum(conn, ["hub_events"]))
        return committed

    def _commit_on(self, conn, batches, pulls) -> tuple[Committed, bool]:
        """(what the group commit did, whether a redaction in it rewrote stored events)."""
        updates = None
        with conn.transaction():
            head = conn.execute("SELECT position FROM hub_counter WHERE one FOR UPDATE").fetchone()[0]
            known = {id: (digest, pos) for id, digest, pos in conn.execute(
                "SELECT id, digest, position FROM hub_events WHERE id = ANY(%s)",
                (list({e.id for events in batches for e in events}),))}
            rows, outcomes, layers = plan_group(batches, known, head + 1)
            with conn.cursor() as cursor:
                if rows:
                    now = now_ms()
                    cursor.executemany("INSERT INTO hub_events VALUES (%s, %s, %s, %s, %s, %s, %s)",
                                       [(head + 1 + i, e.id, e.digest, e.agent, e.layer, now, encode_stored(e))
                                        for i, e in enumerate(rows)])
                    conn.execute("UPDATE hub_counter SET position = %s WHERE one", (head + len(rows),))
                    versions = self._versions(conn)
                    record_page_versions(versions, rows)
                    refuse_loops(versions, rows)
                    record_redactions(versions, rows, head + 1)
                    updates = redacted_rows(rows, lambda id: self._stored(conn, id))
                    if updates:
                        cursor.executemany("UPDATE hub_events SET data = %s WHERE id = %s", updates)
                        refold_pages(versions, [id for _data, id in updates])
                    payload = f"{head + len(rows)} {','.join(sorted(layers))}"
                    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
                    if updates:
                        conn.execute("SELECT pg_notify(%s, %s)", (REDACTIONS, str(head + len(rows))))
                if pulls:
                    cursor.executemany("INSERT INTO hub_pulls VALUES (%s, %s, %s)",
                                       [(p.agent, p.cursor, p.at) for p in pulls])
            return Committed(outcomes=outcomes, head=head + len(rows), layers=layers), bool(updates)

    @staticmethod
    def _stored(conn, id):
        row = conn.execute("SELECT layer, data FROM hub_events WHERE id = %s", (id,)).fetchone()
        return (row[0], bytes(row[1])) if row else None

    def stored(self, id):
        return self._run(lambda conn: self._stored(conn, id))

    def page_heads(self, layer, slug):
        return [(id, bool(held)) for id, held in self._run(lambda conn: conn.execute(HEADS, (layer, slug)).fetchall())]

    def named_versions(self, ids):
        if not ids:
            return set()
        return {id for (id,) in self._run(lambda conn: conn.execute(NAMED, (list(ids),)).fetchall())}

    def pull_rows(self, after, layers, limit):
        if not layers:
            return []
        rows = self._run(lambda conn: conn.execute(
            "SELECT position, recorded_at, data FROM hub_events WHERE position > %s AND layer = ANY(%s) "
            "ORDER BY position LIMIT %s", (after, layers, limit)).fetchall())
        return [(pos, at, bytes(data)) for pos, at, data in rows]

    def redaction_rows(self, after, upto, layers):
        if not layers:
            return []
        rows = self._run(lambda conn: conn.execute(REDACTION_ROWS, (after, upto, layers)).fetchall())
        return [(pos, at, bytes(data)) for pos, at, data in rows]

    def redactions_apart_rows(self, agent, after, upto, limit, besides, layers=()):
        rows = self._run(lambda conn: conn.execute(AUTHORED_ROWS, (agent, after, upto, list(layers), after, upto,
                                                                   list(besides), limit)).fetchall())
        return [(pos, at, bytes(data)) for pos, at, data in rows]

    def head(self):
        return self._run(lambda conn: conn.execute("SELECT position FROM hub_counter").fetchone()[0])

    def layers_of(self, ids):
        return self._column_of(ids, "layer")

    def positions_of(self, ids):
        return self._column_of(ids, "position")

    def _column_of(self, ids, column: str) -> dict:
        return dict(self._run(lambda conn: conn.execute(
            f"SELECT id, {column} FROM hub_events WHERE id = ANY(%s)", (list(ids),)).fetchall()))

    def _watch_loop(self, callback, stop):
        """LISTENs on a connection of its own; after a lost connection, reconnects with backoff and
        reports the head with unknown layers (notifications may have been missed meanwhile)."""
        backoff = 0.1
        while not stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    callback(self.head(), None)
                    backoff = 0.1
                    while not stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            head, _, layers = note.payload.partition(" ")
                            callback(int(head), set(layers.split(",")) if layers else set())
            except (psycopg.Error, StorageUnavailable):
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def watch_redactions(self, callback):
        self._stop_redactions = threading.Event()
        self._redactions = threading.Thread(target=self._redactions_loop, args=(callback, self._stop_redactions),
                                            daemon=True, name="hub-redactions")
        self._redactions.start()

    def _redactions_loop(self, callback, stop):
        """LISTENs for redactions on a connection of its own; after a lost connection, reconnects with backoff and
        calls `callback` once (one may have been missed meanwhile)."""
        backoff, missed = 0.1, False
        while not stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {REDACTIONS}")
                    if missed:
                        callback()
                    backoff, missed = 0.1, False
                    while not stop.is_set():
                        if any(True for _note in conn.notifies(timeout=0.5)):
                            callback()
            except psycopg.Error:
                missed = True
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def latest_position(self, layer):
        return self._run(lambda conn: conn.execute(
            "SELECT COALESCE(MAX(position), 0) FROM hub_events WHERE layer = %s", (layer,)).fetchone()[0])

    def latest_of_layer(self, layer, at_ms):
        row = self._run(lambda conn: conn.execute(
            "SELECT position, recorded_at, data FROM hub_events WHERE layer = %s AND recorded_at <= %s "
            "ORDER BY position DESC LIMIT 1", (layer, at_ms if at_ms is not None else 1 << 62)).fetchone())
        return decode_stored(bytes(row[2]), row[0], row[1]) if row else None

    def received_by(self, agent, at_ms):
        row = self._run(lambda conn: conn.execute(
            "SELECT MAX(cursor) FROM hub_pulls WHERE agent = %s AND at <= %s",
            (agent, at_ms if at_ms is not None else 1 << 62)).fetchone())
        return row[0] or 0

