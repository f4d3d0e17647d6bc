"""`mem search`: what is found, what is not, now and as of past moments; the index is a view."""

import json

import pytest

from conftest import log_rows, run_mem

from eventstore.errors import InvalidInput
from projections import replay as replaying
from projections import search

DAY = "2026-11-30"


def page(title: str, body: str, **fields) -> bytes:
    extra = "".join(f"{k}: {json.dumps(v) if isinstance(v, str) and ':' in v else v}\n" for k, v in fields.items())
    return f"---\ntype: procedure\n{extra}---\n# {title}\n\n{body}\n".encode()


def cites(memory, query, **options):
    return [h.citation for h in search.search(memory.views, query, day=DAY, **options)]


def test_finds_pages_loop_files_and_marks_the_match(memory):
    memory.write_page("deploy", page("Deploy procedure", "Staging first, then the canary.",
                                     description="staging first"))
    seq = memory.loop_append("user", [{"type": "text", "text": "The canary went red at noon."}]).seq
    memory.file_write("notes/today.md", b"Check the canary dashboard.")
    memory.file_write("blob.bin", b"\x00\x01canary\xff")
    hits = search.search(memory.views, "canary", day=DAY)
    assert {h.citation for h in hits} == {"adf-file://mind/deploy.md", f"[S{seq}]", "adf-file://notes/today.md"}
    by_kind = {h.kind: h for h in hits}
    assert "**canary**" in by_kind["page"].snippet and by_kind["page"].path == "mind/deploy.md"
    assert by_kind["loop"].path == "loop main" and by_kind["file"].path == "notes/today.md"
    assert cites(memory, "canary", kinds=["loop"]) == [f"[S{seq}]"]
    assert cites(memory, "nonexistentword") == []


def test_a_word_only_in_a_later_version_is_not_found_earlier(memory):
    first = memory.write_page("deploy", page("Deploy", "Staging first.")).seq
    second = memory.write_page("deploy", page("Deploy", "Canary first.")).seq
    assert cites(memory, "canary") == ["adf-file://mind/deploy.md"]
    assert cites(memory, "canary", as_of=first) == []
    assert cites(memory, "staging") == []  # replaced: the current version no longer says it
    assert cites(memory, "staging", as_of=first) == ["adf-file://mind/deploy.md"]
    assert [h.seq for h in search.search(memory.views, "deploy", as_of=second, day=DAY)] == [second]


def test_deleted_and_renamed_pages_are_found_only_while_they_existed(memory):
    ingest = memory.write_page("runbook", page("Runbook", "Rotate the keys monthly.")).seq
    renamed = memory.rename_page("runbook", "keys").seq
    deleted = memory.delete_page("keys").seq
    assert cites(memory, "rotate") == []
    assert cites(memory, "rotate", as_of=deleted) == []
    assert cites(memory, "rotate", as_of=renamed) == ["adf-file://mind/keys.md"]
    assert cites(memory, "rotate", as_of=ingest) == ["adf-file://mind/runbook.md"]


def test_a_cleared_loop_message_is_labelled_cleared_and_one_no_audit_kept_says_the_loop_audit_was_off(memory):
    def found(text):
        [hit] = search.search(memory.views, text, kinds=["loop"], day=DAY, limit=1)
        return hit.path, hit.flags

    memory.loop_append("user", [{"type": "text", "text": "kestrel audited"}])
    memory.loop_clear()
    memory.config_set("audit.loop", False)
    memory.loop_append("user", [{"type": "text", "text": "kestrel unaudited"}])
    memory.loop_clear()
    memory.loop_append("user", [{"type": "text", "text": "osprey unaudited"}])
    memory.loop_compact("Summary.", preserve=0)
    assert found("kestrel audited") == ("loop main (cleared: `mem audit read`)", ["cleared"])
    assert found("kestrel unaudited") == ("loop main (cleared, loop audit off: `mem audit read`)", ["cleared"])
    assert found("osprey") == ("loop main (compacted, loop audit off: `mem audit read`)", ["compacted"])


def test_compacted_loop_messages_stay_findable_and_say_where(memory):
    seq = memory.loop_append("user", [{"type": "text", "text": "Prod needs my ack."}]).seq
    memory.loop_append("assistant", [{"type": "text", "text": "Understood."}])
    compact = memory.loop_compact("Owner signs off releases.", preserve=0).event.seq
    [hit] = search.search(memory.views, "prod needs", kinds=["loop"], day=DAY, limit=1)
    assert hit.citation == f"[S{seq}]" and "compacted" in hit.flags
    assert [h.citation for h in search.search(memory.views, "owner", kinds=["loop"], day=DAY)] == [f"[S{compact}]"]
    [before] = search.search(memory.views, "prod needs", kinds=["loop"], as_of=seq, day=DAY, limit=1)
    assert before.flags == [] and before.path == "loop main"


def test_file_versions_and_deletes(memory):
    first = memory.file_write("notes/a.md", b"alpha").seq
    memory.file_write("notes/a.md", b"beta")
    gone = memory.file_delete("notes/a.md").seq
    assert cites(memory, "alpha") == [] and cites(memory, "beta") == []
    assert cites(memory, "alpha", as_of=first) == ["adf-file://notes/a.md"]
    assert cites(memory, "beta", as_of=gone - 1) == ["adf-file://notes/a.md"]


