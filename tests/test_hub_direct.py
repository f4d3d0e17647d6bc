"""Push and pull go from the server straight to their handlers (sync/hub.py `HubApp`), past starlette's
router and middleware: their refusals, their unexpected errors and their compression must come out as
they do through the whole stack, and every other request still takes the whole way."""

import asyncio
import contextlib
import json
import logging
import time
from contextlib import contextmanager

import httpx
import msgspec

from eventstore.envelope import new_event
from eventstore.kinds import EntryAppend
from sync.fanout import Fanout
from sync.hub import create_app
from sync.storage_sqlite import SQLiteHubStorage
from sync.wire import PushRequest

from hub_storage_conformance import CONTRACT


class BrokenPulls(SQLiteHubStorage):
    """A real SQLite hub storage whose pulls fail as no refusal does (a bug, a disk gone)."""

    def pull_rows(self, after, layers, limit):
        raise RuntimeError("the disk is gone")


def entry(text: str):
    return new_event(EntryAppend(type="FACT", date="2026-11-30", content=text), agent="alice", layer="insights")


def ask(storage, requests):
    async def scenario():
        transport = httpx.ASGITransport(app=create_app(storage), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://hub") as client:
            return [await client.request(*request[:2], **request[2]) for request in requests]

    return asyncio.run(scenario())


def test_direct_routes_answer_refusals_errors_and_compression_as_the_stack_does(tmp_path):
    storage = BrokenPulls(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    auth = {"authorization": f"Bearer {token}"}
    many = PushRequest(events=[entry(f"fact number {i} " + "x" * 60) for i in range(40)])
    pushed, refused, unknown, broken, wrong_method, head = ask(storage, [
        ("POST", "/v1/push", {"content": msgspec.json.encode(many),
                              "headers": {**auth, "content-type": "application/json", "accept-encoding": "zstd"}}),
        ("POST", "/v1/push", {"content": b"{not json", "headers": {**auth, "content-type": "application/json"}}),
        ("GET", "/v1/pull", {"headers": {"authorization": "Bearer nobody"}}),
        ("GET", "/v1/pull", {"headers": auth}),
        ("GET", "/v1/push", {"headers": auth}),
        ("HEAD", "/health", {}),
    ])
    assert pushed.status_code == 200 and pushed.headers["content-encoding"] == "zstd"
    answer = pushed.json()  # httpx undoes the zstd
    assert [result["position"] for result in answer["results"]] == list(range(2, 42))
    for response, status, kind in ((refused, 400, "invalid-body"), (unknown, 401, "invalid-token"),
                                   (broken, 500, "internal"), (wrong_method, 405, "http-405")):
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["type"].endswith("/" + kind) and response.json()["status"] == status
    assert "disk" not in broken.text  # a 500 tells nothing of its cause
    assert head.status_code == 200
    assert storage.head() == 41  # the refused push left the hub untouched
    storage.close()


class CountedPulls(SQLiteHubStorage):
    """A real SQLite hub storage that counts the pages it reads."""

    pages = 0

    def pull_rows(self, after, layers, limit):
        self.pages += 1
        return super().pull_rows(after, layers, limit)


def test_a_long_poll_that_waits_for_a_wake_up_due_reads_no_page_before_it(tmp_path):
    """A commit made during the pause after a wake-up is told at its end (sync/fanout.py): a long-poll that
    finds only that commit waits for it and shares the woken answer, without reading a page of its own first."""
    storage = CountedPulls(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    auth = {"authorization": f"Bearer {token}"}

    async def scenario():
        app = create_app(storage)
        app.state.hub.fanout = Fanout(cost=0.5)  # the pause after waking one long-poll: half a second
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hub",
                                     headers=auth) as client:
            async def pushed(text):
                response = await client.post("/v1/push", content=msgspec.json.encode(PushRequest(events=[entry(text)])),
                                             headers={"content-type": "application/json"})
                assert response.status_code == 200

            cursor = (await client.get("/v1/pull")).json()["cursor"]
            first = asyncio.create_task(client.get("/v1/pull", params={"cursor": cursor, "wait": 5}))
            while app.state.hub.fanout.waiting < 1:
                await asyncio.sleep(0.01)
            await pushed("a")  # wakes the long-poll at once, then pauses
            cursor = (await first).json()["cursor"]
            await pushed("b")  # during the pause: told at its end
            assert app.state.hub.fanout.deferred(storage.head() - 1, ["insights"])
            storage.pages = 0
            answer = (await client.get("/v1/pull", params={"cursor": cursor, "wait": 5})).json()
            assert [event["body"]["content"] for event in answer["events"]] == ["b"]
            assert storage.pages == 1  # the woken answer's page only

    asyncio.run(scenario())
    storage.close()


def test_a_push_whose_body_comes_in_several_messages_is_read_whole(tmp_path):
    """The push handler reads its body from the ASGI messages itself (sync/hub.py body_of): a body sent in
    pieces is joined in order, and one that grows past the limit is refused as it comes."""
    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    events = [entry(f"piece {i}") for i in range(3)]
    raw = msgspec.json.encode(PushRequest(events=events))

    async def pieces(data: bytes, size: int):
        for start in range(0, len(data), size):
            yield data[start:start + size]

    async def too_much():
        for _ in range(17):
            yield b" " * (1024 * 1024)

    pushed, refused = ask(storage, [("POST", "/v1/push", {"content": pieces(raw, 50), "headers": headers}),
                                    ("POST", "/v1/push", {"content": too_much(), "headers": headers})])
    assert pushed.status_code == 200, pushed.text
    assert [r["id"] for r in pushed.json()["results"]] == [e.id for e in events]
    assert refused.status_code == 413 and refused.json()["type"].endswith("too-large")
    storage.close()


def exchange(port: int, request: bytes, answers: int = 1) -> list[tuple[bytes, bytes]]:
    """Sends raw bytes on one connection and reads `answers` responses: (head without the date line, body) each."""
    import socket

    got, data = [], b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        while len(got) < answers:
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                head = data[:end]
                if head.startswith(b"HTTP/1.1 1"):  # an interim answer (100 Continue)
                    data = data[end + 4:]
                    continue
                length = int(next(line.split(b":")[1] for line in head.lower().split(b"\r\n")
                                  if line.startswith(b"content-length:")))
                if len(data) >= end + 4 + length:
                    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"date:")]
                    got.append((b"\r\n".join(lines), data[end + 4:end + 4 + length]))
                    data = data[end + 4 + length:]
                    continue
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return got


