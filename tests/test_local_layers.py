"""Typed entries with no hub: local layers declared as config events, their files materialised."""

import json
import sqlite3

from conftest import PAGE, log_rows, run_mem

from eventstore.instants import format_instant

from projections import replay as replaying


def test_entries_without_a_hub_through_the_cli(workspace):
    w = ("-w", workspace)
    out = run_mem(*w, "layer", "add", "decisions", "memory/decisions.md", check=True).stdout.decode()
    assert out.startswith("layer decisions -> memory/decisions.md (entries")
    first = run_mem(*w, "entry", "add", "decisions", "[DECISION] 2026-11-29: Deploys need the owner's ack",
                    check=True).stdout.decode().split()[0]
    run_mem(*w, "entry", "add", "decisions", "[DECISION] 2026-11-30: Deploys need two acks", "--reverses", first,
            check=True)
    text = (workspace / "memory/decisions.md").read_text()
    assert text.startswith("# decisions\n\n[DECISION] 2026-11-29: Deploys need the owner's ack [reversed by ")
    assert "[DECISION] 2026-11-30: Deploys need two acks (reverses " in text
    hits = json.loads(run_mem(*w, "search", "acks", "--json", check=True).stdout)
    assert [h["kind"] for h in hits] == ["entry", "entry"] and hits[1]["citation"] == first
    assert hits[0]["path"] == "memory/decisions.md" and hits[1]["flags"][0].startswith("reversed by")
    layers = json.loads(run_mem(*w, "layer", "list", "--json", check=True).stdout)
    assert layers == [{"layer": "decisions", "path": "memory/decisions.md", "format": "entries", "local": True,
                       "produces": True, "consumes": True}]
    assert "no differences" in run_mem(*w, "replay", "--check", check=True).stdout.decode()


def test_layer_refusals_leave_the_log_untouched(workspace, tmp_path):
    w = ("-w", workspace)
    run_mem(*w, "layer", "add", "decisions", "memory/decisions.md", check=True)
    before = log_rows(workspace)
    note = tmp_path / "n.md"
    note.write_text("[DECISION] by hand")
    for args, message in ((("layer", "add", "mind", "memory/m.md"), b"'mind' is reserved"),
                          (("layer", "add", "lessons", "memory/lessons.txt"), b"is a .md file"),
                          (("layer", "add", "lessons", "../out.md"), b"error: "),
                          (("layer", "add", "decisions", "memory/other.md"), b"already exists"),
                          (("layer", "add", "again", "memory/decisions.md"), b"overlaps layer 'decisions'"),
                          (("layer", "add", "under", "memory/decisions.md/sub.md"), b"overlaps layer 'decisions'"),
                          (("layer", "add", "over", "memory/decisions.md/", "--format", "pages"),
                           b"overlaps layer 'decisions'"),
                          (("layer", "add", "above", "memory/", "--format", "pages"), b"overlaps layer 'decisions'"),
                          (("entry", "add", "lessons", "[LESSON] x"), b"no layer 'lessons' declared here"),
                          (("layer", "add", "Bad Name", "memory/y.md"),  # regression (nc13a): "config key ..."
                           b"error: layer name 'Bad Name' must be lowercase letters, digits, '-' or '_'"),
                          (("entry", "add", "decisions", "[WHIM] x"), b"not one of"),
                          (("file", "write", "memory/decisions.md", "--file", note), b"belongs to layer 'decisions'")):
        result = run_mem(*w, *args)
        assert result.returncode == 1 and result.stderr.startswith(b"error: ") and message in result.stderr, args
    assert log_rows(workspace) == before


