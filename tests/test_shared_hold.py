"""`governance: hold` on shared pages: the local writer and the hub on push refuse an update or delete of a
held version that does not release it, and each refusal leaves the log (the workspace's, the hub's) as it
was; one that gets past them is void, with everything built on it, on the hub and on every consumer."""

import json

import httpx
import msgspec
import pytest

from conftest import log_rows
from eventstore.envelope import new_event
from eventstore.errors import Held
from eventstore.governance import hold_refusal, ingest_refusal, is_held, released
from eventstore.kinds import EntryAppend, PageDelete, PageIngest, PageUpdate
from eventstore.layers import Contract, ContractLayer
from sync.intake import accept
from sync.storage import open_storage
from sync.wire import PROBLEM_BASE

from hubserver import HubServer
from teamhub import Team

HELD = {"type": "policy", "governance": "hold"}
TEXT = "# Pricing\n\nNo discounts above 20%.\n"


def held_version(agent="writer", layer="drafts", slug="pricing"):
    return new_event(PageIngest(slug=slug, frontmatter=HELD, text=TEXT), agent=agent, layer=layer)


def update(parent, text="# Pricing\n\nDiscounts as you like.\n", frontmatter=None, note="", agent="alice",
           layer="drafts"):
    return new_event(PageUpdate(slug=parent.body.slug, frontmatter=frontmatter or {"type": "policy"}, text=text,
                                note=note, parents=[parent.id]), agent=agent, layer=layer)


def release(parent, note="the owner agreed", agent="alice"):
    return update(parent, text=parent.body.text, frontmatter=released(parent.body.frontmatter), note=note, agent=agent)


# --- the rule itself, in-process ------------------------------------------------------------------

def test_the_rule_refuses_what_supersedes_a_held_version_and_lets_a_release_through():
    held = held_version()
    known = {held.id: held.body}.get
    delete = new_event(PageDelete(slug="pricing", parents=[held.id]), agent="alice", layer="drafts")
    assert hold_refusal(update(held).body, known) == (held.id, "update")
    assert hold_refusal(delete.body, known) == (held.id, "delete")
    assert hold_refusal(release(held).body, known) is None
    assert hold_refusal(release(held, note=" ").body, known) == (held.id, "update")  # a release says why
    changed = update(held, frontmatter=released(HELD), note="sneaking an edit in")
    assert hold_refusal(changed.body, known) == (held.id, "update")  # a release keeps the text
    still_held = update(held, text=TEXT, frontmatter=HELD, note="same again")
    assert hold_refusal(still_held.body, known) == (held.id, "update")
    assert hold_refusal(update(held).body, {}.get) is None  # an unknown parent holds nothing
    assert hold_refusal(held.body, known) is None  # an ingest supersedes nothing
    open_version = update(held, text="# Open\n", frontmatter={"type": "policy"}, note="x")
    both = {held.id: held.body, open_version.id: open_version.body}.get
    merge = new_event(PageUpdate(slug="pricing", frontmatter={"type": "x"}, text="y",
                                 parents=[open_version.id, held.id]), agent="alice", layer="drafts")
    assert hold_refusal(merge.body, both) == (held.id, "update")


def test_an_ingest_may_not_stand_beside_a_held_head_unless_the_push_releases_it():
    new = {"i"}
    assert ingest_refusal("i", {"h": True, "i": False}, new) == "h"
    assert ingest_refusal("i", {"h": True, "u": False}, {"i", "u"}) == "h"  # an update of the ingest, in the push
    assert ingest_refusal("i", {"r": False, "i": False}, {"i", "r"}) is None  # the push releases the held head
    assert ingest_refusal("i", {"p": False, "i": True}, new) is None  # the ingest holds the page itself
    assert ingest_refusal("j", {"i": True, "j": False}, {"i", "j"}) == "i"  # a hold earlier in the push holds
    assert ingest_refusal("i", {"p": False, "u": True}, {"i", "u"}) is None  # the push's own held head
    assert ingest_refusal("i", {"h": True}, set()) is None  # resent after the hold named it: adds nothing
    assert ingest_refusal("i", {"h": True, "p": False}, set()) is None
    assert ingest_refusal("i", {"i": False}, new) is None


