"""`mem export adf` and `mem import adf`: real ADF files, the fixture's older schema, round trips."""

import json
import shutil
import sqlite3

import brotli
import pytest

from eventstore.errors import InvalidInput
from projections import audit
from projections.adf_file import TABLES, export_adf, import_adf
from projections.memory import Memory

from adf_recipe import audit_read as recipe_read
from conftest import PAGE, run_mem

FIXTURE = "/work/shared/fixtures/artemis.adf"


@pytest.fixture
def fixture_adf(tmp_path):
    import os
    from pathlib import Path

    here = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "artemis.adf"
    source = here if here.exists() else Path(os.environ.get("MEM_FIXTURES", FIXTURE))
    copy = tmp_path / "artemis.adf"
    shutil.copy(source, copy)
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
    second = tmp_path / "second.adf"
    export_adf(again, second, again.log.head())
    for table in TABLES:
        columns, rows_a = table_rows(first, table)
        _, rows_b = table_rows(second, table)
        if table == "adf_meta":
            rows_a = [r for r in rows_a if r[0] not in ("adf_created_at", "adf_updated_at")]
            rows_b = [r for r in rows_b if r[0] not in ("adf_created_at", "adf_updated_at")]
        if table == "adf_files":  # the wiki's own files are re-derived: their times are the import's
            rows_a = [r if not r[0].startswith("mind") else r[:6] for r in rows_a]
            rows_b = [r if not r[0].startswith("mind") else r[:6] for r in rows_b]
        assert rows_a == rows_b, table
    for seq in range(1, 20):
        assert recipe_read(first, seq) == recipe_read(second, seq)
    assert (again.root / "mind/log.md").read_text() == (memory.root / "mind/log.md").read_text()
    assert audit.audit_read(again.views, again.log, 3).source == "audit"


def test_import_the_fixture_with_its_older_schema(tmp_path, fixture_adf):
    result = run_mem("-w", tmp_path / "ws", "init", "--agent", "artemis", check=True)
    result = run_mem("-w", tmp_path / "ws", "import", "adf", fixture_adf, check=True)
    assert b"(schema 21)" in result.stdout and b"kept as a file: imported/artemis/mind.md" in result.stdout
    listing = json.loads(run_mem("-w", tmp_path / "ws", "file", "list", "--json", check=True).stdout)
    by_path = {f["path"]: f for f in listing}
    assert by_path["document.md"]["protection"] == "no_delete" and by_path["document.md"]["size"] == 1728
    assert by_path["imported/artemis/mind.md"]["size"] == 1069
    config = json.loads(run_mem("-w", tmp_path / "ws", "config", "show", check=True).stdout)
    assert config["audit"]["loop"] is False and config["name"] == "artemis"
    cited = run_mem("-w", tmp_path / "ws", "cite", "adf-file://imported/artemis/mind.md", check=True).stdout
    assert cited.startswith(b"# mind\n")


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
    assert fresh.log.head() == 0
