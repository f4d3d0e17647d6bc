"""Both hub storage backends pass the same conformance suite."""

import fcntl
import os
import threading
import time

import pytest

from eventstore.envelope import new_event
from eventstore.kinds import Redaction
from sync.storage_postgres import PostgresHubStorage
from sync.storage_sqlite import SQLiteHubStorage

from hub_storage_conformance import CONTRACT, HubStorageConformance, entry
from pg import table_bytes


class TestSQLiteHubStorage(HubStorageConformance):
    @pytest.fixture
    def hub(self, tmp_path):
        storage = SQLiteHubStorage(str(tmp_path / "hub.db"))
        yield storage
        storage.close()

    @pytest.fixture
    def second(self, hub):
        storage = SQLiteHubStorage(hub.path)
        yield storage
        storage.close()


class TestPostgresHubStorage(HubStorageConformance):
    @pytest.fixture
    def hub(self, pg_url):
        storage = PostgresHubStorage(pg_url)
        yield storage
        storage.close()

    @pytest.fixture
    def second(self, hub):
        storage = PostgresHubStorage(hub.url)
        yield storage
        storage.close()

    def test_a_redaction_leaves_no_copy_of_the_text_in_the_table_files(self, hub):
        """Regression: the UPDATE that redacts leaves the old row version dead in hub_events' file, where it
        stayed (a small table may never reach autovacuum's threshold) until the hub VACUUMed after the redaction."""
        gone = entry(text="SECRETPHONE 555-0199 is the on-call")
        hub.push([gone])
        assert b"SECRETPHONE" in table_bytes(hub.url, "hub_events")
        hub.push([new_event(Redaction(target_ids=[gone.id], reason="private"), agent="alice", layer="insights")])
        assert b"SECRETPHONE" not in table_bytes(hub.url, "hub_events")


OLD_PAGE_VERSIONS = ("CREATE TABLE hub_page_versions (id TEXT PRIMARY KEY, layer TEXT NOT NULL, slug TEXT NOT NULL, "
                     "held INTEGER NOT NULL, superseded INTEGER NOT NULL)")
"""hub_page_versions as hubs made it before it had `void` (and `parents`, `named_by`)."""


@pytest.mark.parametrize("made", ["without the table", "with the table before void"])
def test_a_hub_made_before_page_versions_were_kept_fills_them_once(tmp_path, pg_url, made):
    """hub_page_versions (the hold check's heads) is filled from the stored events when a hub opens
    without it, or with it as it was before its newest column, on either backend."""
    import psycopg
    import sqlite3

    from hub_storage_conformance import version

    for opened, drop in ((lambda: SQLiteHubStorage(str(tmp_path / "hub.db")),
                          lambda: sqlite3.connect(tmp_path / "hub.db", isolation_level=None)),
                         (lambda: PostgresHubStorage(pg_url), lambda: psycopg.connect(pg_url, autocommit=True))):
        hub = opened()
        held = version(held=True)
        update, other = version(parents=[held.id]), version(held=True)
        hub.push([update, held, other])  # the update first: void once `held` comes
        expected = sorted(hub.page_heads("drafts", "p"))
        assert expected == sorted([(held.id, True), (other.id, True)])
        hub.close()
        conn = drop()
        conn.execute("DROP TABLE hub_page_versions")
        if made != "without the table":
            conn.execute(OLD_PAGE_VERSIONS)
            conn.execute(f"INSERT INTO hub_page_versions VALUES ('{held.id}', 'drafts', 'p', 1, 1)")
        conn.close()
        hub = opened()
        assert sorted(hub.page_heads("drafts", "p")) == expected
        hub.close()


