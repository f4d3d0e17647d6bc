"""A pull answer in msgpack (sync.wire.MSGPACK, asked with `Accept`) says what the JSON answer says: the same
PullResponse, each event made by the hub from its stored bytes without decoding them, over a real hub."""

import threading

import httpx
import msgspec
import pytest

from eventstore.envelope import Event, new_event
from eventstore.kinds import EntryAppend, PageIngest, PageUpdate
from sync.storage import decode_stored, encode_stored, open_storage, placed_stored
from sync.wire import MSGPACK, PullResponse

from hub_storage_conformance import CONTRACT
from hubserver import HubServer


def entry(text):
    return new_event(EntryAppend(type="FACT", date="2026-11-29", content=text), agent="alice", layer="insights")


@pytest.fixture
def hub(tmp_path):
    """A hub holding entries, page versions (one over the compression threshold) and a redacted entry."""
    db = str(tmp_path / "hub.db")
    storage = open_storage(db)
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("main")
    producer = storage.add_agent("alice")
    first = new_event(PageIngest(slug="plan", frontmatter={"type": "note"}, text="# plan\n" + "long line\n" * 200),
                      agent="writer", layer="drafts")
    storage.push([entry("one"), first, entry("two")])
    storage.push([new_event(PageUpdate(slug="plan", frontmatter={"type": "note"}, text="# plan\nshort\n",
                                       parents=[first.id]), agent="writer", layer="drafts"), entry("secret")])
    storage.admin_redact([storage.pull(0, ["insights"], 10)[-1].id], "asked to")
    storage.close()
    with HubServer(db) as server:
        server.producer = producer
        yield server, token