def raw_push(token: str, body: bytes, *extra: str, chunked: bool = False) -> bytes:
    head = ["POST /v1/push HTTP/1.1", "host: hub", f"authorization: Bearer {token}", *extra]
    if chunked:
        return ("\r\n".join([*head, "transfer-encoding: chunked"]) + "\r\n\r\n").encode() + \
            b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    return ("\r\n".join([*head, f"content-length: {len(body)}"]) + "\r\n\r\n").encode() + body


def test_a_push_answered_from_the_parsers_callbacks_is_answered_byte_for_byte_as_the_asgi_way(tmp_path):
    """sync/server.py answers a push from httptools' callbacks (HubApp.push_directly), with no ASGI cycle: each
    answer (accepted, refused for every reason in turn, compressed, a batch checked off the event loop, a
    duplicate, a conflict) is the same bytes as a hub that serves every request the ASGI way; what is unusual
    (chunked, Expect: 100-continue, pipelined behind another) still goes the ASGI way, and answers alike."""
    import zstandard

    from hubserver import HubServer

    servers, tokens = [], []
    for name, direct in (("direct", True), ("asgi", False)):
        storage = SQLiteHubStorage(str(tmp_path / f"{name}.db"))
        storage.apply_contract(CONTRACT)
        tokens.append(storage.add_agent("alice"))
        storage.close()
        servers.append(HubServer(str(tmp_path / f"{name}.db"), direct=direct).start())
    try:
        taken = []
        direct_push = servers[0].app.push_directly
        servers[0].app.push_directly = lambda *args: (taken.append(1), direct_push(*args))
        one, other = entry("one"), entry("other")
        clash = msgspec.json.decode(msgspec.json.encode(one))
        clash["body"]["content"] = "changed"
        many = PushRequest(events=[entry(f"fact number {i} " + "x" * 60) for i in range(40)])
        body = {text: msgspec.json.encode(PushRequest(events=[entry(text)]))
                for text in ("chunked", "expect", "first", "pipelined", "last", "lost")}
        json_type = "content-type: application/json"
        cases = [  # (request maker, answers, whether it is answered directly)
            (lambda t: raw_push(t, msgspec.json.encode(PushRequest(events=[one])), json_type), 1, True),
            (lambda t: raw_push(t, msgspec.json.encode(PushRequest(events=[one])), json_type), 1, True),  # duplicate
            (lambda t: raw_push(t, msgspec.json.encode({"events": [clash]}), json_type), 1, True),  # id conflict
            (lambda t: raw_push("nobody", b"{}", json_type), 1, True),
            (lambda t: raw_push(t, b"{}", json_type).replace(b"authorization: Bearer", b"x-not-it:"), 1, True),
            (lambda t: raw_push(t, b"{}", "content-type: text/plain"), 1, True),
            (lambda t: raw_push(t, body["first"], json_type, "content-type: text/plain"), 1, True),  # given twice
            (lambda t: raw_push(t, body["first"], json_type, f"authorization: Bearer {t}"), 1, True),
            (lambda t: raw_push(t, b"{not json", json_type), 1, True),
            (lambda t: raw_push(t, b'{"events": [{"id": 1}]}', json_type), 1, True),
            (lambda t: raw_push(t, b'{"events": []}', json_type), 1, True),
            (lambda t: raw_push(t, b"{}", json_type, "content-encoding: br"), 1, True),
            (lambda t: raw_push(t, zstandard.ZstdCompressor().compress(msgspec.json.encode(PushRequest(events=[other]))),
                                json_type, "content-encoding: zstd"), 1, True),
            (lambda t: raw_push(t, msgspec.json.encode(many), json_type, "accept-encoding: zstd"), 1, True),
            (lambda t: raw_push(t, body["chunked"], json_type, chunked=True), 1, False),
            (lambda t: raw_push(t, body["expect"], json_type, "expect: 100-continue"), 1, False),
            (lambda t: raw_push(t, body["first"], json_type) + raw_push(t, body["pipelined"], json_type)
                + b"GET /health HTTP/1.1\r\nhost: hub\r\n\r\n", 3, True),
            (lambda t: raw_push(t, body["last"], json_type, "connection: close"), 1, True),
        ]
        statuses = set()
        for make, answers, direct in cases:
            before = len(taken)
            request = make(tokens[0])
            got = exchange(servers[0].port, request, answers)
            expected = exchange(servers[1].port, make(tokens[1]), answers)
            assert got == expected, request[:300]
            assert len(got) == answers
            assert (len(taken) > before) == direct, request[:300]
            statuses.update(head.split(b" ")[1] for head, _ in got)
        assert statuses == {b"200", b"401", b"409", b"415", b"400", b"422"}

        def broken(*args):
            raise RuntimeError("the disk is gone")

        for server in servers:
            server.storage.commit = broken
        failed = [exchange(server.port, raw_push(token, body["lost"], json_type), 1)
                  for server, token in zip(servers, tokens)]
        assert failed[0] == failed[1] and failed[0][0][0].startswith(b"HTTP/1.1 500")
        assert b"disk" not in failed[0][0][1]  # a 500 tells nothing of its cause
        assert servers[0].storage.head() == servers[1].storage.head()
    finally:
        for server in servers:
            server.stop()


