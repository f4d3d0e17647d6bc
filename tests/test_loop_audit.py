"""The loop, compaction, clear and the audit, as ADF does them; citations; files and messages."""

import json
import sqlite3

import brotli
import pytest

from eventstore.errors import InvalidInput, MemError, NotFound, UnsafePath
from projections import audit
from projections.adf_file import export_adf
from projections.memory import Memory

from adf_recipe import audit_read as recipe_read
from conftest import log_rows, run_mem


def say(memory, text, loop="main", role="user"):
    return memory.loop_append(role, [{"type": "text", "text": text}], loop)


def texts(memory, loop="main", as_of=None):
    return [(r.seq, r.text()) for r in audit.loop_rows(memory.views, loop, as_of)]


def blob(memory, audit_id):
    data = memory.views.db.execute("SELECT data FROM adf_audit WHERE id = ?", (audit_id,)).fetchone()[0]
    return json.loads(brotli.decompress(data))


def test_a_loop_message_seq_is_its_event_seq(memory):
    memory.always_add("x")
    assert say(memory, "hello").seq == 2
    assert memory.log.get_by_seq(2).kind == "loop.append"
    assert texts(memory) == [(2, "hello")]


def test_compaction_archives_exactly_as_adf(memory):
    for i in range(1, 6):
        memory.loop_append("user" if i % 2 else "assistant", [{"type": "text", "text": f"m{i}"}],
                           model="m-1" if i == 2 else None, tokens={"input": i} if i == 3 else None)
    done = memory.loop_compact("the summary [S2]", preserve=2)
    assert done.event.seq == 6 and (done.archived.start_seq, done.archived.end_seq, done.archived.id) == (1, 3, 1)
    rows = memory.views.db.execute("SELECT seq, role, content_json, ord FROM adf_loop "
                                   "ORDER BY COALESCE(ord, seq), seq").fetchall()
    assert [(r[0], r[3]) for r in rows] == [(6, 3), (4, None), (5, None)]
    assert json.loads(rows[0][2]) == [{"type": "text", "text": "[Loop Compacted, audited] the summary [S2]"}]
    (row,) = memory.views.db.execute("SELECT id, source, start_seq, end_seq, ref, entry_count, size_bytes, "
                                     "created_at FROM adf_audit").fetchall()
    assert row[1:6] == ("loop:main", 1, 3, None, 3)
    entries = blob(memory, row[0])
    assert row[6] == len(json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode())
    assert row[7] == memory.log.get_by_seq(6).ts
    assert [e["seq"] for e in entries] == [1, 2, 3]
    assert entries[0] == {"seq": 1, "role": "user", "content_json": [{"text": "m1", "type": "text"}],
                          "created_at": memory.log.get_by_seq(1).ts}
    assert entries[1]["model"] == "m-1" and entries[2]["tokens"] == {"input": 3}
    assert isinstance(entries[0]["content_json"], list)


def test_compaction_without_preserve_and_successive_overlapping_ranges(memory):
    for i in range(10):
        say(memory, f"m{i + 1}")
    memory.loop_clear(2, 4)  # rows 3 and 4
    memory.loop_compact("all of it")
    ranges = memory.views.db.execute("SELECT start_seq, end_seq, entry_count FROM adf_audit ORDER BY id").fetchall()
    assert ranges == [(3, 4, 2), (1, 10, 8)]
    assert [r.ord for r in audit.loop_rows(memory.views)] == [None]
    for seq in range(1, 11):
        hit = audit.audit_read(memory.views, memory.log, seq)
        assert hit.source == "audit" and hit.entry["seq"] == seq
    assert audit.audit_read(memory.views, memory.log, 3).audit_id == 1


