"""Append (single and 100-event batches) and read-all: mindlog against the `eventsourcing`
library's SQLite recorder and raw sqlite3 inserts of the same bytes, side by side in one process.

All three use WAL mode and the same `synchronous` setting (FULL by default, the durable one;
`--synchronous NORMAL` compares the faster setting). Usage: python bench/bench_append.py [-n 2000]
"""

import argparse
import shutil
import sqlite3
import statistics
import time
import uuid

from common import table, timed, workdir

from eventstore.envelope import encode_body, new_event
from eventstore.kinds import LoopAppend
from eventstore.sqlite import SQLiteLog


def make_events(n):
    return [new_event(LoopAppend(role="user", content=[{"type": "text", "text": f"message number {i}"}]),
                      agent="bench", layer="loop") for i in range(n)]


class Mindlog:
    name = "mindlog"

    def __init__(self, path, sync):
        self.log = SQLiteLog(path, synchronous=sync)

    def prepare(self, events):
        return events

    def single(self, events):
        for event in events:
            self.log.append([event])

    def batch(self, events):
        for i in range(0, len(events), 100):
            self.log.append(events[i:i + 100])

    def read_all(self):
        return sum(1 for _ in self.log.read())


class EventSourcing:
    name = "eventsourcing"

    def __init__(self, path, sync):
        from eventsourcing.persistence import StoredEvent
        from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteConnectionPool, SQLiteDatastore

        create = SQLiteConnectionPool._create_connection

        def create_with_sync(pool):
            conn = create(pool)
            conn._sqlite_conn.execute(f"PRAGMA synchronous = {sync}")
            return conn

        SQLiteConnectionPool._create_connection = create_with_sync
        self.StoredEvent = StoredEvent
        self.store = SQLiteDatastore(str(path))
        self.recorder = SQLiteApplicationRecorder(self.store)
        self.recorder.create_table()

    def prepare(self, events):
        return [self.StoredEvent(originator_id=uuid.UUID(e.id), originator_version=1, topic=e.kind,
                                 state=encode_body(e.body)) for e in events]

    def single(self, events):
        for stored in events:
            self.recorder.insert_events([stored])

    def batch(self, stored):
        for i in range(0, len(stored), 100):
            self.recorder.insert_events(stored[i:i + 100])

    def read_all(self):
        count, start = 0, 1
        while True:
            page = self.recorder.select_notifications(start, 10000)
            if not page:
                return count
            count += len(page)
            start = page[-1].id + 1


class RawSQLite:
    name = "raw sqlite3"

    def __init__(self, path, sync):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute(f"PRAGMA synchronous = {sync}")
        self.db.execute("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, id TEXT UNIQUE, body BLOB)")

    def prepare(self, events):
        return [(e.id, encode_body(e.body)) for e in events]

    def single(self, rows):
        for row in rows:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("INSERT INTO events (id, body) VALUES (?, ?)", row)
            self.db.execute("COMMIT")

    def batch(self, rows):
        for i in range(0, len(rows), 100):
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("INSERT INTO events (id, body) VALUES (?, ?)", rows[i:i + 100])
            self.db.execute("COMMIT")

    def read_all(self):
        return sum(1 for _ in self.db.execute("SELECT seq, id, body FROM events"))


def timed_append(fresh, method: str, n: int) -> float:
    """Median time of appending n prepared events to a fresh store (preparation not timed)."""
    times = []
    for _ in range(3):
        store = fresh()
        prepared = store.prepare(make_events(n))
        start = time.perf_counter()
        getattr(store, method)(prepared)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=2000, help="events per single-append run")
    parser.add_argument("--batch-n", type=int, default=20000, help="events per batched run")
    parser.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL"])
    args = parser.parse_args()
    base = workdir("append")
    shutil.rmtree(base)
    base.mkdir()
    results = {}
    round_no = [0]
    for backend in (Mindlog, EventSourcing, RawSQLite):
        def fresh():
            round_no[0] += 1
            return backend(str(base / f"{backend.__name__}-{round_no[0]}.db"), args.synchronous)

        single = timed_append(fresh, "single", args.n)
        batched = timed_append(fresh, "batch", args.batch_n)
        reader = fresh()
        reader.batch(reader.prepare(make_events(args.batch_n)))
        read = timed(reader.read_all)
        results[backend.name] = (args.n / single, args.batch_n / batched, args.batch_n / read)

    ours = results["mindlog"]
    rows = [("backend", "single append ev/s", "batch-100 append ev/s", "read-all ev/s")]
    for name, (s, b, r) in results.items():
        rows.append((name, f"{s:,.0f}", f"{b:,.0f}", f"{r:,.0f}"))
    table(f"append and read, WAL, synchronous={args.synchronous} (median of 3)", rows)
    ratio_rows = [("mindlog vs", "single", "batch-100", "read-all")]
    for name in ("eventsourcing", "raw sqlite3"):
        s, b, r = results[name]
        ratio_rows.append((name, f"{ours[0] / s:.2f}x", f"{ours[1] / b:.2f}x", f"{ours[2] / r:.2f}x"))
    table("ratios (higher is better for mindlog)", ratio_rows)
    print("\nmindlog's read-all decodes every body into its typed Struct; the baselines return raw rows.")
    shutil.rmtree(base)


if __name__ == "__main__":
    main()
