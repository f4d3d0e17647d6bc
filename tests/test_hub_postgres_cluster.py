"""Two hub processes (`mem serve`) on one PostgreSQL database: concurrent pushers on both, and a
puller that must see every event exactly once, in gapless position order."""

import subprocess
import threading
import time

import httpx

from eventstore.envelope import new_event
from eventstore.kinds import EntryAppend
from sync.client import HubClient
from sync.storage_postgres import PostgresHubStorage
from sync.wire import Contract, ContractLayer

from conftest import mem_command
from hubserver import free_port

CONTRACT = Contract(layers={"insights": ContractLayer(path="memory/insights.md", format="entries",
                                                      producers=["*"], consumers=["*"])})


def start_hub(url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([*mem_command(), "serve", "--db", url, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"hub did not start: {proc.stderr.read().decode()}")


def test_two_hub_processes_one_database(pg_url):
    admin = PostgresHubStorage(pg_url)
    admin.apply_contract(CONTRACT)
    tokens = [admin.add_agent(f"pusher{i}") for i in range(4)]
    reader = admin.add_agent("reader")
    admin.close()
    hubs = [start_hub(pg_url), start_hub(pg_url)]
    try:
        pushed, seen, errors = [], [], []
        done = threading.Event()

        def pusher(i):
            client = HubClient(hubs[i % 2][1], tokens[i])
            try:
                for n in range(30):
                    batch = [new_event(EntryAppend(type="FACT", date="2026-11-29", content=f"{i}-{n}-{k}"),
                                       agent=f"pusher{i}", layer="insights") for k in range(1 + n % 3)]
                    client.push(batch)
                    pushed.extend(e.id for e in batch)
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)
            finally:
                client.close()

        def puller():
            client = HubClient(hubs[1][1], reader)
            cursor = ""
            try:
                while True:
                    page = client.pull(cursor, 100, wait=1)
                    seen.extend((e.seq, e.id) for e in page.events)
                    cursor = page.cursor
                    if done.is_set() and not page.events and not page.more:
                        break
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
            finally:
                client.close()

        reading = threading.Thread(target=puller)
        reading.start()
        threads = [threading.Thread(target=pusher, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        reading.join(timeout=60)
        assert not errors, errors
        ids = [i for _pos, i in seen]
        assert len(ids) == len(set(ids)), "an event was delivered twice"
        assert set(ids) == set(pushed), "an event was never delivered"
        positions = [pos for pos, _i in seen]
        assert positions == sorted(positions)
        assert positions == list(range(2, 2 + len(pushed)))  # position 1 is the contract
    finally:
        for proc, _url in hubs:
            proc.terminate()
            proc.wait(timeout=10)
