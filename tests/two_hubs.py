"""Two hub processes (`mem serve`) on one database, SQLite or PostgreSQL: the contract, the agents,
and the check that pushers on both with one puller see every event exactly once, in gapless order."""

import threading

from eventstore.envelope import new_event
from eventstore.kinds import EntryAppend
from sync.client import HubClient
from sync.wire import Contract, ContractLayer

CONTRACT = Contract(layers={"insights": ContractLayer(path="memory/insights.md", format="entries",
                                                      producers=["*"], consumers=["*"])})


def fact(agent: str, text: str):
    return new_event(EntryAppend(type="FACT", date="2026-11-30", content=text), agent=agent, layer="insights")


def hub_with(admin, agents: list[str]) -> list[str]:
    """Applies CONTRACT to the hub storage ADMIN, adds AGENTS, closes it; returns their tokens."""
    admin.apply_contract(CONTRACT)
    tokens = [admin.add_agent(name) for name in agents]
    admin.close()
    return tokens


def pushers_on_both_and_a_puller(hubs: list[str], pusher_tokens: list[str], reader_token: str, rounds: int):
    """Pusher i pushes ROUNDS batches of 1-3 facts to hub i % 2 while the reader long-polls the second
    hub; asserts every pushed event is seen once, at gapless positions after the contract's."""
    pushed, seen, errors = [], [], []
    done = threading.Event()

    def pusher(i):
        client = HubClient(hubs[i % 2], pusher_tokens[i])
        try:
            for n in range(rounds):
                batch = [fact(f"pusher{i}", f"{i}-{n}-{k}") for k in range(1 + n % 3)]
                client.push(batch)
                pushed.extend(e.id for e in batch)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            client.close()

    def puller():
        client = HubClient(hubs[1], reader_token)
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
    threads = [threading.Thread(target=pusher, args=(i,)) for i in range(len(pusher_tokens))]
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
    assert positions == list(range(2, 2 + len(pushed)))  # position 1 is the contract