def test_query_syntax_is_just_text(memory):
    memory.write_page("deploy", page("Deploy", "NOT a drill: prod-ready."))
    assert cites(memory, 'NOT "prod-ready') == ["adf-file://mind/deploy.md"]
    with pytest.raises(InvalidInput, match="the query is empty"):
        cites(memory, " ")


def test_a_nul_in_a_query_parts_words_as_the_index_does(memory):
    """Regression (nc17b): a NUL in a query (an MCP tool's argument) ended FTS5's quoted string: sqlite3's
    `unterminated string` instead of an answer."""
    memory.write_page("deploy", page("Deploy", "Prod ready on Friday."))
    assert cites(memory, "prod\0friday") == ["adf-file://mind/deploy.md"]


def test_the_operators_hint_reads_a_long_word_in_linear_time():
    """Regression (nc17b): the `prefix*` pattern of the "no matches" hint tried each start inside a word, so a
    query of one 100,000-letter word held an MCP server (every client's calls) for 28 s; a million letters, hours."""
    import time

    started = time.perf_counter()
    assert search.operators_in("x" * 1_000_000) == [] and search.operators_in("own* a*b") == ["own*", "a*"]
    assert time.perf_counter() - started < 10


def test_a_query_of_no_word_is_refused_not_answered_no_matches(memory):
    """The tokenizer keeps letters and digits only: `🚀` or `--` searched nothing and said "no matches", as if the
    memory held none. A query with a word among them searches that word."""
    memory.write_page("launch", page("Launch", "Shipped 🚀 on Tuesday -- a first."))
    for query in ("🚀", "✅ 🚀", "--", "“”"):
        with pytest.raises(InvalidInput, match=f"the query {query!r} holds no word to search for"):
            cites(memory, query)
    assert cites(memory, "shipped 🚀") == ["adf-file://mind/launch.md"]


def test_the_index_is_a_view_replay_rebuilds_it_identically(memory):
    for i in range(30):
        memory.write_page(f"p{i % 7}", page(f"Page {i % 7}", f"version {i} word{i}"))
    memory.rename_page("p1", "moved")
    memory.delete_page("p2")
    memory.loop_append("user", [{"type": "text", "text": "word5 in the loop"}])
    before = memory.views.dump()["search_docs"]
    hits = cites(memory, "word29")
    assert replaying.check(memory).same
    replaying.replay(memory)
    assert memory.views.dump()["search_docs"] == before
    assert hits == cites(memory, "word29") == ["adf-file://mind/moved.md"]  # p1, renamed
    assert cites(memory, "word28") == ["adf-file://mind/p0.md"] and cites(memory, "word21") == []
    assert cites(memory, "word23") == []  # p2, deleted

    assert cites(memory, "word3", as_of=5) == ["adf-file://mind/p3.md"]


def test_the_all_versions_index_is_written_by_the_fold_and_rebuilt_identically(memory):
    first = memory.write_page("deploy", page("Deploy", "Staging first.")).seq
    second = memory.write_page("deploy", page("Deploy", "Canary first.")).seq
    renamed = memory.rename_page("deploy", "release").seq
    memory.file_write("notes.txt", b"canary notes")
    rewritten = memory.file_write("notes.txt", b"staging notes").seq
    deleted = memory.file_delete("notes.txt").seq
    rows = memory.views.db.execute("SELECT id, kind, key, until, since FROM search_history ORDER BY id").fetchall()
    assert rows == [(first, "page", "mind/deploy", second, first), (second, "page", "mind/deploy", renamed, second),
                    (renamed, "page", "mind/release", None, renamed),
                    (rewritten - 1, "file", "notes.txt", rewritten, rewritten - 1),
                    (rewritten, "file", "notes.txt", deleted, rewritten)]  # before any search of the past
    history = memory.views.dump()["search_history"]
    assert replaying.check(memory).same
    replaying.replay(memory)
    assert memory.views.dump()["search_history"] == history
    assert cites(memory, "staging", as_of=first) == ["adf-file://mind/deploy.md"]
    assert cites(memory, "staging", as_of=second) == []
    assert cites(memory, "staging", as_of=rewritten) == ["adf-file://notes.txt"]
    assert cites(memory, "staging", as_of=deleted) == []