def test_sibling_loops_share_one_counter(memory):
    say(memory, "main 1")
    say(memory, "planner 2", loop="planner")
    say(memory, "main 3")
    memory.loop_compact("main summary")
    assert memory.views.db.execute("SELECT source, start_seq, end_seq FROM adf_audit").fetchall() == [
        ("loop:main", 1, 3)]
    assert audit.audit_read(memory.views, memory.log, 2).source == "live"
    memory.loop_compact("planner summary", loop="planner")
    hit = audit.audit_read(memory.views, memory.log, 2)
    assert (hit.source, hit.loop) == ("audit", "planner")
    assert audit.audit_read(memory.views, memory.log, 2, loop="main").source == "missing"
    assert audit.audit_read(memory.views, memory.log, 3, loop="main").entry["seq"] == 3


def test_clear_is_a_python_slice_over_the_display_order(memory):
    for i in range(6):
        say(memory, f"m{i + 1}")
    memory.loop_clear(-2, None)
    assert [s for s, _ in texts(memory)] == [1, 2, 3, 4]
    memory.loop_clear(None, 1)
    assert [s for s, _ in texts(memory)] == [2, 3, 4]
    memory.loop_clear()
    assert texts(memory) == []
    assert [r[0] for r in memory.views.db.execute("SELECT entry_count FROM adf_audit ORDER BY id")] == [2, 1, 3]


def test_with_loop_audit_off_the_log_still_answers(memory):
    memory.config_set("audit.loop", False)
    say(memory, "secret plan")
    memory.loop_compact("gone")
    assert memory.views.db.execute("SELECT count(*) FROM adf_audit").fetchone()[0] == 0
    assert texts(memory) == [(3, "[Loop Compacted] gone")]
    hit = audit.audit_read(memory.views, memory.log, 2)
    assert hit.source == "log" and hit.entry["content_json"] == [{"text": "secret plan", "type": "text"}]
    assert audit.audit_read(memory.views, memory.log, 99).source == "missing"
    assert audit.audit_read(memory.views, memory.log, 1).source == "missing"  # a config event, not a message


def test_file_delete_and_messages_are_audited_by_their_switches(memory):
    memory.file_write("notes/a.txt", b"alpha")
    memory.file_delete("notes/a.txt")
    assert memory.views.db.execute("SELECT count(*) FROM adf_audit").fetchone()[0] == 0
    memory.config_set("audit.files", True)
    memory.config_set("audit.inbox", True)
    memory.file_write("notes/b.png", b"\x89PNG", "image/png")
    memory.file_delete("notes/b.png")
    memory.message("inbox", {"id": "msg-1", "from": "monitor", "content": "hi", "attachments": [{"n": 1}]})
    memory.message("outbox", {"from": "me", "to": "monitor", "content": "hello"})
    rows = memory.views.db.execute("SELECT id, source, ref, entry_count FROM adf_audit ORDER BY id").fetchall()
    assert [r[1:] for r in rows] == [("file", "notes/b.png", 1), ("inbox_message", "msg-1", 1)]
    assert blob(memory, rows[0][0]) == {"path": "notes/b.png", "content_base64": "iVBORw==",
                                        "mime_type": "image/png", "size": 4}
    assert blob(memory, rows[1][0])["attachments"] == [{"n": 1}]
    inbox = memory.views.db.execute('SELECT id, "from", content, attachments, status FROM adf_inbox').fetchall()
    assert inbox == [("msg-1", "monitor", "hi", '[{"n":1}]', "unread")]
    assert memory.views.db.execute('SELECT "to", status FROM adf_outbox').fetchall() == [("monitor", "pending")]