def test_a_local_layer_is_refused_over_the_agents_own_file(workspace, tmp_path):
    """The agent's own file keeps its path against a layer (Views.blocked): declared over it, the local layer's file
    would never be written. A hub's contract change cannot be refused; the agent's own declaration is."""
    w = ("-w", workspace)
    note = tmp_path / "n.md"
    note.write_text("kept by hand")
    run_mem(*w, "file", "write", "memory/notes.md", "--file", note, check=True)
    run_mem(*w, "file", "write", "docs/a.md", "--file", note, check=True)
    before = log_rows(workspace)
    for args, path in ((("layer", "add", "notes", "memory/notes.md"), b"memory/notes.md"),
                       (("layer", "add", "docs", "docs/", "--format", "pages"), b"docs/a.md"),
                       (("config", "set", "layers.notes", '{"path": "memory/notes.md"}'), b"memory/notes.md")):
        result = run_mem(*w, *args)
        assert result.returncode == 1 and result.stderr.startswith(b"error: " + path + b" is this agent's own file")
        assert len(result.stderr.splitlines()) == 1, args
    assert log_rows(workspace) == before
    run_mem(*w, "file", "delete", "memory/notes.md", check=True)
    run_mem(*w, "layer", "add", "notes", "memory/notes.md", check=True)
    run_mem(*w, "entry", "add", "notes", "[FACT] 2026-12-02: the layer's file is written", check=True)
    assert "the layer's file is written" in (workspace / "memory/notes.md").read_text()


def test_a_replay_rebuilds_local_entry_files(memory):
    memory.declare_layer("lessons", "memory/lessons.md")
    memory.entry_add("lessons", "[LESSON] 2026-11-01: Canary first")
    before = (memory.root / "memory/lessons.md").read_bytes()
    (memory.root / "memory/lessons.md").unlink()
    replaying.replay(memory)
    assert (memory.root / "memory/lessons.md").read_bytes() == before


def test_adf_files_are_read_with_show_and_cite_but_stay_off_the_disk(workspace, tmp_path):
    w = ("-w", workspace)
    run_mem(*w, "layer", "add", "people", "memory/people.md", check=True)
    run_mem(*w, "entry", "add", "people", "[ENTITY] 2026-11-29: Dana owns deploys", check=True)
    note = tmp_path / "n.md"
    note.write_text("scratch notes\n")
    run_mem(*w, "file", "write", "memory/scratch.md", "--file", note, check=True)
    assert not (workspace / "memory/scratch.md").exists() and (workspace / "memory/people.md").exists()
    assert run_mem(*w, "show", "memory/scratch.md", check=True).stdout == b"scratch notes\n"
    assert b"Dana owns deploys" in run_mem(*w, "cite", "adf-file://memory/people.md", check=True).stdout
    assert run_mem(*w, "show", "memory/scratch.md", "--seq", "1").returncode == 1


def test_pages_of_a_layer_are_searched_with_their_trust_fields(memory):
    from eventstore.errors import InvalidInput
    from projections import search

    memory.declare_layer("drafts", "content/drafts/", "pages")
    memory.shared_page_write("drafts", "launch", b"---\ntype: draft\n---\n# Launch\n\nWe launch on Tuesday.\n")
    first = memory.views.checkpoint()
    memory.shared_page_write("drafts", "launch", b"---\ntype: draft\nstatus: deprecated\n---\n# Launch\n\nTuesday.\n")
    assert search.search(memory.views, "tuesday", day="2026-11-30") == []
    [hit] = search.search(memory.views, "tuesday", day="2026-11-30", include_all=True, layers=["drafts"])
    assert hit.kind == "local-page" and hit.citation == "adf-file://content/drafts/launch.md"
    assert hit.flags == ["deprecated"]
    [then] = search.search(memory.views, "launch tuesday", as_of=first, day="2026-11-30", agent="alice")
    assert then.seq == first and then.flags == []
    assert search.search(memory.views, "nothing-of-alice", as_of=first, day="2026-11-30", agent="alice") == []
    try:  # no one named bob wrote anything here: said, not "no matches"
        search.search(memory.views, "launch", as_of=first, day="2026-11-30", agent="bob")
        raise AssertionError("an agent who never wrote anything here was searched")
    except InvalidInput as exc:
        assert str(exc).startswith("no agent 'bob' has written anything here")
    try:
        memory.shared_page_write("drafts", "x", b"---\ntype: draft\nstale_after: someday\n---\n# X\n")
    except InvalidInput as exc:
        assert "stale_after" in str(exc)
    else:
        raise AssertionError("a malformed stale_after was accepted in a layer page")