def test_a_push_checked_with_a_cached_token_state_is_checked_again_when_the_token_was_revoked_meanwhile(
        tmp_path, monkeypatch):
    """A direct push whose token state came from the cache (SQLiteHubStorage.push_state) and whose token was
    revoked by another process before its commit is not applied: the commit sends it back (`Stale`) and the
    push is checked again from a fresh read, which refuses the token."""
    import sync.storage_sqlite

    monkeypatch.setattr(sync.storage_sqlite, "TOKEN_CACHE_CALM", 0.0)
    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    headers = [(b"authorization", f"Bearer {token}".encode()), (b"content-type", b"application/json")]

    async def scenario():
        app = create_app(storage)
        answers = []

        async def push(text):
            answered = asyncio.get_running_loop().create_future()
            app.push_directly(headers, msgspec.json.encode(PushRequest(events=[entry(text)])),
                              lambda *answer: answered.set_result(answer))
            answers.append(await answered)

        await push("read")
        storage._stop_watching()  # no watcher to notice the revocation first: the commit must
        await push("cached")
        other = SQLiteHubStorage(storage.path)
        other.revoke_agent("alice")
        other.close()
        await push("revoked")
        return answers

    answers = asyncio.run(scenario())
    assert [status for status, *_ in answers] == [200, 200, 401]
    assert b"invalid-token" in answers[2][2]
    assert storage.head() == 3  # the contract and the two pushes before the revocation
    storage.close()