def pulled(url, token, packed, **params):
    headers = {"authorization": f"Bearer {token}", **({"accept": MSGPACK} if packed else {})}
    response = httpx.get(url + "/v1/pull", params=params, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == (MSGPACK if packed else "application/json")
    return (msgspec.msgpack if packed else msgspec.json).decode(response.content, type=PullResponse)


def test_a_msgpack_answer_is_the_json_answer(hub):
    server, token = hub
    whole = pulled(server.url, token, False, limit=100)
    assert len(whole.events) == 6 and {e.kind for e in whole.events} == {"entry.append", "page.ingest",
                                                                           "page.update", "redacted", "redaction"}
    assert pulled(server.url, token, True, limit=100) == whole
    for limit in (1, 2, 5):  # page by page, the same cursors
        cursor, pages = "", 0
        while True:
            json_page = pulled(server.url, token, False, cursor=cursor, limit=limit)
            assert pulled(server.url, token, True, cursor=cursor, limit=limit) == json_page
            cursor, pages = json_page.cursor, pages + 1
            if not json_page.more:
                break
        assert pages == -(-6 // limit)


def test_long_polls_woken_together_each_get_their_format(hub):
    """A commit wakes every waiting long-poll at once, and one answer is shared by those at the same cursor:
    one per format."""
    server, token = hub
    head = pulled(server.url, token, False, limit=100).cursor
    answers = {}

    def poll(packed):
        answers[packed] = pulled(server.url, token, packed, cursor=head, wait=10)

    polls = [threading.Thread(target=poll, args=(packed,)) for packed in (False, True, False, True)]
    for thread in polls:
        thread.start()
    fanout = server.server.config.app.state.hub.fanout
    while fanout.waiting < 4:
        threading.Event().wait(0.01)
    pushed = httpx.post(server.url + "/v1/push", content=msgspec.json.encode({"events": [entry("three")]}),
                        headers={"authorization": f"Bearer {server.producer}", "content-type": "application/json"})
    assert pushed.status_code == 200, pushed.text
    for thread in polls:
        thread.join(15)
    assert answers[True] == answers[False] and [e.body.content for e in answers[True].events] == ["three"]



def test_an_event_redacted_after_it_was_answered_is_answered_redacted(hub, tmp_path):
    """Pull answers share each event's encoded form (sync.hub.EncodedEvents), keyed by its stored bytes: once a
    redaction (here `mem hub redact`'s, from another connection) rewrites them, the next answer holds the
    redacted event, in either format, never the form made before; and every answer is the bytes an answer
    encoded on its own would be."""
    from sync.hub import pull_answer

    server, token = hub
    before = {packed: pulled(server.url, token, packed, limit=100) for packed in (False, True)}
    two = next(e for e in before[False].events if e.kind == "entry.append" and e.body.content == "two")
    storage = open_storage(str(tmp_path / "hub.db"))
    storage.admin_redact([two.id], "asked to")
    for packed in (False, True):
        raw = httpx.get(server.url + "/v1/pull", params={"limit": 100}, timeout=30,
                        headers={"authorization": f"Bearer {token}", **({"accept": MSGPACK} if packed else {})}).content
        assert b'"two"' not in raw and b"\xa3two" not in raw
        after = (msgspec.msgpack if packed else msgspec.json).decode(raw, type=PullResponse)
        assert next(e for e in after.events if e.id == two.id).kind == "redacted"
        rows = storage.pull_rows(0, server.server.config.app.state.hub.consumer(token)[1], 101)
        assert raw == pull_answer(0, after.head, rows, 100, packed)
    storage.close()


def test_placed_stored_bytes_decode_as_the_stored_event():
    event = entry("placed")
    stored = encode_stored(event)
    placed = placed_stored(stored, 7, 1_700_000_000_000)
    assert msgspec.msgpack.decode(placed, type=Event) == decode_stored(stored, 7, 1_700_000_000_000)
    as_map16 = b"\xde\x00" + bytes([stored[0] & 0x0F]) + stored[1:]  # the same map, written the long way
    assert placed_stored(as_map16, 7, 1) == msgspec.msgpack.encode(decode_stored(stored, 7, 1))


def test_shared_event_forms_are_bounded_and_answer_the_same_bytes(tmp_path):
    """EncodedEvents holds at most its budget of bytes (stored and encoded), the oldest going first, keeps no
    event over ENCODED_LARGEST, and a page made from its forms is the page encoded on its own, whatever was kept."""
    from sync.hub import ENCODED_LARGEST, EncodedEvents, pull_answer

    storage = open_storage(str(tmp_path / "hub.db"))
    storage.apply_contract(CONTRACT)
    storage.push([entry(f"fact {i}") for i in range(10)] + [entry("x" * (ENCODED_LARGEST + 10))])
    rows = storage.pull_rows(0, ["insights"], 12)
    size = len(rows[0][2]) + len(pull_answer(0, 0, rows[:1], 1).split(b'"events":[')[1].rsplit(b'],"cursor"')[0])
    forms = EncodedEvents(budget=3 * size + 10)
    for start, count in ((0, 4), (2, 5), (0, 11), (7, 4), (0, 11)):
        page = rows[start:start + count + 1]
        for packed in (False, True):
            after = page[0][0] - 1
            assert pull_answer(after, 12, page, count, packed, forms) == pull_answer(after, 12, page, count, packed)
            assert forms.held == sum(len(data) + len(form) for (_packed, data), form in forms.forms.items())
            assert 0 < forms.held <= forms.budget
    assert rows[-1][2] not in {data for _packed, data in forms.forms}  # the large one
    fresh = EncodedEvents(budget=3 * size + 10)
    fresh.of(rows[:5], False)
    assert [data for _packed, data in fresh.forms] == [data for _position, _at, data in rows[2:5]]  # the last three
    storage.close()


def test_a_pushed_redaction_empties_the_shared_forms(hub):
    """A redaction's commit empties the hub's shared event forms: the text it removed leaves the hub's memory
    too, not only its answers."""
    from eventstore.kinds import Redaction

    server, token = hub
    forms = server.server.config.app.state.hub.forms
    whole = pulled(server.url, token, False, limit=100)
    assert forms.held > 0
    target = next(e for e in whole.events if e.kind == "entry.append" and e.body.content == "one")
    redaction = new_event(Redaction(target_ids=[target.id], reason="private"), agent="alice", layer="insights")
    pushed = httpx.post(server.url + "/v1/push", content=msgspec.json.encode({"events": [redaction]}),
                        headers={"authorization": f"Bearer {server.producer}", "content-type": "application/json"})
    assert pushed.status_code == 200, pushed.text
    assert forms.held == 0 and not forms.forms
    assert next(e for e in pulled(server.url, token, True, limit=100).events if e.id == target.id).kind == "redacted"