def test_a_local_pages_layer_is_told_as_local_and_by_its_files(workspace, tmp_path):
    """Regression: a page written to a local pages layer was said as `ingest notes/n1 (seq 2)`, no file of that name
    (the wiki says `ingest mind/deploy.md`), and search called the pages of a layer that is never shared
    `shared-page` (`--kind shared-page` found them). Each verb names the page's file; search calls them
    `local-page`, the kind `--kind` takes, and keeps `shared-page` for the layers of a hub."""
    w = ("-w", workspace)
    run_mem(*w, "layer", "add", "notes", "team/notes/", "--format", "pages", check=True)
    page = tmp_path / "n.md"
    page.write_text("---\ntype: note\n---\n# N1\n\nThe walrus note.\n")
    said = [run_mem(*w, *args, check=True).stdout.decode() for args in (
        ("page", "write", "n1", "--layer", "notes", "--file", page), ("page", "write", "n1", "--layer", "notes",
                                                                      "--file", page, "--note", "again"),
        ("page", "rename", "n1", "n2", "--layer", "notes"), ("page", "delete", "n2", "--layer", "notes"))]
    assert [line.rsplit(" (seq ", 1)[0] for line in said] == [
        "ingest team/notes/n1.md", "update team/notes/n1.md", "rename team/notes/n1.md -> team/notes/n2.md",
        "delete team/notes/n2.md"]
    run_mem(*w, "page", "write", "n3", "--layer", "notes", "--file", page, check=True)
    [hit] = json.loads(run_mem(*w, "search", "walrus", "--json", check=True).stdout)
    assert (hit["kind"], hit["path"]) == ("local-page", "team/notes/n3.md")
    assert json.loads(run_mem(*w, "search", "walrus", "--kind", "local-page", "--json", check=True).stdout) == [hit]
    assert run_mem(*w, "search", "walrus", "--kind", "shared-page", check=True).stdout == b"no matches\n"
    assert b"(local-page)" in run_mem(*w, "search", "walrus", check=True).stdout


def test_believed_names_a_local_layer_as_local_and_each_loop_when_there_are_several(workspace):
    """Regression: `mem believed` printed a local layer (never pushed) under `shared`, and mixed the messages of two
    loops without saying which was which."""
    def mem(*args):
        return run_mem("-w", workspace, *args, check=True).stdout.decode()

    mem("loop", "append", "--role", "user", "--text", "one")
    assert "[S1] user: one" in mem("believed")  # one loop: no name needed
    mem("loop", "append", "--loop", "side", "--role", "user", "--text", "two")
    mem("layer", "add", "decisions", "memory/decisions.md")
    mem("entry", "add", "decisions", "[DECISION] ship on Tuesday")
    shown = mem("believed")
    assert "[S1] main user: one\n[S2] side user: two\n" in shown
    assert "\nlocal memory/decisions.md:\n" in shown and "shared" not in shown


def test_a_local_layer_never_leaves_even_when_the_hub_gets_a_layer_of_its_name(tmp_path):
    """Regression: the push went by layer name, so a local layer made every push exit 1 ("held back": it is in no
    contract), and once the hub's contract gained a layer of that name, the next push shipped every private entry
    to the team; a pull then mixed the team's entries into the agent's own file."""
    from teamhub import CONTRACT, Team

    team = Team(tmp_path, agents=("alice", "bob"))
    try:
        team.mem("alice", "layer", "add", "notes", "memory/notes.md", check=True)
        team.mem("alice", "entry", "add", "notes", "[FACT] the CFO is leaving", check=True)
        pushed = team.mem("alice", "push")
        assert pushed.returncode == 0 and b"pushed 0 events" in pushed.stdout and not pushed.stderr, pushed
        status = team.mem("alice", "status", "--json", check=True).stdout
        assert json.loads(status)["remotes"][0]["unpushed"] == 0 and b"notes" not in status
        team.apply(CONTRACT + '\n[layers.notes]\npath = "team/notes.md"\nformat = "entries"\nproducers = ["*"]\n'
                   'consumers = ["*"]\n')
        assert b"pushed 0 events" in team.mem("alice", "push", check=True).stdout
        team.mem("bob", "pull", check=True)
        team.mem("bob", "entry", "add", "notes", "[FACT] a team note", check=True)
        assert b"pushed 1 event" in team.mem("bob", "push", check=True).stdout
        pulled = team.mem("alice", "pull", check=True)
        assert b"layer 'notes' is this agent's local layer: the hub's layer of that name is not taken here" \
            in pulled.stderr
        assert "CFO" not in (tmp_path / "bob/team/notes.md").read_text()
        assert "team note" not in (tmp_path / "alice/memory/notes.md").read_text()
        assert not (tmp_path / "alice/team").exists()
        for stored in tmp_path.glob("hub.db*"):
            assert b"CFO" not in stored.read_bytes(), stored
    finally:
        team.stop()


