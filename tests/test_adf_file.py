"""`mem export adf` and `mem import adf`: real ADF files, the fixture's older schema, round trips."""

import json
import os
import shutil
import sqlite3
from pathlib import Path

import brotli
import pytest

from eventstore.errors import InvalidInput, MemError
from projections import adf_file, audit
from eventstore.instants import parse_instant
from projections.adf_file import TABLES, export_adf, import_adf
from projections.memory import Memory

from adf_recipe import audit_read as recipe_read
from conftest import PAGE, log_rows, run_mem

FIXTURE = Path(__file__).parent / "fixtures" / "artemis.adf"  # an ADF file of schema 21, from ADF itself


@pytest.fixture
def fixture_adf(tmp_path):
    copy = tmp_path / "artemis.adf"
    shutil.copy(FIXTURE, copy)
    copy.chmod(0o644)
    return copy


def rich_memory(root):
    memory = Memory.init(root, "artemis")
    memory.write_page("deploy", PAGE, "first [S1]")
    memory.always_add("Nothing on weekends.")
    for i in range(4):
        memory.loop_append("user", [{"type": "text", "text": f"m{i}"}], model="x" if i else None,
                           tokens={"in": i} if i == 2 else None)
    memory.loop_append("assistant", [{"type": "text", "text": "planning"}], loop="planner")
    memory.loop_compact("summary", preserve=1)
    memory.config_set("audit.files", True)
    memory.config_set("audit.outbox", True)
    memory.file_write("docs/a.md", b"# A\n")
    memory.file_write("docs/b.bin", bytes(range(256)), "application/octet-stream", "no_delete")
    memory.file_write("docs/c.md", b"gone soon")
    memory.file_delete("docs/c.md")
    memory.message("inbox", {"from": "monitor", "content": "ping", "thread_id": "t1"})
    memory.message("outbox", {"from": "artemis", "to": "monitor", "content": "pong", "meta": {"k": 1}})
    memory.loop_append("user", [{"type": "text", "text": "after"}])
    return memory


def table_rows(path, table):
    db = sqlite3.connect(path)
    try:
        columns = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        return columns, db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
    finally:
        db.close()


def file_content(path, name: str) -> str:
    db = sqlite3.connect(path)
    try:
        return bytes(db.execute("SELECT content FROM adf_files WHERE path = ?", (name,)).fetchone()[0]).decode()
    finally:
        db.close()


def test_export_writes_adf_schema_28(tmp_path):
    memory = rich_memory(tmp_path / "ws")
    out = tmp_path / "out.adf"
    report = export_adf(memory, out, memory.log.head())
    assert report.rows["adf_loop"] == 4 and report.rows["adf_audit"] == 3
    columns, loop = table_rows(out, "adf_loop")
    assert columns == ["seq", "loop", "role", "content_json", "model", "tokens", "created_at", "ord"]
    assert table_rows(out, "adf_audit")[0] == ["id", "source", "start_seq", "end_seq", "ref", "entry_count",
                                                "size_bytes", "data", "created_at"]
    files = {r[0]: r for r in table_rows(out, "adf_files")[1]}
    assert files["mind.md"][4] == "no_delete" and files["mind/log.md"][4] == "no_delete"
    assert files["mind/deploy.md"][4] == "none" and files["mind/deploy.md"][1] == PAGE
    assert files["docs/b.bin"][1] == bytes(range(256)) and "docs/c.md" not in files
    meta = dict((k, v) for k, v, _p in table_rows(out, "adf_meta")[1])
    assert meta["adf_version"] == "0.2" and meta["adf_name"] == "artemis"
    with pytest.raises(InvalidInput, match="exists"):
        export_adf(memory, out, memory.log.head())


def test_an_export_stopped_half_way_leaves_no_file_behind(tmp_path, monkeypatch):
    """Ctrl-C (or an error) while the tables are written: the temporary file and its journal are removed
    (regression: `out.adf.tmp` and its -wal stayed beside the file asked for)."""
    memory = rich_memory(tmp_path / "ws")
    out = tmp_path / "out.adf"

    def interrupted(db, as_of):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(adf_file, "_set_loop_counter", interrupted)
        with pytest.raises(KeyboardInterrupt):
            export_adf(memory, out, memory.log.head())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]
    assert export_adf(memory, out, memory.log.head()).rows["adf_loop"] == 4


def test_export_as_of_a_moment(tmp_path):
    memory = rich_memory(tmp_path / "ws")
    out = tmp_path / "then.adf"
    export_adf(memory, out, 6)  # before the compaction
    assert [r[0] for r in table_rows(out, "adf_loop")[1]] == [3, 4, 5, 6]
    assert table_rows(out, "adf_audit")[1] == []


def test_export_import_export_gives_the_same_tables(tmp_path):
    first = tmp_path / "first.adf"
    memory = rich_memory(tmp_path / "ws")
    export_adf(memory, first, memory.log.head())
    again = Memory.init(tmp_path / "ws2", "artemis")
    report = import_adf(again, first)
    assert report.rows["loop"] == 4 and report.rows["audit"] == 3
    assert sum(report.rows.values()) == report.events, report
    second = tmp_path / "second.adf"
    export_adf(again, second, again.log.head())
    for table in TABLES:
        columns, rows_a = table_rows(first, table)
        _, rows_b = table_rows(second, table)
        if table == "adf_meta":  # the copy's first event is the gap of the file's seqs, of the file's first time
            rows_a = [r for r in rows_a if r[0] != "adf_updated_at"]
            rows_b = [r for r in rows_b if r[0] != "adf_updated_at"]
        if table == "adf_files":  # the wiki's own files are re-derived: their times are the import's
            rows_a = [r if not r[0].startswith("mind") else r[:6] for r in rows_a]
            rows_b = [r if not r[0].startswith("mind") else r[:6] for r in rows_b]
        assert rows_a == rows_b, table
    for seq in range(1, 20):
        assert recipe_read(first, seq) == recipe_read(second, seq)
    assert (again.root / "mind/log.md").read_text() == (memory.root / "mind/log.md").read_text()
    assert audit.audit_read(again.views, again.log, 3).source == "audit"


