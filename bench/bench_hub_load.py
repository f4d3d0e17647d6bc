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
PostgreSQL started for the run as the tests start it). Loopback only; every run is bounded in time
and in requests and stops by itself.

Usage: python bench/bench_hub_load.py [--agents 1,8,32,100] [--backend sqlite|postgres|both]
                                      [--seconds 5] [--repeat 1]
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


class _Id(msgspec.Struct):
    id: str


class _Page(msgspec.Struct):
    """What a consumer reads of a pull answer (msgspec skips the rest of each event)."""

    events: list[_Id]
    cursor: str


_page = msgspec.json.Decoder(_Page)


class Connection:
    """One keep-alive HTTP/1.1 connection with a bearer token; the hub answers with Content-Length."""

    def __init__(self, url: str, token: str):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.headers = (f"host: {self.host}:{self.port}\r\nauthorization: Bearer {token}\r\n"
                        "content-type: application/json\r\n")
        self.reader = self.writer = None

    async def request(self, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"{method} {target} HTTP/1.1\r\n{self.headers}content-length: {len(body)}\r\n\r\n"
                          .encode() + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


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


async def worker(urls: list[str], pushers: dict[str, str], consumers: dict[str, str], start_at: float,
                 seconds: float) -> dict:
    """One load process: its share of pushers and consumers, from `start_at` (perf_counter, which is
    system-wide on Linux, so the processes' times compare) for `seconds`, then a drain."""
    sent: dict[str, float] = {}  # event id -> when its push was sent
    received: dict[str, list] = {}  # event id -> [consumers of this process that got it, when the last did]
    latencies: list[float] = []
    pushes = 0
    stop_at = start_at + seconds

    async def consumer(http: Connection) -> None:
        try:
            cursor = _page.decode((await http.request("GET", "/v1/pull?limit=1"))[1]).cursor
            while True:
                status, answer = await http.request("GET", f"/v1/pull?cursor={cursor}&wait={POLL_WAIT}&limit=5000")
                now = time.perf_counter()
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

    async def pusher(name: str, http: Connection) -> None:
        nonlocal pushes
        n = 0
        while time.perf_counter() < stop_at and pushes < MAX_PUSHES:
            event = new_event(EntryAppend(type="FACT", date="2026-11-30", content=f"{name} fact {n}"),
                              agent=name, layer="insights")
            body = msgspec.json.encode(PushRequest(events=[event]))
            started = time.perf_counter()
            sent[event.id] = started
            status, answer = await http.request("POST", "/v1/push", body)
            if status != 200:
                raise RuntimeError(f"push refused: {answer.decode()}")
            latencies.append(time.perf_counter() - started)
            pushes += 1
            n += 1
        http.close()

    offset = len(pushers)
    polling = [asyncio.create_task(consumer(Connection(urls[(offset + i) % len(urls)], token)))
               for i, token in enumerate(consumers.values())]
    connections = {name: Connection(urls[i % len(urls)], token) for i, (name, token) in enumerate(pushers.items())}
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    await asyncio.gather(*(pusher(name, http) for name, http in connections.items()))
    await asyncio.sleep(max(0.0, stop_at + DRAIN_SECONDS - time.perf_counter()))
    for task in polling:
        task.cancel()
    await asyncio.gather(*polling, return_exceptions=True)
    return {"sent": sent, "received": received, "latencies": latencies, "pushes": pushes}


def run_worker(*args) -> dict:
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = asyncio.run(worker(*args))
    after = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return result


def load(hubs: list[tuple[subprocess.Popen, str]], pushers: dict[str, str], consumers: dict[str, str],
         seconds: float) -> dict:
    """Spreads the agents over LOAD_PROCESSES processes (one asyncio loop would be the bottleneck) and
    merges what they measured, with the CPU seconds the hub processes and the load processes used."""
    import psutil

    def hub_cpu() -> float:
        return sum(sum(psutil.Process(proc.pid).cpu_times()[:2]) for proc, _ in hubs)

    urls = [url for _, url in hubs]
    processes = min(LOAD_PROCESSES, len(pushers))
    share = lambda d, w: dict(list(d.items())[w::processes])  # noqa: E731
    loadavg = os.getloadavg()[0]
    hub_before = hub_cpu()
    start_at = time.perf_counter() + 2.0 + 0.02 * len(consumers)  # every consumer is long-polling by then
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        parts = pool.starmap(run_worker, [(urls, share(pushers, w), share(consumers, w), start_at, seconds)
                                          for w in range(processes)])
    hub_used = hub_cpu() - hub_before
    sent, received, latencies = {}, {}, []
    for part in parts:
        sent.update(part["sent"])
        latencies.extend(part["latencies"])
        for id, (count, at) in part["received"].items():
            got = received.setdefault(id, [0, 0.0])
            got[0] += count
            got[1] = max(got[1], at)
    pushes = sum(part["pushes"] for part in parts)
    everyone = len(consumers)
    fanout = [received[i][1] - at for i, at in sent.items() if received.get(i, (0,))[0] >= everyone]
    return {"events/s": pushes / seconds, "p50": percentile(latencies, 50) * 1000,
            "p99": percentile(latencies, 99) * 1000, "fanout p99": percentile(fanout, 99) * 1000,
            "missed": len(sent) - len(fanout), "hub cpu": hub_used, "load cpu": sum(part["cpu"] for part in parts),
            "loadavg": loadavg}


def one_run(backend: str, agents: int, group: bool, seconds: float, pg_server) -> dict:
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
    hubs = [serve(db, group) for _ in range(1 if backend == "sqlite" else 2)]
    try:
        return load(hubs, pushers, consumers, seconds)
    finally:
        for proc, _ in hubs:
            proc.terminate()
            proc.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="1,8,32,100", help="comma-separated agent counts")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--no-pg", action="store_true", help="the same as --backend sqlite")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the agents push, per run")
    parser.add_argument("--repeat", type=int, default=1, help="off/on pairs per agent count")
    args = parser.parse_args()
    counts = [int(n) for n in args.agents.split(",")]
    backend = "sqlite" if args.no_pg else args.backend
    backends = ["sqlite", "postgres"] if backend == "both" else [backend]
    pg_executor = pg_url = None
    if "postgres" in backends:
        pg_executor, pg_url = start_postgres()
    try:
        for backend in backends:
            rows = [("agents", "group commit", "events/s", "vs off", "push p50 ms", "push p99 ms",
                     "fan-out p99 ms", "missed", "hub cpu s", "load cpu s", "load avg")]
            for agents in counts:
                for _ in range(args.repeat):
                    off = one_run(backend, agents, False, args.seconds, pg_url)
                    on = one_run(backend, agents, True, args.seconds, pg_url)
                    for label, r in (("off", off), ("on", on)):
                        rows.append((agents, label, f"{r['events/s']:,.0f}", f"{r['events/s'] / off['events/s']:.2f}x",
                                     f"{r['p50']:.1f}", f"{r['p99']:.1f}", f"{r['fanout p99']:.1f}", r["missed"],
                                     f"{r['hub cpu']:.1f}", f"{r['load cpu']:.1f}", f"{r['loadavg']:.2f}"))
            where = ("SQLite, synchronous=FULL, one hub process" if backend == "sqlite"
                     else "PostgreSQL, two hub processes on one database")
            table(f"{args.seconds:g} s of one-event pushes, as many long-polling consumers ({where})", rows)
    finally:
        if pg_executor is not None:
            pg_executor.stop()


if __name__ == "__main__":
    main()