def test_mem_search_cli(workspace, tmp_path):
    doc = tmp_path / "d.md"
    doc.write_bytes(page("Deploy procedure", "Prod needs the owner ack."))
    run_mem("page", "write", "deploy", "--file", doc, cwd=workspace, check=True)
    out = run_mem("search", "owner", cwd=workspace, check=True).stdout.decode()
    assert "cite adf-file://mind/deploy.md" in out and "**owner**" in out
    hits = json.loads(run_mem("search", "owner", "--json", cwd=workspace, check=True).stdout)
    assert hits[0]["citation"] == "adf-file://mind/deploy.md" and hits[0]["kind"] == "page"
    assert json.loads(run_mem("search", "owner", "--seq", "1", "--json", cwd=workspace, check=True).stdout)
    common = json.loads(run_mem("search", "ack", "--json", cwd=workspace, check=True).stdout)  # in every document
    assert common and all(hit["score"] != 0 for hit in common), common
    before = log_rows(workspace)
    bad = run_mem("search", "owner", "--seq", "0", cwd=workspace)
    assert bad.returncode == 1 and b"error: seq 0 is before the first event" in bad.stderr
    bad = run_mem("search", "owner", "--kind", "nope", cwd=workspace)
    assert bad.returncode == 2 and b"error: --kind" in bad.stderr and b"Traceback" not in bad.stderr
    bad = run_mem("search", "owner", "--at", "yesterday", cwd=workspace)
    assert bad.returncode == 1 and bad.stderr.startswith(b"error: ")
    bad = run_mem("search", "owner", "--agent", "nobody", cwd=workspace)  # said "no matches"
    assert bad.returncode == 1 and bad.stderr.decode().startswith("error: no agent 'nobody' has written anything here")
    bad = run_mem("search", "owner", "--agent", "", cwd=workspace)  # searched every agent's (nc17b)
    assert bad.returncode == 1 and bad.stderr.decode() == "error: an agent filter needs an agent's name\n"
    bad = run_mem("search", "owner", "--type", "procedur", cwd=workspace)
    assert bad.returncode == 1 and bad.stderr.decode().startswith(
        "error: nothing here has ever had the type 'procedur' (the types of pages, entries, loop roles and files here: ")
    assert run_mem("search", "nosuchword", "--type", "procedure", cwd=workspace, check=True).stdout == b"no matches\n"
    for query, told in (("owner OR nobody", "OR is"), ("owner -nobody", "-nobody is"), ("own*", "own* is"),
                        ("NEAR(owner ack) NOT x", "NEAR(, NOT are")):  # said "no matches" alone: as if nothing held owner
        out = run_mem("search", query, cwd=workspace, check=True).stdout.decode()
        assert out.startswith(f"no matches ({told} searched as text, not as an operator: every word"), out
    for n in ("-1", "0"):  # 0 said "no matches", as if nothing matched
        bad = run_mem("search", "owner", "-n", n, cwd=workspace)
        assert bad.returncode == 1 and not bad.stdout
        assert bad.stderr.decode() == f"error: -n must be 1 or more (how many hits to show), not {n}\n"
    assert log_rows(workspace) == before


def test_filters_type_status_and_layer(memory):
    memory.write_page("a", page("Alpha", "shared word"))
    memory.write_page("b", b"---\ntype: lesson\nstatus: deprecated\n---\n# Beta\n\nshared word\n")
    memory.loop_append("assistant", [{"type": "text", "text": "shared word"}])
    assert cites(memory, "shared", types=["procedure"]) == ["adf-file://mind/a.md"]
    assert cites(memory, "shared", status="deprecated") == ["adf-file://mind/b.md"]
    assert cites(memory, "shared", types=["assistant"], layers=["loop"]) == ["[S3]"]
    assert cites(memory, "shared", layers=["agent"]) == []


def test_a_status_no_page_ever_had_is_refused_through_the_cli(workspace, tmp_path):
    doc = tmp_path / "d.md"
    doc.write_bytes(page("Deploy", "Prod needs the owner ack.", status="deprecated"))
    run_mem("page", "write", "deploy", "--file", doc, cwd=workspace, check=True)
    doc.write_bytes(page("Deploy", "Prod needs the owner ack.", status="current"))
    run_mem("page", "write", "deploy", "--file", doc, cwd=workspace, check=True)
    before = log_rows(workspace)
    bad = run_mem("search", "owner", "--status", "nosuch", cwd=workspace)
    assert bad.returncode == 1 and bad.stdout == b""
    assert bad.stderr.decode() == ("error: no page has ever had a status starting with 'nosuch' "
                                   "(the statuses pages have had here: current, deprecated)\n")
    bad = run_mem("search", "owner", "--status", " ", cwd=workspace)
    assert bad.returncode == 1 and bad.stderr.startswith(b"error: a status filter needs a word")
    for blank in ("", "  "):  # searched, it said "no matches", as if there were nothing to find
        bad = run_mem("search", blank, cwd=workspace)
        assert (bad.returncode, bad.stdout) == (1, b"")
        assert bad.stderr.decode() == "error: the query is empty: give at least one word to search for\n"
    assert log_rows(workspace) == before
    # a status some version had is a fair question at any moment, even when nothing has it now
    out = run_mem("search", "owner", "--status", "deprec", cwd=workspace, check=True).stdout.decode()
    assert out == "no matches\n"
    hits = json.loads(run_mem("search", "owner", "--status", "deprecated", "--seq", "1", "--json", cwd=workspace,
                              check=True).stdout)
    assert [h["status"] for h in hits] == ["deprecated"]
    helped = run_mem("search", "--help", cwd=workspace, env={"COLUMNS": "300"}).stdout
    assert b"A status no page ever had is refused" in b" ".join(helped.split())


