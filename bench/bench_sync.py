"""Push and pull through a hub over loopback, against appending the same events locally; and the
PostgreSQL hub's batched push against the `eventsourcing` library's PostgreSQL recorder.

The hub runs as its own process (`mem serve`, SQLite, synchronous=FULL like the local log).
PostgreSQL is started for the run by this script (as the tests do). Usage:
python bench/bench_sync.py [-n 100000] [--pg-n 20000] [--no-pg]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from common import table, workdir

from eventstore.envelope import encode_body, new_event
from eventstore.kinds import EntryAppend
from projections.memory import Memory
from projections.fold import no_cyclic_gc
from projections.replay import replay
from sync import client as sync_client
from sync.client import HubClient, Remote, pull, push
from sync.storage import open_storage
from sync.wire import Contract, ContractLayer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import pg  # noqa: E402  (the tests' way to run PostgreSQL, root included)
from hubserver import free_port  # noqa: E402

CONTRACT = Contract(layers={"insights": ContractLayer(path="memory/insights.md", format="entries",
                                                      producers=["*"], consumers=["*"])})


def events(n: int, agent: str):
    return [new_event(EntryAppend(type="FACT", date="2026-11-29", content=f"fact number {i} about the system"),
                      agent=agent, layer="insights") for i in range(n)]


def serve(db: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    mem = shutil.which("mem") or "mem"
    proc = subprocess.Popen([mem, "serve", "--db", db, "--port", str(port)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(url + "/health", timeout=1)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("hub did not start")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far (all its threads), from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_loopback(n: int) -> list[tuple]:
    base = workdir("sync")
    shutil.rmtree(base)
    base.mkdir()
    hub_db = str(base / "hub.db")
    admin = open_storage(hub_db)
    admin.apply_contract(CONTRACT)
    tokens = {a: admin.add_agent(a) for a in ("writer", "reader")}
    admin.close()

    local = Memory.init(base / "local", "writer")
    batch = events(n, "writer")
    start = time.perf_counter()
    for i in range(0, n, 1000):
        local.log.append(batch[i:i + 1000])
    local_s = time.perf_counter() - start

    writer = Memory.init(base / "writer", "writer")
    for i in range(0, n, 10_000):
        writer.log.append(batch[i:i + 10_000])
    writer.set_contract(CONTRACT)  # as `mem remote add` does: the contract is known before anything is written
    writer.refresh()  # as after ordinary writes: the views are up to date before a push
    proc, url = serve(hub_db)
    try:
        remote = Remote(name="hub", url=url, token_file="-")
        client = HubClient(url, tokens["writer"])
        hub_cpu, own_cpu, start = cpu_seconds(proc.pid), time.process_time(), time.perf_counter()
        report = push(writer, remote, client)
        push_s = time.perf_counter() - start
        push_cpu = (cpu_seconds(proc.pid) - hub_cpu, time.process_time() - own_cpu)
        assert report.pushed == n, report

        reader = Memory.init(base / "reader", "reader")
        reader.set_contract(CONTRACT)
        client = HubClient(url, tokens["reader"])
        with PagesTimed() as pages:
            hub_cpu, own_cpu, pull_start = cpu_seconds(proc.pid), time.process_time(), time.perf_counter()
            pulled = pull(reader, remote, client)
            pull_s = time.perf_counter() - pull_start
            pull_cpu = (cpu_seconds(proc.pid) - hub_cpu, time.process_time() - own_cpu)
        assert pulled.pulled == n, pulled
    finally:
        proc.terminate()
        proc.wait()
    with no_cyclic_gc():  # as the catch-up builds them
        start = time.perf_counter()
        replay(reader, keep_hand_edits=True)
        replay_s = time.perf_counter() - start
    appended_s = pages.appended - pull_start
    local_rate = n / local_s
    return [
        ("append locally (batches of 1,000)", f"{local_rate:,.0f}", "1.00x", ""),
        (f"push to the hub over loopback (CPU s: hub {push_cpu[0]:.2f}, client {push_cpu[1]:.2f})",
         f"{n / push_s:,.0f}", f"{(n / push_s) / local_rate:.2f}x",
         ">= 50,000/s and 0.3x"),
        (f"pull from the hub over loopback, + views (CPU s: hub {pull_cpu[0]:.2f}, client {pull_cpu[1]:.2f})",
         f"{n / pull_s:,.0f}", f"{(n / pull_s) / local_rate:.2f}x",
         ">= 50,000/s and 0.3x"),
        (f"  its pages fetched, checked, appended ({appended_s:.2f} s of {pull_s:.2f} s)", f"{n / appended_s:,.0f}",
         f"{(n / appended_s) / local_rate:.2f}x", ""),
        (f"  views built alone (`mem replay` of that log, {replay_s:.2f} s)", f"{n / replay_s:,.0f}",
         f"{(n / replay_s) / local_rate:.2f}x", ""),
    ]


class PagesTimed:
    """Notes when a catch-up has appended its last page (the views build may still be running): the pull's
    wire part, apart from the views."""

    def __enter__(self):
        self.appended = None
        self.original = sync_client._ViewsBuilder.__exit__

        def exit(builder, *exc):
            self.appended = time.perf_counter()
            return self.original(builder, *exc)

        sync_client._ViewsBuilder.__exit__ = exit
        return self

    def __exit__(self, *exc):
        sync_client._ViewsBuilder.__exit__ = self.original


def start_postgres():
    from pytest_postgresql.executors.proc import PostgreSQLExecutor

    folder = Path(tempfile.mkdtemp(prefix="mindlog-bench-pg-"))
    executor = PostgreSQLExecutor(executable=pg.pg_ctl(), host="127.0.0.1", port=free_port(),
                                  datadir=str(folder / "data"), unixsocketdir=tempfile.gettempdir(),
                                  logfile=str(folder / "pg.log"), startparams="-w", dbname="bench")
    executor.start()
    executor.wait_for_postgres()
    import psycopg

    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{executor.port}/postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    return executor, f"postgresql://postgres@127.0.0.1:{executor.port}/bench"


def bench_postgres(n: int) -> list[tuple]:
    executor, url = start_postgres()
    try:
        from sync.storage_postgres import PostgresHubStorage

        hub = PostgresHubStorage(url)
        batch = events(n, "writer")
        start = time.perf_counter()
        for i in range(0, n, 100):
            hub.push(batch[i:i + 100])
        ours = n / (time.perf_counter() - start)
        hub.close()

        from eventsourcing.persistence import StoredEvent
        from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

        store = PostgresDatastore(dbname="bench", host="127.0.0.1", port=executor.port, user="postgres", password="")
        recorder = PostgresApplicationRecorder(store)
        recorder.create_table()
        stored = [StoredEvent(originator_id=uuid.UUID(e.id), originator_version=1, topic=e.kind,
                              state=encode_body(e.body)) for e in batch]
        start = time.perf_counter()
        for i in range(0, n, 100):
            recorder.insert_events(stored[i:i + 100])
        theirs = n / (time.perf_counter() - start)
        store.close()
    finally:
        executor.stop()
    return [("PostgreSQL hub push, batches of 100", f"{ours:,.0f}", f"{ours / theirs:.2f}x", ""),
            ("eventsourcing PostgresApplicationRecorder, same", f"{theirs:,.0f}", "1.00x", "")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=100_000)
    parser.add_argument("--pg-n", type=int, default=20_000)
    parser.add_argument("--no-pg", action="store_true")
    args = parser.parse_args()
    table(f"sync of {args.n:,} events over loopback (hub and logs SQLite, synchronous=FULL)",
          [("operation", "events/s", "vs local", "target")] + bench_loopback(args.n))
    if not args.no_pg:
        table(f"PostgreSQL: {args.pg_n:,} events pushed in batches of 100 (storage level, same server)",
              [("recorder", "events/s", "ratio", "")] + bench_postgres(args.pg_n))


if __name__ == "__main__":
    main()