def test_a_local_layer_is_refused_a_name_whose_events_other_agents_wrote(tmp_path):
    """Regression (nc33a): after the hub dropped `drafts`, `mem layer add drafts notes/ --format pages` took in the
    team's pages of it (written into the agent's own folder, its next write an update over a teammate's version).
    A local layer of a name the log holds other agents' events of is refused; nothing is recorded."""
    from teamhub import CONTRACT, Team

    team = Team(tmp_path, agents=("alice", "writer"))
    try:
        team.mem("writer", "page", "write", "plan", "--layer", "drafts", "--file", team.page("p", "Plan", "by bob"),
                 check=True)
        team.mem("writer", "push", check=True)
        team.mem("alice", "pull", check=True)
        team.apply(CONTRACT.split("[layers.drafts]")[0])
        team.mem("alice", "pull", check=True)
        rows = log_rows(tmp_path / "alice")
        refused = team.mem("alice", "layer", "add", "drafts", "notes/", "--format", "pages")
        assert refused.returncode == 1 and refused.stderr.decode() == (
            "error: the log holds other agents' events of layer 'drafts' (writer's among them), from a hub that shares or "
            "shared it: a local layer of that name would take them in; choose another name\n"), refused
        assert log_rows(tmp_path / "alice") == rows and not (tmp_path / "alice/notes").exists()
        team.mem("alice", "layer", "add", "mydrafts", "notes/", "--format", "pages", check=True)
    finally:
        team.stop()


def test_entries_written_to_a_local_layer_stay_local_after_its_declaration_is_redacted(tmp_path):
    """Regression (nc13b): `mem redact` of the layer's `config.set layers.journal` un-declared it; once the hub's
    contract had a layer of that name, status said "1 to push" and the push sent the private entry to every
    consumer. What is written to the hub's layer after the redaction is pushed as any producer's."""
    from teamhub import CONTRACT, Team

    team = Team(tmp_path, agents=("carol", "bob"))
    try:
        team.mem("carol", "layer", "add", "journal", "memory/journal.md", check=True)
        team.mem("carol", "entry", "add", "journal", "[FACT] 2026-11-06: CAROL PRIVATE entry", check=True)
        team.apply(CONTRACT + '\n[layers.journal]\npath = "team/journal.md"\nformat = "entries"\n'
                   'producers = ["carol"]\nconsumers = ["bob", "carol"]\n')
        team.mem("carol", "pull", check=True)
        team.mem("carol", "redact", "1", "--reason", "undeclare the local layer", "--yes", check=True)
        status = json.loads(team.mem("carol", "status", "--json", check=True).stdout)
        assert status["remotes"][0]["unpushed"] == 0, status["remotes"]
        assert b"pushed 0 events" in team.mem("carol", "push", check=True).stdout
        team.mem("carol", "entry", "add", "journal", "[FACT] 2026-11-07: for the team", check=True)
        assert b"pushed 1 event" in team.mem("carol", "push", check=True).stdout
        team.mem("bob", "pull", check=True)
        text = (tmp_path / "bob/team/journal.md").read_text()
        assert "for the team" in text and "PRIVATE" not in text, text
        for stored in tmp_path.glob("hub.db*"):
            assert b"PRIVATE" not in stored.read_bytes(), stored
    finally:
        team.stop()


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_STEPS = st.lists(st.one_of(st.tuples(st.just("add"), st.integers(0, 3)), st.tuples(st.just("older"), st.integers(0, 9)),
                            st.tuples(st.just("reverse"), st.integers(0, 30))), min_size=1, max_size=14)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_STEPS)