def test_always_lines_are_found_while_they_are_in_mind_md_and_tell_the_event_that_added_them(memory, workspace):
    """Regression: search never looked at mind.md's `## Always` lines: `mem search tuesday` said "no matches" while
    the rule "Deploy only on Tuesdays" stood in the agent's own index. A hit is cited as mind.md (`mem cite` resolves
    it: `[S1]` did not, nc23a), its seq the event that added the line."""
    added = memory.always_add("Deploy only on Tuesdays after the freeze").seq
    memory.always_add("Cite sources for every claim")
    memory.write_page("deploy", page("Deploy procedure", "Deploy to staging first.", status="current"))
    removed = memory.always_remove(1).seq
    [hit] = search.search(memory.views, "tuesday", day=DAY, as_of=removed - 1)
    assert (hit.kind, hit.path, hit.citation, hit.seq, hit.layer) == ("always", "mind.md", "adf-file://mind.md", added,
                                                                      "mind")
    assert hit.snippet == "Deploy only on **Tuesdays** after the freeze"

    def found(query, **options):
        return [(h.kind, h.seq) for h in search.search(memory.views, query, day=DAY, **options)]

    assert found("tuesday", as_of=added - 1) == [] and found("tuesday") == []
    assert found("deploy", as_of=removed - 1) == [("page", removed - 1), ("always", added)]
    assert found("deploy", as_of=removed - 1, kinds=["always"]) == [("always", added)]
    for narrowed in ({"kinds": ["page"]}, {"types": ["procedure"]}, {"layers": ["loop"]}, {"status": "current"}):
        assert ("always", added) not in found("deploy", as_of=removed - 1, **narrowed), narrowed
    mine = {"agent": memory.config.agent, "self_agent": memory.config.agent}  # this agent's lines
    assert ("always", added) in found("deploy", as_of=removed - 1, layers=["mind"], **mine)
    memory.always_add("Deploy only on Tuesdays after the freeze")  # back again: the event that added it this time
    assert found("tuesday") == [("always", memory.views.checkpoint())]
    assert found("tuesday", as_of=removed - 1) == [("always", added)]
    out = run_mem("-w", workspace, "search", "cite", "--kind", "always", check=True).stdout.decode()
    assert out.startswith(" 1. Always — mind.md (always)\n    cite adf-file://mind.md\n"), out
    assert "- Cite sources for every claim" in run_mem("-w", workspace, "cite", "adf-file://mind.md",
                                                       check=True).stdout.decode()


def test_a_search_that_finds_always_lines_reads_no_more_than_their_history_since_each_was_added(memory):
    """Regression (nc23a): every search replayed the whole history of `## Always`, each version against the last: with
    3,000 edits any search took 4 s. Now the lines as of the moment are matched, and each hit's history is read back
    only to its addition."""
    for i in range(300):
        memory.always_add(f"rule number {i} about topic{i % 7}")
    statements = []
    memory.views.db.set_trace_callback(statements.append)
    try:
        assert search.search(memory.views, "nothingmatcheshere", day=DAY) == []
        hits = search.search(memory.views, "topic3", day=DAY, kinds=["always"], limit=2)
        assert len(hits) == 2 and all(h.seq == int(h.snippet.split()[2]) + 1 for h in hits), hits  # rule i: seq i + 1
    finally:
        memory.views.db.set_trace_callback(None)
    history = [s for s in statements if "always_versions" in s]
    assert len([s for s in history if "instr" in s]) == 2 and not any("ORDER BY seq\n" in s or s.rstrip().endswith(
        "ORDER BY seq") for s in history), history


def test_messages_archived_in_an_imported_adf_file_are_found(memory, tmp_path):
    from projections.adf_file import export_adf, import_adf
    from projections.memory import Memory

    seq = memory.loop_append("user", [{"type": "text", "text": "The migration needs the new column."}]).seq
    memory.loop_append("user", [{"type": "text", "text": "ok"}])
    memory.loop_compact("Summary.", preserve=1)
    export_adf(memory, tmp_path / "a.adf", memory.views.checkpoint())
    with Memory.init(tmp_path / "copy") as copy:
        import_adf(copy, tmp_path / "a.adf")
        [hit] = search.search(copy.views, "migration column", day=DAY)
        assert hit.citation == f"[S{seq}]" and "compacted" in hit.flags


def test_messages_archived_in_an_imported_adf_file_are_not_found_before_the_import(memory, tmp_path):
    from projections.adf_file import export_adf, import_adf
    from projections.memory import Memory

    seq = memory.loop_append("user", [{"type": "text", "text": "The migration needs the new column."}]).seq
    memory.loop_append("user", [{"type": "text", "text": "ok"}])
    memory.loop_compact("Summary.", preserve=1)
    export_adf(memory, tmp_path / "a.adf", memory.views.checkpoint())
    with Memory.init(tmp_path / "copy") as copy:
        import_adf(copy, tmp_path / "a.adf")
        copy.loop_append("user", [{"type": "text", "text": "later"}])  # the import is in the past now
        [imported] = [e.seq for e in copy.log.read(kinds=["audit.import"])]
        assert seq < imported  # the message keeps its seq, which the log had passed before the import
        assert cites(copy, "migration column", as_of=imported - 1) == []
        assert cites(copy, "migration column", as_of=seq) == []
        assert cites(copy, "migration column", as_of=imported) == [f"[S{seq}]"]
        assert cites(copy, "migration column") == [f"[S{seq}]"]


