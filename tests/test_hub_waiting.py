"""Long-polls hold no thread and no lock: many open at once leave the hub answering, one push wakes
them all (fan-out), and a follower outlives an idle hub and a hub restart."""

import asyncio
import signal
import subprocess
import time

import httpx
import msgspec
import pytest

from eventstore.envelope import new_event
from eventstore.kinds import EntryAppend
from sync.client import HubClient
from sync.storage import open_storage
from sync.wire import PushRequest

from conftest import mem_command, run_mem
from hub_storage_conformance import CONTRACT
from hubserver import HubServer
from test_hub_direct import Logged

POLLS = 64


def entry(text: str, agent: str = "alice"):
    return new_event(EntryAppend(type="FACT", date="2026-11-30", content=text), agent=agent, layer="insights")


def prepared(db: str) -> dict[str, str]:
    storage = open_storage(db)
    storage.apply_contract(CONTRACT)
    tokens = {name: storage.add_agent(name) for name in ("alice", "main")}
    storage.close()
    return tokens


@pytest.fixture(params=["sqlite", "postgres"])
def hub_db(request, tmp_path):
    return str(tmp_path / "hub.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")


def test_many_long_polls_leave_the_hub_answering_and_one_push_wakes_them_all(hub_db):
    tokens = prepared(hub_db)

    async def scenario(url):
        limits = httpx.Limits(max_connections=POLLS + 8)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30,
                                     headers={"authorization": f"Bearer {tokens['main']}"}) as main, \
                httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {tokens['alice']}"}) as alice:
            cursor = (await main.get("/v1/pull")).json()["cursor"]
            polls = [asyncio.create_task(main.get("/v1/pull", params={"cursor": cursor, "wait": 20}))
                     for _ in range(POLLS)]
            await asyncio.sleep(1.0)
            started = time.monotonic()
            answer = await alice.get("/v1/contract")
            answered_in = time.monotonic() - started
            assert answer.status_code == 200 and answered_in < 2, answered_in
            assert not any(poll.done() for poll in polls)  # they were all still waiting
            event = entry("one push, every long-poll")
            pushed = await alice.post("/v1/push", content=msgspec.json.encode(PushRequest(events=[event])),
                                      headers={"content-type": "application/json"})
            assert pushed.status_code == 200, pushed.text
            started = time.monotonic()
            pages = await asyncio.wait_for(asyncio.gather(*polls), 10)
            assert time.monotonic() - started < 5
            assert all([e["id"] for e in page.json()["events"]] == [event.id] for page in pages)

    with HubServer(hub_db) as hub:
        asyncio.run(scenario(hub.url))


def test_a_long_poll_on_an_idle_hub_ends_before_the_clients_read_timeout(tmp_path):
    tokens = prepared(str(tmp_path / "hub.db"))
    with HubServer(str(tmp_path / "hub.db")) as hub:
        client = HubClient(hub.url, tokens["main"], timeout=0.5)
        page = client.pull("", wait=1.5)  # the wait is longer than the timeout: the read must allow for it
        assert page.events == [] and not page.more
        client.close()