def test_an_import_keeps_the_files_times_and_its_ids_are_the_same_at_every_import(tmp_path):
    """Regression: every imported event got a fresh id and the import's time, so importing a file twice
    was refused (or, into two workspaces, made two unrelated histories). Now an event's time is its row's
    own (a loop row's created_at, a file's updated_at, an audit row's or a message's time) and its id is
    derived from the file's agent and the event: the same file gives the same ids anywhere, and imported
    again into the same workspace appends nothing."""
    out = tmp_path / "out.adf"
    memory = rich_memory(tmp_path / "ws")
    export_adf(memory, out, memory.log.head())
    run_mem("init", "--agent", "artemis", "-w", tmp_path / "a", check=True)
    first = json.loads(run_mem("-w", tmp_path / "a", "import", "adf", out, "--json", check=True).stdout)
    log = json.loads(run_mem("-w", tmp_path / "a", "log", "--json", check=True).stdout)
    again = run_mem("-w", tmp_path / "a", "import", "adf", out, check=True).stdout.decode()
    assert again == f"{out} was imported here already: all {first['events']} of its events are in the log; nothing " \
                    "appended\n"
    assert json.loads(run_mem("-w", tmp_path / "a", "log", "--json", check=True).stdout) == log
    other = Memory.init(tmp_path / "b", "bob")
    import_adf(other, out)
    assert [(e.id, e.ts, e.seq) for e in other.events()] == [(e["id"], e["ts"], e["seq"]) for e in log]

    loop = {e["seq"]: e for e in log if e["body"]["kind"] == "loop.append"}
    assert loop and all(e["ts"] == e["body"]["created_at"] for e in loop.values())
    files = [e for e in log if e["body"]["kind"] == "file.write"]
    assert files and all(e["ts"] == parse_instant(e["body"]["updated_at"]) for e in files)
    audits = [e for e in log if e["body"]["kind"] == "audit.import"]
    assert len(audits) == 3 and all(e["ts"] == e["body"]["created_at"] for e in audits)
    messages = {e["body"]["kind"]: e for e in log if e["body"]["kind"].endswith(".message")}
    assert messages["inbox.message"]["ts"] == messages["inbox.message"]["body"]["message"]["received_at"]
    assert messages["outbox.message"]["ts"] == messages["outbox.message"]["body"]["message"]["created_at"]
    originals = {e.seq: e.ts for e in memory.events()}
    assert all(originals[seq] <= e["ts"] <= originals[seq] + 5 for seq, e in loop.items())  # when they were said


def test_import_the_fixture_with_its_older_schema(tmp_path, fixture_adf):
    result = run_mem("-w", tmp_path / "ws", "init", "--agent", "artemis", check=True)
    result = run_mem("-w", tmp_path / "ws", "import", "adf", fixture_adf, check=True)
    assert b"(schema 21)" in result.stdout and b"kept as a file: imported/artemis/mind.md" in result.stdout
    listing = json.loads(run_mem("-w", tmp_path / "ws", "file", "list", "--json", check=True).stdout)
    by_path = {f["path"]: f for f in listing}
    assert by_path["document.md"]["protection"] == "no_delete" and by_path["document.md"]["size"] == 1728
    assert by_path["imported/artemis/mind.md"]["size"] == 1069
    config = json.loads(run_mem("-w", tmp_path / "ws", "config", "show", "--json", check=True).stdout)
    assert config["audit"]["loop"] is False and config["name"] == "artemis"
    cited = run_mem("-w", tmp_path / "ws", "cite", "adf-file://imported/artemis/mind.md", check=True).stdout
    assert cited.startswith(b"# mind\n")
    believed = run_mem("-w", tmp_path / "ws", "believed", check=True).stdout  # said nothing of it: an empty mind
    assert b"kept aside by an import, not loaded (`mem show PATH` reads one): imported/artemis/mind.md" in believed
    believed = json.loads(run_mem("-w", tmp_path / "ws", "believed", "--json", check=True).stdout)
    assert believed["kept_aside"] == ["imported/artemis/mind.md"]
    assert b"no differences" in run_mem("-w", tmp_path / "ws", "replay", "--check", check=True).stdout


def test_import_schema_21_loop_blobs_by_their_entries(tmp_path, fixture_adf):
    db = sqlite3.connect(fixture_adf)
    entries = [{"seq": s, "role": "user", "content_json": [{"type": "text", "text": f"old {s}"}], "created_at": s}
               for s in (7, 9, 8)]
    text = json.dumps(entries)
    db.execute("INSERT INTO adf_audit (source, start_at, end_at, entry_count, size_bytes, data, created_at) "
               "VALUES ('loop', 1000, 2000, 3, ?, ?, 5)", (len(text), brotli.compress(text.encode())))
    db.execute("INSERT INTO adf_loop (seq, role, content_json, created_at) VALUES (12, 'user', ?, 10)",
               (json.dumps([{"type": "text", "text": "still live"}]),))
    db.commit()
    db.close()
    memory = Memory.init(tmp_path / "ws", "artemis")
    import_adf(memory, fixture_adf)
    assert memory.views.db.execute("SELECT source, start_seq, end_seq FROM adf_audit").fetchall() == [("loop", 7, 9)]
    hit = audit.audit_read(memory.views, memory.log, 8)
    assert (hit.source, hit.loop, hit.entry["content_json"][0]["text"]) == ("audit", "main", "old 8")
    assert [(r.seq, r.text()) for r in audit.loop_rows(memory.views)] == [(12, "still live")]
    assert memory.log.verify().ok