def test_every_message_archived_in_an_imported_adf_file_is_found_now_and_from_the_import_on(memory, tmp_path):
    """Regression: an archived message was indexed only when its seq was below its audit.import event's, and an
    import put its audit events at its first seqs: of 12 archived messages only the first few were ever found
    (of hermes.adf's 1,976, six). Every seq the file names now comes before the import's other events."""
    from projections.adf_file import export_adf, import_adf
    from projections.memory import Memory

    memory.write_page("deploy", page("Deploy", "Staging first."))
    seqs = [memory.loop_append("user", [{"type": "text", "text": f"zebra number {i}"}]).seq for i in range(12)]
    memory.loop_compact("Summary.", preserve=1)
    export_adf(memory, tmp_path / "a.adf", memory.views.checkpoint())
    with Memory.init(tmp_path / "copy") as copy:
        import_adf(copy, tmp_path / "a.adf")
        found = {f"[S{seq}]" for seq in seqs}
        assert set(cites(copy, "zebra", limit=100)) == found
        assert set(cites(copy, "zebra", limit=100, as_of=copy.log.head())) == found
        [imported] = [e.seq for e in copy.log.read(kinds=["audit.import"])]
        assert set(cites(copy, "zebra", limit=100, as_of=imported)) == found
        assert cites(copy, "zebra", limit=100, as_of=imported - 1) == [f"[S{seqs[-1]}]"]  # the live one


def test_an_imported_page_and_an_archived_message_never_share_a_search_row(tmp_path):
    """Regression: a search row's id is its seq, and an import gave its page the seq an archived message has:
    in the present the message took the row and the page was never found, in the past the other way round.
    Through the CLI, as the README's export and import are run."""
    ws = tmp_path / "m1"
    run_mem("init", "-w", ws, check=True)
    for text in ("first message", "second message", "third message"):
        run_mem("-w", ws, "loop", "append", "--role", "user", "--text", text, check=True)
    (tmp_path / "sum.txt").write_text("summary")
    run_mem("-w", ws, "loop", "compact", "--summary-file", tmp_path / "sum.txt", check=True)
    (tmp_path / "deploy.md").write_bytes(page("Deploy procedure", "Staging first, then the canary."))
    run_mem("-w", ws, "page", "write", "deploy", "--file", tmp_path / "deploy.md", check=True)
    run_mem("-w", ws, "export", "adf", tmp_path / "m1.adf", check=True)
    copy = tmp_path / "m2"
    run_mem("init", "-w", copy, check=True)
    run_mem("-w", copy, "import", "adf", tmp_path / "m1.adf", check=True)

    def found(*args):
        hits = json.loads(run_mem("-w", copy, "search", *args, "--json", check=True).stdout)
        return sorted(h["citation"] for h in hits)

    head = json.loads(run_mem("-w", copy, "log", "--json", check=True).stdout)[-1]["seq"]
    both = ["[S1]", "adf-file://mind/deploy.md"]
    assert found("first") == found("first", "--seq", str(head)) == both
    assert found("canary") == ["adf-file://mind/deploy.md"]
    run_mem("-w", copy, "replay", check=True)
    assert found("first") == found("first", "--seq", str(head)) == both


def test_views_made_when_the_history_index_was_a_cache_are_folded_again(memory):
    first = memory.write_page("deploy", page("Deploy", "Staging first.")).seq
    memory.write_page("deploy", page("Deploy", "Canary first."))
    db = memory.views.db
    db.execute("DROP TABLE search_history")
    db.execute("CREATE TABLE search_history (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, layer TEXT NOT NULL, "
               "key TEXT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL, type TEXT, status TEXT, stale_after TEXT, "
               "ref TEXT, reverses TEXT, agent TEXT)")
    memory.close()
    from projections.memory import Memory

    with Memory.open(memory.root) as again:
        assert cites(again, "staging", as_of=first) == ["adf-file://mind/deploy.md"]
        assert cites(again, "staging") == [] and cites(again, "canary", as_of=first) == []


def _shared_memory(memory):
    """The workspace with a shared `drafts` pages layer (a contract as if pulled from a hub), reopened."""
    from projections.memory import Memory

    (memory.root / ".mem" / "contract.json").write_text(json.dumps({"layers": {"drafts": {
        "path": "content/drafts/", "format": "pages", "producers": ["*"], "consumers": ["*"]}}}))
    memory.close()
    return Memory.open(memory.root)