def raw_get(token: str | None, target: str, *extra: str, version: str = "1.1") -> bytes:
    auth = [f"authorization: Bearer {token}"] if token else []
    return ("\r\n".join([f"GET {target} HTTP/{version}", "host: hub", *auth, *extra]) + "\r\n\r\n").encode()


def twin_hubs(tmp_path):
    """A hub answering from the parser's callbacks and one answering every request the ASGI way, on ONE
    database (the same events, positions and times, so their answers to a pull can be the same bytes)."""
    from hubserver import HubServer

    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    tokens = {name: storage.add_agent(name) for name in ("alice", "carol")}
    storage.close()
    servers = [HubServer(str(tmp_path / "hub.db"), direct=direct).start() for direct in (True, False)]
    return servers, tokens


def asked_while_waiting(servers, request: bytes, then) -> list:
    """`request` sent to each hub; once both wait (a long-poll), `then()`; each hub's answer."""
    from concurrent.futures import ThreadPoolExecutor

    waiting = [server.app.state.hub.fanout.waiting for server in servers]
    with ThreadPoolExecutor(2) as pool:
        answers = [pool.submit(exchange, server.port, request) for server in servers]
        deadline = time.monotonic() + 30
        while any(server.app.state.hub.fanout.waiting <= was for server, was in zip(servers, waiting)):
            assert time.monotonic() < deadline, "the long-polls did not start waiting"
            time.sleep(0.01)
        then()
        return [answer.result() for answer in answers]


