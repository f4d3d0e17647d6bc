"""Append (single and 100-event batches) and read-all: mindlog against the `eventsourcing` library's
SQLite recorder and raw sqlite3, side by side in one process.

What each side does in the timed part (making the events — encoding each body, its digest — and
each baseline's own preparation are done before the clock starts, for all four alike):

- mindlog: `SQLiteLog.append(events)` of events made by `new_event` (what `Memory` appends after
  validation and the secret scan, which are not timed here): numbering, the recording time, the
  hash-chain link, zstd above 512 bytes, the insert of the whole envelope row, the commit.
- eventsourcing: `SQLiteApplicationRecorder.insert_events` of `StoredEvent`s (id, version, topic,
  body bytes) — the library's own transaction and unique (id, version) key.
- raw sqlite3, same row: `BEGIN IMMEDIATE; INSERT; COMMIT` of mindlog's own row (every column the
  log stores, seq and chain computed beforehand by the log's own `plan_rows`) into a table made by the
  log's own schema (`SCHEMA`) with the log's pragmas, through the log's own one-row INSERT: the floor
  for "the same durable insert". The row and table are imported, so they follow any change to the log
  (its byte columns come as bytearrays, which sqlite3 binds without the adapter lookup it makes for
  every `bytes` value: the baseline gets that shortcut too). Batches go in by `executemany`.
- raw sqlite3, same row, autocommit: the same, but a single append is the INSERT alone, its own transaction
  (as mindlog's is): the same syscalls as `BEGIN IMMEDIATE; INSERT; COMMIT` (strace: 6 fcntl locks, 4
  pwrites of 2 WAL frames, 1 fdatasync per append on every side), two statement calls fewer.
- raw sqlite3, (id, body): the same statements inserting only an id (unique) and the body, as `bytes`.

All use WAL mode and the same `synchronous` setting (FULL by default, the durable one; `--synchronous
NORMAL` or `OFF` compare the CPU work alone, without the fsync every side pays). The backends take
turns in small slices of the work (10 single appends, 5 batches), in a rotating order, each on its
own database, so a load swing on a shared machine (another process's fsyncs) hits all of them alike;
each figure is the total events over the total time of its slices. A second ratio table counts only
this process's CPU seconds (no fsync wait, no time spent waiting for a core): on a crowded machine it
is steadier than the wall-clock ratios, which are the ones the targets are about.

What separates mindlog's single append from raw sqlite3's at FULL is not I/O: both make the same
syscalls, write the same bytes and frames to the WAL and checkpoint alike. It is the CPU work each does
after every fsync, which runs from cold caches (the process slept, the vCPU idled): the same work costs
4-5 times what it costs warm (the row's recording time, chain link and blobs, which the raw baseline made
before the clock started, cost mindlog ~1.5 us warm and 6-8 us here). See the README's Benchmarks.
Usage: python bench/bench_append.py [-n 2000] [--batch-n 20000]
"""

import argparse
import shutil
import sqlite3
import time
import uuid

from common import table, workdir

from eventstore.envelope import encode_body, new_event
from eventstore.kinds import LoopAppend
from eventstore.recorder import ZERO_CHAIN, plan_rows, rows_of
from eventstore.sqlite import COLUMNS, SCHEMA, SQLiteLog, insert_rows


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
    name = "raw sqlite3 (id, body)"
    insert = "INSERT INTO events (id, body) VALUES (?, ?)"

    def __init__(self, path, sync):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute(f"PRAGMA synchronous = {sync}")
        self.create()
        self.seq = 0

    def create(self):
        self.db.execute("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, id TEXT UNIQUE, body BLOB)")

    def prepare(self, events):
        return [(e.id, encode_body(e.body)) for e in events]

    def single(self, rows):
        for row in rows:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute(self.insert, row)
            self.db.execute("COMMIT")

    def batch(self, rows):
        for i in range(0, len(rows), 100):
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany(self.insert, rows[i:i + 100])
            self.db.execute("COMMIT")

    def read_all(self):
        return sum(1 for _ in self.db.execute("SELECT seq, id, body FROM events"))