def test_as_of_a_moment_replaced_shared_versions_do_not_crowd_out_the_rest(memory):
    """Each replaced version of a shared page was a match (ranked first: short, the word three times) that
    the search then dropped as no longer current, so past searches of a busy shared page found nothing."""
    from eventstore.envelope import new_event
    from eventstore.kinds import PageIngest, PageUpdate

    memory.write_page("notes", page("Notes", "the alpha plan, with many more words around it than the drafts have"))
    mem = _shared_memory(memory)
    try:
        parent = new_event(PageIngest(slug="plan", frontmatter={}, text="alpha alpha alpha"), agent="bob",
                           layer="drafts")
        events = [parent]
        for i in range(120):
            parent = new_event(PageUpdate(slug="plan", frontmatter={}, text=f"alpha alpha alpha {i}",
                                          parents=[parent.id]), agent="bob", layer="drafts")
            events.append(parent)
        mem.log.append(events)
        mem.write_page("later", page("Later", "unrelated"))
        mem.refresh()
        head = mem.log.head()
        then = cites(mem, "alpha", as_of=head - 1)
        assert then == cites(mem, "alpha") and sorted(then) == ["adf-file://content/drafts/plan.md",
                                                                  "adf-file://mind/notes.md"]
        first = cites(mem, "alpha", as_of=2, include_all=True)
        assert sorted(first) == ["adf-file://content/drafts/plan.md", "adf-file://mind/notes.md"]
    finally:
        mem.close()


def test_a_short_query_word_marks_only_itself_in_the_snippet(workspace):
    run_mem("loop", "append", "--role", "user", "--text", "Prod deploys need my ack, and a green canary first.",
            "-w", workspace, check=True)
    [hit] = json.loads(run_mem("search", "a", "--json", "-w", workspace, check=True).stdout)
    assert hit["snippet"] == "Prod deploys need my ack, and **a** green canary first."
    [hit] = json.loads(run_mem("search", "acks deploying", "--json", "-w", workspace, check=True).stdout)
    assert hit["snippet"] == "Prod **deploys** need my **ack**, and a green canary first."


def test_a_snippet_starts_and_ends_on_whole_words():
    for pad in range(8):  # wherever the window falls
        text = "x" * pad + " staging first, prod needs owner ack" * 3 + " and a green canary" + " then ship it" * 20
        cut = search.snippet(text, search._stems("canary"))
        assert cut.startswith("…") and cut.endswith("…") and "**canary**" in cut, cut
        words = cut[1:-1].replace("**", "").split(" ")
        assert words[0] in text.split(" ") and words[-1] in text.split(" "), cut


# --- searches of the past against a model of what was alive (hypothesis) ------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

WORDS = ("alpha", "bravo", "charlie", "delta")
_OPS = st.one_of(
    st.tuples(st.just("write"), st.sampled_from("abc"), st.sets(st.sampled_from(WORDS))),
    st.tuples(st.just("delete"), st.sampled_from("abc")),
    st.tuples(st.just("rename"), st.sampled_from("abc"), st.sampled_from("abc")),
    st.tuples(st.just("file"), st.sampled_from(["f.md", "g.txt"]), st.sets(st.sampled_from(WORDS))),
    st.tuples(st.just("unfile"), st.sampled_from(["f.md", "g.txt"])),
    st.tuples(st.just("pad"), st.integers(1, 40)),  # events that index nothing: lifetimes across buckets
)


def _indexed(db) -> list[int]:
    """The rowids search_history_fts holds (a table without column sizes is not scanned: its vocabulary is)."""
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.history_terms USING fts5vocab(main, search_history_fts, "
               "instance)")
    return [doc for (doc,) in db.execute("SELECT DISTINCT doc FROM temp.history_terms ORDER BY doc")]