def test_a_pull_answered_from_the_parsers_callbacks_is_answered_byte_for_byte_as_the_asgi_way(tmp_path):
    """sync/server.py answers a pull from httptools' callbacks too (HubApp.pull_directly), a long-poll included:
    every answer (a page, JSON or msgpack, compressed or not, every refusal of its parameters and token in
    their order, a long-poll woken by a commit or over, a token revoked while it waited, a 500) is the same
    bytes as the ASGI way's on the same database; what is unusual (a page over INLINE_PULL, `ack=durable`,
    HTTP/1.0, a GET with a body, pipelined behind another) still goes the ASGI way, and answers alike."""
    servers, tokens = twin_hubs(tmp_path)
    alice, carol = tokens["alice"], tokens["carol"]
    try:
        taken = []
        direct_pull = servers[0].app.pull_directly
        servers[0].app.pull_directly = lambda *args: (taken.append(1), direct_pull(*args))[1]
        many = PushRequest(events=[entry(f"fact number {i} " + "x" * 60) for i in range(30)])
        pushed = exchange(servers[0].port, raw_push(alice, msgspec.json.encode(many), "content-type: application/json"))
        assert pushed[0][0].startswith(b"HTTP/1.1 200")
        head = servers[0].storage.head()
        from sync.hub import encode_cursor

        at = {n: encode_cursor(n) for n in (1, 10, head)}
        msgpack = "accept: application/msgpack"
        cases = [  # (request, answers, whether it is answered directly)
            (raw_get(alice, "/v1/pull"), 1, True),
            (raw_get(alice, "/v1/pull?limit=3"), 1, True),
            (raw_get(alice, f"/v1/pull?cursor={at[10]}&limit=2"), 1, True),
            (raw_get(alice, f"/v1/pull?cursor={at[10]}&limit=2", msgpack), 1, True),
            (raw_get(alice, "/v1/pull", "accept-encoding: zstd"), 1, True),
            (raw_get(alice, "/v1/pull?limit=1", "accept-encoding: gzip, zstd"), 1, True),
            (raw_get(alice, "/v1/pull", msgpack, "accept-encoding: zstd"), 1, True),
            (raw_get(alice, f"/v1/pull?cursor={at[1]}&held={at[1]}&limit=4"), 1, True),
            (raw_get(alice, "/v1/pull?li%6Dit=2&limit=5&limit=+3&x"), 1, True),
            (raw_get(alice, f"/v1/pull?cursor={at[1]}&wait=5&limit=2"), 1, True),  # behind: at once
            (raw_get(alice, f"/v1/pull?cursor={at[head]}&wait=0.2"), 1, True),  # nothing new: its wait over
            (raw_get(alice, "/v1/pull?cursor=nope"), 1, True),
            (raw_get(alice, f"/v1/pull?cursor={at[1]}&held=nope"), 1, True),
            (raw_get(alice, "/v1/pull?limit=many"), 1, True),
            (raw_get("nobody", "/v1/pull?limit=many"), 1, True),
            (raw_get(alice, "/v1/pull?limit=0"), 1, True),
            (raw_get(alice, "/v1/pull?wait=-1"), 1, True),
            (raw_get(alice, "/v1/pull?wait=nan"), 1, True),
            (raw_get(None, "/v1/pull"), 1, True),
            (raw_get("nobody", "/v1/pull"), 1, True),
            (raw_get(alice, "/v1/pull?limit=2", "connection: close"), 1, True),
            (raw_get(alice, "/v1/pull?limit=2") + raw_get(alice, "/v1/pull?limit=3"), 2, True),
            (raw_get(alice, "/v1/pull?limit=6000"), 1, False),
            (raw_get(alice, "/v1/pull?limit=2&ack=durable"), 1, False),
            (raw_get(alice, "/v1/pull?limit=2", version="1.0"), 1, False),
            (raw_get(alice, "/v1/pull?limit=2", "content-length: 2")[:-4] + b"\r\n\r\n{}", 1, False),
            (raw_get(alice, "/v1/pull/"), 1, False),
        ]
        statuses = set()
        for request, answers, direct in cases:
            before = len(taken)
            got = exchange(servers[0].port, request, answers)
            expected = exchange(servers[1].port, request, answers)
            assert got == expected, request
            assert len(got) == answers
            assert (len(taken) > before) == direct, request
            statuses.update(head.split(b" ")[1] for head, _ in got)
        assert statuses == {b"200", b"307", b"400", b"401"}

        def push(text: str) -> None:
            body = msgspec.json.encode(PushRequest(events=[entry(text)]))
            assert exchange(servers[0].port, raw_push(alice, body, "content-type: application/json"))[0][0] \
                .startswith(b"HTTP/1.1 200")

        head = servers[0].storage.head()
        long_poll = raw_get(alice, f"/v1/pull?cursor={encode_cursor(head)}&wait=20")
        before = len(taken)
        woken = asked_while_waiting(servers, long_poll, lambda: push("woken"))
        assert woken[0] == woken[1] and b'"content":"woken"' in woken[0][0][1]
        assert len(taken) == before + 1

        head = servers[0].storage.head()

        def revoked() -> None:
            servers[0].storage.revoke_agent("carol")
            push("after carol")

        gone = asked_while_waiting(servers, raw_get(carol, f"/v1/pull?cursor={encode_cursor(head)}&wait=20"), revoked)
        assert gone[0] == gone[1] and gone[0][0][0].startswith(b"HTTP/1.1 401")

        def broken(*args):
            raise RuntimeError("the disk is gone")

        for server in servers:
            server.storage.pull_rows = broken
        failed = [exchange(server.port, raw_get(alice, "/v1/pull"), 1) for server in servers]
        assert failed[0] == failed[1] and failed[0][0][0].startswith(b"HTTP/1.1 500")
        assert b"disk" not in failed[0][0][1]
    finally:
        for server in servers:
            server.stop()