@pytest.mark.parametrize("made", ["before both tables", "before the authors' table"])
def test_a_hub_made_before_redactions_were_kept_apart_fills_them_once(tmp_path, pg_url, made):
    """hub_redactions (the redactions a producer that does not consume a layer pulls) and hub_redaction_authors (who
    wrote what each one names: GET /v1/redactions) are filled from the stored events when a hub opens without the
    second, on either backend: a text that only reads like a redaction's tag is not one."""
    import psycopg
    import sqlite3

    for opened, drop in ((lambda: SQLiteHubStorage(str(tmp_path / "hub.db")),
                          lambda: sqlite3.connect(tmp_path / "hub.db", isolation_level=None)),
                         (lambda: PostgresHubStorage(pg_url), lambda: psycopg.connect(pg_url, autocommit=True))):
        hub = opened()
        hub.apply_contract(CONTRACT)
        gone, lookalike, bobs = entry(text="gone"), entry(text='{"kind": "redaction"}'), entry("bob", "bob's")
        hub.push([gone, lookalike, bobs])
        hub.push([new_event(Redaction(target_ids=[gone.id, bobs.id], reason="private"), agent="carol",
                            layer="insights")])
        expected = hub.redaction_rows(0, hub.head(), ["insights"])
        assert len(expected) == 1
        for agent in ("alice", "bob"):
            assert hub.redactions_apart_rows(agent, 0, hub.head(), 10, []) == expected
        hub.close()
        conn = drop()
        conn.execute("DROP TABLE hub_redaction_authors")
        if made == "before both tables":
            conn.execute("DROP TABLE hub_redactions")
        conn.close()
        hub = opened()
        assert hub.redaction_rows(0, hub.head(), ["insights"]) == expected
        for agent in ("alice", "bob"):
            assert hub.redactions_apart_rows(agent, 0, hub.head(), 10, []) == expected
        assert hub.redactions_apart_rows("carol", 0, hub.head(), 10, []) == []
        hub.close()
        if made == "before both tables":
            conn = drop()
            conn.execute("DROP TABLE hub_redaction_authors")
            conn.close()