def test_a_follower_survives_a_hub_restart_and_receives_later_events(tmp_path):
    db = str(tmp_path / "hub.db")
    tokens = prepared(db)
    (tmp_path / "main.token").write_text(tokens["main"])
    workspace = tmp_path / "main"
    with HubServer(db) as hub:
        run_mem("init", "-w", workspace, "--agent", "main", check=True)
        run_mem("remote", "add", "origin", hub.url, "--token-file", tmp_path / "main.token", "-w", workspace,
                check=True)
        follower = subprocess.Popen([*mem_command(), "-w", workspace, "pull", "--follow"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        shared = workspace / "memory/insights.md"

        def arrives(text):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (shared.exists() and text in shared.read_text()):
                time.sleep(0.1)
            return shared.exists() and text in shared.read_text()

        try:
            writer = HubClient(hub.url, tokens["alice"])
            writer.push([entry("before the restart")])
            assert arrives("before the restart")
            hub.stop()
            time.sleep(2)  # the follower finds the hub gone and backs off
            hub.start()
            writer.push([entry("after the restart")])
            assert arrives("after the restart")
            writer.close()
            assert follower.poll() is None
        finally:
            follower.send_signal(signal.SIGINT)
            _, err = follower.communicate(timeout=30)
    errors = err.decode()
    assert follower.returncode == 0, errors
    assert "Traceback" not in errors
    assert errors.count("retrying until it answers") == 1, errors
    assert "answers again" in errors


def test_long_polls_woken_by_one_commit_each_get_their_own_layers_and_a_revoked_token_nothing(hub_db):
    """The polls one commit wakes share one read of their page per cursor and layers: a consumer of
    fewer layers does not get the others' page, and a token revoked while waiting still gets 401."""
    from eventstore.kinds import PageIngest

    storage = open_storage(hub_db)
    storage.apply_contract(CONTRACT)
    tokens = {name: storage.add_agent(name) for name in ("alice", "main", "bob", "writer")}
    storage.close()

    async def scenario(url):
        clients = {name: httpx.AsyncClient(base_url=url, timeout=30, headers={"authorization": f"Bearer {token}"})
                   for name, token in tokens.items()}
        try:
            cursor = (await clients["main"].get("/v1/pull")).json()["cursor"]
            polls = {(name, i): asyncio.create_task(clients[name].get("/v1/pull", params={"cursor": cursor, "wait": 20}))
                     for name, count in (("main", 3), ("alice", 3), ("bob", 2)) for i in range(count)}
            await asyncio.sleep(1.0)
            revoking = open_storage(hub_db)
            revoking.revoke_agent("bob")
            revoking.close()
            draft = new_event(PageIngest(slug="plan", frontmatter={"type": "x"}, text="t"), agent="writer",
                              layer="drafts")
            fact = entry("in every consumer's layer", agent="writer")
            pushed = await clients["writer"].post("/v1/push", content=msgspec.json.encode(PushRequest(events=[draft, fact])),
                                                  headers={"content-type": "application/json"})
            assert pushed.status_code == 200, pushed.text
            answers = dict(zip(polls, await asyncio.wait_for(asyncio.gather(*polls.values()), 10)))
        finally:
            for client in clients.values():
                await client.aclose()
        for (name, _), answer in answers.items():
            if name == "bob":
                assert answer.status_code == 401 and fact.id not in answer.text
            else:
                expected = [draft.id, fact.id] if name == "main" else [fact.id]
                assert [e["id"] for e in answer.json()["events"]] == expected, name

    with HubServer(hub_db) as hub:
        asyncio.run(scenario(hub.url))


@pytest.mark.parametrize("direct", [True, False], ids=["answered-directly", "asgi-way"])
def test_a_stopping_hub_answers_its_long_polls_at_once(tmp_path, direct):
    """A hub told to stop (SIGTERM to `mem serve`) answered each waiting long-poll only when the shutdown's
    grace ran out, with a 500 (and a traceback in its log): `mem pull --follow` said "hub refused: HTTP 500".
    Its long-polls now end at once with the page as it stands, and the hub stops without waiting them out."""
    import socket
    import threading

    db = str(tmp_path / "hub.db")
    tokens = prepared(db)
    hub = HubServer(db, direct=direct).start()
    cursor = httpx.get(hub.url + "/v1/pull", headers={"authorization": f"Bearer {tokens['main']}"}).json()["cursor"]
    request = (f"GET /v1/pull?cursor={cursor}&wait=30 HTTP/1.1\r\nhost: hub\r\n"
               f"authorization: Bearer {tokens['main']}\r\n\r\n").encode()
    polls = [socket.create_connection(("127.0.0.1", hub.port), timeout=10) for _ in range(2)]
    for poll in polls:
        poll.sendall(request)
    fanout = hub.server.config.app.state.hub.fanout
    deadline = time.monotonic() + 10
    while fanout.waiting < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fanout.waiting == 2
    started = time.monotonic()
    stopping = threading.Thread(target=hub.stop)
    stopping.start()
    answers = []
    for poll in polls:
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            chunk = poll.recv(65536)
            if not chunk:
                break
            answer += chunk
        answers.append(answer)
        poll.close()
    answered = time.monotonic() - started
    stopping.join(15)
    assert all(a.startswith(b"HTTP/1.1 200") and b'"events":[]' in a for a in answers), answers
    assert answered < 1.5 and time.monotonic() - started < 1.9, answered  # the grace is 2 s


@pytest.mark.parametrize("direct", [True, False], ids=["answered-directly", "asgi-way"])
def test_a_long_poll_whose_client_left_stops_waiting_at_once(hub_db, direct):
    """A long-poll the ASGI way (every pull of a PostgreSQL hub, whose reads wait) went on waiting for a commit
    or its time after its client had closed the connection: each one a task and a waiter held for nothing, up
    to the longest wait. It ends as the connection closes, as one answered from the parser's callbacks does,
    with nothing in the server's log (a HEAD, which the router serves, logged the disconnect as an error)."""
    import socket

    tokens = prepared(hub_db)
    with HubServer(hub_db, direct=direct) as hub, Logged().from_("uvicorn.error") as logged:
        headers = {"authorization": f"Bearer {tokens['main']}"}
        cursor = httpx.get(hub.url + "/v1/pull", headers=headers).json()["cursor"]
        fanout = hub.server.config.app.state.hub.fanout
        polls = [socket.create_connection(("127.0.0.1", hub.port), timeout=10) for _ in range(3)]
        for poll, method in zip(polls, ("GET", "GET", "HEAD")):
            poll.sendall(f"{method} /v1/pull?cursor={cursor}&wait=30 HTTP/1.1\r\nhost: hub\r\n"
                         f"authorization: Bearer {tokens['main']}\r\n\r\n".encode())
        deadline = time.monotonic() + 10
        while fanout.waiting < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fanout.waiting == 3
        polls.pop().close()
        polls.pop().close()
        deadline = time.monotonic() + 2
        while fanout.waiting > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fanout.waiting == 1  # the one still connected waits on
        pushed = httpx.post(hub.url + "/v1/push", content=msgspec.json.encode(PushRequest(events=[entry("after")])),
                            headers={"authorization": f"Bearer {tokens['alice']}", "content-type": "application/json"})
        assert pushed.status_code == 200
        answer = b""
        while not answer.endswith(b"}"):
            answer += polls[0].recv(65536)
        assert answer.startswith(b"HTTP/1.1 200") and b'"content":"after"' in answer
        polls[0].close()
    assert not logged.lines, logged.lines


def test_a_long_poll_that_streams_a_body_is_not_read_without_end(tmp_path):
    """Watching for its client leaving, a long-poll the ASGI way reads what the connection brings: a pull that
    streams a chunked body had the event loop read and throw away gigabytes for its whole wait. Past a few
    kilobytes the hub stops reading, and the client's sends block as they did before anything watched."""
    import socket

    db = str(tmp_path / "hub.db")
    tokens = prepared(db)
    with HubServer(db, direct=False) as hub:
        cursor = httpx.get(hub.url + "/v1/pull", headers={"authorization": f"Bearer {tokens['main']}"}).json()["cursor"]
        fanout = hub.server.config.app.state.hub.fanout
        poll = socket.create_connection(("127.0.0.1", hub.port), timeout=10)
        poll.sendall(f"GET /v1/pull?cursor={cursor}&wait=30 HTTP/1.1\r\nhost: hub\r\ntransfer-encoding: chunked\r\n"
                     f"authorization: Bearer {tokens['main']}\r\n\r\n".encode())
        deadline = time.monotonic() + 10
        while fanout.waiting < 1 and time.monotonic() < deadline:
            poll.sendall(b"1\r\nx\r\n")
            time.sleep(0.01)
        assert fanout.waiting == 1
        poll.setblocking(False)
        chunk, sent, until = b"%x\r\n%s\r\n" % (65536, b"x" * 65536), 0, time.monotonic() + 2
        while time.monotonic() < until:
            try:
                sent += poll.send(chunk)
            except BlockingIOError:
                time.sleep(0.01)
        poll.close()
        assert sent < 64 * 2**20, sent  # the loopback's buffers hold a few megabytes; unread, nothing more goes


def test_a_client_gone_with_a_request_pipelined_behind_its_long_poll_is_not_logged_as_an_error(hub_db):
    """A request pipelined behind a long-poll on one connection, then the client gone: the long-poll's answer,
    once its wait was over, was written to the closed connection, and the hub logged "Exception in ASGI
    application" with a traceback (a PostgreSQL hub, whose every request goes the ASGI way)."""
    import socket

    tokens = prepared(hub_db)
    with HubServer(hub_db) as hub, Logged().from_("uvicorn.error") as logged:
        auth = f"authorization: Bearer {tokens['main']}\r\n"
        cursor = httpx.get(hub.url + "/v1/pull", headers={"authorization": f"Bearer {tokens['main']}"}).json()["cursor"]
        fanout = hub.server.config.app.state.hub.fanout
        poll = socket.create_connection(("127.0.0.1", hub.port), timeout=10)
        poll.sendall(f"GET /v1/pull?cursor={cursor}&wait=1 HTTP/1.1\r\nhost: hub\r\n{auth}\r\n".encode())
        deadline = time.monotonic() + 10
        while fanout.waiting < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        poll.sendall(f"GET /v1/pull?cursor={cursor} HTTP/1.1\r\nhost: hub\r\n{auth}\r\n"
                     "GET /health HTTP/1.1\r\nhost: hub\r\n\r\n".encode())
        time.sleep(0.2)
        poll.close()
        deadline = time.monotonic() + 5
        while (fanout.waiting or hub.server.server_state.tasks) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert not fanout.waiting and not hub.server.server_state.tasks
    assert not logged.lines, logged.lines