def test_a_consumer_keeps_a_pulled_update_of_a_held_page_void(workspace):
    """What a hub that did not check (an older one) hands out: the consumer appends it (a version built on it
    may come before it, or after it from elsewhere: only the whole chain tells it is void) and its fold makes
    it void, and what is built on it; the release and what follows it count."""
    from projections.memory import Memory

    contract = Contract(layers={"drafts": ContractLayer(path="content/drafts/", format="pages", producers=["*"],
                                                        consumers=["*"])})
    held = held_version()
    sneaky = update(held)
    on_sneaky = update(sneaky, note="on top")
    freed = release(held)
    after = update(freed, note="now it may change")
    raws = [msgspec.Raw(msgspec.json.encode(e)) for e in (held, on_sneaky, sneaky)]
    (workspace / ".mem" / "contract.json").write_text(json.dumps(msgspec.to_builtins(contract)))
    with Memory.open(workspace) as mem:
        events, rejected = accept(raws, contract, "main", mem.log)
        assert [e.id for e in events] == [held.id, on_sneaky.id, sneaky.id] and rejected == []
        mem.log.append(events)
        mem.refresh(files=False)
        shared = mem.views.shared
        assert [h.id for h in shared.heads("drafts", "pricing", mem.views.checkpoint())] == [held.id]
        assert "No discounts above 20%." in shared.page_text("drafts", "pricing", mem.views.checkpoint())
        assert mem.search("discounts", day="2026-11-30", include_all=True) and \
            {hit.seq for hit in mem.search("discounts", day="2026-11-30", include_all=True)} == {1}
        events, rejected = accept([msgspec.Raw(msgspec.json.encode(e)) for e in (freed, after)], contract, "main",
                                  mem.log)
        mem.log.append(events)
        mem.refresh(files=False)
        assert [h.id for h in shared.heads("drafts", "pricing", mem.views.checkpoint())] == [after.id]


# --- the local writer and a concurrent edit, in-process --------------------------------------------

def test_a_held_head_wins_a_conflict_so_a_concurrent_edit_cannot_unfreeze_it(memory):
    memory.declare_layer("notes", "notes/", "pages")
    first = memory.shared_page_write("notes", "pricing", b"---\ntype: policy\n---\n# Pricing\n\nv1\n")
    held = memory.shared_page_write("notes", "pricing", b"---\ntype: policy\ngovernance: hold\n---\n# Pricing\n\nv2\n")
    concurrent = new_event(PageUpdate(slug="pricing", frontmatter={"type": "policy"}, text="# Pricing\n\nv3\n",
                                      parents=[first.id]), agent="alice", layer="notes")
    memory.append(concurrent)  # its parent is not held: a teammate who had not seen the hold yet
    assert concurrent.id > held.id
    assert memory.views.shared_winner("notes", "pricing") == held.id
    assert "v2" in (memory.root / "notes/pricing.md").read_text()
    before = log_rows(memory.root)
    with pytest.raises(Held, match="mem page release pricing --layer notes"):
        memory.shared_page_write("notes", "pricing", b"---\ntype: policy\n---\n# Pricing\n\nv4\n")
    with pytest.raises(Held):
        memory.resolve("notes", "pricing", b"---\ntype: policy\n---\n# Pricing\n\nmerged\n")
    with pytest.raises(Held, match="a resolve does not release"):  # its release, with no note of why (nc18a)
        memory.resolve("notes", "pricing", b"---\ntype: policy\n---\n# Pricing\n\nv2\n")
    assert log_rows(memory.root) == before


# --- through `mem`, with a real hub ---------------------------------------------------------------

def test_mem_refuses_to_change_a_held_shared_page_until_it_is_released(tmp_path):
    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        check_holds_through_mem(team)
    finally:
        team.stop()


def test_a_redaction_of_a_held_version_says_the_page_is_no_longer_held(tmp_path):
    """Regression (nc36b): a redacted version holds nothing (its text cannot be read: see the hub's and consumers'
    checks), so redacting the held version of a page lifts its hold; `mem redact` said only that the page showed the
    stub, and gave a way back to the version before as if nothing else had changed."""
    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        held = team.root / "held.md"
        held.write_text("---\ntype: policy\ngovernance: hold\n---\n# Ops\n\nEscalate to Dana, cell 555-0142.\n")
        team.mem("writer", "page", "write", "ops", "--layer", "drafts", "--file", held, check=True)
        team.mem("writer", "sync", check=True)
        team.mem("reviewer", "sync", check=True)
        seq = json.loads(team.mem("reviewer", "history", "content/drafts/ops.md", "--json", check=True).stdout)[-1]
        note = team.mem("reviewer", "redact", str(seq["seq"]), "--reason", "private cell", check=True).stderr.decode()
    finally:
        team.stop()
    assert note == ("note: content/drafts/ops.md shows `[redacted: private cell]` now, its current version redacted, "
                    "and so will every agent's copy once it is pushed: the version held the page (governance: hold); "
                    "redacted, it holds nothing: the page is no longer held; `mem page write ops --layer drafts "
                    "--file FILE` writes it anew\n"), note


