"""Many agents on one hub: N agents each pushing one event per request for a fixed time while N
consumers long-poll, with group commit on against off (one transaction per push) in the same run.

Each agent and each consumer has its own token and its own keep-alive HTTP/1.1 connection. The load
runs in LOAD_PROCESSES processes apart from the hub's, each an asyncio loop speaking plain HTTP/1.1
over asyncio streams (no HTTP library: the load must cost little CPU beside the hub it measures on a
2-core machine). Reported per run: aggregate pushed events/s, p50/p99 push latency (request sent to
answer), p99 fan-out (push sent to the moment the last consumer received the event), how many events
some consumer never got before the drain deadline, the CPU seconds the hub and the load used, and the
1-minute load average when the run started. SQLite (one `mem serve`, synchronous=FULL) and
PostgreSQL (two `mem serve` processes on one database, agents and consumers split between them;
PostgreSQL started for the run as the tests start it); `--sqlite-hubs 2` runs SQLite the same way,
two `mem serve` processes on one file, group commit on and off alike. Loopback only; every run is bounded in time
and in requests and stops by itself.

With `--costs`, first what one request of each kind costs the hub (SQLite): a closed loop of as many
connections as agents sending only `/health` (the HTTP floor: uvicorn, the app's dispatch, one loopback
send), only pulls without wait, or only one-event pushes, group commit on and off; the hub's CPU per
request split between its event loop's thread and its other threads (the commit thread), and the
load's. The load run's CPU per push is about a push plus (pulls per push) pulls of these.

Usage: python bench/bench_hub_load.py [--agents 1,8,32,100] [--backend sqlite|postgres|both]
                                      [--seconds 5] [--repeat 1] [--costs]
The issue's target case alone: python bench/bench_hub_load.py --agents 32 --backend sqlite --repeat 2
"""

import argparse
import asyncio
import multiprocessing
import os
import resource
import shutil
import subprocess
import time
from urllib.parse import urlsplit

import httpx
import msgspec
from common import table, workdir

from eventstore.envelope import new_event
from eventstore.kinds import EntryAppend
from sync.storage import open_storage
from sync.wire import Contract, ContractLayer, PushRequest

from bench_sync import start_postgres, free_port  # noqa: I001  (bench_sync puts tests/ on the path)

CONTRACT = Contract(layers={"insights": ContractLayer(path="memory/insights.md", format="entries",
                                                      producers=["*"], consumers=["*"])})
MAX_PUSHES = 200_000
DRAIN_SECONDS = 5.0
LOAD_PROCESSES = 2
POLL_WAIT = 10
PREPARED_SECONDS_RATE = 400
PREPARED_MAX = 40_000
"""Pushes made ready (encoded, digests computed) per agent and second of the run before it starts, at
most PREPARED_MAX per load process (about a second of its CPU); more are made as they go."""


class _Id(msgspec.Struct):
    id: str


class _Page(msgspec.Struct):
    """What a consumer reads of a pull answer (msgspec skips the rest of each event)."""

    events: list[_Id]
    cursor: str


_page = msgspec.json.Decoder(_Page)


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection with a bearer token, as an asyncio protocol: a request is one
    write, its answer is parsed where it arrives (the hub answers with Content-Length), one wake-up."""

    def __init__(self, url: str, token: str):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.headers = (f"host: {self.host}:{self.port}\r\nauthorization: Bearer {token}\r\n"
                        "content-type: application/json\r\n")
        self.transport = self.answer = None
        self.buffer, self.status, self.length = b"", 0, -1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.length < 0:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            self.status = int(head[9:12])
            at = head.find(b"content-length:") + 15
            line_end = head.find(b"\r\n", at)
            self.length = int(head[at:line_end if line_end >= 0 else end])
            self.buffer = self.buffer[end + 4:]
        if len(self.buffer) >= self.length:
            body, self.buffer = self.buffer[:self.length], self.buffer[self.length:]
            self.length = -1
            if self.answer is not None and not self.answer.done():
                self.answer.set_result((self.status, body))

    def connection_lost(self, exc) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(ConnectionError("the hub closed the connection"))

    async def request(self, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        if self.transport is None:
            self.transport, _ = await loop.create_connection(lambda: self, self.host, self.port)
        self.answer = loop.create_future()
        self.transport.write(f"{method} {target} HTTP/1.1\r\n{self.headers}content-length: {len(body)}\r\n\r\n"
                             .encode() + body)
        return await self.answer

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def serve(db: str, group: bool) -> tuple[subprocess.Popen, str]:
    port = free_port()
    mem = shutil.which("mem") or "mem"
    proc = subprocess.Popen([mem, "serve", "--db", db, "--port", str(port),
                             "--group-commit" if group else "--no-group-commit"], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/health", timeout=1)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("hub did not start")


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def push_body(agent: str, n: int) -> tuple[str, bytes]:
    """(event id, request body) of an agent's n-th one-event push."""
    event = new_event(EntryAppend(type="FACT", date="2026-11-30", content=f"{agent} fact {n}"), agent=agent,
                      layer="insights")
    return event.id, msgspec.json.encode(PushRequest(events=[event]))