def test_an_entries_file_kept_rendered_and_grown_reads_as_one_rendered_whole(tmp_path_factory, steps):
    """The current entries file is kept rendered and grown by the entries folded since when they add lines at its
    end (shared.SharedViews.render_entries): after each step (entries added a few at a time, one arriving with an
    older id as from a teammate, a reversal) the file on disk and the render are what rendering it whole gives."""
    from eventstore.envelope import new_event
    from eventstore.ids import uuid7_layout, uuid_text
    from eventstore.kinds import EntryAppend
    from projections.memory import Memory
    from projections.shared import SharedViews

    with Memory.init(tmp_path_factory.mktemp("ws"), "agent") as memory:
        memory.declare_layer("notes", "memory/notes.md")
        ids = []
        for number, (step, value) in enumerate(steps):
            if step == "add":
                for n in range(value + 1):
                    ids.append(memory.entry_add("notes", f"[FACT] 2026-11-01: fact {number}.{n}").id)
            elif step == "older":  # a teammate's, written earlier: its id sorts before the last
                body = EntryAppend(type="FACT", date="2026-11-02", content=f"older {number}")
                older = uuid_text(uuid7_layout(1_700_000_000_000 + value, 0, number))  # uuid7 would follow the last
                event = new_event(body, agent="other", layer="notes", ts=1_700_000_000_000 + value, id=older)
                ids.append(memory.append(event, touches=["memory/notes.md"]).id)
            elif ids:
                memory.entry_add("notes", f"[LESSON] 2026-11-03: undo {number}", reverses=ids[value % len(ids)])
            whole = SharedViews(memory.views.db)._render_entries("notes", memory.views.checkpoint())
            assert memory.views.shared.render_entries("notes", memory.views.checkpoint()) == whole
            file = memory.root / "memory/notes.md"
            assert (file.read_text() if file.exists() else "# notes\n\n") == whole


def test_an_entry_id_search_cites_is_resolved_by_cite_and_checked_by_lint(workspace, tmp_path):
    """Regression: `mem search` cites an entry by its id, the layer's file shows its first 18 characters, and
    `mem cite` (CLI and MCP) refused both as "not a citation"; `mem lint --check citations` never read them."""
    from test_mcp import call, run_stdio

    run_mem("-w", workspace, "layer", "add", "decisions", "memory/decisions.md", check=True)
    run_mem("-w", workspace, "entry", "add", "decisions", "[DECISION] 2026-12-02: No deploys on Fridays", check=True)
    [hit] = json.loads(run_mem("-w", workspace, "search", "fridays", "--json", check=True).stdout)
    id = hit["citation"]
    for ref in (id, id[:18]):
        shown = run_mem("-w", workspace, "cite", ref, check=True).stdout.decode()
        assert shown == (f"{id} in memory/decisions.md (layer decisions, seq 2, by alice)\n"
                         "[DECISION] 2026-12-02: No deploys on Fridays\n")
    cited = json.loads(run_mem("-w", workspace, "cite", id[:18], "--json", check=True).stdout)
    assert (cited["kind"], cited["resolved"], cited["path"], cited["layer"], cited["entry"]["id"]) == \
        ("entry", True, "memory/decisions.md", "decisions", id)
    ghost = "01a2352d-5980-7d6f-9402-79e89bf7ea58"
    missing = run_mem("-w", workspace, "cite", ghost)
    assert missing.returncode == 1 and missing.stderr.decode() == (
        f"error: there is no entry {ghost} in any layer of this workspace (`mem entry list LAYER` lists them)\n")
    assert json.loads(run_mem("-w", workspace, "cite", id, "--seq", "1", "--json").stdout)["resolved"] is False

    note = tmp_path / "n.md"
    note.write_text(f"---\ntype: note\ndescription: d\n---\n# N\n\nSee {id} and {ghost[:18]}.\n")
    run_mem("-w", workspace, "page", "write", "n", "--file", note, check=True)
    linted = run_mem("-w", workspace, "lint", "--check", "citations").stdout.decode()
    assert f"[citations] mind/n.md: {ghost[:18]} names no entry of any layer of this workspace" in linted
    assert id not in linted

    async def session_body(session):
        return await call(session, "cite", citation=id[:18])

    is_error, text = run_stdio(workspace, session_body)
    assert not is_error and json.loads(text)["entry"]["id"] == id