def check_holds_through_mem(team):
    held = team.root / "held.md"
    held.write_text("---\ntype: policy\ngovernance: hold\n---\n# Pricing\n\nNo discounts above 20%.\n")
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", held, check=True)
    team.mem("writer", "sync", check=True)
    team.mem("reviewer", "sync", check=True)
    before = log_rows(team.root / "reviewer")
    edit = team.page("edit", "Pricing", "Discounts as you like.")
    for verb, args in (("update", ("write", "pricing", "--file", edit)), ("delete", ("delete", "pricing")),
                       ("rename", ("rename", "pricing", "prices"))):
        result = team.mem("reviewer", "page", *args, "--layer", "drafts")
        assert result.returncode != 0
        assert result.stderr.decode().startswith("error: page 'pricing' of layer 'drafts' is held"), result.stderr
        assert f"refusing to {verb} it" in result.stderr.decode(), result.stderr
        assert len(result.stderr.decode().strip().splitlines()) == 1
        assert log_rows(team.root / "reviewer") == before
    refused = team.mem("reviewer", "page", "release", "missing", "--layer", "drafts", "--note", "x")
    assert refused.returncode != 0 and b"no page missing" in refused.stderr

    released_ = team.mem("reviewer", "page", "release", "pricing", "--layer", "drafts", "--note", "owner agreed",
                         check=True)
    assert released_.stdout.decode().startswith("release content/drafts/pricing.md (seq ")
    assert "governance" not in (team.root / "reviewer/content/drafts/pricing.md").read_text()
    again = team.mem("reviewer", "page", "release", "pricing", "--layer", "drafts", "--note", "x")
    assert again.returncode != 0 and b"is not held" in again.stderr
    team.mem("reviewer", "page", "write", "pricing", "--layer", "drafts", "--file", edit, check=True)
    team.mem("reviewer", "sync", check=True)
    team.mem("writer", "sync", check=True)
    assert "Discounts as you like." in (team.root / "writer/content/drafts/pricing.md").read_text()


def test_adopt_tells_how_to_have_back_a_held_shared_page_deleted_by_hand(tmp_path):
    """Regression: `mem adopt` refused the deletion of a held page deleted by hand (rightly), and nothing said how to
    have the file again: `mem status` said it missing across pulls until a full replay. The refusal says the way back
    (the deletion stays to be adopted once the page is released), and that way puts the very file back."""
    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        held = team.root / "held.md"
        held.write_text("---\ntype: policy\ngovernance: hold\n---\n# Pricing\n\nNo discounts above 20%.\n")
        team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", held, check=True)
        team.mem("writer", "sync", check=True)
        team.mem("reviewer", "sync", check=True)
        page = team.root / "reviewer/content/drafts/pricing.md"
        text, before = page.read_text(), log_rows(team.root / "reviewer")
        page.unlink()
        adopted = team.mem("reviewer", "adopt")
        said = adopted.stdout.decode() + adopted.stderr.decode()
        way_back = "mem show content/drafts/pricing.md > content/drafts/pricing.md"
        assert "is held" in said and f"or put the file back: `{way_back}`" in said, said
        assert log_rows(team.root / "reviewer") == before
        page.write_bytes(team.mem("reviewer", "show", "content/drafts/pricing.md", check=True).stdout)  # the way back
        assert page.read_text() == text
        status = team.mem("reviewer", "status", check=True).stdout.decode()
        assert "missing" not in status, status
    finally:
        team.stop()


# --- the hub on push, over HTTP -------------------------------------------------------------------