def minted(agents, count: int) -> dict[str, list[tuple[str, bytes]]]:
    """`count` pushes per agent made ready (`push_body`), minted round by round (every agent's n-th event,
    then every agent's n+1-th), so their ids (UUIDv7, time-ordered) follow each other as they would had each
    agent made each event just before pushing it: the agents push at about the same pace, so the pushes a
    group commit carries hold ids that sit side by side in the hub's id index. Minted agent by agent, each
    agent's ids were a run of their own, and every group's events touched as many index pages as agents."""
    ready = {name: [] for name in agents}
    for n in range(count):
        for name in agents:
            ready[name].append(push_body(name, n))
    return ready


async def worker(urls: list[str], pushers: dict[str, str], consumers: dict[str, str], start_at: float,
                 seconds: float) -> dict:
    """One load process: its share of pushers and consumers, from `start_at` (perf_counter, which is
    system-wide on Linux, so the processes' times compare) for `seconds`, then a drain."""
    sent: dict[str, float] = {}  # event id -> when its push was sent
    received: dict[str, list] = {}  # event id -> [consumers of this process that got it, when the last did]
    latencies: list[float] = []
    pushes = pulls = 0
    stop_at = start_at + seconds

    async def consumer(http: Connection) -> None:
        nonlocal pulls
        try:
            cursor = _page.decode((await http.request("GET", "/v1/pull?limit=1"))[1]).cursor
            while True:
                status, answer = await http.request("GET", f"/v1/pull?cursor={cursor}&wait={POLL_WAIT}&limit=5000")
                now = time.perf_counter()
                pulls += now < stop_at
                if status != 200:
                    raise RuntimeError(f"pull refused: {answer.decode()}")
                page = _page.decode(answer)
                for event in page.events:
                    got = received.setdefault(event.id, [0, 0.0])
                    got[0] += 1
                    got[1] = now
                cursor = page.cursor
        finally:
            http.close()

    async def pusher(name: str, http: Connection, ready: list[tuple[str, bytes]]) -> None:
        nonlocal pushes
        n = 0
        while time.perf_counter() < stop_at and pushes < MAX_PUSHES:
            id, body = ready[n] if n < len(ready) else push_body(name, n)
            started = time.perf_counter()
            sent[id] = started
            status, answer = await http.request("POST", "/v1/push", body)
            if status != 200:
                raise RuntimeError(f"push refused: {answer.decode()}")
            latencies.append(time.perf_counter() - started)
            pushes += 1
            n += 1
        http.close()

    prepared = min(int(PREPARED_SECONDS_RATE * seconds), PREPARED_MAX // max(1, len(pushers)))
    ready = minted(pushers, prepared)  # the load's CPU, before the clock
    offset = len(pushers)
    polling = [asyncio.create_task(consumer(Connection(urls[(offset + i) % len(urls)], token)))
               for i, token in enumerate(consumers.values())]
    connections = {name: Connection(urls[i % len(urls)], token) for i, (name, token) in enumerate(pushers.items())}
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    cpu_before = cpu_seconds()
    await asyncio.gather(*(pusher(name, http, ready[name]) for name, http in connections.items()))
    cpu = cpu_seconds() - cpu_before
    await asyncio.sleep(max(0.0, stop_at + DRAIN_SECONDS - time.perf_counter()))
    for task in polling:
        task.cancel()
    await asyncio.gather(*polling, return_exceptions=True)
    return {"sent": sent, "received": received, "latencies": latencies, "pushes": pushes, "pulls": pulls,
            "cpu": cpu}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_worker(*args) -> dict:
    """One load process's asyncio loop (uvloop's when installed: the load's own CPU is part of what it
    measures on a 2-core machine); its CPU seconds are counted while its agents push."""
    try:
        import uvloop

        return uvloop.run(worker(*args))
    except ImportError:
        return asyncio.run(worker(*args))


def load(hubs: list[tuple[subprocess.Popen, str]], pushers: dict[str, str], consumers: dict[str, str],
         seconds: float) -> dict:
    """Spreads the agents over LOAD_PROCESSES processes (one asyncio loop would be the bottleneck) and
    merges what they measured, with the CPU seconds the hub processes and the load processes used."""
    import psutil

    def hub_cpu() -> tuple[float, float]:
        """CPU seconds of the hub processes: all their threads, and their event loops' (main) threads."""
        total = loop = 0.0
        for proc, _ in hubs:
            for thread in psutil.Process(proc.pid).threads():
                total += thread.user_time + thread.system_time
                loop += (thread.user_time + thread.system_time) if thread.id == proc.pid else 0.0
        return total, loop

    urls = [url for _, url in hubs]
    processes = min(LOAD_PROCESSES, len(pushers))
    share = lambda d, w: dict(list(d.items())[w::processes])  # noqa: E731
    loadavg = os.getloadavg()[0]
    start_at = time.perf_counter() + 3.5 + 0.02 * len(consumers)  # every push ready, every consumer long-polling
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        pending = pool.starmap_async(run_worker, [(urls, share(pushers, w), share(consumers, w), start_at, seconds)
                                                  for w in range(processes)])
        time.sleep(max(0.0, start_at - time.perf_counter()))
        hub_before = hub_cpu()
        time.sleep(max(0.0, start_at + seconds - time.perf_counter()))
        hub_after = hub_cpu()
        hub_used, loop_used = (after - before for after, before in zip(hub_after, hub_before))  # while the agents push
        parts = pending.get()
    sent, received, latencies = {}, {}, []
    for part in parts:
        sent.update(part["sent"])
        latencies.extend(part["latencies"])
        for id, (count, at) in part["received"].items():
            got = received.setdefault(id, [0, 0.0])
            got[0] += count
            got[1] = max(got[1], at)
    pushes = sum(part["pushes"] for part in parts)
    pulls = sum(part["pulls"] for part in parts)
    everyone = len(consumers)
    fanout = [received[i][1] - at for i, at in sent.items() if received.get(i, (0,))[0] >= everyone]
    return {"events/s": pushes / seconds, "p50": percentile(latencies, 50) * 1000,
            "p99": percentile(latencies, 99) * 1000, "fanout p99": percentile(fanout, 99) * 1000,
            "missed": len(sent) - len(fanout), "hub cpu": hub_used, "loop cpu": loop_used, "load cpu": sum(part["cpu"] for part in parts),
            "pulls": pulls, "pushes": pushes, "loadavg": loadavg}


def disk_floor(seconds: float = 2.0) -> tuple[float, float]:
    """(commits/s, median ms) of back-to-back one-row commits by raw sqlite3 in WAL mode at
    synchronous=FULL, in the benchmark's folder: the most transactions a second this disk lets one
    writer make, so the most pushes a second a hub committing each on its own could reach."""
    import sqlite3
    import statistics

    path = workdir("hub_load") / "floor.db"
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE t (position INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, data BLOB NOT NULL)")
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        started = time.perf_counter()
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t (id, data) VALUES (?, ?)", (os.urandom(16).hex(), os.urandom(300)))
        db.execute("COMMIT")
        times.append(time.perf_counter() - started)
    db.close()
    return len(times) / seconds, statistics.median(times) * 1000


def one_run(backend: str, agents: int, group: bool, seconds: float, pg_server, hubs: int = 1) -> dict:
    if backend == "sqlite":
        folder = workdir("hub_load")
        db = folder / "hub.db"
        for suffix in ("", "-wal", "-shm"):
            db.with_name(db.name + suffix).unlink(missing_ok=True)
        db = str(db)
    else:
        import psycopg

        name = f"load_{agents}_{int(group)}"
        with psycopg.connect(pg_server.replace("/bench", "/postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
        db = pg_server.replace("/bench", f"/{name}")
    admin = open_storage(db)
    admin.apply_contract(CONTRACT)
    pushers = {f"agent{i}": admin.add_agent(f"agent{i}") for i in range(agents)}
    consumers = {f"reader{i}": admin.add_agent(f"reader{i}") for i in range(agents)}
    admin.close()
    served = [serve(db, group) for _ in range(hubs)]
    try:
        return load(served, pushers, consumers, seconds)
    finally:
        for proc, _ in served:
            proc.terminate()
            proc.wait(timeout=30)


COST_KINDS = {"health": ("GET", "/health"), "pull": ("GET", "/v1/pull?limit=1"), "push": ("POST", "/v1/push")}


def request_costs(clients: int, group: bool, seconds: float = 3.0) -> list[tuple]:
    """Rows (mode, request, requests/s, hub event-loop µs, hub other threads µs, load µs per request) of
    a closed loop of `clients` connections sending one kind of request, one kind after the other."""
    import psutil

    folder = workdir("hub_costs")
    db = folder / "hub.db"
    for suffix in ("", "-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    admin = open_storage(str(db))
    admin.apply_contract(CONTRACT)
    tokens = {f"agent{i}": admin.add_agent(f"agent{i}") for i in range(clients)}
    admin.close()
    proc, url = serve(str(db), group)
    hub = psutil.Process(proc.pid)

    def threads() -> tuple[float, float]:
        """CPU seconds of the hub's event-loop thread (its main thread) and of all its others."""
        times = {t.id: t.user_time + t.system_time for t in hub.threads()}
        main = times.pop(proc.pid, 0.0)
        return main, sum(times.values())

    async def loop(kind: str) -> tuple:
        method, target = COST_KINDS[kind]
        connections = {name: Connection(url, token) for name, token in tokens.items()}
        await asyncio.gather(*(http.request("GET", "/health") for http in connections.values()))
        bodies = {name: [body for _, body in made] for name, made in minted(tokens, int(seconds * 400)).items()}
        count, stop_at = 0, time.perf_counter() + seconds

        async def client(name: str, http: Connection) -> None:
            nonlocal count
            n = 0
            while time.perf_counter() < stop_at and n < len(bodies[name]):
                status, answer = await http.request(method, target, bodies[name][n] if method == "POST" else b"")
                if status != 200:
                    raise RuntimeError(f"{kind} refused: {answer.decode()}")
                count, n = count + 1, n + 1

        (main0, other0), load0, started = threads(), time.process_time(), time.perf_counter()
        await asyncio.gather(*(client(name, http) for name, http in connections.items()))
        (main1, other1), load1, wall = threads(), time.process_time(), time.perf_counter() - started
        for http in connections.values():
            http.close()
        per = lambda cpu: f"{cpu * 1e6 / max(1, count):.0f}"  # noqa: E731
        return ("on" if group else "off", kind, f"{count / wall:,.0f}", per(main1 - main0), per(other1 - other0),
                per(load1 - load0), f"{os.getloadavg()[0]:.2f}")

    try:
        return [asyncio.run(loop(kind)) for kind in COST_KINDS]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def cpu_bound(run: dict, cores: int, hubs: int) -> float:
    """The events/s at which the CPU measured per push would fill the hub processes' cores (one each: the
    GIL) or the machine's (hub and load together), whichever comes first."""
    hub = run["hub cpu"] / max(1, run["pushes"])
    return min(hubs / max(hub, 1e-9), cores / max(hub + run["load cpu"] / max(1, run["pushes"]), 1e-9))


def bounds(agents: int, off: dict, on: dict, disk: float | None, cores: int, hubs: int) -> str:
    """What bounds each side of a pair, from what was measured: the disk (commits/s it allows one writer)
    or the CPU (at the CPU per push measured), and so the most group commit could give over this off
    figure at this CPU per push."""
    off_cpu, on_cpu = cpu_bound(off, cores, hubs), cpu_bound(on, cores, hubs)
    where = f"the disk allows {disk:,.0f} commits/s, " if disk else ""
    return (f"{agents} agents: off {off['events/s']:,.0f} ev/s ({where}its CPU per push {off_cpu:,.0f}); on "
            f"{on['events/s']:,.0f} ev/s, at its CPU per push at most {on_cpu:,.0f} = "
            f"{on_cpu / max(off['events/s'], 1e-9):.1f}x this off")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="1,8,32,100", help="comma-separated agent counts")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--no-pg", action="store_true", help="the same as --backend sqlite")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the agents push, per run")
    parser.add_argument("--repeat", type=int, default=1, help="off/on pairs per agent count (0 with --costs: those alone)")
    parser.add_argument("--sqlite-hubs", type=int, default=1,
                        help="hub processes on the SQLite file, group commit on and off alike (agents split between them)")
    parser.add_argument("--costs", action="store_true", help="first, what one request of each kind costs the hub")
    args = parser.parse_args()
    counts = [int(n) for n in args.agents.split(",")]
    backend = "sqlite" if args.no_pg else args.backend
    backends = ["sqlite", "postgres"] if backend == "both" else [backend]
    pg_executor = pg_url = None
    if "postgres" in backends:
        pg_executor, pg_url = start_postgres()
    cores = os.cpu_count() or 1
    if args.costs:
        clients = max(counts)
        rows = [("group commit", "request", "requests/s", "hub loop µs/req", "hub other threads µs/req",
                 "load µs/req", "load avg")]
        for group in (False, True):
            rows += request_costs(clients, group)
        table(f"what one request costs (SQLite FULL, {clients} connections, a closed loop of each kind alone)", rows)
        if args.repeat == 0:
            return
    try:
        for backend in backends:
            rate = None
            if backend == "sqlite":
                rate, median = disk_floor()
                print(f"\nthis disk: back-to-back one-row commits, raw sqlite3, WAL, synchronous=FULL: {rate:,.0f} "
                      f"commits/s (median {median:.2f} ms) at load average {os.getloadavg()[0]:.2f}")
            notes = []
            rows = [("agents", "group commit", "events/s", "vs off", "push p50 ms", "push p99 ms", "fan-out p99 ms",
                     "missed", "pulls/push", "hub cpu ms/push", "of it loop", "load cpu ms/push", "cpu-bound max ev/s", "load avg")]
            for agents in counts:
                for _ in range(args.repeat):
                    hubs = args.sqlite_hubs if backend == "sqlite" else 2
                    off = one_run(backend, agents, False, args.seconds, pg_url, hubs)
                    on = one_run(backend, agents, True, args.seconds, pg_url, hubs)
                    notes.append(bounds(agents, off, on, rate, cores, hubs))
                    for label, r in (("off", off), ("on", on)):
                        per_push = lambda cpu: cpu * 1000 / max(1, r["pushes"])  # noqa: E731
                        rows.append((agents, label, f"{r['events/s']:,.0f}", f"{r['events/s'] / off['events/s']:.2f}x",
                                     f"{r['p50']:.1f}", f"{r['p99']:.1f}", f"{r['fanout p99']:.1f}", r["missed"],
                                     f"{r['pulls'] / max(1, r['pushes']):.2f}", f"{per_push(r['hub cpu']):.3f}", f"{per_push(r['loop cpu']):.3f}",
                                     f"{per_push(r['load cpu']):.2f}", f"{cpu_bound(r, cores, hubs):,.0f}",
                                     f"{r['loadavg']:.2f}"))
            processes = "one hub process" if args.sqlite_hubs == 1 else f"{args.sqlite_hubs} hub processes on one file"
            where = (f"SQLite, synchronous=FULL, {processes}" if backend == "sqlite"
                     else "PostgreSQL, two hub processes on one database")
            table(f"{args.seconds:g} s of one-event pushes, as many long-polling consumers ({where})", rows)
            print(f"  cpu-bound max: the events/s at which, at the CPU per push measured, the hub would fill its one "
                  f"core (a Python process), or the hub and the load all {cores} cores, whichever comes first")
            for note in notes:
                print("  " + note)
    finally:
        if pg_executor is not None:
            pg_executor.stop()


if __name__ == "__main__":
    main()