class RawSameRow(RawSQLite):
    name = "raw sqlite3, same row"
    insert = insert_rows(1)

    def create(self):
        self.db.execute("PRAGMA secure_delete = ON")
        for statement in SCHEMA:
            self.db.execute(statement)
        self.chain = ZERO_CHAIN

    def prepare(self, events):
        values, _seqs, self.seq, self.chain = plan_rows(events, {}, self.seq,
                                                        self.chain, time.time_ns() // 1_000_000)
        return rows_of(values)

    def read_all(self):
        return sum(1 for _ in self.db.execute(f"SELECT {COLUMNS} FROM events"))


class RawSameRowAutocommit(RawSameRow):
    name = "raw sqlite3, same row, autocommit"

    def single(self, rows):
        for row in rows:
            self.db.execute(self.insert, row)


BACKENDS = (Mindlog, EventSourcing, RawSameRow, RawSameRowAutocommit, RawSQLite)


def interleaved(stores: dict, method: str, n: int, slice_n: int) -> tuple[dict[str, float], dict[str, float]]:
    """Events/s of each store doing `method` over n fresh events, the stores taking turns slice by slice:
    by the wall clock, and per CPU second of this process (which a crowded run queue does not stretch;
    the wait for an fsync is not in it)."""
    prepared = {name: [] for name in stores}
    for start in range(0, n, slice_n):
        events = make_events(min(slice_n, n - start))
        for name, store in stores.items():
            prepared[name].append(store.prepare(events))
    spent = dict.fromkeys(stores, 0.0)
    cpu = dict.fromkeys(stores, 0.0)
    names = list(stores)
    for turn in range(len(prepared[names[0]])):
        for name in names[turn % len(names):] + names[:turn % len(names)]:
            start, start_cpu = time.perf_counter(), time.process_time()
            getattr(stores[name], method)(prepared[name][turn])
            spent[name] += time.perf_counter() - start
            cpu[name] += time.process_time() - start_cpu
    return {name: n / spent[name] for name in stores}, {name: n / cpu[name] for name in stores}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=2000, help="events appended one at a time, per backend")
    parser.add_argument("--batch-n", type=int, default=20000, help="events appended in batches of 100, per backend")
    parser.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL", "OFF"])
    args = parser.parse_args()
    base = workdir("append")
    shutil.rmtree(base)
    base.mkdir()

    def fresh(kind):
        return {b.name: b(str(base / f"{b.__name__}-{kind}.db"), args.synchronous) for b in BACKENDS}

    single, single_cpu = interleaved(fresh("single"), "single", args.n, 10)
    stores = fresh("batch")
    batched, batched_cpu = interleaved(stores, "batch", args.batch_n, 500)
    spent = dict.fromkeys(stores, 0.0)
    for _round in range(3):
        for name, store in stores.items():
            start = time.perf_counter()
            count = store.read_all()
            spent[name] += time.perf_counter() - start
    read = {name: 3 * count / spent[name] for name in stores}

    rows = [("backend", "single append ev/s", "batch-100 append ev/s", "read-all ev/s")]
    for name in stores:
        rows.append((name, f"{single[name]:,.0f}", f"{batched[name]:,.0f}", f"{read[name]:,.0f}"))
    table(f"append and read, WAL, synchronous={args.synchronous} (interleaved slices)", rows)
    ratio_rows = [("mindlog vs", "single", "batch-100", "read-all")]
    for name in list(stores)[1:]:
        ratio_rows.append((name, f"{single['mindlog'] / single[name]:.2f}x", f"{batched['mindlog'] / batched[name]:.2f}x",
                           f"{read['mindlog'] / read[name]:.2f}x"))
    table("ratios (higher is better for mindlog)", ratio_rows)
    cpu_rows = [("mindlog vs, per CPU second", "single", "batch-100")]
    for name in list(stores)[1:]:
        cpu_rows.append((name, f"{single_cpu['mindlog'] / single_cpu[name]:.2f}x",
                         f"{batched_cpu['mindlog'] / batched_cpu[name]:.2f}x"))
    table("ratios of the CPU work (a steadier view on a busy machine; not the target, which is wall time)", cpu_rows)
    print("\nmindlog's read-all decodes every body into its typed Struct; the baselines return raw rows.")
    shutil.rmtree(base)


if __name__ == "__main__":
    main()