def test_import_refuses_a_used_workspace_and_non_adf_files(tmp_path, fixture_adf):
    memory = Memory.init(tmp_path / "ws", "a")
    memory.always_add("x")
    with pytest.raises(InvalidInput, match="new workspace"):
        import_adf(memory, fixture_adf)
    fresh = Memory.init(tmp_path / "ws2", "a")
    junk = tmp_path / "junk.adf"
    junk.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(InvalidInput, match="not an ADF file"):
        import_adf(fresh, junk)
    partial = tmp_path / "partial.adf"
    db = sqlite3.connect(partial)
    db.execute("CREATE TABLE adf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.commit()
    db.close()
    with pytest.raises(InvalidInput, match="not an ADF file"):
        import_adf(fresh, partial)
    with pytest.raises(InvalidInput, match=f"^{tmp_path} is a directory, not an ADF file$"):
        import_adf(fresh, tmp_path)
    assert fresh.log.head() == 0


def test_a_view_a_pipe_or_a_wiki_folder_given_as_an_adf_file_is_one_line_and_nothing_is_read(tmp_path):
    """Regression (nc24a): an adf_loop made as a view of a recursive query never ended (2.4 GB and a million events
    for a 12 KB file when bounded, the OOM killer when not), and a named pipe hung the import for good. Each is
    refused before a row is read; a wiki folder is told the way in (nc24b)."""
    fresh = Memory.init(tmp_path / "ws", "a")
    hostile = tmp_path / "view.adf"
    build_adf(hostile, tables=("adf_meta", "adf_config", "adf_files", "adf_audit"))
    db = sqlite3.connect(hostile)
    db.execute("CREATE VIEW ADF_LOOP AS WITH RECURSIVE n(seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM n) "
               "SELECT seq, 'main' AS loop, 'user' AS role, '[]' AS content_json, 5 AS created_at FROM n")
    db.commit()
    db.close()
    with pytest.raises(InvalidInput, match="its adf_loop is a view, not a table: an ADF file holds its rows in tables"):
        import_adf(fresh, hostile)
    pipe = tmp_path / "pipe.adf"
    os.mkfifo(pipe)
    with pytest.raises(InvalidInput, match=r"pipe.adf is not a regular file \(a pipe, a device\), not an ADF file$"):
        import_adf(fresh, pipe)
    wiki = tmp_path / "wiki"
    (wiki / "mind").mkdir(parents=True)
    result = run_mem("-w", tmp_path / "ws", "import", "adf", wiki)
    assert result.stderr.decode() == (f"error: {wiki} is a directory, not an ADF file; a wiki folder is brought under "
                                      "mindlog in place: `mem init` in it, then `mem adopt`\n")
    assert fresh.log.head() == 0


# --- files from other producers, and hostile ones: read what is there, refuse in one line ----------

PAGE_ROW = ("---\ntype: procedure\ndescription: staging first\n---\n# Deploy\n\nStaging first.\n").encode()
ISO = "2026-01-01T00:00:00.000Z"


def build_adf(path, *, tables=("adf_meta", "adf_config", "adf_loop", "adf_files", "adf_audit"), meta=True,
              loop=(), files=(), audit=(), config=None):
    """A minimal ADF file of schema 28 holding only the given tables and rows."""
    from projections.adf_file import SCHEMA_28

    db = sqlite3.connect(path)
    for statement in SCHEMA_28.split(";"):
        if statement.strip() and any(f"TABLE {t} " in statement or f"ON {t}(" in statement for t in tables):
            db.execute(statement)
    if meta:
        db.executemany("INSERT INTO adf_meta (key, value) VALUES (?, ?)",
                       [("adf_version", "0.2"), ("adf_schema_version", "28"), ("adf_handle", "other")])
    if config is not None:
        db.execute("INSERT INTO adf_config VALUES (1, ?, ?)", (config, ISO))
    for sql, rows in (
            ("INSERT INTO adf_loop (seq, loop, role, content_json, created_at) VALUES (?, 'main', ?, ?, 5)", loop),
            ("INSERT INTO adf_files (path, content, size, created_at, updated_at) VALUES (?, ?, 0, ?, ?)",
             [(p, c, ISO, ISO) for p, c in files]),
            ("INSERT INTO adf_audit (source, start_seq, end_seq, entry_count, size_bytes, data, created_at) "
             "VALUES (?, ?, ?, 1, 1, ?, 5)", audit)):
        if rows:
            db.executemany(sql, rows)
    db.commit()
    db.close()
    return path


def text_row(seq, text, role="user"):
    return (seq, role, json.dumps([{"type": "text", "text": text}]))


def import_cli(tmp_path, adf, agent="me"):
    ws = tmp_path / "ws"
    run_mem("init", "-w", ws, "--agent", agent, check=True)
    return ws, run_mem("-w", ws, "import", "adf", adf)


def refused_in_one_line(result, expected: str) -> None:
    err = result.stderr.decode()
    assert result.returncode == 1 and err.startswith("error: "), (result.stdout, err)
    assert err.count("\n") == 1 and "Traceback" not in err and expected in err, err


def test_import_reads_a_file_without_the_tables_it_does_not_need(tmp_path):
    adf = build_adf(tmp_path / "lean.adf", tables=("adf_meta", "adf_loop", "adf_files"),
                    loop=[text_row(1, "hello")], files=[("mind/deploy.md", PAGE_ROW)])
    ws, result = import_cli(tmp_path, adf)
    assert result.returncode == 0, result.stderr
    assert b"as 2 events (loop 1, pages 1)" in result.stdout, result.stdout
    assert b"S1: live in the loop" in run_mem("-w", ws, "cite", "[S1]", check=True).stdout
    only_meta = build_adf(tmp_path / "meta-only.adf", tables=("adf_meta",))
    _ws, result = import_cli(tmp_path / "b", only_meta)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("tables, meta, expected", [
    ((), False, "no adf_meta table, which every ADF file has"),
    (("adf_meta", "adf_loop"), False, "no adf_version"),
])
def test_import_refuses_a_file_without_what_every_adf_file_has(tmp_path, tables, meta, expected):
    adf = build_adf(tmp_path / "x.adf", tables=tables, meta=meta)
    ws, result = import_cli(tmp_path, adf)
    refused_in_one_line(result, expected)
    assert log_rows(ws) == []


def test_pages_without_a_mind_md_are_in_the_catalog_and_replay_agrees(tmp_path):
    adf = build_adf(tmp_path / "pages.adf", files=[("mind/deploy.md", PAGE_ROW), ("notes/a.md", b"# A\n")])
    ws, result = import_cli(tmp_path, adf)
    assert result.returncode == 0, result.stderr
    assert "- [Deploy](adf-file://mind/deploy.md) — staging first" in (ws / "mind.md").read_text()
    assert b"no differences" in run_mem("-w", ws, "replay", "--check", check=True).stdout


def test_a_loop_seq_far_ahead_is_one_gap_event_not_millions(tmp_path):
    adf = build_adf(tmp_path / "far.adf", loop=[text_row(2, "early"), text_row(50_000_000, "far ahead")],
                    files=[("mind/deploy.md", PAGE_ROW)])
    ws, result = import_cli(tmp_path, adf)
    assert result.returncode == 0, result.stderr
    assert b"as 5 events" in result.stdout  # a gap for seq 1, a loop row, one gap, a loop row, the page
    assert [r[0] for r in log_rows(ws)] == [1, 2, 49_999_999, 50_000_000, 50_000_001]
    assert b"far ahead" in run_mem("-w", ws, "cite", "[S50000000]", check=True).stdout
    assert run_mem("-w", ws, "cite", "[S1234]").returncode == 1
    assert b"[S50000002] user appended" in run_mem("-w", ws, "loop", "append", "--role", "user", "--text", "next",
                                                   check=True).stdout
    assert b"ok" in run_mem("-w", ws, "verify", check=True).stdout
    assert b"no differences" in run_mem("-w", ws, "replay", "--check", check=True).stdout
    assert b"replayed 6 events; views at seq 50000002" in run_mem("-w", ws, "replay", check=True).stdout
    assert b"replayed 2 events; views at seq 2" in run_mem("-w", ws, "replay", "--to", "2", check=True).stdout
    assert b"replayed 3 events; views at seq 49999999" in run_mem("-w", ws, "replay", "--to", "49999999",
                                                                  check=True).stdout
    run_mem("-w", ws, "replay", check=True)
    shown = run_mem("-w", ws, "loop", "show", "--seq", "49999998", check=True).stdout
    assert shown.decode().splitlines() == ["[S2] user: early"]


def loop_blob(seqs, text="archived decision {}: the owner must ack prod") -> bytes:
    """A loop audit blob as ADF writes it, one user message per seq."""
    return brotli.compress(json.dumps([{"seq": s, "role": "user", "content_json": [
        {"type": "text", "text": text.format(s)}], "created_at": 0} for s in seqs]).encode())


CITING_PAGE = b"---\ntype: decision\ndescription: prod needs ack\n---\n# Prod ack\n\nThe owner must ack prod [S5].\n"


def test_a_seq_an_archived_message_names_is_never_given_to_another_event(tmp_path):
    """Regression: the import kept live rows' seqs but not archived messages'. A file whose loop was cleared
    (one blob, seqs 1-50, no live row) had its audit and page events put at seqs 1 and 2, and the next
    `mem loop append` took seq 3: after four of them `[S5]` in the page named the new message, and lint saw
    nothing wrong. Every seq the file names now stays its message's: one gap stands for them, the file's
    other events and every later message come after them."""
    adf = build_adf(tmp_path / "cleared.adf", files=[("mind/prod-ack.md", CITING_PAGE)],
                    audit=[("loop:main", 1, 50, loop_blob(range(1, 51)))])
    ws, result = import_cli(tmp_path, adf)
    assert result.returncode == 0, result.stderr
    assert [(seq, kind) for seq, kind in ((r[0], r[6]) for r in log_rows(ws)) if seq <= 50] == [(50, "import.gap")]
    for i in range(1, 5):
        appended = run_mem("-w", ws, "loop", "append", "--role", "user", "--text", f"new {i}", check=True).stdout
        assert int(appended.split(b"]")[0][2:]) > 50
    cited = run_mem("-w", ws, "cite", "[S5]", check=True).stdout.decode()
    assert cited.startswith("S5: in audit blob 1 (loop main)") and "archived decision 5" in cited
    assert b"no findings" in run_mem("-w", ws, "lint", "--check", "citations", check=True).stdout
    assert b"no differences" in run_mem("-w", ws, "replay", "--check", check=True).stdout


def test_a_deleted_files_snapshot_is_scanned_as_its_text_not_its_base64(tmp_path):
    """Regression: the import's secret scan read a file-delete audit blob's base64 as one high-entropy string,
    so the README's own round trip (a file written and deleted with audit.files on) was refused."""
    memory = Memory.init(tmp_path / "ws", "artemis")
    memory.config_set("audit.files", True)
    memory.file_write("notes/today.md", b"Standup: the canary runs before every prod deploy.\n")
    memory.file_delete("notes/today.md")
    memory.file_write("notes/key.md", b"the key is ghp_Xq7Lm2Rt9Vb4Nc8Kd3Pw6Zs1Hy5Jf0Ag2Ue7Ti\n", allow_secret=True)
    memory.file_delete("notes/key.md")
    out = tmp_path / "out.adf"
    export_adf(memory, out, memory.log.head())
    db = sqlite3.connect(out)
    with db:
        db.execute("DELETE FROM adf_audit WHERE ref = 'notes/key.md'")
    db.close()
    with Memory.init(tmp_path / "copy", "artemis") as copy:
        assert import_adf(copy, out).rows["audit"] == 1
    export_adf(memory, tmp_path / "key.adf", memory.log.head())
    with Memory.init(tmp_path / "copy2", "artemis") as copy:
        with pytest.raises(MemError, match="GitHub Token"):
            import_adf(copy, tmp_path / "key.adf")


def test_the_files_loop_counter_is_kept_by_the_import_and_written_by_the_export(tmp_path, fixture_adf):
    """ADF's adf_loop counts with AUTOINCREMENT: the fixture's loop used seqs up to 32 and was cleared without
    audit, so its next message is S33 and a citation of S1-S32 names one of its own, never an event the
    import made. An export writes the counter at its seq, so an ADF runtime (and an import) appends after
    every seq the file names: with its last live row cleared, it used to start again at S1, under an
    archived message's seq."""
    memory = Memory.init(tmp_path / "ws", "artemis")
    for i in range(3):
        memory.loop_append("user", [{"type": "text", "text": f"m{i}"}])
    memory.loop_compact("summary")
    memory.loop_clear()
    memory.config_set("audit.files", True)
    head = memory.log.head()
    out = tmp_path / "out.adf"
    export_adf(memory, out, head)
    runtime = shutil.copy(out, tmp_path / "runtime.adf")  # as an ADF runtime appends to it
    db = sqlite3.connect(runtime)
    with db:
        assert db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'adf_loop'").fetchone() == (head,)
        db.execute("INSERT INTO adf_loop (role, content_json, created_at) VALUES ('user', '[]', 0)")
        assert db.execute("SELECT max(seq) FROM adf_loop").fetchone() == (head + 1,)
    db.close()
    for adf, counter in ((fixture_adf, 32), (out, head)):
        with Memory.init(tmp_path / adf.stem, "artemis") as copy:
            import_adf(copy, adf)
            assert [e.kind for e in copy.log.read(upto=counter)] == ["import.gap"]
            assert copy.loop_append("user", [{"type": "text", "text": "next"}]).seq > counter


@pytest.mark.parametrize("loop, audit, counter, expected", [
    ([text_row(2, "live two")], [("loop:main", 1, 2, loop_blob([1, 2]))], None,
     "adf_loop seq 2 is live and archived in adf_audit row 1 too"),
    ([], [("loop:main", 1, 2, loop_blob([1, 2])), ("loop:main", 2, 3, loop_blob([2, 3]))], None,
     "adf_audit row 2 archives seq 2 as adf_audit row 1 does: a message has one seq"),
    ([], [("loop:main", 1, 1, loop_blob([1, 1]))], None, "adf_audit row 1 archives seq 1 twice"),
    ([], [("loop:main", 1, 1, loop_blob([2 ** 60]))], None,
     "adf_audit row 1 archives a message whose seq must be an integer between 1 and 9007199254740991"),
    ([], [("loop:main", 1, 1, loop_blob([0]))], None, "whose seq must be an integer between 1"),
    ([text_row(1, "x")], [], 2 ** 60, "the file's loop counter (sqlite_sequence) must be an integer between 0"),
    ([text_row(1, "x")], [], "many", "the file's loop counter (sqlite_sequence) must be an integer"),
])
def test_seqs_that_cannot_be_kept_are_refused_in_one_line(tmp_path, loop, audit, counter, expected):
    adf = build_adf(tmp_path / "bad.adf", loop=loop, audit=audit)
    if counter is not None:
        db = sqlite3.connect(adf)
        with db:
            db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'adf_loop'", (counter,))
        db.close()
    ws, result = import_cli(tmp_path, adf)
    refused_in_one_line(result, expected)
    assert log_rows(ws) == []


@pytest.mark.parametrize("rows, expected", [
    ([text_row(0, "x")], "adf_loop seq 0"),
    ([text_row(2 ** 60, "x")], "adf_loop seq 1152921504606846976"),
    ([text_row(3, "x", role="system")], "role must be one of user, assistant, not 'system'"),
    ([(3, "user", "{not json")], "content_json is not valid JSON"),
    ([(3, "user", "[" * 5000 + "]" * 5000)], "content_json is nested more than 64 deep"),
    ([(3, "user", b'[{"type": "text", "text": "\xff"}]')], "adf_loop seq 3 content_json is not valid UTF-8 (byte 27)"),
    ([(3, "user", "[42]")], "content must be a non-empty JSON array of blocks"),
])
def test_hostile_loop_rows_are_refused_in_one_line(tmp_path, rows, expected):
    ws, result = import_cli(tmp_path, build_adf(tmp_path / "bad.adf", loop=rows))
    refused_in_one_line(result, expected)
    assert log_rows(ws) == []


def test_a_text_column_that_is_not_utf8_is_refused_in_one_line(tmp_path):
    """Invalid UTF-8 stored as TEXT: sqlite3's own error quotes the bytes; the import names the column."""
    adf = build_adf(tmp_path / "bad.adf")
    with sqlite3.connect(adf) as db:
        db.execute("INSERT INTO adf_loop (seq, loop, role, content_json, created_at) VALUES (1, 'main', 'user', "
                   "CAST(? AS TEXT), 5)", (b'[{"type": "text", "text": "\xff\xfe"}]',))
    ws, result = import_cli(tmp_path, adf)
    refused_in_one_line(result, "adf_loop: a row's content_json is not valid UTF-8 text")
    assert log_rows(ws) == []


def test_bad_config_json_is_refused_in_one_line(tmp_path):
    ws, result = import_cli(tmp_path, build_adf(tmp_path / "bad.adf", config="{\"audit\": "))
    refused_in_one_line(result, "adf_config.config_json is not valid JSON")
    assert log_rows(ws) == []


@pytest.mark.parametrize("path, expected", [
    ("../../x", "'..'"), ("/etc/passwd", "must be a relative path"), ("a/./b", "'.'"),
    ("imported/" + "x" * 600, "longer than 512"), (".mem/log.db", "belongs to mindlog itself"),
])
def test_unsafe_file_paths_are_refused(tmp_path, path, expected):
    adf = build_adf(tmp_path / "bad.adf", files=[(path, b"x")])
    with Memory.init(tmp_path / "ws", "me") as memory:
        with pytest.raises(MemError) as refused:
            import_adf(memory, adf)
        assert expected in str(refused.value) and "\n" not in str(refused.value)
        assert memory.log.head() == 0


def test_an_unsafe_file_path_is_refused_through_the_cli_in_one_line(tmp_path):
    ws, result = import_cli(tmp_path, build_adf(tmp_path / "bad.adf", files=[("../../x", b"x")]))
    refused_in_one_line(result, "'..'")
    assert log_rows(ws) == []


def test_a_page_with_an_unusable_slug_is_kept_aside_and_the_workspace_works(tmp_path):
    long_slug = "a" * 200  # over a slug's 120 characters; a file name over 255 bytes is refused whole (test_input_bounds)
    adf = build_adf(tmp_path / "slug.adf", files=[(f"mind/{long_slug}.md", PAGE_ROW), ("mind/log.md", b"# Log\n"),
                                                  ("mind/Bad Name.md", PAGE_ROW)])
    ws, result = import_cli(tmp_path, adf)
    assert result.returncode == 0, result.stderr
    assert f"kept as a file: imported/other/mind/{long_slug}.md".encode() in result.stdout
    assert b"kept as a file: imported/other/mind/Bad Name.md" in result.stdout
    assert sorted(p.name for p in (ws / "mind").iterdir()) == ["log.md"]
    page = tmp_path / "p.md"
    page.write_bytes(PAGE_ROW)
    for command in (["status"], ["always", "add", "x"], ["page", "write", "p", "--file", page], ["replay"]):
        run_mem("-w", ws, *command, check=True)


def test_a_brotli_bomb_is_refused_on_import(tmp_path):
    from eventstore.blobs import MAX_BLOB_BYTES

    bomb = brotli.compress(b"[" + b" " * (MAX_BLOB_BYTES + 1) + b"]", quality=1)
    assert len(bomb) < 100_000
    ws, result = import_cli(tmp_path, build_adf(tmp_path / "bomb.adf", audit=[("loop:main", 1, 2, bomb)]))
    refused_in_one_line(result, "expands to more than 64 MiB")
    assert log_rows(ws) == []
    schema21 = tmp_path / "bomb21.adf"
    shutil.copy(FIXTURE, schema21)
    schema21.chmod(0o644)
    db = sqlite3.connect(schema21)
    db.execute("INSERT INTO adf_audit (source, start_at, end_at, entry_count, size_bytes, data, created_at) "
               "VALUES ('loop', 1, 2, 1, 1, ?, 5)", (bomb,))
    db.commit()
    db.close()
    ws, result = import_cli(tmp_path / "b", schema21)
    refused_in_one_line(result, "expands to more than 64 MiB")


def test_audit_read_and_cite_of_a_bomb_already_in_the_log_answer_one_line(tmp_path):
    """A log written before imports were checked may hold a bomb: reading it stays bounded."""
    from eventstore.envelope import new_event
    from eventstore.kinds import AuditImport
    from eventstore.blobs import MAX_BLOB_BYTES

    bomb = brotli.compress(b"[" + b" " * (MAX_BLOB_BYTES + 1) + b"]", quality=1)
    memory = Memory.init(tmp_path / "ws", "me")
    memory.log.append([new_event(AuditImport(source="loop:main", start_seq=1, end_seq=5, entry_count=5,
                                             size_bytes=1, data=bomb, created_at=1), agent="me", layer="agent")])
    memory.close()
    for command in (["audit", "read", "3"], ["cite", "[S3]"]):
        refused_in_one_line(run_mem("-w", tmp_path / "ws", *command), "audit blob 1 expands to more than 64 MiB")


def test_an_export_names_the_workspace_own_agent(tmp_path):
    from eventstore.envelope import new_event
    from eventstore.kinds import AlwaysAdd

    memory = Memory.init(tmp_path / "ws", "bob")
    memory.log.append([new_event(AlwaysAdd(line="from someone else"), agent="alice", layer="mind")])
    memory.always_add("mine")
    export_adf(memory, tmp_path / "out.adf", memory.log.head())
    meta = dict((k, v) for k, v, _p in table_rows(tmp_path / "out.adf", "adf_meta")[1])
    assert (meta["adf_name"], meta["adf_handle"]) == ("bob", "bob")


def test_mindlogs_own_index_with_trust_flags_is_not_kept_aside(tmp_path):
    """mind.md flags a superseded or stale page in its catalog line; the import knows it for mindlog's own
    index (it used to keep it aside as imported/<name>/mind.md, a second copy in every round trip)."""
    memory = Memory.init(tmp_path / "ws", "artemis")
    memory.write_page("deploy", PAGE)
    memory.write_page("manual", PAGE.replace(b"type: procedure", b"type: procedure\nstatus: 'superseded-by: deploy'"))
    memory.write_page("rollback", PAGE.replace(b"type: procedure", b"type: procedure\nstale_after: 2001-01-01"))
    mind = (memory.root / "mind.md").read_text()
    assert "(superseded by deploy)" in mind and "(stale since 2001-01-01)" in mind
    first, second = tmp_path / "first.adf", tmp_path / "second.adf"
    export_adf(memory, first, memory.log.head())
    again = Memory.init(tmp_path / "ws2", "artemis")
    assert import_adf(again, first).kept_aside == []
    assert (again.root / "mind.md").read_text() == mind
    export_adf(again, second, again.log.head())
    assert [r[:2] for r in table_rows(first, "adf_files")[1]] == [r[:2] for r in table_rows(second, "adf_files")[1]]
    edited = Memory.init(tmp_path / "ws3", "artemis")  # a hand-edited index is still kept aside
    db = sqlite3.connect(first)
    with db:
        db.execute("UPDATE adf_files SET content = replace(content, '(stale since', '(old since') "
                   "WHERE path = 'mind.md'")
    db.close()
    assert import_adf(edited, first).kept_aside == ["imported/artemis/mind.md"]


def test_local_layers_come_back_as_their_entries_and_pages(tmp_path):
    """An export renders local layers' files into adf_files; an import declared the layers again but kept
    their files aside: `mem entry list decisions` was empty after it. They come back as what they were (an
    entries file line by line, a reversal to the entry it names; a pages layer's file as its page), and only
    a layer file that cannot be read back whole is kept aside, not left at a path the layer owns."""
    memory = Memory.init(tmp_path / "ws", "artemis")
    memory.declare_layer("decisions", "memory/decisions.md")
    memory.declare_layer("drafts", "notes/drafts/", "pages")
    first = memory.entry_add("decisions", "[DECISION] 2026-11-01: Deploys go out on Fridays")
    memory.entry_add("decisions", "[FACT] 2026-11-02: The canary takes ten minutes")
    memory.entry_add("decisions", "[DECISION] 2026-11-29: Deploys never go out on Fridays", first.id)
    memory.shared_page_write("drafts", "launch", PAGE)
    out = tmp_path / "out.adf"
    export_adf(memory, out, memory.log.head())

    def entries(workspace):
        return [(e["type"], e["date"], e["content"], e["reverses"] is not None, e["reversed_by"] is not None)
                for e in json.loads(run_mem("-w", workspace, "entry", "list", "decisions", "--json", check=True).stdout)]

    run_mem("init", "--agent", "artemis", "-w", tmp_path / "ws2", check=True)
    imported = json.loads(run_mem("-w", tmp_path / "ws2", "import", "adf", out, "--json", check=True).stdout)
    assert imported["kept_aside"] == []
    assert imported["rows"]["entries"] == 3 and sum(imported["rows"].values()) == imported["events"], imported
    assert entries(tmp_path / "ws2") == entries(memory.root) == [
        ("DECISION", "2026-11-01", "Deploys go out on Fridays", False, True),
        ("FACT", "2026-11-02", "The canary takes ten minutes", False, False),
        ("DECISION", "2026-11-29", "Deploys never go out on Fridays", True, False)]
    listed = json.loads(run_mem("-w", tmp_path / "ws2", "page", "list", "--layer", "drafts", "--json", check=True).stdout)
    assert [(p["slug"], p["heads"]) for p in listed] == [("launch", 1)]
    assert (tmp_path / "ws2/notes/drafts/launch.md").read_bytes() == PAGE
    reversal = json.loads(run_mem("-w", tmp_path / "ws2", "entry", "list", "decisions", "--json").stdout)
    assert reversal[2]["reverses"] == reversal[0]["id"] and reversal[0]["reversed_by"] == reversal[2]["id"]
    # the 18 characters of an id the file shows are kept: exported again, the layer's file says the same
    originals = [row.id if hasattr(row, "id") else row["id"] for row in memory.entries("decisions")]
    assert [reversal[i]["id"][:18] for i in (0, 2)] == [originals[i][:18] for i in (0, 2)]
    second = tmp_path / "second.adf"
    run_mem("-w", tmp_path / "ws2", "export", "adf", second, check=True)
    assert file_content(second, "memory/decisions.md") == file_content(out, "memory/decisions.md")
    assert "(reverses " + first.id[:18] + ")" in file_content(second, "memory/decisions.md")

    db = sqlite3.connect(out)  # a layer file edited by hand past reading back: kept aside, as before
    with db:
        db.execute("UPDATE adf_files SET content = CAST('# decisions\n\nnot an entry\n' AS BLOB) "
                   "WHERE path = 'memory/decisions.md'")
    db.close()
    again = Memory.init(tmp_path / "ws3", "artemis")
    report = import_adf(again, out)
    assert report.kept_aside == ["imported/artemis/memory/decisions.md"]
    paths = {row[0] for row in again.files()}
    assert "memory/decisions.md" not in paths and "not an entry" in again.file_text(
        "imported/artemis/memory/decisions.md")
    assert [spec["layer"] for spec in again.layers()] == ["decisions", "drafts"]

@pytest.mark.parametrize("config, expected", [
    ({"context": "abc"}, "config_json's context must be a JSON object, not \"abc\""),
    ({"context": [1, 2]}, "context must be a JSON object, not [1, 2]"),
    ({"context": {"audit": True}}, "context.audit must be a JSON object, not true"),
    ({"audit": "on"}, "audit must be a JSON object, not \"on\""),
    ({"layers": "str"}, "layers must be a JSON object, not \"str\""),
])
def test_a_config_whose_objects_are_not_objects_is_refused_in_one_line(tmp_path, config, expected):
    """Such a config imported, then broke the workspace at its first compaction (or, `layers`, the import)."""
    adf = build_adf(tmp_path / "bad.adf", loop=[text_row(1, "hello")], config=json.dumps(config))
    ws, result = import_cli(tmp_path, adf)
    refused_in_one_line(result, expected)
    assert log_rows(ws) == []


def test_a_log_already_holding_a_config_of_non_objects_still_works(tmp_path):
    """A log imported before the check may hold one: every reader takes a non-object as absent."""
    from eventstore.envelope import new_event
    from eventstore.kinds import ConfigSet

    memory = Memory.init(tmp_path / "ws", "me")
    memory.log.append([new_event(ConfigSet(key="", value={"context": "abc", "audit": [1], "layers": "str",
                                                          "lint": 3}), agent="me", layer="agent")])
    memory.close()
    ws = tmp_path / "ws"
    run_mem("-w", ws, "loop", "append", "--role", "user", "--text", "hello", check=True)
    (tmp_path / "s.txt").write_text("summary")
    assert b"archived seqs 2..2 in audit 1" in run_mem("-w", ws, "loop", "compact", "--summary-file",
                                                        tmp_path / "s.txt", check=True).stdout
    assert b"hello" in run_mem("-w", ws, "audit", "read", "2", check=True).stdout
    run_mem("-w", ws, "lint", check=True)
    assert b"no differences" in run_mem("-w", ws, "replay", "--check", check=True).stdout


def test_lint_reports_a_citation_into_an_unreadable_blob_as_a_finding(tmp_path):
    """Lint stopped at the first blob it could not read ("error: ... not valid brotli"), listing nothing."""
    from eventstore.envelope import new_event
    from eventstore.kinds import AuditImport

    memory = Memory.init(tmp_path / "ws", "me")
    memory.log.append([new_event(AuditImport(source="loop:main", start_seq=1, end_seq=5, entry_count=5,
                                             size_bytes=1, data=b"\x1b\x00", created_at=1), agent="me",
                                 layer="agent")])
    memory.close()
    page = tmp_path / "deploy.md"
    page.write_text("---\ntype: procedure\n---\n# Deploy\n\nThe owner acks prod [S3].\n")
    run_mem("-w", tmp_path / "ws", "page", "write", "deploy", "--file", page, check=True)
    result = run_mem("-w", tmp_path / "ws", "lint", "--check", "citations")
    assert result.returncode == 1 and b"Traceback" not in result.stderr, result.stderr
    assert b"[S3]" in result.stdout and b"cannot be resolved: audit blob 1 is not valid brotli" in result.stdout


def test_an_import_names_the_tables_it_leaves_out_with_their_rows(tmp_path, fixture_adf):
    """Regression (newcomer9): an ADF file's identity, tasks, timers and logs were dropped by `mem import adf` without
    a word (an export then has no such tables). The import says which of the file's tables hold rows it does not
    take, with how many; its JSON has them too; a file whose such tables are empty says nothing of them."""
    db = sqlite3.connect(fixture_adf)
    db.execute("INSERT INTO adf_identity (purpose, value) VALUES ('signing', x'00')")
    db.executemany("INSERT INTO adf_tasks (id, tool, created_at) VALUES (?, 'fs_read', 1)", [("t1",), ("t2",)])
    db.execute("INSERT INTO adf_timers (schedule_json, next_wake_at, created_at) VALUES ('{}', 1, 1)")
    db.commit()
    db.close()
    ws, result = import_cli(tmp_path, fixture_adf)
    assert result.returncode == 0, result.stderr
    assert ("left out the rows of adf_identity (1 row), adf_tasks (2 rows), adf_timers (1 row): mindlog keeps an "
            "agent's memory") in result.stdout.decode(), result.stdout
    again = run_mem("init", "-w", tmp_path / "json", "--agent", "me", check=True)
    assert again.returncode == 0
    told = json.loads(run_mem("-w", tmp_path / "json", "import", "adf", fixture_adf, "--json", check=True).stdout)
    assert told["not_read"] == {"adf_identity": 1, "adf_tasks": 2, "adf_timers": 1}
    _ws, plain = import_cli(tmp_path / "plain", FIXTURE)
    assert b"left out the rows" not in plain.stdout, plain.stdout


@pytest.mark.parametrize("files, says", [
    ([("notes", b"a file"), ("notes/a.md", b"# A\n")], "adf_files 'notes/a.md': notes/a.md cannot be written: notes is "
                                                        "a file, and notes/a.md would make it a folder too"),
    ([("Readme.md", b"one"), ("readme.md", b"two")], "adf_files 'readme.md': readme.md cannot be written: Readme.md is "
                                                      "there, the same name but for letter case"),
])
def test_an_imported_file_that_is_a_folder_of_another_or_its_twin_is_refused(tmp_path, files, says):
    """Regression: an import took file paths that `mem file write` refuses (a file and a folder at once, names equal but
    for letter case), and the workspace could then not be written out or checked out."""
    adf = build_adf(tmp_path / "paths.adf", files=files)
    ws, result = import_cli(tmp_path, adf)
    refused_in_one_line(result, says)
    assert log_rows(ws) == []


def test_a_path_listed_twice_in_adf_files_is_refused_in_one_line(tmp_path):
    """Regression (nc13c): an adf_files table without its PRIMARY KEY listing a path twice was imported with the last
    row, the other dropped without a word (a loop seq listed twice is refused)."""
    adf = tmp_path / "dup.adf"
    build_adf(adf, tables=("adf_meta", "adf_config", "adf_loop", "adf_audit"))
    with sqlite3.connect(adf) as db:
        db.execute("CREATE TABLE adf_files (path TEXT, content BLOB NOT NULL, mime_type TEXT, size INTEGER NOT NULL, "
                   "protection TEXT, created_at TEXT, updated_at TEXT, metadata_json TEXT)")
        db.executemany("INSERT INTO adf_files (path, content, size, created_at, updated_at) VALUES (?, ?, 1, ?, ?)",
                       [("notes/a.txt", b"x", ISO, ISO), ("notes/a.txt", b"y", ISO, ISO)])
    ws, result = import_cli(tmp_path, adf)
    refused_in_one_line(result, "adf_files path 'notes/a.txt' appears twice")
    assert log_rows(ws) == []


@pytest.mark.parametrize("change, says", [
    ("UPDATE adf_files SET content = NULL", "adf_files 'notes/a.txt' has no content (NULL)"),
    ("UPDATE adf_files SET created_at = 'garbage'", "adf_files 'notes/a.txt' created_at must be an ISO 8601 time"),
    ("UPDATE adf_files SET updated_at = '99999-99-99'", "adf_files 'notes/a.txt' updated_at must be an ISO 8601 time"),
    ("UPDATE adf_config SET updated_at = 'yesterday'", "adf_config.updated_at must be an ISO 8601 time"),
    ("UPDATE adf_loop SET created_at = 9223372036854775807", "created_at (milliseconds since 1970) must be an integer "
                                                            "between 0 and 253402300799999"),
    ("UPDATE adf_loop SET created_at = -5", "created_at (milliseconds since 1970) must be an integer between 0"),
    ("UPDATE adf_audit SET created_at = 253402300800000", "created_at (milliseconds since 1970) must be an integer "
                                                          "between 0 and 253402300799999"),
], ids=["null-content", "junk-created", "junk-updated", "config-time", "loop-huge", "loop-negative", "audit-huge"])
def test_a_file_with_no_content_or_a_time_that_is_no_time_is_refused(tmp_path, change, says):
    """Regression (nc13c): a file with NULL content was imported as an empty file, and junk times ('garbage', a loop
    time of 2**63) were taken as given (carried into the next export, or an event at 1970)."""
    adf = build_adf(tmp_path / "junk.adf", loop=[text_row(1, "hello")], files=[("notes/a.txt", b"x")],
                    audit=[("file", None, None, brotli.compress(json.dumps(
                        {"path": "old.txt", "content_base64": "eA==", "mime_type": "text/plain", "size": 1}).encode()))],
                    config="{}")
    with sqlite3.connect(adf) as db:
        for table in ("adf_files", "adf_loop", "adf_audit"):  # as a hostile file is made: without its NOT NULLs
            columns = ", ".join(row[1] for row in db.execute(f"PRAGMA table_info({table})"))
            db.execute(f"CREATE TABLE loose AS SELECT * FROM {table}")
            db.execute(f"DROP TABLE {table}")
            db.execute(f"CREATE TABLE {table} ({columns})")
            db.execute(f"INSERT INTO {table} SELECT * FROM loose")
            db.execute("DROP TABLE loose")
        db.execute(change)
    ws, result = import_cli(tmp_path, adf)
    refused_in_one_line(result, says)
    assert log_rows(ws) == []


def test_the_log_says_what_an_import_gap_and_a_restored_change_log_stand_for(tmp_path, fixture_adf):
    """Regression (nc24b): `mem log` showed an empty summary where an imported log begins (import.gap), and for the
    whole config the file brought (a restored change log's: test_adopt)."""
    ws = tmp_path / "ws"
    run_mem("init", "-w", ws, check=True)
    run_mem("-w", ws, "import", "adf", fixture_adf, check=True)
    lines = run_mem("-w", ws, "log", check=True).stdout.decode().splitlines()
    summaries = {line.split()[4]: line.split(None, 5)[5] if len(line.split()) > 5 else "" for line in lines}
    assert summaries["import.gap"] == "stands for seqs 1 to 31 of artemis"
    assert summaries["config.set"] == "the whole config"


def test_an_adf_file_with_nothing_to_keep_says_so(tmp_path):
    """Regression (nc24a): a file of adf_meta alone was "imported ... as 0 events ()"."""
    empty = tmp_path / "empty.adf"
    build_adf(empty, tables=("adf_meta",))
    run_mem("init", "-w", tmp_path / "ws", check=True)
    said = run_mem("-w", tmp_path / "ws", "import", "adf", empty, check=True).stdout.decode()
    assert said == f"imported {empty} (schema 28): it holds nothing mindlog keeps; nothing appended\n"
    assert log_rows(tmp_path / "ws") == []


def test_an_adf_file_whose_name_holds_a_hash_or_a_question_mark_is_the_file_read(tmp_path, fixture_adf):
    """Regression (nc25a): the file's path went into an SQLite URI unescaped, so `backup#2.adf` opened `backup` (the
    rest read as a fragment), read-write: it made an empty file `backup` and failed the import."""
    for name in ("backup#2.adf", "what?.adf"):
        odd = tmp_path / name
        shutil.copy(fixture_adf, odd)
        ws = tmp_path / f"ws-{len(name)}"
        run_mem("init", "-w", ws, check=True)
        said = run_mem("-w", ws, "import", "adf", odd, check=True).stdout.decode()
        assert said.startswith(f"imported {odd} (schema 21) as ")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["artemis.adf", "backup#2.adf", "what?.adf"]


def test_an_entry_reversed_twice_comes_back_with_no_prefix_shared_with_another(tmp_path):
    """Regression (nc30b): of an entry reversed by two later ones, the import gave the first reversal the 18
    characters of the entry it reverses (a line takes those of the nearest kept line above it): a citation of the
    entry by the prefix its file shows named two entries in the copy, and lint found it unresolvable."""
    w = ("-w", tmp_path / "a")
    run_mem("init", *w, "--agent", "a", check=True)
    run_mem(*w, "layer", "add", "decisions", "memory/decisions.md", check=True)
    first = run_mem(*w, "entry", "add", "decisions", "[DECISION] 2026-11-01: Fridays", check=True).stdout.split()[0]
    for text in ("[DECISION] 2026-11-29: Never Fridays", "[DECISION] 2026-11-30: Fridays again"):
        run_mem(*w, "entry", "add", "decisions", text, "--reverses", first.decode(), check=True)
    run_mem(*w, "export", "adf", tmp_path / "a.adf", check=True)
    copy = ("-w", tmp_path / "copy")
    run_mem("init", *copy, "--agent", "a", check=True)
    run_mem(*copy, "import", "adf", tmp_path / "a.adf", check=True)
    ids = [e["id"] for e in json.loads(run_mem(*copy, "entry", "list", "decisions", "--json", check=True).stdout)]
    assert len({id[:18] for id in ids}) == 3 and ids == sorted(ids), ids
    cited = run_mem(*copy, "cite", first.decode()[:18], check=True).stdout.decode()
    assert cited.endswith("[DECISION] 2026-11-01: Fridays [reversed by " + ids[2][:18] + "]\n"), cited
    assert (tmp_path / "copy/memory/decisions.md").read_text() == (tmp_path / "a/memory/decisions.md").read_text()


def _layer_file(tmp_path, lines: list[str]) -> Path:
    """An export of a workspace with a `notes` entries layer, its file's text replaced by `lines`."""
    w = ("-w", tmp_path / "src")
    run_mem("init", *w, "--agent", "a", check=True)
    run_mem(*w, "layer", "add", "notes", "memory/notes.md", check=True)
    run_mem(*w, "entry", "add", "notes", "[FACT] 2026-12-04: a", check=True)
    run_mem(*w, "export", "adf", tmp_path / "x.adf", check=True)
    text = ("# notes\n\n" + "".join(f"{line}\n" for line in lines)).encode()
    db = sqlite3.connect(tmp_path / "x.adf")
    db.execute("UPDATE adf_files SET content = ?, size = ? WHERE path = 'memory/notes.md'", (text, len(text)))
    db.commit()
    db.close()
    return tmp_path / "x.adf"


def test_a_prefix_past_the_year_9999_is_not_kept_and_the_copy_stays_usable(tmp_path):
    """Regression (nc31a): an entries file naming ids past the year 9999 (`ffffffff-ffff-7fff`) made the import record
    events stamped in the year 10889, then fail on them with a traceback, as every later command did (replay, export):
    such prefixes are not kept (the lines take the file's time) and the copy works."""
    adf = _layer_file(tmp_path, ["[FACT] 2026-12-04: a [reversed by ffffffff-ffff-7fff]",
                                 "[FACT] 2026-12-04: not a (reverses ffffffff-ffff-7ffe)"])
    copy = ("-w", tmp_path / "copy")
    run_mem("init", *copy, "--agent", "a", check=True)
    run_mem(*copy, "import", "adf", adf, check=True)
    entries = json.loads(run_mem(*copy, "entry", "list", "notes", "--json", check=True).stdout)
    assert [e["content"] for e in entries] == ["a", "not a"] and all(e["id"] < "ffff" for e in entries), entries
    assert b"no differences" in run_mem(*copy, "replay", "--check", check=True).stdout
    run_mem(*copy, "export", "adf", tmp_path / "again.adf", check=True)


def test_imported_lines_between_shown_prefixes_take_prefixes_of_their_own(tmp_path):
    """Regression (nc31a): the lines between two prefixes a file shows all took the same 18 characters: once one of
    them was reversed, the prefix the file showed for it named several entries (`mem cite` and `--reverses` refused
    it as ambiguous)."""
    w = ("-w", tmp_path / "a")
    run_mem("init", *w, "--agent", "a", check=True)
    run_mem(*w, "layer", "add", "notes", "memory/notes.md", check=True)
    first = run_mem(*w, "entry", "add", "notes", "[FACT] 2026-12-04: a", check=True).stdout.split()[0].decode()
    for n in (1, 2, 3):
        run_mem(*w, "entry", "add", "notes", f"[FACT] 2026-12-04: not a {n}", "--reverses", first, check=True)
    run_mem(*w, "export", "adf", tmp_path / "a.adf", check=True)
    copy = ("-w", tmp_path / "copy")
    run_mem("init", *copy, "--agent", "a", check=True)
    run_mem(*copy, "import", "adf", tmp_path / "a.adf", check=True)
    ids = [e["id"] for e in json.loads(run_mem(*copy, "entry", "list", "notes", "--json", check=True).stdout)]
    assert len({id[:18] for id in ids}) == len(ids) == 4 and ids == sorted(ids), ids
    run_mem(*copy, "entry", "add", "notes", "[FACT] 2026-12-04: not not a 1", "--reverses", ids[1][:18], check=True)
    assert run_mem(*copy, "cite", ids[1][:18], check=True).returncode == 0