def test_a_layer_whose_declaration_is_redacted_is_found_by_no_view(workspace):
    """Regression: after `mem redact` of a local layer's `config.set layers.d`, `mem entry list d` and `mem show`
    knew no layer `d`, at any moment, yet `mem search` still found its entries, under a path that is no file."""
    run_mem("-w", workspace, "layer", "add", "d", "memory/d.md", check=True)
    run_mem("-w", workspace, "entry", "add", "d", "[DECISION] 2026-12-02: the walrus rule", check=True)
    [hit] = json.loads(run_mem("-w", workspace, "search", "walrus", "--json", check=True).stdout)
    assert hit["path"] == "memory/d.md"
    run_mem("-w", workspace, "redact", "1", "--reason", "wrong layer", check=True)
    for moment in ((), ("--seq", "2")):
        assert json.loads(run_mem("-w", workspace, "search", "walrus", "--json", *moment, check=True).stdout) == []
        assert run_mem("-w", workspace, "entry", "list", "d", *moment).returncode == 1
        assert run_mem("-w", workspace, "show", "memory/d.md", *moment).returncode == 1
    assert json.loads(run_mem("-w", workspace, "cite", hit["citation"], "--json").stdout)["resolved"] is False


_CONTENT = st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp")), min_size=1, max_size=30).filter(str.strip)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(st.tuples(st.sampled_from(("FACT", "LESSON", "DECISION")), _CONTENT, st.integers(0, 10**6)),
                        min_size=1, max_size=12))
def test_an_entries_file_rendered_apart_by_sqlite_is_the_file_python_renders(tmp_path_factory, entries):
    """A rebuild renders a large entries file in a thread, by SQL alone (shared.entries_text_apart), while it writes
    the other files: the same text as `_render_entries` (ids in any order, any text a line may hold); no text when an
    entry is reversed (those lines are Python's) or when the views are not at the seq asked for."""
    from eventstore.envelope import new_event
    from eventstore.ids import uuid7_layout, uuid_text
    from eventstore.kinds import EntryAppend
    from projections.memory import Memory
    from projections.shared import SharedViews, entries_text_apart
    from projections.views import Views

    with Memory.init(tmp_path_factory.mktemp("ws"), "agent") as memory:
        memory.declare_layer("notes", "memory/notes.md")
        for number, (type, content, ms) in enumerate(entries):
            body = EntryAppend(type=type, date="2026-11-02", content=content)
            id = uuid_text(uuid7_layout(1_700_000_000_000 + ms, 0, number))
            memory.append(new_event(body, agent="other", layer="notes", ts=1_700_000_000_000 + ms, id=id),
                          touches=["memory/notes.md"])
        views, checkpoint = memory.views, memory.views.checkpoint()
        whole = SharedViews(views.db)._render_entries("notes", checkpoint)
        assert entries_text_apart(views.path, "notes", checkpoint).text == whole
        assert entries_text_apart(views.path, "notes", checkpoint - 1) is None
        assert views.entries_ahead(["memory/notes.md"]) == {}  # kept rendered by this process: grown, not rendered
        fresh = Views(views.path, contract=memory.hub_contract(), agent=memory.config.agent)
        ahead = fresh.entries_ahead(["memory/notes.md", "mind.md"])
        assert list(ahead) == ["memory/notes.md"] and ahead["memory/notes.md"].result().text == whole
        fresh.close()
        assert (memory.root / "memory/notes.md").read_text() == whole
        memory.entry_add("notes", "[LESSON] 2026-11-03: undo", reverses=memory.views.shared.entries("notes", 1 << 62)[0].id)
        assert entries_text_apart(views.path, "notes", views.checkpoint()) is None