@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request, tmp_path):
    db = str(tmp_path / "hub.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    storage = open_storage(db)
    storage.apply_contract(Contract(layers={"drafts": ContractLayer(path="content/drafts/", format="pages",
                                                                    producers=["*"], consumers=["*"]),
                                            "notes": ContractLayer(path="memory/notes.md", format="entries",
                                                                   producers=["*"], consumers=["*"])}))
    tokens = {name: storage.add_agent(name) for name in ("alice", "writer")}
    storage.close()
    with HubServer(db) as server:
        server.tokens = tokens
        yield server


def push(hub, agent, *events):
    with httpx.Client(base_url=hub.url, headers={"authorization": f"Bearer {hub.tokens[agent]}"}, timeout=30) as http:
        return http.post("/v1/push", content=msgspec.json.encode({"events": list(events)}),
                         headers={"content-type": "application/json"})


def hub_events(hub):
    storage = open_storage(hub.db)
    try:
        return [e.id for e in storage.pull(0, ["drafts"], 100)]
    finally:
        storage.close()


def hub_heads(hub, slug="pricing"):
    storage = open_storage(hub.db)
    try:
        return storage.page_heads("drafts", slug)
    finally:
        storage.close()


def test_the_hub_refuses_another_agents_update_of_a_held_page(hub):
    held = held_version()
    assert push(hub, "writer", held).status_code == 200
    delete = new_event(PageDelete(slug="pricing", parents=[held.id]), agent="alice", layer="drafts")
    for batch in ([update(held)], [delete], [release(held, note="")], [held_version("alice", slug="b"), update(held)]):
        response = push(hub, "alice", *batch)
        assert response.status_code == 409, response.text
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["type"] == PROBLEM_BASE + "held" and problem["field"].endswith(".body.parents")
        assert "page 'pricing' of layer 'drafts' is held" in problem["detail"] and held.id in problem["detail"]
        assert hub_events(hub) == [held.id]
    inside = held_version("alice", slug="memo")
    response = push(hub, "alice", inside, update(inside, note="x"))  # a hold in the same batch holds too
    assert response.status_code == 409 and hub_events(hub) == [held.id]

    freed = release(held)
    after = update(freed, note="now it may change")
    assert push(hub, "alice", freed, after).status_code == 200
    assert hub_events(hub) == [held.id, freed.id, after.id]


def test_the_hub_refuses_an_ingest_beside_a_held_head(hub):
    """An agent that wrote the page before it saw the hold pushes a version with no parent: it would be a
    second head beside the held one. Refused like an update, until the same push releases the hold."""
    held = held_version()
    assert push(hub, "writer", held).status_code == 200
    assert hub_heads(hub) == [(held.id, True)]
    unaware = new_event(PageIngest(slug="pricing", frontmatter={"type": "policy"}, text="# Pricing\n\nAny.\n"),
                        agent="alice", layer="drafts")
    holding_too = new_event(PageIngest(slug="pricing", frontmatter=HELD, text="# Pricing\n\nMine.\n"),
                            agent="alice", layer="drafts")
    for batch in ([unaware], [unaware, update(unaware, note="and on")], [holding_too],
                  [held_version("alice", slug="memo"), unaware]):
        response = push(hub, "alice", *batch)
        assert response.status_code == 409, response.text
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["type"] == PROBLEM_BASE + "held" and problem["field"].endswith(".body.slug")
        assert "page 'pricing' of layer 'drafts' is held" in problem["detail"] and held.id in problem["detail"]
        assert unaware.id in problem["detail"] or holding_too.id in problem["detail"]
        assert hub_events(hub) == [held.id]
    memo = held_version("alice", slug="memo")
    second = new_event(PageIngest(slug="memo", frontmatter={"type": "x"}, text="y"), agent="alice", layer="drafts")
    response = push(hub, "alice", memo, second)  # a hold earlier in the same push holds too
    assert response.status_code == 409 and second.id in response.json()["detail"]

    freed = release(held)
    assert push(hub, "alice", unaware, freed).status_code == 200  # the push releases what it stands beside
    assert hub_events(hub) == [held.id, unaware.id, freed.id]
    assert sorted(hub_heads(hub)) == sorted([(unaware.id, False), (freed.id, False)])

    early = new_event(PageIngest(slug="plan", frontmatter={"type": "x"}, text="early"), agent="alice", layer="drafts")
    assert push(hub, "alice", early).status_code == 200
    late_hold = held_version(slug="plan")  # a concurrent held version: it holds the page, beside `early`
    assert push(hub, "writer", late_hold).status_code == 200
    assert sorted(hub_heads(hub, "plan")) == sorted([(early.id, False), (late_hold.id, True)])
    again = push(hub, "alice", early)  # resent (its answer was lost): a duplicate, not a refusal
    assert again.status_code == 200 and again.json()["results"][0]["duplicate"]


def write_beside_a_hold(team: Team) -> None:
    """The writer pushes a held `pricing`; the reviewer, before it has pulled that, writes its own."""
    held = team.root / "held.md"
    held.write_text("---\ntype: policy\ngovernance: hold\n---\n# Pricing\n\nNo discounts above 20%.\n")
    team.mem("writer", "page", "write", "pricing", "--layer", "drafts", "--file", held, check=True)
    team.mem("writer", "push", check=True)
    mine = team.page("mine", "Pricing", "Discounts as you like.")
    team.mem("reviewer", "page", "write", "pricing", "--layer", "drafts", "--file", mine, check=True)


def test_mem_push_refuses_an_ingest_written_before_the_hold_was_seen(tmp_path):
    """The reviewer writes its own `pricing` before it has pulled the writer's held one: the hub refuses
    the push; once pulled, `mem push` refuses before anything leaves; a release lets both go."""
    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        write_beside_a_hold(team)
        hub_before, before = log_rows_of_hub(team), log_rows(team.root / "reviewer")

        refused = team.mem("reviewer", "push")  # the hub refuses it
        err = refused.stderr.decode()
        assert refused.returncode == 1 and len(err.strip().splitlines()) == 1, err
        assert err.startswith("error: hub refused: Held") and "page 'pricing' of layer 'drafts' is held" in err
        assert log_rows_of_hub(team) == hub_before and log_rows(team.root / "reviewer") == before

        pulled = team.mem("reviewer", "pull", check=True).stderr.decode()
        assert "No discounts" in (team.root / "reviewer/content/drafts/pricing.md").read_text()  # the held head wins
        # the conflict's warning names the release a resolve needs first; it named the resolve alone (nc21a)
        assert pulled.endswith('(`mem conflicts --show`; its head is held: `mem page release pricing --layer drafts '
                               '--note "why"`, then `mem resolve drafts/pricing --file F`)\n'), pulled
        before = log_rows(team.root / "reviewer")
        for command in (("push",), ("sync",)):
            refused = team.mem("reviewer", *command)  # refused here, before it leaves
            err = refused.stderr.decode()
            assert refused.returncode == 1 and len(err.strip().splitlines()) == 1, err
            assert err.startswith("error: page 'pricing' of layer 'drafts' is held") and "nothing was pushed" in err
            assert "mem page release pricing --layer drafts" in err
            assert log_rows_of_hub(team) == hub_before and log_rows(team.root / "reviewer") == before

        team.mem("reviewer", "page", "release", "pricing", "--layer", "drafts", "--note", "owner agreed", check=True)
        assert team.mem("reviewer", "push", check=True).stdout.decode().startswith("pushed 2 events")
        assert len(log_rows_of_hub(team)) == len(hub_before) + 2
    finally:
        team.stop()


def push_to_team(team, agent, *events):
    token = (team.root / f"{agent}.token").read_text().strip()
    return httpx.post(f"{team.url}/v1/push", content=msgspec.json.encode({"events": list(events)}),
                      headers={"authorization": f"Bearer {token}", "content-type": "application/json"})


def hub_heads_of_team(team, slug="pricing"):
    storage = open_storage(str(team.db))
    try:
        return storage.page_heads("drafts", slug)
    finally:
        storage.close()


def log_rows_of_hub(team):
    import sqlite3

    db = sqlite3.connect(team.db)
    try:
        return db.execute("SELECT position, id FROM hub_events ORDER BY position").fetchall()
    finally:
        db.close()


def test_the_hub_refuses_a_version_naming_another_pages_version_as_parent(hub):
    """Regression: taken, it made every consumer's folded views differ from their rebuild (`mem replay --check`:
    DIFFERENT, shared_heads). Refused 422 naming the parent, whether stored or in the same batch; nothing applied."""
    plan = new_event(PageIngest(slug="plan", frontmatter={"type": "draft"}, text="# Plan\n"), agent="alice",
                     layer="drafts")
    launch = new_event(PageIngest(slug="launch", frontmatter={"type": "draft"}, text="# Launch\n"), agent="alice",
                       layer="drafts")
    assert push(hub, "alice", plan, launch).status_code == 200
    other = new_event(PageUpdate(slug="launch", frontmatter={"type": "draft"}, text="# Launch\n\nx\n",
                                 parents=[plan.id]), agent="alice", layer="drafts")
    mixed = new_event(PageDelete(slug="launch", parents=[launch.id, plan.id]), agent="alice", layer="drafts")
    fresh = new_event(PageIngest(slug="memo", frontmatter={"type": "draft"}, text="# Memo\n"), agent="alice",
                      layer="drafts")
    in_batch = new_event(PageUpdate(slug="launch", frontmatter={"type": "draft"}, text="# Launch\n\ny\n",
                                    parents=[fresh.id]), agent="alice", layer="drafts")
    note = new_event(EntryAppend(type="FACT", date="2026-12-03", content="a note"), agent="alice", layer="notes")
    assert push(hub, "alice", note).status_code == 200
    batch_note = new_event(EntryAppend(type="FACT", date="2026-12-03", content="another"), agent="alice",
                           layer="notes")
    on_a_note = new_event(PageUpdate(slug="launch", frontmatter={"type": "draft"}, text="# Launch\n\nn\n",
                                     parents=[note.id]), agent="alice", layer="drafts")
    on_a_batch_note = new_event(PageDelete(slug="launch", parents=[batch_note.id]), agent="alice", layer="drafts")
    no_version = "is no page version but an event of layer 'notes'"  # regression (nc15c): both taken, 200
    for batch, parent, why in (([other], plan, "is a version of page 'plan'"), ([mixed], plan, "is a version of page "
                               "'plan'"), ([fresh, in_batch], fresh, "is a version of page 'memo'"),
                               ([on_a_note], note, no_version), ([batch_note, on_a_batch_note], batch_note, no_version)):
        response = push(hub, "alice", *batch)
        assert response.status_code == 422, response.text
        problem = response.json()
        assert problem["field"] == f"events[{len(batch) - 1}].body.parents"
        assert f"parent {parent.id} {why}" in problem["detail"]
        assert hub_events(hub) == [plan.id, launch.id]
    fine = new_event(PageUpdate(slug="launch", frontmatter={"type": "draft"}, text="# Launch\n\nz\n",
                                parents=[launch.id]), agent="alice", layer="drafts")
    assert push(hub, "alice", fine).status_code == 200


def test_a_version_closing_a_loop_of_versions_is_refused_over_http(hub):
    """Regression (nc26a): a producer pushed a version naming the head and an id not pushed yet, then that id's
    version naming the first: the page had no head and vanished from every consumer. Refused (422), nothing
    applied; the version naming the id stays the head."""
    plain = {"type": "policy"}
    head = new_event(PageIngest(slug="pricing", frontmatter=plain, text=TEXT), agent="alice", layer="drafts")
    assert push(hub, "alice", head).status_code == 200
    later = update(head)
    hiding = new_event(PageUpdate(slug="pricing", frontmatter=plain, text=TEXT, parents=[head.id, later.id]),
                       agent="alice", layer="drafts")
    assert push(hub, "alice", hiding).status_code == 200
    closing = new_event(PageUpdate(slug="pricing", frontmatter=plain, text=TEXT, parents=[hiding.id]), agent="alice",
                        layer="drafts", id=later.id)
    response = push(hub, "alice", closing)
    assert response.status_code == 422, response.text
    assert f"parent {hiding.id} is built on this version" in response.json()["detail"]
    assert hub_events(hub) == [head.id, hiding.id] and hub_heads(hub) == [(hiding.id, False)]


def test_a_version_a_stored_one_names_as_parent_is_no_new_head(hub):
    """A child can reach the hub before its parent (another path, a resend): the parent arriving later,
    alone or after its resent child in one batch, adds no head, so it does not stand beside the hold."""
    held = held_version()
    assert push(hub, "writer", held).status_code == 200
    unaware = new_event(PageIngest(slug="pricing", frontmatter={"type": "policy"}, text="# Pricing\n\nAny.\n"),
                        agent="alice", layer="drafts")
    child = update(unaware, note="on top of mine")
    assert push(hub, "alice", child).status_code == 200  # its parent unknown here: it holds nothing
    assert sorted(hub_heads(hub)) == sorted([(held.id, True), (child.id, False)])
    for batch in ([unaware], [child, unaware], [unaware, child]):
        response = push(hub, "alice", *batch)
        assert response.status_code == 200, response.text
    assert sorted(hub_heads(hub)) == sorted([(held.id, True), (child.id, False)])
    assert hub_events(hub) == [held.id, child.id, unaware.id]


from hypothesis import example, given, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_hubs_heads_of_a_batch_do_not_depend_on_its_order(data):
    """heads_after: a page's heads once a batch lands are the versions (stored heads and the batch's) that
    nothing names as a parent, nothing else, in any order of the batch."""
    from sync.hub import heads_after

    count = data.draw(st.integers(1, 7))
    ids = [f"v{i}" for i in range(count)]
    parents = {id: sorted(set(data.draw(st.lists(st.sampled_from(ids[:i]), max_size=2)))) if i else []
               for i, id in enumerate(ids)}
    held = {id: data.draw(st.booleans()) for id in ids}
    stored = set(data.draw(st.sets(st.sampled_from(ids))))
    events = {}
    for id in ids:
        frontmatter = HELD if held[id] else {"type": "policy"}
        events[id] = new_event(PageUpdate(slug="pricing", frontmatter=frontmatter, text="t",
                                          parents=[events[p].id for p in parents[id]]) if parents[id] else
                               PageIngest(slug="pricing", frontmatter=frontmatter, text="t"), agent="alice",
                               layer="drafts")
    stored_named = {p for id in stored for p in parents[id]}
    stored_heads = {id: held[id] for id in stored if id not in stored_named}
    batch = [id for id in ids if id not in stored or data.draw(st.booleans())]  # some resent
    order = data.draw(st.permutations(batch))
    named_by_all = {p for id in {*stored, *batch} for p in parents[id]}
    expected = {id: held[id] for id in {*stored, *batch} if id not in named_by_all}
    renamed = {events[id].id: id for id in ids}
    found = heads_after({events[id].id: h for id, h in stored_heads.items()}, [events[id] for id in order],
                        {events[p].id for p in stored_named})
    assert {renamed[id]: h for id, h in found.items()} == expected


def test_a_push_split_in_several_requests_sends_the_release_with_the_ingest(tmp_path):
    """More than one request's worth (sync.client.BATCH) between an ingest written before the hold was
    seen and its release: `mem push` still goes through, the release travelling with the ingest."""
    from eventstore.kinds import EntryAppend
    from projections.memory import Memory
    from sync.client import BATCH

    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        write_beside_a_hold(team)
        with Memory.open(team.root / "reviewer") as memory:
            memory.log.append([new_event(EntryAppend(type="FACT", date="2026-11-30", content=f"fact {i}"),
                                         agent="reviewer", layer="insights") for i in range(BATCH)])
        team.mem("reviewer", "pull", check=True)
        team.mem("reviewer", "page", "release", "pricing", "--layer", "drafts", "--note", "owner agreed", check=True)
        hub_before = log_rows_of_hub(team)

        pushed = team.mem("reviewer", "push")
        assert pushed.returncode == 0, pushed.stderr
        assert pushed.stdout.decode().startswith(f"pushed {BATCH + 2} events"), pushed.stdout
        assert len(log_rows_of_hub(team)) == len(hub_before) + BATCH + 2
        again = team.mem("reviewer", "push", check=True)
        assert again.stdout.decode().startswith("pushed 0 events"), again.stdout
        team.mem("writer", "pull", check=True)
        conflicts = json.loads(team.mem("writer", "conflicts", "--json").stdout)
        assert [sorted(h["agent"] for h in c["heads"]) for c in conflicts] == [["reviewer", "reviewer"]]
    finally:
        team.stop()


# --- a consumer's fold: the held head wins, whatever the order ------------------------------------

DRAFTS = Contract(layers={"drafts": ContractLayer(path="content/drafts/", format="pages", producers=["*"],
                                                  consumers=["*"])})


@st.composite
def held_dags(draw):
    """Versions of one page as hubs may hand them out: ingests (some beside a held head), updates, some
    held, releases of held versions, updates of a held version that do not release it (what a hub that did
    not check lets through) and versions built on those (void too); then two arrival orders, each cut in
    batches."""
    made = []  # (kind, parents, held)
    for index in range(draw(st.integers(2, 9))):
        earlier = list(range(len(made)))
        kind = draw(st.sampled_from(["ingest", "update", "release", "sneak"] if earlier else ["ingest"]))
        held_earlier = [i for i in earlier if made[i][2]]
        if kind in ("release", "sneak") and not held_earlier:
            kind = "update"
        if kind == "ingest":
            made.append(("ingest", [], draw(st.booleans())))
        elif kind == "update":  # of an open version: a sneak's, or one built on it, is as void
            open_ = [i for i in earlier if not made[i][2]] or [None]
            parents = {draw(st.sampled_from(open_)), draw(st.sampled_from(open_))}
            made.append(("update", sorted(parents - {None}), draw(st.booleans())))
        elif kind == "release":
            made.append((kind, [draw(st.sampled_from(held_earlier))], False))
        else:  # a sneak may name another parent too, which it does not supersede either
            parents = {draw(st.sampled_from(held_earlier)), draw(st.sampled_from(earlier))}
            made.append((kind, sorted(parents), draw(st.booleans())))
    orders = [(draw(st.permutations(range(len(made)))), sorted(set(draw(st.lists(st.integers(1, len(made)),
                                                                                     max_size=3)))))
              for _ in range(2)]
    return made, orders


def held_events(made):
    events = []
    for index, (kind, parents, held) in enumerate(made):
        frontmatter = HELD if held else {"type": "policy"}
        ids = [events[p].id for p in parents]
        if kind == "release":
            parent = events[parents[0]].body
            body = PageUpdate(slug="pricing", frontmatter=released(parent.frontmatter), text=parent.text,
                              note="agreed", parents=ids)
        elif ids:
            body = PageUpdate(slug="pricing", frontmatter=frontmatter, text=f"pricing v{index}\n", parents=ids)
        else:
            body = PageIngest(slug="pricing", frontmatter=frontmatter, text=f"pricing v{index}\n")
        events.append(new_event(body, agent="alice", layer="drafts"))
    return events


def assert_kept_heads_are_the_heads(shared, pages) -> None:
    """The heads the fold keeps (`shared_heads`, read at once by `heads_kept`: a rebuild's files) are those the
    statement over the versions finds as of the checkpoint."""
    head = shared.checkpoint()
    found_one_by_one = {page: shared.heads(*page, head) for page in pages}
    with shared.heads_kept():
        assert {page: shared.heads(*page, head) for page in pages} == found_one_by_one


def found(mem, as_of=None) -> set[str]:
    """The ids of the versions of `pricing` that `mem search` finds (as of a seq)."""
    hits = mem.search("pricing", as_of=as_of, day="2026-11-30", include_all=True, limit=100, kinds=["shared-page"])
    return {mem.event(hit.seq).id for hit in hits}


@settings(max_examples=30, deadline=None)
@given(dag=held_dags())
# a sneak (void once the held version it names comes) was the head until then, not the version it replaced
@example(dag=([("ingest", [], False), ("ingest", [], True), ("sneak", [0, 1], False)], [([0, 1, 2], []), ([0, 2, 1], [])]))
def test_a_consumer_shows_the_held_head_whatever_the_order_and_batches(tmp_path_factory, dag):
    """Every consumer of the same versions shows the same page, conflicts, heads and search hits, however
    they arrived; a held head, when there is one, is what it shows; and as of every seq, `mem search`
    finds the heads `mem` showed then."""
    from unittest.mock import patch

    from projections import bulk
    from projections.memory import Memory
    from projections.replay import check

    made, orders = dag
    note(f"versions {made}, arrivals {orders}")
    events = held_events(made)
    seen = []
    for order, cuts in orders:
        root = tmp_path_factory.mktemp("consumer")
        Memory.init(root, "main").close()
        (root / ".mem" / "contract.json").write_text(json.dumps(msgspec.to_builtins(DRAFTS)))
        arrived = [events[i] for i in order]
        with Memory.open(root) as mem:
            start = 0
            for cut in [*cuts, len(arrived)]:
                page = [msgspec.Raw(msgspec.json.encode(e)) for e in arrived[start:cut]]
                accepted, _rejected = accept(page, DRAFTS, "main", mem.log)
                mem.log.append(accepted)
                mem.refresh(files=False)
                assert_kept_heads_are_the_heads(mem.views.shared, [("drafts", "pricing")])
                start = cut
            shared, head = mem.views.shared, mem.views.checkpoint()
            changes = dict(shared.winner_at_each_version("drafts", "pricing", head))  # the page's history, in one pass
            winner = None
            for as_of in range(1, head + 1):
                winner = changes.get(as_of, (winner,))[0]
                heads = shared.heads("drafts", "pricing", as_of)
                assert heads[-1].id == winner
                assert found(mem, as_of) == {h.id for h in heads}, as_of
            heads = shared.heads("drafts", "pricing", head)
            assert found(mem) == {h.id for h in heads}
            mem.refresh()
            with patch.object(bulk, "BATCH", 3):  # a rebuild (the bulk build, in batches of its own) agrees
                rebuilt = check(mem)
            assert rebuilt.same, rebuilt.differences
            seen.append(({h.id for h in heads}, heads[-1].id, mem.views.shared.page_text("drafts", "pricing",
                                                                                          mem.views.checkpoint()),
                         {(c.slug, c.winner) for c in mem.conflicts()}, found(mem)))
            held = {e.id for e in events if is_held(getattr(e.body, "frontmatter", None))}
            if any(h.id in held for h in heads):
                assert heads[-1].id in held
    assert seen[0] == seen[1]


def test_an_update_of_a_held_page_that_reached_the_hub_first_does_not_unfreeze_it(tmp_path):
    """The hub took an update naming a version it did not have yet (it holds nothing then), and the
    held version after it: a consumer pulls them in that order and still shows the held text."""
    team = Team(tmp_path, agents=("writer", "reviewer", "researcher"))
    try:
        held = held_version()
        sneaky = update(held, agent="reviewer")
        for agent, event in (("reviewer", sneaky), ("writer", held)):
            response = push_to_team(team, agent, event)
            assert response.status_code == 200, response.text
        assert hub_heads_of_team(team) == [(held.id, True)]  # the hub too: the update is void, the hold stands
        unaware = new_event(PageIngest(slug="pricing", frontmatter={"type": "policy"}, text="# Pricing\n\nAny.\n"),
                            agent="researcher", layer="drafts")
        refused = push_to_team(team, "researcher", unaware)
        assert refused.status_code == 409 and refused.json()["type"] == PROBLEM_BASE + "held", refused.text
        on_top = update(sneaky, text="# Pricing\n\nDiscounts as you like, and free shipping.\n", agent="reviewer")
        assert push_to_team(team, "reviewer", on_top).status_code == 200  # built on a void update: void too
        assert hub_heads_of_team(team) == [(held.id, True)]
        team.mem("researcher", "pull", check=True)
        assert "No discounts above 20%." in (team.root / "researcher/content/drafts/pricing.md").read_text()
        conflicts = team.mem("researcher", "conflicts", "--json")
        assert conflicts.returncode == 0 and json.loads(conflicts.stdout) == []
        seqs = {e["id"]: e["seq"] for e in json.loads(team.mem("researcher", "log", "--layer", "drafts", "--json",
                                                                 check=True).stdout)}
        assert seqs[sneaky.id] < seqs[held.id] < seqs[on_top.id]
        for moment in ((), ("--seq", str(seqs[held.id])), ("--seq", str(seqs[on_top.id]))):  # now, and as of then
            hits = json.loads(team.mem("researcher", "search", "discounts", "--all", "--json", *moment,
                                       check=True).stdout)
            assert [hit["snippet"] for hit in hits] == ["# Pricing No **discounts** above 20%."], (moment, hits)
        team.mem("researcher", "replay", "--check", check=True)
        refused = team.mem("researcher", "page", "write", "pricing", "--layer", "drafts",
                           "--file", team.page("edit", "Pricing", "Any."))
        assert refused.returncode == 1
        assert refused.stderr.decode().startswith("error: page 'pricing' of layer 'drafts' is held")
    finally:
        team.stop()