def _events(ops, alive: dict, heads: dict):
    """The events of `ops` (those that apply), each with what is alive after it: {citation: words}."""
    from eventstore.envelope import new_event
    from eventstore.kinds import AlwaysAdd, FileDelete, FileWrite, PageDelete, PageIngest, PageRename, PageUpdate

    out = []
    for op in ops:
        made = []
        if op[0] == "write":
            _, slug, words = op
            text = " ".join(sorted(words)) or "nothing"
            head = heads.get(slug)
            made.append(new_event(PageUpdate(slug=slug, frontmatter={"type": "note"}, text=text, parents=[head])
                                  if head else PageIngest(slug=slug, frontmatter={"type": "note"}, text=text),
                                  agent="me", layer="mind"))
            heads[slug] = made[-1].id
            alive[f"adf-file://mind/{slug}.md"] = set(words)
        elif op[0] == "delete" and op[1] in heads:
            made.append(new_event(PageDelete(slug=op[1], parents=[heads.pop(op[1])]), agent="me", layer="mind"))
            del alive[f"adf-file://mind/{op[1]}.md"]
        elif op[0] == "rename" and op[1] in heads and op[2] not in heads:
            made.append(new_event(PageRename(old=op[1], new=op[2], parents=[heads.pop(op[1])]), agent="me",
                                  layer="mind"))
            heads[op[2]] = made[-1].id
            alive[f"adf-file://mind/{op[2]}.md"] = alive.pop(f"adf-file://mind/{op[1]}.md")
        elif op[0] == "file":
            text = " ".join(sorted(op[2])) or "nothing"
            made.append(new_event(FileWrite(path=op[1], content=text.encode()), agent="me", layer="agent"))
            alive[f"adf-file://{op[1]}"] = set(op[2])
        elif op[0] == "unfile" and f"adf-file://{op[1]}" in alive:
            made.append(new_event(FileDelete(path=op[1]), agent="me", layer="agent"))
            del alive[f"adf-file://{op[1]}"]
        elif op[0] == "pad":
            made += [new_event(AlwaysAdd(line=f"rule {i}"), agent="me", layer="mind") for i in range(op[1])]
        out += [(event, {c: set(w) for c, w in alive.items()}) for event in made]
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(first=st.lists(_OPS, max_size=25), then=st.lists(_OPS, max_size=12), cuts=st.sets(st.integers(1, 40)))
def test_a_search_of_the_past_finds_exactly_what_was_alive_then(tmp_path_factory, first, then, cuts):
    """Whatever the history (versions replaced soon or long after, pages deleted and renamed, files) and
    however the fold was batched, and after a replay (the index built once) followed by more events."""
    from projections.memory import Memory

    root = tmp_path_factory.mktemp("past")
    Memory.init(root, "me").close()
    alive, heads, snapshots = {}, {}, {0: {}}  # seq -> what is alive from it on
    with Memory.open(root) as mem:
        def append(made):
            bounds = [0, *sorted(c for c in cuts if c < len(made)), len(made)]
            for start, end in zip(bounds, bounds[1:]):
                batch = made[start:end]
                for seq, (_event, then_alive) in zip(mem.log.append([event for event, _ in batch]), batch):
                    snapshots[seq] = then_alive
                mem.refresh(files=False)

        def check():
            for as_of in range(1, mem.views.checkpoint() + 1):
                then_alive = snapshots[max(seq for seq in snapshots if seq <= as_of)]
                for word in WORDS:
                    found = [h.citation for h in search.search(mem.views, word, as_of=as_of, day=DAY,
                                                               include_all=True, limit=50)]
                    assert sorted(found) == sorted(c for c, words in then_alive.items() if word in words), (word, as_of)

        append(_events(first, alive, heads))
        check()
        replaying.replay(mem)
        check()
        append(_events(then, alive, heads))
        check()
        rowids = _indexed(mem.views.db)
        replaying.replay(mem)  # the index moved version by version is the index built at once
        assert _indexed(mem.views.db) == rowids


def test_the_docs_index_is_the_one_sqlite_utils_makes():
    """search.DOCS_FTS is written out (importing sqlite-utils costs a rebuild a quarter second): it must make
    the very schema `enable_fts` makes, and index the rows search_docs holds already as it does."""
    import sqlite3

    import sqlite_utils

    made = {}
    for how in ("ours", "sqlite-utils"):
        db = sqlite3.connect(":memory:", isolation_level=None)
        db.executescript(search.SCHEMA)
        db.execute("INSERT INTO search_docs (id, kind, layer, key, title, body) VALUES "
                   "(7, 'page', 'mind', 'mind/a', 'Canary', 'went red')")
        if how == "ours":
            search.init(db)
        else:
            sqlite_utils.Database(db, recursive_triggers=False)["search_docs"].enable_fts(
                ["title", "body"], tokenize="porter", create_triggers=True)
            db.execute(search.HISTORY_FTS)
        made[how] = (db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall(),
                     db.execute("SELECT rowid FROM search_docs_fts WHERE search_docs_fts MATCH 'red'").fetchall())
    assert made["ours"] == made["sqlite-utils"]
    assert made["ours"][1] == [(7,)]


def test_a_bulk_batch_closes_the_page_versions_of_earlier_batches_as_one_update_a_row_would():
    """search._close_pages (a rebuild's batch: staged, one statement) leaves search_history as one UPDATE a
    (id, seq) did: `until` set on the page rows named (the last seq of an id named twice), no other row touched."""
    import sqlite3

    def built():
        db = sqlite3.connect(":memory:", isolation_level=None)
        db.execute(search.SCHEMA.split(";")[1])
        for id, kind in ((1, "page"), (2, "page"), (3, "file"), (4, "page"), (5, "page")):
            db.execute("INSERT INTO search_history (id, kind, layer, key, title, body, since) VALUES (?, ?, 'mind', "
                       "'k', 't', 'b', ?)", (id, kind, id))
        return db

    closed = [(1, 10), (3, 11), (4, 12), (1, 13), (9, 14)] + [(100 + n, n) for n in range(70)]
    one_by_one, staged = built(), built()
    one_by_one.executemany("UPDATE search_history SET until = ? WHERE id = ? AND kind = 'page'",
                           [(seq, id) for id, seq in closed])
    search._close_pages(staged, closed)
    rows = "SELECT id, kind, until FROM search_history ORDER BY id"
    assert staged.execute(rows).fetchall() == one_by_one.execute(rows).fetchall() == [
        (1, "page", 13), (2, "page", None), (3, "file", None), (4, "page", 12), (5, "page", None)]