def test_refusals_leave_the_log_untouched(memory):
    memory.file_write("keep.md", b"x", protection="no_delete")
    before = log_rows(memory.root)
    bad = [
        (lambda: memory.loop_append("system", [{"type": "text", "text": "x"}]), InvalidInput),
        (lambda: memory.loop_append("user", []), InvalidInput),
        (lambda: memory.loop_append("user", ["not a block"]), InvalidInput),
        (lambda: memory.loop_append("user", [{"type": "text"}], loop="../x"), InvalidInput),
        (lambda: memory.loop_compact("   "), InvalidInput),
        (lambda: memory.loop_compact("s", preserve=-1), InvalidInput),
        (lambda: memory.file_write("../etc/passwd", b"x"), UnsafePath),
        (lambda: memory.file_write("/abs", b"x"), UnsafePath),
        (lambda: memory.file_write("mind/x.md", b"x"), UnsafePath),
        (lambda: memory.file_write("a//b", b"x"), UnsafePath),
        (lambda: memory.file_write("f", b"x", protection="sticky"), InvalidInput),
        (lambda: memory.file_delete("nope"), NotFound),
        (lambda: memory.file_delete("keep.md"), InvalidInput),
        (lambda: memory.message("inbox", {"content": "no sender"}), InvalidInput),
        (lambda: memory.message("outbox", {"from": "a", "content": "no recipient"}), InvalidInput),
        (lambda: memory.config_set("audit.loop", "yes"), InvalidInput),
        (lambda: memory.config_set("bad key", 1), InvalidInput),
        (lambda: audit.cite(memory.views, memory.log, "see S12 somewhere"), InvalidInput),
    ]
    for action, error in bad:
        with pytest.raises(error):
            action()
    assert log_rows(memory.root) == before


def test_cli_refusals(workspace, tmp_path):
    before = log_rows(workspace)
    for args, expect in [
        (["loop", "append", "--role", "user", "--content-json", "[not json"], "not valid JSON"),
        (["loop", "append", "--role", "robot", "--text", "x"], "role must be"),
        (["file", "write", "../x", "--file", __file__], "'..'"),
        (["message", "receive", "--file", "-"], "needs 'from'"),
        (["config", "set", "audit.files", "maybe"], "switch"),
        (["cite", "nonsense"], "not a citation"),
        (["import", "adf", __file__], "not an ADF file"),
    ]:
        result = run_mem("-w", workspace, *args, input=b'{"content": "x"}')
        assert result.returncode != 0 and expect in result.stderr.decode(), (args, result.stderr)
    assert log_rows(workspace) == before


def test_citations_resolve_and_lint_finds_the_missing(workspace, tmp_path):
    with Memory.open(workspace) as memory:
        for i in range(3):
            say(memory, f"fact {i}")
        memory.loop_compact("facts 1-2", preserve=1)
    cited = run_mem("-w", workspace, "cite", "[S1]", check=True).stdout.decode()
    assert cited.startswith("S1: in audit blob 1 (loop main)") and "fact 0" in cited
    assert "live in the loop" in run_mem("-w", workspace, "cite", "adf-audit://seq/3?loop=main").stdout.decode()
    with Memory.open(workspace) as memory:
        memory.write_page("facts", b"---\ntype: lesson\nsources:\n  - adf-audit://seq/2\n---\n# Facts\n\n"
                                   b"From [S1] and [S77].\nSee adf-file://mind/nothing.md\n")
    assert run_mem("-w", workspace, "cite", "adf-file://mind/facts.md", check=True).stdout.startswith(b"---\n")
    result = run_mem("-w", workspace, "lint", "--citations", "--json")
    assert result.returncode == 1
    found = {f["citation"] for f in json.loads(result.stdout)["findings"]}
    assert found == {"[S77]", "adf-file://mind/nothing.md"}
    run_mem("-w", workspace, "lint", "--citations", "--record")
    assert "lint | Lint pass" in (workspace / "mind/log.md").read_text()


def test_point_in_time_for_the_loop_audit_files_and_belief(memory):
    say(memory, "one")
    say(memory, "two")
    memory.file_write("a.txt", b"v1")
    before = memory.log.head()
    memory.loop_compact("short")
    memory.file_write("a.txt", b"v2")
    memory.always_add("be brief")
    assert texts(memory, as_of=before) == [(1, "one"), (2, "two")]
    assert audit.audit_rows(memory.views, as_of=before) == []
    assert bytes(memory.views.file("a.txt", before)[1]) == b"v1"
    assert bytes(memory.views.file("a.txt")[1]) == b"v2"
    then = audit.believed(memory.views, before)
    assert [m.text() for m in then.loop] == ["one", "two"] and "be brief" not in then.mind
    now = audit.believed(memory.views, memory.log.head())
    assert [m.text() for m in now.loop] == ["[Loop Compacted, audited] short"] and "- be brief" in now.mind
    assert audit.audit_read(memory.views, memory.log, 1, as_of=before).source == "live"