def test_a_long_poll_answered_directly_that_outlasts_the_servers_graceful_stop_is_answered_as_the_asgi_way(tmp_path):
    """A long-poll answered from the parser's callbacks stands among uvicorn's tasks while it waits: a stopping
    server waits for it as for an ASGI task, then cancels it, and its client hears the same 500 either way. (A hub
    served by sync/server.py releases its long-polls as it begins to stop (Fanout.release,
    test_hub_waiting.py): here, one served without that, as another runner would.)"""
    import threading

    servers, tokens = twin_hubs(tmp_path)
    for server in servers:
        server.server.stopping = None
    head = servers[0].storage.head()
    from sync.hub import encode_cursor

    def stop_both() -> None:
        stopping = [threading.Thread(target=server.stop) for server in servers]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()

    try:
        answers = asked_while_waiting(servers, raw_get(tokens["alice"], f"/v1/pull?cursor={encode_cursor(head)}&wait=25"),
                                      stop_both)
    finally:
        for server in servers:
            if server.thread.is_alive():
                server.stop()
    assert answers[0] == answers[1]
    assert answers[0][0][0].startswith(b"HTTP/1.1 500") and answers[0][0][1] == b"Internal Server Error"


def test_a_connection_answered_from_the_parser_is_kept_alive_while_busy_and_closed_once_idle(tmp_path):
    """sync/server.py arms one keep-alive timer per idle spell rather than one per answer: a connection that
    keeps asking stays open past the keep-alive timeout, and one left idle is closed after it."""
    import socket

    from hubserver import HubServer

    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    storage.close()
    server = HubServer(str(tmp_path / "hub.db")).start()
    server.server.config.timeout_keep_alive = 2.0  # read by each connection as it opens
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            started = time.monotonic()
            asked = 0
            while time.monotonic() - started < 5.0:  # busy for two and a half timeouts, never idle 2 s
                sock.sendall(raw_get(token, "/v1/pull?limit=1"))
                assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "closed while busy"
                asked += 1
                time.sleep(0.05)
            assert asked > 10
            assert sock.recv(65536) == b""  # idle: closed after the timeout (recv waits up to 30 s)
    finally:
        server.stop()


H2C = ("connection: Upgrade, HTTP2-Settings", "upgrade: h2c", "http2-settings: AAMAAABkAAQCAAAAAAIAAAAA")
"""What `curl --http2` adds to a plain-http request: an offer to switch to HTTP/2, which a server may ignore."""


def test_a_request_offering_an_upgrade_is_answered_over_http_1_1_with_its_body(tmp_path):
    """httptools stops at the head of a request that asks to upgrade (curl --http2 asks for h2c): its body never
    reached the hub, which refused the push as truncated JSON, and the connection read nothing more. The offer is
    ignored as RFC 9110 lets a server ignore it: the push lands, whether its body comes with the head or after it,
    the next request on the connection is answered, and a body the hub cannot delimit is refused in one line."""
    import socket

    from hubserver import HubServer

    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    storage.close()
    json_type = "content-type: application/json"
    with HubServer(str(tmp_path / "hub.db")) as server:
        first = msgspec.json.encode(PushRequest(events=[entry("offered h2c")]))
        (head, body), (pull_head, pull_body) = exchange(
            server.port, raw_push(token, first, json_type, *H2C) + raw_get(token, "/v1/pull?limit=5"), 2)
        assert head.startswith(b"HTTP/1.1 200") and msgspec.json.decode(body)["results"][0]["position"] == 2
        assert pull_head.startswith(b"HTTP/1.1 200")
        assert [e["body"]["content"] for e in msgspec.json.decode(pull_body)["events"]] == ["offered h2c"]

        later = raw_push(token, msgspec.json.encode(PushRequest(events=[entry("body sent apart")])), json_type, *H2C)
        split = later.index(b"\r\n\r\n") + 4
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(later[:split])
            time.sleep(0.2)
            sock.sendall(later[split:split + 10])
            time.sleep(0.1)
            sock.sendall(later[split + 10:] + raw_get(token, "/health", *H2C))
            answers = b""
            while answers.count(b"HTTP/1.1 200") < 2:
                chunk = sock.recv(65536)
                assert chunk, answers
                answers += chunk
        assert b'"position":3' in answers and b'{"ok":true}' in answers

        padded = raw_push(token, msgspec.json.encode(PushRequest(events=[entry("padded length")])), json_type, *H2C)
        (head, body), = exchange(server.port, padded.replace(b"\r\n\r\n", b" \t\r\n\r\n", 1))  # RFC 9110's OWS
        assert head.startswith(b"HTTP/1.1 200") and msgspec.json.decode(body)["results"][0]["position"] == 4

        logged = Logged()
        with logged.from_("uvicorn.error", "asyncio"):
            (refused, reason), = exchange(server.port, raw_push(token, first, json_type, *H2C, chunked=True))
            time.sleep(0.3)  # the request's task, started before its body was refused, ends
        assert refused.startswith(b"HTTP/1.1 400") and json.loads(reason)["detail"] == (
            "A request asking to upgrade must send its body with one Content-Length.")
        assert logged.lines == []  # it logged two tracebacks: the task that waited for the body failed to answer
    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    assert storage.head() == 4
    storage.close()


