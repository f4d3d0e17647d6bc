"""Push and pull go from the server straight to their handlers (sync/hub.py `HubApp`), past starlette's
router and middleware: their refusals, their unexpected errors and their compression must come out as
they do through the whole stack, and every other request still takes the whole way."""

import asyncio

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
