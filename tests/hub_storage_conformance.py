"""The conformance suite every hub storage backend passes (subclass it with a `hub` fixture)."""

import threading
import time

import pytest

from eventstore.envelope import check_event, new_event
from eventstore.errors import IdConflict, InvalidInput, NotFound
from eventstore.kinds import EntryAppend, PageDelete, PageIngest, PageUpdate, Redacted, Redaction
from sync.storage import PullRecord, decode_stored
from sync.wire import Contract, ContractLayer

CONTRACT = Contract(layers={
    "insights": ContractLayer(path="memory/insights.md", format="entries", producers=["*"], consumers=["*"]),
    "drafts": ContractLayer(path="content/drafts/", format="pages", producers=["writer"], consumers=["main"]),
})


def version(slug="p", parents=(), held=False, delete=False):
    frontmatter = {"type": "x", **({"governance": "hold"} if held else {})}
    body = (PageDelete(slug=slug, parents=list(parents)) if delete else
            PageUpdate(slug=slug, frontmatter=frontmatter, text="t", parents=list(parents)) if parents else
            PageIngest(slug=slug, frontmatter=frontmatter, text="t"))
    return new_event(body, agent="writer", layer="drafts")


def entry(agent="alice", text="x", layer="insights"):
    return new_event(EntryAppend(type="FACT", date="2026-11-29", content=text), agent=agent, layer=layer)


