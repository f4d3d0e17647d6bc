"""The event log in SQLite: WAL mode, synchronous=FULL by default, one writer at a time."""

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from .envelope import (ZERO_CHAIN, Event, chain_next, check_event, compute_digest, decode_body,
                       encode_body, pack_body, unpack_body)
from .errors import IdConflict, InvalidInput
from .ids import now_ms
from .recorder import Recorder, VerifyReport

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    ts INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    agent TEXT NOT NULL,
    layer TEXT NOT NULL,
    kind TEXT NOT NULL,
    codec INTEGER NOT NULL,
    body BLOB NOT NULL,
    digest TEXT NOT NULL,
    chain TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_kind ON events(kind, seq);
CREATE INDEX IF NOT EXISTS events_layer ON events(layer, seq);
CREATE INDEX IF NOT EXISTS events_recorded_at ON events(recorded_at);
"""

COLUMNS = "seq, id, ts, recorded_at, agent, layer, kind, codec, body, digest, chain"


def row_to_event(row) -> Event:
    seq, id, ts, recorded_at, agent, layer, kind, codec, body, digest, chain = row
    return Event(id=id, ts=ts, agent=agent, layer=layer, body=decode_body(unpack_body(codec, body)),
                 digest=digest, seq=seq, recorded_at=recorded_at, chain=chain)


class SQLiteLog(Recorder):
    def __init__(self, path: str | Path, *, synchronous: str = "FULL", trusted: bool = True):
        """`synchronous` is SQLite's: FULL survives power loss, NORMAL only a process crash.

        `trusted=False` recomputes every appended event's digest (for events from elsewhere).
        """
        self.path = str(path)
        self.trusted = trusted
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=60, check_same_thread=False)
        self.db.execute("PRAGMA busy_timeout = 60000")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute(f"PRAGMA synchronous = {synchronous}")
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name='events'").fetchone():
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        self.db.execute(statement)
            finally:
                if self.db.in_transaction:
                    self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    # --- write --------------------------------------------------------------------------------

    def append(self, events: Sequence[Event]) -> list[int]:
        prepared = []
        for event in events:
            raw = check_event(event) if not self.trusted else encode_body(event.body)
            if self.trusted and not event.digest:
                raise InvalidInput(f"event {event.id} has no digest")
            prepared.append((event, raw))
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            seqs = self._append_locked(prepared)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return seqs

    def _append_locked(self, prepared) -> list[int]:
        db = self.db
        last = db.execute("SELECT seq, chain, recorded_at FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        seq, chain, last_recorded = last if last else (0, ZERO_CHAIN, 0)
        recorded_at = max(now_ms(), last_recorded)
        seen: dict[str, tuple[str, int]] = {}
        rows, seqs = [], []
        for event, raw in prepared:
            known = seen.get(event.id)
            if known is None:
                found = db.execute("SELECT digest, seq FROM events WHERE id = ?", (event.id,)).fetchone()
                known = (found[0], found[1]) if found else None
            if known is not None:
                if known[0] != event.digest:
                    raise IdConflict(f"event {event.id} is already in the log with a different digest")
                seqs.append(known[1])
                continue
            seq += 1
            chain = chain_next(chain, event.digest)
            codec, stored = pack_body(raw)
            rows.append((seq, event.id, event.ts, recorded_at, event.agent, event.layer, event.kind,
                         codec, stored, event.digest, chain))
            seen[event.id] = (event.digest, seq)
            seqs.append(seq)
        if rows:
            db.executemany(f"INSERT INTO events ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        return seqs

    # --- read ---------------------------------------------------------------------------------

    def read_rows(self, after: int = 0, upto: int | None = None, *, kinds=None, layers=None,
                  since_ms=None, limit=None, newest_first=False) -> Iterator[tuple]:
        where, params = ["seq > ?"], [after]
        if upto is not None:
            where.append("seq <= ?")
            params.append(upto)
        if kinds:
            where.append(f"kind IN ({','.join('?' * len(kinds))})")
            params.extend(kinds)
        if layers:
            where.append(f"layer IN ({','.join('?' * len(layers))})")
            params.extend(layers)
        if since_ms is not None:
            where.append("recorded_at >= ?")
            params.append(since_ms)
        sql = f"SELECT {COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY seq {'DESC' if newest_first else 'ASC'}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        # A dedicated cursor so that a reader and a writer can share this connection.
        yield from self.db.execute(sql, params)

    def read(self, after=0, upto=None, *, kinds=None, layers=None, since_ms=None, limit=None,
             newest_first=False) -> Iterator[Event]:
        for row in self.read_rows(after, upto, kinds=kinds, layers=layers, since_ms=since_ms,
                                  limit=limit, newest_first=newest_first):
            yield row_to_event(row)

    def get(self, id: str) -> Event | None:
        row = self.db.execute(f"SELECT {COLUMNS} FROM events WHERE id = ?", (id,)).fetchone()
        return row_to_event(row) if row else None

    def get_by_seq(self, seq: int) -> Event | None:
        row = self.db.execute(f"SELECT {COLUMNS} FROM events WHERE seq = ?", (seq,)).fetchone()
        return row_to_event(row) if row else None

    def head(self) -> int:
        row = self.db.execute("SELECT MAX(seq) FROM events").fetchone()
        return row[0] or 0

    def seq_at(self, recorded_at_ms: int) -> int:
        row = self.db.execute("SELECT MAX(seq) FROM events WHERE recorded_at <= ?", (recorded_at_ms,)).fetchone()
        return row[0] or 0

    def recorded_at(self, seq: int) -> int | None:
        row = self.db.execute("SELECT recorded_at FROM events WHERE seq = ?", (seq,)).fetchone()
        return row[0] if row else None

    def verify(self, progress=None) -> VerifyReport:
        """Checks that seqs are gapless, every body decodes, every digest and the chain hold."""
        expected_seq, chain, checked = 0, ZERO_CHAIN, 0
        head = self.head()
        for seq, id, ts, _rec, agent, layer, kind, codec, body, digest, stored_chain in self.db.execute(
                f"SELECT {COLUMNS} FROM events ORDER BY seq"):
            expected_seq += 1

            def bad(problem):
                return VerifyReport(ok=False, checked=checked, head=head, first_bad_seq=seq, problem=problem)

            if seq != expected_seq:
                return bad(f"gap: expected seq {expected_seq}, found {seq}")
            try:
                raw = unpack_body(codec, body)
                decoded = decode_body(raw)
            except Exception as exc:  # noqa: BLE001 - any failure here is corruption to report
                return bad(f"body does not decode: {exc}")
            if decoded.__struct_config__.tag != kind:
                return bad(f"kind column {kind!r} disagrees with the body's {decoded.__struct_config__.tag!r}")
            if compute_digest(id, ts, agent, layer, kind, raw) != digest:
                return bad("digest mismatch: the event's content was changed after it was appended")
            chain = chain_next(chain, digest)
            if chain != stored_chain:
                return bad("chain mismatch: an event before this one was changed, removed or reordered")
            checked += 1
            if progress:
                progress(checked)
        return VerifyReport(ok=True, checked=checked, head=head)