class Logged(logging.Handler):
    """What some loggers say while a block runs (uvicorn's do not reach pytest's capture: they do not propagate)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record) -> None:
        self.lines.append(record.getMessage())

    @contextmanager
    def from_(self, *names: str):
        loggers = [logging.getLogger(name) for name in names]
        for logger in loggers:
            logger.addHandler(self)
        try:
            yield self
        finally:
            for logger in loggers:
                logger.removeHandler(self)


def test_a_push_whose_client_leaves_mid_body_is_not_logged_as_an_internal_error(tmp_path):
    """A push going the ASGI way (chunked, over DIRECT_BODY_BYTES, Expect: 100-continue) whose client leaves before
    its body is whole has nobody to answer: nothing is stored and nothing is logged (a 500 was attempted on the
    closed connection, and two tracebacks logged)."""
    import socket

    from hubserver import HubServer

    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    storage.close()
    body = msgspec.json.encode(PushRequest(events=[entry("left early")]))
    requests = [raw_push(token, body, "content-type: application/json", chunked=True),
                raw_push(token, body + b" " * 70_000, "content-type: application/json"),
                raw_push(token, body, "content-type: application/json", "expect: 100-continue")]
    logged = Logged()
    with HubServer(str(tmp_path / "hub.db")) as server, logged.from_("uvicorn.error", "asyncio"):
        for request in requests:
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(request[:request.index(b"\r\n\r\n") + 10])
                time.sleep(0.2)
            time.sleep(0.3)
        assert logged.lines == []
    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    assert storage.head() == 1
    storage.close()



def test_a_request_that_does_not_arrive_in_time_is_answered_408_and_its_connection_closed(tmp_path):
    """A client that opens connections and sends nothing, or a request's head a byte at a time, or stops in the
    middle of a body, held a descriptor each for good: at the process's limit of open files (newcomer9: about
    20,000 such sockets) every other request was refused. `mem serve --read-timeout` (20 s by default) closes
    them, after a 408 problem document; a body that keeps coming and a long-poll waiting longer are not cut."""
    import socket

    from conftest import run_mem
    from hubserver import mem_serve
    from sync.server import READ_TIMEOUT

    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    storage.close()
    push = raw_push(token, msgspec.json.encode(PushRequest(events=[entry("slow but steady")])),
                    "content-type: application/json")
    split = push.index(b"\r\n\r\n") + 4
    step = -(-(len(push) - split) // 6)
    steady_parts = [push[:split], *(push[at:at + step] for at in range(split, len(push), step))]

    def until_closed(sock) -> bytes:
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
        return got

    def one_answer(sock) -> bytes:
        got = b""
        while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < int(
                got.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0]):
            chunk = sock.recv(65536)
            assert chunk, got
            got += chunk
        return got

    with mem_serve(str(tmp_path / "hub.db"), args=("--read-timeout", "2.5")) as url:
        port = int(url.rsplit(":", 1)[1])
        cursor = httpx.get(url + "/v1/pull", headers={"authorization": f"Bearer {token}"}).json()["cursor"]
        silent, half_head, half_body, steady, waiting = (
            socket.create_connection(("127.0.0.1", port), timeout=15) for _ in range(5))
        half_body.sendall(push[:split + 5])
        waiting.sendall(raw_get(token, f"/v1/pull?cursor={cursor}&wait=5"))
        for n, part in enumerate(steady_parts):  # parts 0.5 s apart: 3.5 s in all, never 2.5 s without a byte
            steady.sendall(part)
            with contextlib.suppress(OSError):  # its head a byte every 0.5 s: never whole (closed: the send fails)
                half_head.sendall(push[n:n + 1])
            time.sleep(0.5)
        for sock in (silent, half_head, half_body):
            late = until_closed(sock)
            assert late.startswith(b"HTTP/1.1 408"), late
            assert json.loads(late.split(b"\r\n\r\n", 1)[1])["status"] == 408
        assert one_answer(steady).startswith(b"HTTP/1.1 200")
        assert one_answer(waiting).startswith(b"HTTP/1.1 200")  # waited its 5 s: not cut
        for sock in (silent, half_head, half_body, steady, waiting):
            sock.close()
        assert httpx.get(url + "/health").status_code == 200
    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    assert [event.body.content for event in storage.pull(0, ["insights"], 10)] == ["slow but steady"]
    storage.close()
    helped = run_mem("serve", "--help", env={"COLUMNS": "300"}).stdout.decode()
    assert f"Default: {READ_TIMEOUT:g}." in " ".join(helped.split())  # the help says the default the server has


def test_heads_too_large_requests_unreadable_and_answers_never_read_are_cut_with_problem_documents(tmp_path):
    """Regression (nc15c): a 64 MiB header was read whole into memory and answered 200; a request the parser could
    not read got a text/plain 400; a client that sent pulls and read none of the answers held each answer in the
    hub's memory for as long as it kept its connection open. Now a head over MAX_HEAD_BYTES is answered 431, an
    unreadable request 400, both problem documents, and a connection whose answer goes unread for the read timeout
    is dropped; a client that reads slowly is not."""
    import socket

    from hubserver import assert_heads_too_large_and_unreadable_requests_are_refused, mem_serve, raw_answer

    storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("alice")
    storage.push([entry(f"fact {i} " + "x" * 300) for i in range(12_000)])
    storage.close()

    def unread(size: int) -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
        sock.settimeout(15)
        sock.connect(("127.0.0.1", port))
        sock.sendall(raw_get(token, "/v1/pull?limit=12000"))
        return sock

    with mem_serve(str(tmp_path / "hub.db"), args=("--read-timeout", "2.5")) as url:
        port = int(url.rsplit(":", 1)[1])
        assert_heads_too_large_and_unreadable_requests_are_refused(port)
        pipelined = b"GET /health HTTP/1.1\r\nhost: hub\r\nx-filler: %s\r\n\r\n" % (b"y" * 150) * 2_000  # (nc16b: 431)
        answers = raw_answer(port, pipelined + b"GET /health HTTP/1.1\r\nhost: hub\r\nconnection: close\r\n\r\n")
        assert answers.count(b"HTTP/1.1 200 ") == 2_001 and b" 431 " not in answers, answers[-300:]
        fine = f"GET /health HTTP/1.1\r\nhost: hub\r\nx-filler: {'y' * 8000}\r\nconnection: close\r\n\r\n".encode()
        assert raw_answer(port, fine).startswith(b"HTTP/1.1 200")

        never, slow = unread(4096), unread(4096)
        whole = len(httpx.get(url + "/v1/pull?limit=12000", headers={"authorization": f"Bearer {token}"},
                              timeout=30).content)
        assert whole > 3_000_000
        slowly = b""
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:  # 6 s, past the 2.5 s timeout, reading a little every 0.2 s
            slowly += slow.recv(32768)
            time.sleep(0.2)
        got = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := never.recv(65536):
                got += chunk
        assert len(got) < whole, "the answer nobody read was kept until it was read"
        head_end = slowly.index(b"\r\n\r\n") + 4
        assert b"content-length: %d" % whole in slowly[:head_end].lower()
        while len(slowly) < head_end + whole:  # the slow reader gets all of it
            chunk = slow.recv(65536)
            assert chunk, len(slowly)
            slowly += chunk
        never.close()
        slow.close()
        assert httpx.get(url + "/health").status_code == 200