def test_a_sqlite_hubs_write_queues_on_the_files_flock_that_another_hub_process_holds(tmp_path):
    """Hub processes on one SQLite file take turns writing through an flock of the file, which wakes the
    next the moment it is let go (SQLite's busy handler sleeps 1, 2, 5, 10 ms... between tries): a push
    waits while another holder has it, and goes in as soon as it is released."""
    hub = SQLiteHubStorage(str(tmp_path / "hub.db"))
    other = os.open(hub.path, os.O_RDONLY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        done = []
        pusher = threading.Thread(target=lambda: done.append(hub.push([entry()])))
        pusher.start()
        time.sleep(0.3)
        assert not done  # queued behind the other holder
        released = time.monotonic()
        fcntl.flock(other, fcntl.LOCK_UN)
        pusher.join(5)
        assert done and done[0][0].position == 1 and time.monotonic() - released < 2
    finally:
        os.close(other)
        hub.close()


def test_a_sqlite_group_of_new_entries_is_one_autocommit_insert_and_anything_else_a_transaction(tmp_path):
    """The common group commits as one INSERT in autocommit (SQLiteHubStorage._one_statement: each statement
    makes the commit thread win the GIL back from a busy event loop); a group with a pull record, a page
    version, a resent event or an id repeated in it goes the transaction's way, and every group's results
    are the same."""
    from eventstore.envelope import new_event
    from eventstore.kinds import PageIngest
    from sync.storage import PullRecord

    hub = SQLiteHubStorage(str(tmp_path / "hub.db"))
    hub.apply_contract(CONTRACT)
    statements = []
    hub.db.set_trace_callback(lambda sql: statements.append(sql.split(" ")[0]))
    try:
        first, second, third = entry(), entry(), entry()
        committed = hub.commit([[first], [second, third]])
        assert statements == ["INSERT"]
        assert [[result.position for result in outcome] for outcome in committed.outcomes] == [[2], [3, 4]]
        statements.clear()
        again = hub.commit([[first], [entry()]])  # a resent event: the INSERT is refused, then planned against the file
        assert again.outcomes[0][0].duplicate and again.outcomes[0][0].position == 2
        assert again.outcomes[1][0].position == 5 and "BEGIN" in statements
        for group in ([[entry()]], [PullRecord("alice", 5, 0)]), ([[new_event(
                PageIngest(slug="p", frontmatter={"type": "t"}, text="x"), agent="alice", layer="pages")]], []):
            statements.clear()
            hub.commit(*group)
            assert statements[0] == "BEGIN" and statements[-1] == "COMMIT"
        repeated = entry()  # an id twice in one group (`plain_group` plans none such): stored once, acknowledged twice
        statements.clear()
        twice = hub.commit([[repeated], [repeated]])
        assert statements[0] == "BEGIN" and statements[-1] == "COMMIT"
        assert [(r.position, r.duplicate) for outcome in twice.outcomes for r in outcome] == [(8, False), (8, True)]
        assert hub.head() == 8 and hub.received_by("alice", None) == 5
    finally:
        hub.close()


def test_a_cached_token_state_holds_only_while_nothing_changed_and_is_checked_again_inside_the_commit(
        tmp_path, monkeypatch):
    """SQLiteHubStorage.push_state answers a known token from its cache (no read) with the epoch it was read
    in; the commit applies a batch checked so only if no token state may have changed since: a revocation
    committed by another connection (the writer's `PRAGMA data_version` moved) or by this one leaves the
    batch unapplied (`Stale`), and the next state is read afresh."""
    import sync.storage_sqlite
    from sync.storage import Stale

    monkeypatch.setattr(sync.storage_sqlite, "TOKEN_CACHE_CALM", 0.0)

    class Counted(SQLiteHubStorage):
        reads = 0

        def _request_row(self, token_hash):
            self.reads += 1
            return super()._request_row(token_hash)

    hub = Counted(str(tmp_path / "hub.db"))
    hub.apply_contract(CONTRACT)
    alice, bob = hub.add_agent("alice"), hub.add_agent("bob")
    try:
        assert hub.push_state(alice)[3] is None and hub.reads == 1  # read, then cached
        agent, _contract, _position, checked = hub.push_state(alice)
        assert agent == "alice" and checked is not None and hub.reads == 1
        assert not isinstance(hub.commit([[entry()]], [], [checked]).outcomes[0], Exception)  # nothing changed
        other = SQLiteHubStorage(hub.path)
        other.revoke_agent("alice")  # another connection
        other.close()
        head = hub.head()
        assert isinstance(hub.commit([[entry()]], [], [checked]).outcomes[0], Stale) and hub.head() == head
        assert hub.push_state(alice)[0] is None and hub.reads == 2  # read again: revoked
        hub.push_state(bob)
        checked = hub.push_state(bob)[3]
        assert checked is not None
        hub.revoke_agent("bob")  # this connection: data_version does not move, the storage knows
        fresh = entry()
        committed = hub.commit([[entry()], [fresh]], [], [checked, None])
        assert isinstance(committed.outcomes[0], Stale) and committed.outcomes[1][0].id == fresh.id
        assert hub.head() == head + 1
    finally:
        hub.close()


def test_the_one_pass_plan_of_a_plain_group_is_plan_groups_and_refuses_every_other_group():
    """`plain_group` is a shortcut of `plan_group` for the common group; where it plans, the plans must be equal."""
    from eventstore.envelope import new_event
    from eventstore.kinds import PageIngest, Redaction
    from sync.storage import plain_group, plan_group

    batches = [[entry()], [entry(), entry(layer="notes")], [entry(agent="bob")]]
    assert plain_group(batches, 7) == plan_group(batches, {}, 7)
    page = new_event(PageIngest(slug="p", frontmatter={"type": "t"}, text="x"), agent="alice", layer="pages")
    redaction = new_event(Redaction(target_ids=[batches[0][0].id], reason="r"), agent="alice", layer="insights")
    for other in ([[page]], [[redaction]], [batches[0], batches[0]]):
        assert plain_group(other, 1) is None


def test_a_sqlite_pull_of_several_layers_leaves_no_gap_when_a_push_commits_between_its_reads(tmp_path):
    """Regression: a pull of several layers reads a range of positions in order, then the layer index past it.
    Each read had its own snapshot, so events committed between them in the range read first were never
    answered, while those past it were, and the cursor moved past all of them. Both now read one snapshot."""
    hub, other = SQLiteHubStorage(str(tmp_path / "hub.db")), None
    try:
        hub.apply_contract(CONTRACT)
        hub.push([entry()])
        other = SQLiteHubStorage(hub.path)
        pushed = []

        def between(statement: str) -> None:
            if "layer IN" in statement and "+layer" not in statement and not pushed:
                pushed.append(other.push([entry(text=f"late {i}") for i in range(300)]))

        hub._reader().set_trace_callback(between)
        rows = hub.pull_rows(1, ["insights", "drafts"], 100)
        assert pushed  # the push did commit between the two reads
        positions = [row[0] for row in rows]
        assert positions == list(range(2, 2 + len(positions))), positions[:5]
    finally:
        hub.close()
        if other is not None:
            other.close()
