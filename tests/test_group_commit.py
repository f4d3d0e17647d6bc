"""Group commit through the hub: concurrent pushes share transactions, a refused push refuses only
itself, and every answer comes after its events are stored."""

import asyncio
import threading
import time

import httpx
import msgspec
import pytest

from eventstore.envelope import new_event
from eventstore.kinds import EntryAppend
from sync.committer import PULL_RECORD_DELAY
from sync.hub import create_app
from sync.storage_sqlite import SQLiteHubStorage
from sync.wire import PushRequest

from hub_storage_conformance import CONTRACT

PUSHES = 24


class CountingStorage(SQLiteHubStorage):
    """A real SQLite hub storage that counts its transactions."""

    def __init__(self, path):
        super().__init__(path)
        self.transactions = 0

    def _commit_group(self, batches, pulls, checked=None):
        self.transactions += 1
        return super()._commit_group(batches, pulls, checked)


class GatedStorage(CountingStorage):
    """Holds its first commit until `pending()` pushes more are queued behind it: whatever the machine's
    load, every other push is waiting when the first commit returns (a group commit then carries them all)."""

    def __init__(self, path, pending=None):
        super().__init__(path)
        self.pending = pending

    def _commit_group(self, batches, pulls, checked=None):
        gate, self.pending = self.pending, None
        if gate is not None:
            deadline = time.monotonic() + 60
            while gate(len(batches)) and time.monotonic() < deadline:
                time.sleep(0.01)
        return super()._commit_group(batches, pulls, checked)


def entry(text: str, **kw):
    return new_event(EntryAppend(type="FACT", date="2026-11-30", content=text), agent="alice", layer="insights", **kw)