def test_exported_file_satisfies_adfs_own_recipe(memory, tmp_path):
    say(memory, "a")
    say(memory, "b", loop="planner")
    say(memory, "c")
    memory.loop_clear(0, 1)
    say(memory, "d")
    memory.loop_compact("sum", preserve=1)
    memory.config_set("audit.loop", False)
    say(memory, "e")
    memory.loop_compact("lost")
    out = tmp_path / "agent.adf"
    export_adf(memory, out, memory.log.head())
    db = sqlite3.connect(out)
    assert dict(db.execute("SELECT key, value FROM adf_meta").fetchall())["adf_schema_version"] == "28"
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for seq in range(1, memory.log.head() + 2):
        ours = audit.audit_read(memory.views, memory.log, seq)
        theirs = recipe_read(out, seq)
        expected = ours.source if ours.source != "log" else "missing"
        assert theirs["source"] == expected, seq
        if theirs["source"] == "audit":
            assert theirs["entry"] == ours.entry and theirs["audit_id"] == ours.audit_id
    assert recipe_read(out, 2, loop="planner")["source"] == "live"
    assert recipe_read(out, 1, loop="main")["source"] == "audit"


def test_memerror_is_the_base_of_every_refusal():
    assert issubclass(InvalidInput, MemError) and issubclass(UnsafePath, MemError)


def test_wiki_files_appear_in_adf_files_with_adfs_protections(memory):
    from conftest import PAGE

    memory.write_page("deploy", PAGE)
    memory.file_write("notes/a.md", b"x")
    rows = {r[0]: r for r in memory.views.db.execute("SELECT path, protection, content FROM adf_files")}
    assert rows["mind.md"][1] == "no_delete" and rows["mind/log.md"][1] == "no_delete"
    assert rows["mind/deploy.md"][1:] == ("none", PAGE) and rows["notes/a.md"][1] == "none"
    memory.delete_page("deploy")
    assert "mind/deploy.md" not in {r[0] for r in memory.views.db.execute("SELECT path FROM adf_files")}


