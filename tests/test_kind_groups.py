"""Kind groups come from the tagged union: each fold, the hub and the contract formats read the same sets."""

import msgspec
import pytest

from eventstore.envelope import new_event
from eventstore.kinds import (ADF_KINDS, ENTRY_KINDS, KINDS, SHARED_KINDS, SHARED_PAGE_KINDS, WIKI_KINDS, BodyUnion,
                              PageRename)
from eventstore.layers import FORMATS, LAYER_KINDS
from sync.storage import open_storage
from sync.wire import PROBLEM_BASE

from hub_storage_conformance import CONTRACT
from hubserver import HubServer


def test_groups_are_read_off_the_union():
    tags = {cls.__struct_config__.tag for cls in BodyUnion.__args__}
    assert WIKI_KINDS | ADF_KINDS | SHARED_KINDS <= tags == set(KINDS)
    assert not WIKI_KINDS & ADF_KINDS and not ENTRY_KINDS & (WIKI_KINDS | ADF_KINDS)
    assert SHARED_PAGE_KINDS == {"page.ingest", "page.update", "page.delete"} < WIKI_KINDS
    assert {format: set(kinds) for format, kinds in LAYER_KINDS.items()} == {
        "pages": set(SHARED_PAGE_KINDS) | {"redaction"}, "entries": {"entry.append", "redaction"}}
    assert set(FORMATS) == set(LAYER_KINDS)


def test_groups_are_not_fields():
    body = PageRename(old="a", new="b")
    assert "groups" not in msgspec.json.decode(msgspec.json.encode(body))


@pytest.fixture
def hub(tmp_path):
    db = str(tmp_path / "hub.db")
    storage = open_storage(db)
    storage.apply_contract(CONTRACT)
    token = storage.add_agent("writer")
    storage.close()
    with HubServer(db) as server:
        server.token = token
        yield server


def test_the_hub_refuses_a_rename_in_a_pages_layer(hub):
    """The shared fold has no rename (a rename across replicas is a delete plus an ingest): the hub and
    the contract say so instead of accepting what every consumer would drop."""
    import httpx

    rename = new_event(PageRename(old="launch", new="launch-v2"), agent="writer", layer="drafts")
    response = httpx.post(hub.url + "/v1/push", content=msgspec.json.encode({"events": [rename]}),
                          headers={"authorization": f"Bearer {hub.token}", "content-type": "application/json"})
    assert response.status_code == 422
    problem = response.json()
    assert problem["type"] == PROBLEM_BASE + "wrong-kind" and "page.rename" in problem["detail"]
    assert open_storage(hub.db).head() == 1