@pytest.mark.parametrize("group", [True, False])
def test_concurrent_pushes_share_commits_and_a_refused_one_refuses_only_itself(tmp_path, group):
    storage = GatedStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    known = entry("known")
    storage.push([known])
    forged = entry("forged", id=known.id, ts=known.ts)
    batches = [[entry(f"push {i}")] for i in range(PUSHES)]
    batches[PUSHES // 2] = [entry("refused with the forged one"), forged]
    storage.transactions = 0

    async def scenario():
        app = create_app(storage, group_commit=group)
        storage.pending = lambda committing: committing + len(app.state.hub.committer._pushes) < PUSHES
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hub",
                                     headers={"authorization": f"Bearer {token}"}) as client:
            async def push(batch):
                answer = await client.post("/v1/push", content=msgspec.json.encode(PushRequest(events=batch)),
                                           headers={"content-type": "application/json"})
                # answered only once stored: the events are readable when the answer arrives
                stored = {e.id for e in storage.pull(0, ["insights"], 1000)}
                return answer, all(e.id in stored for e in batch)

            return await asyncio.gather(*(push(batch) for batch in batches))

    answers = asyncio.run(scenario())
    statuses = [answer.status_code for answer, _ in answers]
    assert statuses == [409 if i == PUSHES // 2 else 200 for i in range(PUSHES)]
    assert answers[PUSHES // 2][0].json()["type"].endswith("/id-conflict")
    assert all(durable for answer, durable in answers if answer.status_code == 200)
    positions = sorted(r["position"] for answer, _ in answers if answer.status_code == 200
                       for r in answer.json()["results"])
    assert positions == list(range(3, 3 + PUSHES - 1))  # 1: the contract, 2: the known event
    assert storage.head() == 2 + PUSHES - 1
    if group:
        # the held first one, then all the others at once; or one alone, when every push was queued before
        # the commit thread took the first (a loaded machine, the pushes quicker than its wake-up)
        assert storage.transactions in (1, 2), storage.transactions
    else:
        assert storage.transactions == PUSHES
    storage.close()


def test_pull_cursors_wait_their_delay_then_go_alone_when_no_push_is_committing(tmp_path):
    """With group commit a pull's cursor is stored PULL_RECORD_DELAY after it came, not with the next push's
    commit (which stays one INSERT on SQLite): on a hub without pushes then, in a transaction of its own
    (two pulls' cursors in one); without group commit each cursor and each push is its own."""
    storage = CountingStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")

    async def scenario(group: bool) -> tuple[int, int]:
        transport = httpx.ASGITransport(app=create_app(storage, group_commit=group))
        async with httpx.AsyncClient(transport=transport, base_url="http://hub",
                                     headers={"authorization": f"Bearer {token}"}) as client:
            async def pull() -> None:
                cursor = (await client.get("/v1/pull")).json()["cursor"]
                await client.get("/v1/pull", params={"cursor": cursor})

            storage.transactions = 0
            await pull()
            answer = await client.post("/v1/push", content=msgspec.json.encode(PushRequest(events=[entry(f"{group}")])),
                                       headers={"content-type": "application/json"})
            assert answer.status_code == 200
            await asyncio.sleep(PULL_RECORD_DELAY + 0.5)
            with_push = storage.transactions
            storage.transactions = 0
            await pull()
            await asyncio.sleep(PULL_RECORD_DELAY + 0.5)
            return with_push, storage.transactions

    assert asyncio.run(scenario(group=True)) == (2, 1)  # the push alone, then both cursors; then one alone
    assert storage.received_by("alice", None) == storage.head()
    assert asyncio.run(scenario(group=False)) == (3, 2)
    storage.close()


class HeldStorage(SQLiteHubStorage):
    """A real SQLite hub storage that records what each commit carried (pushes, pull records) and holds its
    first commit until `release` is set."""

    def __init__(self, path):
        super().__init__(path)
        self.commits: list[tuple[int, int]] = []
        self.release: threading.Event | None = None

    def _commit_group(self, batches, pulls, checked=None):
        held, self.release = self.release, None
        if held is not None:
            held.wait(60)
        self.commits.append((len(batches), len(pulls)))
        return super()._commit_group(batches, pulls, checked)


def test_pull_cursors_due_while_a_commit_is_in_flight_ride_on_the_next_groups_commit(tmp_path):
    """A busy hub spends no transaction on cursors: once due they go with the next group of pushes."""
    storage = HeldStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    storage.commits = []

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=create_app(storage))
        async with httpx.AsyncClient(transport=transport, base_url="http://hub",
                                     headers={"authorization": f"Bearer {token}"}) as client:
            def push(text: str):
                return asyncio.ensure_future(client.post("/v1/push", headers={"content-type": "application/json"},
                                                         content=msgspec.json.encode(PushRequest(events=[entry(text)]))))

            storage.release = release = threading.Event()
            first = push("held in its commit")
            while storage.release is not None:  # the commit thread took it
                await asyncio.sleep(0.01)
            cursor = (await client.get("/v1/pull")).json()["cursor"]
            await client.get("/v1/pull", params={"cursor": cursor})
            second = push("queued behind it")
            await asyncio.sleep(PULL_RECORD_DELAY + 0.2)  # the cursors are due while the first commit is in flight
            release.set()
            assert [answer.status_code for answer in await asyncio.gather(first, second)] == [200, 200]
            await asyncio.sleep(PULL_RECORD_DELAY + 0.5)

    asyncio.run(scenario())
    assert storage.commits == [(1, 0), (1, 2)]  # both cursors with the second push: no transaction of their own
    assert storage.received_by("alice", None) == 1  # the contract, all the pulls saw
    storage.close()


def test_each_app_answers_from_its_own_storage(tmp_path):
    """The handlers are shared by every app: each finds its hub on `request.app.state`."""
    storages = [SQLiteHubStorage(str(tmp_path / f"hub{i}.db")) for i in range(2)]
    tokens = []
    for i, storage in enumerate(storages):
        for _ in range(i + 1):
            storage.apply_contract(CONTRACT)
        tokens.append(storage.add_agent("alice"))

    async def contract_positions() -> list[int]:
        positions = []
        for storage, token in zip(storages, tokens):
            transport = httpx.ASGITransport(app=create_app(storage))
            async with httpx.AsyncClient(transport=transport, base_url="http://hub",
                                         headers={"authorization": f"Bearer {token}"}) as client:
                positions.append((await client.get("/v1/contract")).json()["position"])
        return positions

    assert asyncio.run(contract_positions()) == [1, 2]
    for storage in storages:
        storage.close()


def test_a_group_gathers_the_pushes_of_the_agents_pushing_lately_and_a_lone_agent_waits_for_nobody(
        tmp_path, monkeypatch):
    """sync/committer.py: a group's first push waits (at most GATHER_SECONDS) until pushes from a share of
    the agents that pushed lately are queued, so a busy hub's groups are larger and its commits fewer; an
    agent pushing alone is committed at once."""
    import sync.committer
    from sync.committer import GroupCommitter
    from sync.fanout import Fanout

    monkeypatch.setattr(sync.committer, "GATHER_SECONDS", 30.0)  # only the count ends a wait here
    monkeypatch.setattr(sync.committer, "PUSHERS_WINDOW", 0.2)
    storage = CountingStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    agents = [f"agent{i}" for i in range(8)]

    def event(agent: str, n: int):
        return new_event(EntryAppend(type="FACT", date="2026-11-30", content=f"{agent} {n}"), agent=agent,
                         layer="insights")

    async def scenario():
        committer = GroupCommitter(storage, Fanout())
        await asyncio.wait_for(committer.push([event("agent0", 0)]), 20)  # alone: at once, whatever GATHER_SECONDS
        await asyncio.sleep(0.25)  # a new window: agent0 alone pushed in the last
        await asyncio.wait_for(committer.push([event("agent0", 1)]), 20)
        await asyncio.gather(*(committer.push([event(agent, 2)]) for agent in agents))  # eight agents push
        await asyncio.sleep(0.25)  # then a new window, counting eight
        before = storage.transactions
        pushes = []
        for agent in agents[:6]:  # 3/4 of eight: the sixth push ends the gathering
            pushes.append(asyncio.ensure_future(committer.push([event(agent, 3)])))
            await asyncio.sleep(0.05)  # time enough for a commit of each push alone, were it not gathered
            assert storage.transactions == before or agent == agents[5]
        results = await asyncio.wait_for(asyncio.gather(*pushes), 20)
        assert storage.transactions == before + 1  # six pushes, one commit
        assert [result[0].position for result in results] == list(range(results[0][0].position,
                                                                           results[0][0].position + 6))

    asyncio.run(scenario())
    storage.close()