def test_a_bulk_batch_closes_shared_page_versions_as_one_update_a_row_would():
    """search._close_shared (a rebuild's batch: staged, one statement) leaves search_history as CLOSE_SHARED row by
    row did: `until` set on the shared page rows still open that are named (the first seq of an id named twice, as
    two concurrent versions naming one parent do), no closed or other row touched."""
    import sqlite3

    def built():
        db = sqlite3.connect(":memory:", isolation_level=None)
        db.execute(search.SCHEMA.split(";")[1])
        for id, kind, until in ((1, "shared-page", None), (2, "shared-page", None), (3, "page", None),
                                (4, "shared-page", 7), (5, "shared-page", None)):
            db.execute("INSERT INTO search_history (id, kind, layer, key, title, body, until, since) VALUES (?, ?, "
                       "'docs', 'k', 't', 'b', ?, ?)", (id, kind, until, id))
        return db

    closed = [(10, 1), (11, 3), (12, 4), (13, 1), (14, 9)] + [(n, 100 + n) for n in range(70)]
    one_by_one, staged = built(), built()
    one_by_one.executemany(search.CLOSE_SHARED, closed)
    search._close_shared(staged, closed)
    rows = "SELECT id, kind, until FROM search_history ORDER BY id"
    assert staged.execute(rows).fetchall() == one_by_one.execute(rows).fetchall() == [
        (1, "shared-page", 10), (2, "shared-page", None), (3, "page", None), (4, "shared-page", 7),
        (5, "shared-page", None)]


def test_a_batch_finds_what_names_its_shared_versions_by_key_not_by_reading_every_version(tmp_path):
    """Regression: the fold asked, at every batch with shared page versions, which versions a void version names
    (search.NAMED_SINCE) by reading every shared version folded so far, blobs and all, and only then the void ones:
    a team's catch-up of 200,000 versions read them fifty times. The void versions (few, often none) come first now,
    each version then found by its key; and the answer is what it was."""
    from projections.views import Views

    views = Views(tmp_path / "views.db")
    db = views.db
    db.executemany("INSERT INTO shared_versions VALUES ('docs', ?, ?, ?, 'a', ?, 0, NULL)",
                   [("p", "v1", 1, "[]"), ("p", "v2", 2, '["v1"]'), ("p", "v3", 3, '["v1"]'), ("q", "w1", 4, "[]")])
    db.executemany("INSERT INTO shared_parents VALUES (?, ?)", [("v1", 2)])
    db.execute("INSERT INTO shared_void VALUES ('docs', 'p', 'v3', 3)")
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + search.NAMED_SINCE, ('["v1"]',))]
    assert "SCAN c" not in plan and any(step.startswith("SEARCH c USING") for step in plan), plan
    assert sorted(db.execute(search.NAMED_SINCE, ('["v1", "w1"]',)).fetchall(), key=str) == [("v1", 2), ("v1", None)]
    views.close()


def test_a_loop_messages_tool_calls_results_and_thinking_are_searchable(memory):
    """Regression: only a loop message's top-level text blocks were indexed; in an agent's transcript most of what
    it did and saw is in tool_use input, tool_result content and thinking, and none of it was found. Ids and an
    image's data are not text."""
    memory.loop_append("assistant", [{"type": "thinking", "thinking": "check the quokka rollout", "signature": "c2ln"},
                                     {"type": "tool_use", "id": "toolu_walrus", "name": "bash",
                                      "input": {"command": "kubectl rollout status deploy/zebrafish"}}])
    memory.loop_append("user", [{"type": "tool_result", "tool_use_id": "toolu_walrus",
                                 "content": [{"type": "text", "text": "deployment giraffe rolled out"}]},
                                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                             "data": "aGlwcG8="}}])
    assert cites(memory, "zebrafish") == cites(memory, "quokka") == ["[S1]"]
    assert cites(memory, "giraffe") == ["[S2]"]
    assert cites(memory, "walrus") == cites(memory, "aGlwcG8") == cites(memory, "c2ln") == []


def test_the_largest_count_the_cli_takes_is_any_number_of_hits(workspace, tmp_path):
    """Regression: `mem search canary -n 9223372036854775807` (2**63 - 1, inside the range the refusal quotes)
    was refused as past what the log holds: the query asked SQLite for three times as many rows."""
    page = tmp_path / "p.md"
    page.write_bytes(b"---\ntype: note\ndescription: d\n---\n# P\n\nA green canary.\n")
    run_mem("-w", workspace, "page", "write", "p", "--file", page, check=True)
    found = run_mem("-w", workspace, "search", "canary", "-n", str(2**63 - 1), "--json", check=True)
    assert [hit["path"] for hit in json.loads(found.stdout)] == ["mind/p.md"]


def test_a_query_of_a_thousand_words_searches_the_past_as_it_searches_now(memory):
    """Regression: a pasted document as the query (1,000 words) searched as of a past seq failed with SQLite's
    "Expression tree is too large (maximum depth 1000)": the words' scores were added one after another."""
    memory.write_page("p", page("Canary", "canary walrus"))
    memory.always_add("later")
    query = " ".join(["canary"] * 1000)
    now = [hit.seq for hit in memory.search(query, day="2026-11-30")]
    assert now == [1] and [hit.seq for hit in memory.search(query, as_of=1, day="2026-11-30")] == now