def test_status_after_a_local_layers_declaration_was_redacted_names_the_way_back(workspace):
    """Regression (nc19b): with the declaration of a local layer redacted, `mem status` said only that a hub's contract
    would place the layer's file (`mem pull`, `mem remote add`), in a workspace that never had a hub."""
    run_mem("-w", workspace, "layer", "add", "decisions", "memory/decisions.md", check=True)
    run_mem("-w", workspace, "entry", "add", "decisions", "[DECISION] Deploy on Tuesdays", check=True)
    events = json.loads(run_mem("-w", workspace, "log", "--json", check=True).stdout)
    declared = next(e["seq"] for e in events if e["body"]["kind"] == "config.set")
    run_mem("-w", workspace, "redact", str(declared), "--reason", "undeclare", check=True)
    status = run_mem("-w", workspace, "status").stdout.decode()
    assert "not placed:" in status and "`mem layer add NAME PATH` declares one of them a local layer again" in status


def test_a_layers_files_carry_their_own_times_now_and_as_of_a_seq(workspace):
    """Regression (nc19b): a local layer's file got mind/log.md's times in `mem file list` (and `--seq`) and in an ADF
    export, which change with every page write; its entries' and its page's versions' own times, and a layer page is
    deletable (protection none), as a page of the mind is."""
    w = ("-w", workspace)
    run_mem(*w, "layer", "add", "decisions", "memory/decisions.md", check=True)
    run_mem(*w, "layer", "add", "notes", "notes/", "--format", "pages", check=True)
    run_mem(*w, "entry", "add", "decisions", "[DECISION] 2026-11-29: one", check=True)
    run_mem(*w, "page", "write", "x", "--layer", "notes", "-f", "-", input=PAGE, check=True)
    run_mem(*w, "entry", "add", "decisions", "[DECISION] 2026-11-30: two", check=True)
    run_mem(*w, "page", "write", "later", "-f", "-", input=PAGE, check=True)
    events = json.loads(run_mem(*w, "log", "--json", check=True).stdout)
    times = {e["seq"]: format_instant(e["ts"]) for e in events}

    def files(*args):
        listed = json.loads(run_mem(*w, "file", "list", "--json", *args, check=True).stdout)
        return {f["path"]: (f["protection"], f["updated_at"]) for f in listed}

    now = files()
    assert now["memory/decisions.md"] == ("no_delete", times[5]) and now["notes/x.md"] == ("none", times[4])
    assert now["mind/log.md"][1] == times[6]
    assert files("--seq", "3")["memory/decisions.md"] == ("no_delete", times[3])
    exported = workspace / "out.adf"
    run_mem(*w, "export", "adf", exported, check=True)
    with sqlite3.connect(exported) as db:
        rows = dict(db.execute("SELECT path, created_at || ' ' || updated_at FROM adf_files"))
    assert rows["memory/decisions.md"] == f"{times[3]} {times[5]}" and rows["notes/x.md"] == f"{times[4]} {times[4]}"


def test_an_entry_whose_id_reads_past_year_9999_breaks_no_file_listing(workspace):
    """Regression (nc21b): a layer file's times are read from its entries' ids (UUIDv7s), and an id is any UUID a
    writer chose: one reading past year 9999 made every command that listed or exported the files fail with a
    traceback ("year 10889 is out of range"). Such an id is left out of the times; the entry is still there."""
    from eventstore.envelope import new_event
    from eventstore.kinds import EntryAppend
    from projections.memory import Memory

    w = ("-w", workspace)
    run_mem(*w, "layer", "add", "decisions", "memory/decisions.md", check=True)
    run_mem(*w, "entry", "add", "decisions", "[DECISION] 2026-11-29: one", check=True)
    with Memory.open(workspace) as memory:
        memory.log.append([new_event(EntryAppend(type="DECISION", date="2026-11-30", content="far"), agent="alice",
                                     layer="decisions", id="ffffffff-ffff-7fff-bfff-ffffffffffff")])
    listed = json.loads(run_mem(*w, "file", "list", "--json", check=True).stdout)
    times = {f["path"]: f["updated_at"] for f in listed}
    first = json.loads(run_mem(*w, "log", "--json", check=True).stdout)[1]
    assert times["memory/decisions.md"] == format_instant(first["ts"])
    assert "far" in run_mem(*w, "show", "memory/decisions.md", check=True).stdout.decode()
    run_mem(*w, "export", "adf", workspace / "out.adf", check=True)