def test_loop_show_gives_the_start_of_a_tool_call_result_or_thought_not_its_type_alone(workspace):
    """Regression: `mem loop show` printed `[tool_use]` and `[tool_result]` for most of an agent's transcript."""
    from conftest import run_mem

    blocks = [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "kubectl rollout status " + "x" * 200}},
              {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGlwcG8="}}]
    run_mem("-w", workspace, "loop", "append", "--role", "assistant", "--content-json", json.dumps(blocks), check=True)
    shown = run_mem("-w", workspace, "loop", "show", check=True).stdout.decode()
    assert shown == f"[S1] assistant: [tool_use: kubectl rollout status {'x' * 56}…] [image]\n"


def test_a_seq_cited_before_it_was_written_says_not_yet_not_missing_from_everywhere(workspace):
    """Regression: `mem cite "[S41]" --seq 40` and `mem audit read 72` (head 71) said "not live, not in any audit
    blob, not in the log", though the log holds S41 from seq 41 on: the message was not written yet."""
    from conftest import run_mem

    for text in ("one", "two"):
        run_mem("-w", workspace, "loop", "append", "--role", "user", "--text", text, check=True)
    before = run_mem("-w", workspace, "cite", "[S2]", "--seq", "1")
    assert before.returncode == 1 and before.stdout.decode() == "S2: missing: not yet written by seq 1\n"
    past = run_mem("-w", workspace, "audit", "read", "3")
    assert past.returncode == 1 and past.stdout.decode() == "S3: missing: not yet written by seq 2\n"
    assert json.loads(run_mem("-w", workspace, "audit", "read", "3", "--json").stdout)["read_at"] == 2
    assert run_mem("-w", workspace, "cite", "[S2]", "--seq", "2", check=True).stdout.decode().startswith(
        "S2: live in the loop")


def test_messages_received_and_sent_are_listed_now_and_as_of_a_moment(workspace):
    """A message recorded with `mem message receive` could be read back only through an ADF export (nc15a)."""
    received = run_mem("-w", workspace, "message", "receive", "--file", "-",
                       input=b'{"from": "bob", "content": "the deploy window\\nmoved", "thread_id": "t1"}', check=True)
    assert received.stdout == b"received message (seq 1)\n"
    run_mem("-w", workspace, "message", "send", "--file", "-", input=b'{"to": "bob", "content": "thanks"}', check=True)
    inbox = json.loads(run_mem("-w", workspace, "message", "list", "--json", check=True).stdout)
    assert [(m["from"], m["content"], m["thread_id"]) for m in inbox] == [("bob", "the deploy window\nmoved", "t1")]
    outbox = json.loads(run_mem("-w", workspace, "message", "list", "outbox", "--json", check=True).stdout)
    assert [(m["to"], m["content"]) for m in outbox] == [("bob", "thanks")]
    text = run_mem("-w", workspace, "message", "list", check=True).stdout.decode()
    assert text.endswith("  bob  the deploy window moved\n") and text.count("\n") == 1, text
    assert run_mem("-w", workspace, "message", "list", "outbox", "--seq", "1", "--json", check=True).stdout.strip() \
        == b"[]"
    refused = run_mem("-w", workspace, "message", "list", "spam")
    assert refused.returncode == 1 and refused.stderr == b"error: there is no box 'spam': inbox or outbox\n"
    before = log_rows(workspace)
    for when in ("1e30", "-5", "true", '"yesterday"', "2.5"):  # regression (nc16a): recorded, listed as 1969 or as-is
        refused = run_mem("-w", workspace, "message", "receive", "--file", "-",
                          input=b'{"from": "x", "content": "y", "received_at": %s}' % when.encode())
        assert refused.returncode == 1 and refused.stderr.decode() == (
            "error: the message's received_at must be milliseconds since 1970 (a whole number, up to the year 9999), "
            f"not {when}\n"), (when, refused.stderr)
    assert log_rows(workspace) == before


def test_a_message_an_adf_file_holds_as_bytes_is_listed_without_a_traceback(workspace, tmp_path):
    """Regression (nc16a): an ADF file is SQLite, so a message's content may be a BLOB; `mem message list` ended in a
    TypeError traceback on it."""
    import sqlite3

    run_mem("-w", workspace, "message", "receive", "--file", "-", input=b'{"from": "x", "content": "y"}', check=True)
    exported = tmp_path / "m.adf"
    run_mem("-w", workspace, "export", "adf", exported, check=True)
    with sqlite3.connect(exported) as db:
        db.execute("UPDATE adf_inbox SET content = X'DEADBEEF00'")
    db.close()
    copy = tmp_path / "copy"
    run_mem("init", "--workspace", copy, check=True)
    run_mem("-w", copy, "import", "adf", exported, check=True)
    listed = run_mem("-w", copy, "message", "list", check=True)
    assert listed.stdout.decode().endswith("  x  <5 bytes>\n") and listed.stderr == b"", listed
    for when in ("'yesterday'", "1e30", "-5"):  # regression (nc16b): refused by `mem message receive`, imported
        with sqlite3.connect(exported) as db:
            db.execute(f"UPDATE adf_inbox SET received_at = {when}")
        db.close()
        other = tmp_path / f"other{when}"
        run_mem("init", "--workspace", other, check=True)
        refused = run_mem("-w", other, "import", "adf", exported)
        assert refused.returncode == 1 and "'s received_at must be milliseconds since 1970" in refused.stderr.decode(), \
            refused.stderr