class HubStorageConformance:
    def test_tokens_are_hashed_and_revocable(self, hub):
        token = hub.add_agent("alice")
        assert hub.agent_for_token(token) == "alice"
        assert hub.agent_for_token(token + "x") is None and hub.agent_for_token("") is None
        assert token not in repr(hub.agents())
        with pytest.raises(InvalidInput):
            hub.add_agent("alice")
        hub.revoke_agent("alice")
        assert hub.agent_for_token(token) is None
        assert hub.agent_for_token(hub.add_agent("alice")) == "alice"
        with pytest.raises(NotFound):
            hub.revoke_agent("nobody")
        with pytest.raises(InvalidInput):
            hub.add_agent("bad name!")

    def test_request_states_are_each_tokens_request_state(self, hub):
        """The states of the long-polls one commit woke are read together: each is what its own read gives,
        an unknown or revoked token's included."""
        hub.apply_contract(CONTRACT)
        alice, bob, carol = (hub.add_agent(name) for name in ("alice", "bob", "carol"))
        hub.revoke_agent("bob")
        hub.push([entry()])
        tokens = [alice, bob, carol, alice + "x", ""]
        states = hub.request_states(tokens)
        assert states == {token: hub.request_state(token) for token in tokens}
        assert [states[token][0] for token in tokens] == ["alice", None, "carol", None, None]

    def test_positions_are_gapless_and_duplicates_acknowledged(self, hub):
        a, b, c = entry(text="a"), entry(text="b"), entry(text="c")
        first = hub.push([a, b])
        assert [(r.position, r.duplicate) for r in first] == [(1, False), (2, False)]
        again = hub.push([b, c, c])
        assert [(r.position, r.duplicate) for r in again] == [(2, True), (3, False), (3, True)]
        assert hub.head() == 3
        assert [e.id for e in hub.pull(0, ["insights"], 10)] == [a.id, b.id, c.id]
        assert [e.seq for e in hub.pull(1, ["insights"], 10)] == [2, 3]

    def test_a_known_id_with_another_digest_refuses_the_whole_batch(self, hub):
        a = entry(text="a")
        hub.push([a])
        forged = new_event(EntryAppend(type="FACT", date="2026-11-29", content="forged"), agent="alice",
                           layer="insights", id=a.id, ts=a.ts)
        with pytest.raises(IdConflict):
            hub.push([entry(text="new"), forged])
        assert hub.head() == 1

    def test_layers_of_names_the_layer_of_held_ids(self, hub):
        a, b = entry(text="a"), entry(layer="drafts", agent="writer")
        hub.push([a, b])
        assert hub.layers_of([a.id, b.id, entry().id]) == {a.id: "insights", b.id: "drafts"}
        assert hub.layers_of([]) == {}

    def test_positions_of_names_the_position_of_held_ids(self, hub):
        a, b = entry(text="a"), entry(layer="drafts", agent="writer")
        hub.push([a, b])
        assert hub.positions_of([b.id, entry().id, a.id]) == {a.id: 1, b.id: 2}
        assert hub.positions_of([]) == {}

    def test_positions_seen_by_an_agent_are_those_of_events_it_may_have_had(self, hub):
        """GET /v1/contract?holds= told any agent the position of any event the hub held, one of a layer it may not
        read included (nc22b): now only its own events, the contract's, and those of layers it consumed then."""
        for agent in ("main", "writer", "eve"):
            hub.add_agent(agent)
        hub.apply_contract(CONTRACT)  # drafts: writer produces, main consumes; eve neither
        contract_id = next(iter(hub.pull(0, ["_contract"], 1))).id
        draft, shared, eves = version("d"), entry(text="all"), entry(agent="eve", text="eve's")
        hub.push([draft, shared, eves])
        ids = [contract_id, draft.id, shared.id, eves.id, entry().id]
        positions = hub.positions_of(ids)
        assert hub.positions_seen_by("main", ids) == {id: positions[id]
                                                      for id in (contract_id, draft.id, shared.id, eves.id)}
        assert hub.positions_seen_by("writer", ids) == positions  # its own draft, the shared entries
        assert hub.positions_seen_by("eve", ids) == {id: positions[id] for id in (contract_id, shared.id, eves.id)}
        hub.apply_contract(Contract(layers={"insights": CONTRACT.layers["insights"]}))  # main stops consuming drafts
        later = version("later")
        hub.push([later])
        assert draft.id in hub.positions_seen_by("main", [draft.id, later.id])  # pulled before the drop: still seen
        assert hub.positions_seen_by("main", [later.id]) == {}
        assert hub.positions_seen_by("main", []) == {}
        # the redactions a pull hands over apart from a consumed layer's events count as seen (nc23a: left out, the
        # last event a pull brought looked lost from the hub at every pull): writer produces drafts without
        # consuming them, main consumed drafts before the drop, and eve neither
        [redaction] = hub.admin_redact([draft.id], "gone")
        redaction_id = next(e.id for e in hub.pull(redaction.position - 1, ["drafts"], 1))
        assert redaction_id in hub.positions_seen_by("writer", [redaction_id])
        assert redaction_id in hub.positions_seen_by("main", [redaction_id])
        assert hub.positions_seen_by("eve", [redaction_id]) == {}
        [unseen] = hub.admin_redact([later.id], "gone too")  # of a version stored after main's drop: never handed it
        unseen_id = next(e.id for e in hub.pull(unseen.position - 1, ["drafts"], 1))
        assert hub.positions_seen_by("main", [unseen_id]) == {} and unseen_id in hub.positions_seen_by("writer",
                                                                                                    [unseen_id])

    def test_pull_filters_layers_and_limits(self, hub):
        hub.push([entry(text="1"), entry(layer="drafts", agent="writer"), entry(text="3")])
        assert [e.seq for e in hub.pull(0, ["insights"], 10)] == [1, 3]
        assert [e.seq for e in hub.pull(0, ["insights", "drafts"], 2)] == [1, 2]
        assert hub.pull(0, [], 10) == []
        event = hub.pull(0, ["insights"], 1)[0]
        assert event.recorded_at and event.digest and event.body.content == "1"
        rows = hub.pull_rows(0, ["insights", "drafts"], 10)  # as stored: what a msgpack pull answer is made of
        assert [type(data) for _, _, data in rows] == [bytes] * 3
        assert [decode_stored(data, position, at) for position, at, data in rows] == hub.pull(0, ["insights", "drafts"], 10)

    def test_a_pull_of_several_layers_is_the_next_of_their_events_wherever_they_lie(self, hub):
        """Dense and sparse stretches of the asked layers among another layer's runs: every (cursor, limit) gives
        exactly the next `limit` events of those layers, in position order."""
        shape = "ii" + "x" * 9 + "d" + "x" * 7 + "id" + "x" * 20 + "iiddi" + "x" * 3 + "d"
        layers = {"i": "insights", "d": "drafts", "x": "noise"}
        hub.push([entry(agent="writer", text=str(n), layer=layers[c]) for n, c in enumerate(shape)])
        wanted = [n + 1 for n, c in enumerate(shape) if c != "x"]
        for after in range(len(shape) + 1):
            for limit in (1, 2, 3, 5, 20):
                expected = [seq for seq in wanted if seq > after][:limit]
                assert [e.seq for e in hub.pull(after, ["insights", "drafts"], limit)] == expected, (after, limit)

    def test_contracts_are_events_answerable_as_of_a_time(self, hub):
        assert hub.contract()[0] == Contract()
        position = hub.apply_contract(CONTRACT)
        middle = int(time.time() * 1000)
        time.sleep(0.01)
        changed = Contract(layers={"insights": CONTRACT.layers["insights"]})
        hub.apply_contract(changed)
        assert hub.contract()[0] == changed
        assert hub.contract(middle) == (CONTRACT, position)
        assert hub.contract(0)[0] == Contract()
        assert hub.pull(0, ["insights", "drafts"], 10) == []  # contract events are never pulled

    def test_pull_progress_answers_what_an_agent_had_received(self, hub):
        hub.record_pull("alice", 3)
        middle = int(time.time() * 1000)
        time.sleep(0.01)
        hub.record_pull("alice", 7)
        assert hub.received_by("alice", middle) == 3
        assert hub.received_by("alice", None) == 7
        assert hub.received_by("bob", None) == 0

    def test_watch_sees_commits_made_by_another_hub_process(self, hub, second):
        seen = []
        hub.watch(lambda head, layers: seen.append((head, layers)))
        time.sleep(0.3)  # the watcher is listening
        second.push([entry(), entry(agent="writer", layer="drafts")])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(head >= 2 for head, _ in seen):
            time.sleep(0.02)
        head, layers = next((head, layers) for head, layers in seen if head >= 2)
        assert head == 2 and layers in (None, {"insights", "drafts"})

    def test_pushes_through_two_connections_in_turn_stay_gapless_and_see_each_others_events(self, hub, second):
        """Each connection's next push after the other appended (its memory of the head stale), or one
        that resends the other's events, gets the right positions and duplicates (SQLite: the optimistic
        INSERT at the remembered head is refused and the group planned again)."""
        a, b, c, d = entry(text="a"), entry(text="b"), entry(text="c"), entry(text="d")
        assert hub.push([a])[0].position == 1
        assert second.push([b])[0].position == 2
        assert [(r.position, r.duplicate) for r in hub.push([c, b])] == [(3, False), (2, True)]
        assert [(r.position, r.duplicate) for r in second.push([a])] == [(1, True)]
        assert [(r.position, r.duplicate) for r in second.push([d, c])] == [(4, False), (3, True)]
        assert [(r.position, r.duplicate) for r in hub.push([d])] == [(4, True)]
        assert hub.head() == second.head() == 4
        assert [e.id for e in hub.pull(0, ["insights"], 10)] == [a.id, b.id, c.id, d.id]

    def test_a_refused_batch_inside_a_group_refuses_only_itself(self, hub):
        a = entry(text="a")
        hub.push([a])
        forged = new_event(EntryAppend(type="FACT", date="2026-11-29", content="forged"), agent="alice",
                           layer="insights", id=a.id, ts=a.ts)
        b, c, d = entry(text="b"), entry(text="c"), entry(text="d")
        twin = new_event(EntryAppend(type="FACT", date="2026-11-29", content="twin"), agent="alice",
                         layer="insights", id=c.id, ts=c.ts)
        done = hub.commit([[b], [entry(text="lost"), forged], [c, a], [twin], [d, c]])
        first, refused, third, refused_twin, last = done.outcomes
        assert [(r.position, r.duplicate) for r in first] == [(2, False)]
        assert isinstance(refused, IdConflict) and isinstance(refused_twin, IdConflict)
        assert [(r.position, r.duplicate) for r in third] == [(3, False), (1, True)]
        assert [(r.position, r.duplicate) for r in last] == [(4, False), (3, True)]
        assert done.head == hub.head() == 4 and done.layers == {"insights"}
        assert [e.id for e in hub.pull(0, ["insights"], 10)] == [a.id, b.id, c.id, d.id]

    def test_a_group_carries_pull_records(self, hub):
        done = hub.commit([[entry()]], [PullRecord("bob", 5, int(time.time() * 1000))])
        assert done.head == 1 and hub.received_by("bob", None) == 5

    def test_concurrent_pushers_get_distinct_gapless_positions(self, hub):
        results, errors = [], []

        def pusher(n):
            try:
                for i in range(20):
                    results.extend(r.position for r in hub.push([entry(agent=f"a{n}", text=f"{n}-{i}")]))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=pusher, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert sorted(results) == list(range(1, 81))
        assert [e.seq for e in hub.pull(0, ["insights"], 1000)] == list(range(1, 81))

    def test_a_redaction_removes_bodies_of_its_own_layer(self, hub):
        kept, gone, elsewhere = entry(text="kept"), entry(text="Jane's phone is 555-0199"), entry(text="other",
                                                                                                  layer="drafts")
        hub.push([kept, gone, elsewhere])
        redaction = new_event(Redaction(target_ids=[gone.id, elsewhere.id], reason="private"), agent="alice",
                              layer="insights")
        assert hub.push([redaction])[0].position == 4
        pulled = {e.id: e for e in hub.pull(0, ["insights", "drafts"], 10)}
        assert pulled[kept.id].body == kept.body and pulled[elsewhere.id].body == elsewhere.body
        assert isinstance(pulled[gone.id].body, Redacted) and pulled[gone.id].body.reason == "private"
        assert pulled[gone.id].digest == gone.digest and pulled[gone.id].seq == 2
        check_event(pulled[gone.id])  # what consumers get still verifies
        assert b"555-0199" not in hub.stored(gone.id)[1]
        assert hub.push([redaction])[0].duplicate

    def test_the_first_of_two_redactions_of_one_event_in_a_push_wins_as_across_pushes(self, hub):
        gone = entry(text="Jane's phone is 555-0199")
        hub.push([gone])
        hub.push([new_event(Redaction(target_ids=[gone.id], reason=reason), agent=agent, layer="insights")
                  for agent, reason in (("alice", "first"), ("bob", "second"))])
        assert hub.pull(0, ["insights"], 10)[0].body.reason == "first"

    def test_the_administrator_redacts_in_each_layer(self, hub):
        one, two = entry(text="one"), entry(text="two", layer="drafts")
        hub.push([one, two])
        results = hub.admin_redact([one.id, two.id], "  asked   to ")
        assert [r.position for r in results] == [3, 4]
        redactions = hub.pull(2, ["insights", "drafts"], 10)
        assert {(e.agent, e.layer) for e in redactions} == {("_hub", "insights"), ("_hub", "drafts")}
        assert all(isinstance(e.body, Redacted) and e.body.reason == "asked to"
                   for e in hub.pull(0, ["insights", "drafts"], 2))
        with pytest.raises(NotFound):
            hub.admin_redact(["01a2270a-c5b3-7eca-9806-1025c3bb9d81"], "x")
        with pytest.raises(InvalidInput):
            hub.admin_redact([one.id], " ")

    def test_the_redactions_of_a_layer_are_read_apart_in_a_range_of_positions(self, hub):
        """What a pull adds for a layer the agent produces without consuming it (Hub.page_rows): its redactions
        alone, the administrator's and an agent's, each at its position, in the range asked."""
        one, two, three = entry(text="one"), entry(text="two", layer="drafts"), entry(text="three")
        hub.push([one, two, three])
        hub.admin_redact([two.id], "asked")  # position 4
        by_alice = new_event(Redaction(target_ids=[one.id], reason="mine"), agent="alice", layer="insights")
        hub.commit([[entry(text="four")], [by_alice]])  # positions 5 and 6, in one group
        rows = hub.redaction_rows(0, hub.head(), ["drafts", "insights"])
        assert [position for position, _at, _data in rows] == [4, 6]
        assert [decode_stored(data, position, at).id for position, at, data in rows] == [
            event.id for event in hub.pull(3, ["drafts", "insights"], 10) if isinstance(event.body, Redaction)]
        assert [row[0] for row in hub.redaction_rows(0, hub.head(), ["insights"])] == [6]
        assert hub.redaction_rows(4, 5, ["drafts", "insights"]) == [] and hub.redaction_rows(0, 6, []) == []
        assert [row[0] for row in hub.redaction_rows(3, 4, ["drafts"])] == [4]

    def test_the_redactions_of_an_agents_events_are_read_by_author(self, hub):
        """What GET /v1/redactions answers: the redactions naming an event the agent wrote, whoever made them and
        whatever the contract says now, in a range of positions, leaving out the layers it names (consumed)."""
        alices, bobs, alices_draft = entry(text="one"), entry("bob", "two"), entry(text="three", layer="drafts")
        hub.push([alices, bobs, alices_draft])
        hub.admin_redact([alices_draft.id], "asked")  # position 4
        both = new_event(Redaction(target_ids=[alices.id, bobs.id], reason="both"), agent="carol", layer="insights")
        hub.commit([[entry(text="four")], [both]])  # positions 5 and 6, in one group
        hub.push([new_event(Redaction(target_ids=[bobs.id], reason="again"), agent="bob", layer="insights")])

        def read(agent, after=0, upto=None, limit=10, besides=()):
            rows = hub.redactions_apart_rows(agent, after, hub.head() if upto is None else upto, limit,
                                               list(besides))
            return [(position, decode_stored(data, position, at).body.reason) for position, at, data in rows]

        assert read("alice") == [(4, "asked"), (6, "both")]
        assert read("bob") == [(6, "both"), (7, "again")]
        assert read("carol") == [] and read("_hub") == []
        assert read("alice", besides=["insights"]) == [(4, "asked")]
        assert read("alice", besides=["drafts", "insights"]) == []
        assert read("alice", after=4) == [(6, "both")] and read("alice", upto=5) == [(4, "asked")]
        assert read("bob", limit=1) == [(6, "both")]
        rows = hub.redactions_apart_rows("carol", 0, hub.head(), 10, [], ["insights"])  # a layer it consumed once
        assert [(position, decode_stored(data, position, at).body.reason) for position, at, data in rows] == [
            (6, "both"), (7, "again")]
        rows = hub.redactions_apart_rows("bob", 0, hub.head(), 10, [], ["drafts", "insights"])  # each one once
        assert [position for position, _at, _data in rows] == [4, 6, 7]

    def test_a_former_layers_redactions_are_only_those_of_events_that_could_have_reached_the_agent(self, hub):
        """A consumer dropped from a layer holds at most its events stored before the contract that dropped it: the
        redactions of later ones were handed over too, reason and all (found at the last stop's end). One of an
        event the agent wrote itself still reaches it; a page is as full as `limit` allows, past those left out."""
        hub.add_agent("main")
        hub.apply_contract(CONTRACT)
        seen = version("seen")
        hub.push([seen])
        hub.apply_contract(Contract(layers={"insights": CONTRACT.layers["insights"]}))  # main stops consuming drafts
        dropped = hub.head()
        unseen = [version(f"unseen{i}") for i in range(3)]
        by_main = new_event(PageIngest(slug="own", frontmatter={"type": "x"}, text="t"), agent="main", layer="drafts")
        hub.push([*unseen, by_main])
        for target, reason in [(unseen[0], "u0"), (seen, "seen"), (unseen[1], "u1"), (by_main, "own"),
                               (unseen[2], "u2")]:
            hub.admin_redact([target.id], reason)
        formerly = hub.consumed_ever("main")
        assert formerly == {"drafts": dropped, "insights": None}

        def read(limit=10, after=0):
            rows = hub.redactions_apart("main", after, hub.head(), limit, ["insights"],
                                        {"drafts": formerly["drafts"]})
            return [decode_stored(data, position, at).body.reason for position, at, data in rows]

        assert read() == ["seen", "own"]
        assert read(limit=1) == ["seen"] and read(limit=2) == ["seen", "own"]
        reads, rows_of = [], hub.redactions_apart_rows
        hub.redactions_apart_rows = lambda *args: reads.append(args) or rows_of(*args)
        assert read(limit=1) == ["seen"] and len(reads) == 1  # one read of many rows, not one a row (nc21b)
        del hub.redactions_apart_rows
        unfiltered = [row[0] for row in hub.redactions_apart_rows("main", 0, hub.head(), 10, ["insights"], ["drafts"])]
        assert len(unfiltered) == 5
        assert read(after=unfiltered[1]) == ["own"] and read(after=unfiltered[3]) == []

    def test_the_layers_an_agent_ever_consumed_are_those_of_every_contract(self, hub):
        for agent in ("main", "writer", "nobody"):
            hub.add_agent(agent)
        hub.apply_contract(CONTRACT)
        assert hub.consumed_ever("main") == {"drafts": None, "insights": None}
        assert hub.consumed_ever("writer") == {"insights": None}
        hub.push([entry(text="one")])
        hub.apply_contract(Contract(layers={"insights": CONTRACT.layers["insights"]}))  # drafts dropped
        dropped = hub.head()
        assert hub.consumed_ever("main") == {"drafts": dropped, "insights": None}
        assert hub.consumed_ever("nobody") == {"insights": None}  # consumers = ["*"]
        hub.apply_contract(CONTRACT)  # consumed again, then dropped again: the later drop is what counts
        hub.apply_contract(Contract(layers={"insights": CONTRACT.layers["insights"]}))
        assert hub.consumed_ever("main") == {"drafts": hub.head(), "insights": None}
        assert hub.consumed_ever("stranger") == {}  # no agent of the hub
        hub.apply_contract(Contract(layers={"drafts": CONTRACT.layers["drafts"]}))  # insights (consumers "*") dropped
        dropped = hub.head()
        time.sleep(0.01)
        hub.add_agent("late")  # "*" named no agent of its name while insights was shared (nc21b: its redactions came)
        assert hub.consumed_ever("late") == {} and hub.consumed_ever("nobody") == {"insights": dropped}

    def test_page_heads_follow_the_parents_whatever_the_arrival_order(self, hub):
        first = version()
        child = version(parents=[first.id])
        hub.push([child])  # before its parent: the parent is superseded when it arrives
        assert hub.page_heads("drafts", "p") == [(child.id, False)]
        hub.push([first])
        assert hub.page_heads("drafts", "p") == [(child.id, False)]
        beside, gone = version(held=True), version(parents=[child.id], delete=True)
        hub.commit([[beside], [gone]])
        assert sorted(hub.page_heads("drafts", "p")) == sorted([(beside.id, True), (gone.id, False)])
        assert hub.page_heads("drafts", "q") == [] and hub.page_heads("insights", "p") == []
        hub.admin_redact([beside.id], "private")  # a version that cannot be read holds nothing
        assert sorted(hub.page_heads("drafts", "p")) == sorted([(beside.id, False), (gone.id, False)])

    @pytest.mark.parametrize("order", ["held last", "held between", "held first", "one batch"])
    def test_a_held_version_that_arrives_after_an_update_of_it_stays_the_head(self, hub, order):
        """An update of a held version that does not release it is void (eventstore.governance), and so is
        what is built on it, whatever reached the hub first: the held version stays the page's head, named by
        nothing, and the version it updated stays superseded."""
        first = version()
        held = version(parents=[first.id], held=True)
        sneak = version(parents=[held.id])  # reaches the hub before `held` when the hub could not check it
        on_top = version(parents=[sneak.id])
        merge = version(parents=[on_top.id, first.id], delete=True)
        hub.push([first])
        batches = {"held last": [[sneak], [on_top, merge], [held]], "held between": [[sneak], [held], [on_top, merge]],
                   "held first": [[held], [merge], [sneak], [on_top]], "one batch": [[sneak, on_top, held, merge]]}
        for batch in batches[order]:
            hub.push(batch)
        assert hub.page_heads("drafts", "p") == [(held.id, True)]
        assert hub.named_versions([first.id, held.id, sneak.id, on_top.id]) == {first.id}
        freed = new_event(PageUpdate(slug="p", frontmatter={"type": "x"}, text="t", parents=[held.id], note="agreed"),
                          agent="writer", layer="drafts")
        hub.push([freed])
        assert hub.page_heads("drafts", "p") == [(freed.id, False)]

    def test_a_redacted_held_version_holds_nothing_so_what_it_made_void_counts_again(self, hub):
        """A redacted version reads as its stand-in (eventstore.redaction), which holds nothing, as on every
        consumer, whose views are rebuilt from the redacted log: its updates are not void any more."""
        held = version(held=True)
        sneak = version(parents=[held.id])
        on_top = version(parents=[sneak.id])
        hub.push([sneak, held, on_top])
        assert hub.page_heads("drafts", "p") == [(held.id, True)]
        hub.admin_redact([held.id], "private")
        assert hub.page_heads("drafts", "p") == [(on_top.id, False)]
        assert hub.named_versions([held.id, sneak.id, on_top.id]) == {held.id, sneak.id}

    def test_versions_that_would_supersede_one_another_in_a_loop_are_refused_alone(self, hub):
        """Regression (nc26a): a parent not held yet is taken (a child may come first), so a producer, who chooses
        its ids, pushed a version naming the head and an id not pushed yet, then that id's version naming the first:
        a page with no head, gone from every consumer; a version naming itself broke every view of its page. The
        version that closes the loop is refused, alone in its group, in one batch or two, across pushes."""
        head = version()
        hub.push([head])
        later = version()  # its id only: the version is made below, naming what names it
        hiding = version(parents=[head.id, later.id])
        hub.push([hiding])
        closing = new_event(PageUpdate(slug="p", frontmatter={"type": "x"}, text="t", parents=[hiding.id]),
                            agent="writer", layer="drafts", id=later.id)
        with pytest.raises(InvalidInput, match=f"parent {hiding.id} is built on this version"):
            hub.push([closing])
        itself = version()
        naming_itself = new_event(PageUpdate(slug="q", frontmatter={"type": "x"}, text="t", parents=[itself.id]),
                                  agent="writer", layer="drafts", id=itself.id)
        with pytest.raises(InvalidInput, match=f"parent {itself.id} is this version itself"):
            hub.push([naming_itself])
        b = version(slug="r")
        a = version(slug="r", parents=[b.id])
        b = new_event(PageUpdate(slug="r", frontmatter={"type": "x"}, text="t", parents=[a.id]), agent="writer",
                      layer="drafts", id=b.id)
        with pytest.raises(InvalidInput, match="loop"):
            hub.push([a, b])
        fact = entry()
        done = hub.commit([[a], [b], [fact]])  # checked at once, as two pushes can be: the later is refused
        assert [r.position for r in done.outcomes[0]] == [3] and isinstance(done.outcomes[1], InvalidInput)
        assert [r.position for r in done.outcomes[2]] == [4]
        assert [e.id for e in hub.pull(0, ["drafts", "insights"], 10)] == [head.id, hiding.id, a.id, fact.id]
        assert hub.page_heads("drafts", "p") == [(hiding.id, False)]
        assert hub.page_heads("drafts", "r") == [(a.id, False)]
        chain = [version(slug="s")]
        for _ in range(3):
            chain.append(version(slug="s", parents=[chain[-1].id]))
        hub.push(chain[::-1])  # children first, in one batch: no loop
        assert hub.page_heads("drafts", "s") == [(chain[-1].id, False)]

    def test_the_loop_check_reads_little_whatever_order_a_pages_versions_come_in(self, hub, monkeypatch):
        """Regression (nc27a): the check walked every descendant of a version, one read per level, under the write
        lock: a root pushed after 16,000 of its descendants held it 20 s, and a chain pushed child first one version
        per push took minutes. A version is looked at only when one come before it names it, through versions come
        before it, the smaller side first: a few reads per push, however long the chain."""
        import sync.storage as storage

        reads = []
        checked = storage.refuse_loops

        def counted(sql, events):
            def rows(query, params):
                reads.append(query)
                return sql.rows(query, params)
            return checked(sql._replace(rows=rows), events)

        monkeypatch.setattr(f"{type(hub).__module__}.refuse_loops", counted)
        chain = [version(slug="long")]
        for _ in range(300):
            chain.append(version(slug="long", parents=[chain[-1].id]))
        for event in reversed(chain):  # child first, one version per push
            hub.push([event])
        assert hub.page_heads("drafts", "long") == [(chain[-1].id, False)]
        assert len([q for q in reads if q == reads[0]]) <= 3 * len(chain)
        reads.clear()
        hub.push([version(slug="long", parents=[chain[-1].id])])  # pushed after its parent: one read
        assert len(reads) == 1

    def test_a_loop_stored_before_the_check_does_not_refuse_a_version_that_closes_none(self, hub, monkeypatch):
        """Regression (nc27a): a hub holding a loop from before the check failed (500) on every version reaching it."""
        monkeypatch.setattr(f"{type(hub).__module__}.refuse_loops", lambda sql, events: None)
        root, later = version(slug="old"), version(slug="old")
        looped = version(slug="old", parents=[root.id, later.id])
        closing = new_event(PageUpdate(slug="old", frontmatter={"type": "x"}, text="t", parents=[looped.id]),
                            agent="writer", layer="drafts", id=later.id)
        hub.push([looped])
        hub.push([closing])
        monkeypatch.undo()
        assert [r.duplicate for r in hub.push([root])] == [False]

    def test_named_versions_are_the_ids_a_stored_version_names_as_parent(self, hub):
        ingest = version()
        child = version(parents=[ingest.id])
        hub.push([child])  # the parent is named before it arrives
        assert hub.named_versions([ingest.id, child.id, "nothing"]) == {ingest.id}
        hub.push([ingest])
        assert hub.named_versions([ingest.id, child.id]) == {ingest.id}
        assert hub.named_versions([]) == set()