def test_a_file_named_as_a_layers_file_but_for_letter_case_is_refused(workspace):
    """Regression (nc24a): `mem file write memory/DEC.md` beside the layer's memory/dec.md (one file on macOS and
    Windows), `Notes/a.md` in the folder of a pages layer at notes/, and a file under the layer's file were taken:
    the letter-case rule of the agent's own files left the layers' out. Each is refused, the log untouched."""
    run_mem("-w", workspace, "layer", "add", "dec", "memory/dec.md", check=True)
    run_mem("-w", workspace, "layer", "add", "notes", "notes/", "--format", "pages", check=True)
    before = log_rows(workspace)
    for path, layer, held in (("memory/DEC.md", "dec", "memory/dec.md"), ("Notes/a.md", "notes", "notes/"),
                              ("memory/dec.md/x.md", "dec", "memory/dec.md")):
        refused = run_mem("-w", workspace, "file", "write", path, "--file", "-", input=b"x\n")
        assert refused.returncode == 1 and refused.stderr.decode() == (
            f"error: {path} cannot be written: layer {layer!r} has {held} there, the same name but for letter case "
            "or Unicode normalization, or one inside the other\n")
    assert log_rows(workspace) == before
    run_mem("-w", workspace, "file", "write", "memory/other.md", "--file", "-", input=b"x\n", check=True)


def while_another_holds_the_lock(root, first, second):
    """Runs `second(memory)` in a thread on its own Memory while `first(memory)`, on another, holds the workspace's
    lock (two processes at once): `second` starts, and reads whatever it reads before it waits for the lock, before
    `first` writes. Returns what `second` returned or raised."""
    import threading
    import time

    from projections.memory import Memory

    one, two = Memory.open(root), Memory.open(root)
    outcome = {}

    def run():
        try:
            outcome["done"] = second(two)
        except Exception as exc:  # noqa: BLE001 - the refusal is what the caller checks
            outcome["refused"] = exc

    try:
        with one.lock():
            thread = threading.Thread(target=run)
            thread.start()
            time.sleep(0.5)
            first(one)
        thread.join(30)
    finally:
        one.close()
        two.close()
    return outcome


def test_two_layers_declared_at_once_on_one_file_are_refused_one_of_them(workspace):
    """Regression (nc34a): `mem layer add` checked the new layer's path against the layers as this process had read
    them, before it took the lock: two at once both passed, and one layer's entries showed in no file."""
    outcome = while_another_holds_the_lock(workspace, lambda m: m.declare_layer("e1", "memory/same.md"),
                                           lambda m: m.declare_layer("e2", "memory/same.md"))
    assert str(outcome.get("refused")) == "memory/same.md overlaps layer 'e1' (memory/same.md)", outcome
    assert [line.split()[0] for line in run_mem("layer", "list", "-w", workspace, check=True).stdout.decode()
            .splitlines() if "same.md" in line] == ["e1"]


def test_two_writes_at_once_of_a_layer_page_in_one_workspace_chain_not_fork(workspace):
    """Regression (nc34a): a write of a layer page named as its parent the version its file showed, read before the
    lock: two writes at once in one workspace both named the version before them, and the page was in conflict with
    itself (no `--if-version` for layer pages to guard it). The second now builds on the first."""
    run_mem("layer", "add", "notes", "notes/", "--format", "pages", "-w", workspace, check=True)
    run_mem("page", "write", "y", "--layer", "notes", "--file", "-", "-w", workspace, input=PAGE, check=True)
    outcome = while_another_holds_the_lock(
        workspace, lambda m: m.shared_page_write("notes", "y", PAGE.replace(b"Staging", b"First")),
        lambda m: m.shared_page_write("notes", "y", PAGE.replace(b"Staging", b"Second")))
    assert "done" in outcome, outcome
    assert run_mem("conflicts", "-w", workspace).stdout.decode() == "no conflicts\n"
    assert "Second" in (workspace / "notes/y.md").read_text()
