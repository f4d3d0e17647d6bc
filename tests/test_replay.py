"""`mem replay` rebuilds byte-identical views; `--to` and `--check`; as-of reads agree with a rebuild."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from subprocess import Popen
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.errors import MemError, StorageFailure
from eventstore.instants import format_instant
from projections import adf, audit, bulk, search
from projections.fold import lines_json
from projections.memory import Memory
from projections.replay import _build, check, replay

from conftest import PAGE, run_mem

SLUGS = ["alpha", "beta", "gamma-notes", "d.e"]
TEXTS = ["# Alpha\n\nfirst", "# Beta [x]\n\nsecond\n", "no heading at all\n", "# Ünïcode — title\n\nß\n", ""]

op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(SLUGS), st.sampled_from(TEXTS),
              st.sampled_from(["", "a hook", "hook: with colon"]), st.sampled_from(["", "why [S1]"])),
    st.tuples(st.just("delete"), st.sampled_from(SLUGS)),
    st.tuples(st.just("rename"), st.sampled_from(SLUGS), st.sampled_from(SLUGS)),
    st.tuples(st.just("always_add"), st.text(min_size=1, max_size=30)),
    st.tuples(st.just("always_remove"), st.integers(min_value=1, max_value=4)),
    st.tuples(st.just("say"), st.sampled_from(["main", "planner"]), st.sampled_from(["user", "assistant"]),
              st.text(max_size=20)),
    st.tuples(st.just("compact"), st.sampled_from(["main", "planner"]), st.integers(min_value=0, max_value=3)),
    st.tuples(st.just("clear"), st.sampled_from(["main", "planner"]), st.none() | st.integers(-4, 4),
              st.none() | st.integers(-4, 4)),
    st.tuples(st.just("audit"), st.sampled_from(["loop", "files"]), st.booleans()),
    st.tuples(st.just("file"), st.sampled_from(["a.txt", "b/c.md"]), st.booleans()),
)


def perform(memory: Memory, step) -> None:
    kind = step[0]
    try:
        if kind == "write":
            _, slug, text, hook, note = step
            fm = "type: note\n" + (f"description: {hook!r}\n" if hook else "")
            memory.write_page(slug, f"---\n{fm}---\n{text}".encode(), note)
        elif kind == "delete":
            memory.delete_page(step[1], "gone")
        elif kind == "rename":
            memory.rename_page(step[1], step[2])
        elif kind == "always_add":
            memory.always_add(step[1])
        elif kind == "always_remove":
            memory.always_remove(step[1])
        elif kind == "say":
            memory.loop_append(step[2], [{"type": "text", "text": step[3]}], step[1])
        elif kind == "compact":
            memory.loop_compact(f"summary of {step[1]}", step[2], step[1])
        elif kind == "clear":
            memory.loop_clear(step[2], step[3], step[1])
        elif kind == "audit":
            memory.config_set(f"audit.{step[1]}", step[2])
        elif step[2]:
            memory.file_write(step[1], step[1].encode())
        else:
            memory.file_delete(step[1])
    except MemError:
        pass  # refused (a missing page, an empty line...): the log is unchanged, which is the point


WORDS = ["first", "second", "alpha", "summary", "title", "txt", "b"]


def found(views, word: str, as_of: int | None) -> set[tuple[str, str]]:
    return {(hit.citation, hit.snippet) for hit in search.search(views, word, as_of=as_of, day="2026-11-30",
                                                                   include_all=True, limit=1000)}


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".mem" not in p.parts}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(op, min_size=1, max_size=25), data=st.data())
def test_replay_is_byte_identical_to_incremental_updates(steps, data):
    with tempfile.TemporaryDirectory() as tmp:
        with Memory.init(Path(tmp) / "ws", "alice") as memory:
            memory.log.db.execute("PRAGMA synchronous = OFF")
            for step in steps:
                perform(memory, step)
            files, tables = snapshot(memory.root), memory.views.dump()
            assert check(memory).same
            replay(memory)
            assert snapshot(memory.root) == files
            assert memory.views.dump() == tables

            head = memory.log.head()
            at = data.draw(st.integers(min_value=0, max_value=head))
            rebuilt = _build(memory, Path(tmp) / "at.db", at, None)
            for path in set(memory.views.paths(at)) | set(rebuilt.paths()):
                assert memory.show(path, at) == rebuilt.file_text(path), path
            assert audit.loop_rows(memory.views, None, at) == audit.loop_rows(rebuilt, None)
            assert audit.audit_rows(memory.views, None, at) == audit.audit_rows(rebuilt, None)
            for word in WORDS:  # the all-versions index as of `at` finds what a rebuild up to `at` holds
                assert found(memory.views, word, at) == found(rebuilt, word, None), word
            rebuilt.close()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(op, min_size=4, max_size=25), batch=st.integers(min_value=1, max_value=4))
def test_a_rebuild_in_many_batches_through_the_writer_process_is_byte_identical(steps, batch):
    """A rebuild of more than a batch hands the history tables and the search index to a child process
    (bulk.HistoryWriter): batches of a few events make every one of them cross a batch and the process."""
    with tempfile.TemporaryDirectory() as tmp, patch.object(bulk, "BATCH", batch):
        with Memory.init(Path(tmp) / "ws", "alice") as memory:
            memory.log.db.execute("PRAGMA synchronous = OFF")
            for step in steps:
                perform(memory, step)
            moments = (None, memory.log.head() // 2)
            files, tables = snapshot(memory.root), memory.views.dump()
            hits = {(word, at): found(memory.views, word, at) for word in WORDS for at in moments}
            spawned = []
            with patch.object(bulk.subprocess, "Popen", lambda *a, **k: spawned.append(a) or Popen(*a, **k)):
                replay(memory)
            assert len(spawned) == (memory.log.head() > batch)  # a writer process for more than a batch
            assert snapshot(memory.root) == files
            assert memory.views.dump() == tables
            assert hits == {(word, at): found(memory.views, word, at) for word in WORDS for at in moments}


def test_a_writer_reading_the_log_takes_compressed_redacted_and_renamed_pages_as_the_fold_reads_them(memory, tmp_path):
    """A rebuild's writer process takes page_versions' ids, times and bodies from the SQLite log itself
    (bulk.FROM_LOG); the fold hands over what the log does not hold as the fold reads it (a body compressed or
    redacted, a renamed page's) and reads no ids of the wiki's events. Its views are a fold's, row for row."""
    from eventstore.envelope import CODEC_REDACTED, CODEC_ZSTD
    from projections.fold import catch_up
    from projections.redact import redact
    from projections.views import Views

    long = b"---\ntype: note\ndescription: long\n---\n# Long\n\n" + b"many words in a long page " * 40
    memory.write_page("a", long)
    memory.write_page("b", PAGE)
    memory.always_add("a rule")
    memory.write_page("a", long + b"and more\n")
    memory.rename_page("b", "c")
    memory.write_page("d", PAGE.replace(b"# ", b"# Secret ", 1))
    redact(memory, [memory.log.get_by_seq(6)], "leaked")
    memory.write_page("c", long)
    memory.delete_page("a", "gone")
    codecs = {codec for (codec,) in memory.log.db.execute("SELECT codec FROM events")}
    assert {CODEC_ZSTD, CODEC_REDACTED} <= codecs
    folded = Views(tmp_path / "folded.db")
    catch_up(memory.log, folded)  # event by event in this process, ids and all: what a rebuild must equal
    spawned = []
    with patch.object(bulk, "BATCH", 2), \
            patch.object(bulk.subprocess, "Popen", lambda *a, **k: spawned.append(a) or Popen(*a, **k)):
        rebuilt = bulk.build(memory.log, tmp_path / "rebuilt.db")
    assert spawned and spawned[0][0][-1] == str(memory.log.path)  # the writer was given the log
    assert rebuilt.dump() == folded.dump()
    assert rebuilt.db.execute("SELECT count(*) FROM pages WHERE version_id = x''").fetchone() == (0,)
    in_process = bulk.build(memory.log, tmp_path / "one-batch.db")  # its writer in this process
    for table in bulk.BUILT_FTS:  # the writer's FTS5 settings taken out at its end
        config = f"SELECT * FROM {table}_config ORDER BY k"
        assert rebuilt.db.execute(config).fetchall() == in_process.db.execute(config).fetchall() == \
            folded.db.execute(config).fetchall()
    assert in_process.dump() == folded.dump()
    for views in (rebuilt, folded, in_process):
        views.close()


def test_a_page_body_redacted_after_the_fold_read_it_is_written_as_a_fold_reads_it_now(memory, tmp_path):
    """The writer reads a page version's body from the log after the fold did: a redaction in between (a
    catch-up's page) leaves the body stored otherwise, and the writer takes its stand-in, as a fold reading it
    now would (the next command rebuilds the views anyway: a redaction is never folded)."""
    from projections.fold import unpacked_body
    from projections.redact import redact
    from projections.views import Views

    memory.write_page("a", PAGE)
    memory.write_page("b", PAGE)
    redact(memory, [memory.log.get_by_seq(1)], "leaked")
    views = Views(tmp_path / "new.db", fast=True)
    bulk.HistoryWriter(views.db, str(tmp_path / "new.db"))
    views.close()
    db = bulk._connect(str(tmp_path / "new.db"), str(memory.log.path))
    rows = [["a", 1, 0, 0, 0, "", "A", "", 0, "a", "note", 0, 0, 0],  # both sent as stored when the fold read them
            ["b", 2, 0, 0, 0, "", "B", "", 0, "b", "note", 0, 0, 0]]
    search.stage_versions(db, rows)
    bulk._insert_versions(db, len(rows))
    stored = dict(memory.log.db.execute("SELECT seq, body FROM events WHERE seq IN (1, 2)").fetchall())
    got = dict(db.execute("SELECT seq, doc FROM page_versions").fetchall())
    assert got == {1: unpacked_body(2, stored[1]), 2: stored[2]}
    assert b"[redacted: leaked]" in got[1]
    db.close()


def test_a_writer_child_that_fails_is_reported_and_its_build_leaves_nothing(memory, tmp_path):
    """The writer's child reads batches ahead of the one it writes (bulk.READ_AHEAD): one it cannot write still
    stops the build with the child's error, and nothing of the build is left."""
    import pytest

    for i in range(6):
        memory.always_add(f"rule {i}")
    (tmp_path / "build").mkdir()
    with patch.object(bulk, "BATCH", 2), patch.object(bulk.msgspec.msgpack, "encode", lambda obj: b"\xc1 no msgpack"):
        with pytest.raises(StorageFailure, match="history writer failed: DecodeError"):
            bulk.build(memory.log, tmp_path / "build" / "views.db")
    assert list((tmp_path / "build").iterdir()) == []


def test_a_writer_child_killed_midway_is_one_refusal_and_its_build_leaves_nothing(memory, tmp_path):
    """The writer's child killed (as by the OOM killer) is a MemError, which every edge reports in one line."""
    import pytest

    for i in range(6):
        memory.always_add(f"rule {i}")
    (tmp_path / "build").mkdir()
    add = bulk.HistoryWriter.add

    def add_after_a_kill(writer, *batch):
        if writer.child is not None and writer.child.poll() is None:
            writer.child.kill()
            writer.child.wait()
        return add(writer, *batch)

    with patch.object(bulk, "BATCH", 2), patch.object(bulk.HistoryWriter, "add", add_after_a_kill):
        with pytest.raises(StorageFailure, match="history writer failed: its process stopped"):
            bulk.build(memory.log, tmp_path / "build" / "views.db")
    assert list((tmp_path / "build").iterdir()) == []


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)))))
def test_always_rows_are_json_dumps_of_the_lines(lines):
    """The fold joins a list of plain lines itself (fold.lines_json); any list reads as json.dumps writes it."""
    assert lines_json(lines) == json.dumps(lines, ensure_ascii=False)


def test_replay_to_a_seq_then_catch_up(memory):
    memory.write_page("a", PAGE)
    memory.write_page("b", PAGE)
    memory.always_add("keep this")
    replay(memory, 1)
    assert memory.views.checkpoint() == 1
    assert (memory.root / "mind/a.md").exists() and not (memory.root / "mind/b.md").exists()
    assert "keep this" not in (memory.root / "mind.md").read_text()
    memory.refresh()
    assert (memory.root / "mind/b.md").exists() and "keep this" in (memory.root / "mind.md").read_text()


def test_replay_check_reports_differences_without_touching_anything(workspace, tmp_path):
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "a", "--file", page, check=True)
    assert run_mem("-w", workspace, "replay", "--check", check=True).stdout.startswith(b"rebuilt to seq 1: no diff")
    (workspace / "mind/a.md").write_text("tampered\n")
    views_before = (workspace / ".mem/views.db").read_bytes()
    result = run_mem("-w", workspace, "replay", "--check")
    assert result.returncode == 1 and b"file mind/a.md differs" in result.stdout
    assert (workspace / "mind/a.md").read_text() == "tampered\n"
    assert (workspace / ".mem/views.db").read_bytes() == views_before


def test_replay_check_tells_a_file_not_yet_written_from_a_difference(workspace):
    """A command interrupted after its append (Ctrl-C, a kill) leaves files the views still owe, which the
    next command writes; `replay --check` reported them as differing from a rebuild (exit 1)."""
    with Memory.open(workspace) as mem:
        mem.log.append([mem.writer.always_add("owed to mind.md")])
        mem.refresh(files=False)  # the views moved on; the file was not written
    checked = run_mem("-w", workspace, "replay", "--check")
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.decode().splitlines() == [  # the headline says so too: "no differences" alone, then the
        "rebuilt to seq 1: no differences (and 1 file not yet written, which the next command writes)",  # list (nc24b)
        "  file mind.md not yet written (the next command writes it)"]
    report = json.loads(run_mem("-w", workspace, "replay", "--check", "--json", check=True).stdout)
    assert report["same"] is True and report["not_yet_written"] == ["mind.md"]
    run_mem("-w", workspace, "always", "list", check=True)  # writes it
    assert "- owed to mind.md" in (workspace / "mind.md").read_text()
    assert run_mem("-w", workspace, "replay", "--check", check=True).stdout.decode().splitlines()[1:] == []


def test_replay_check_catches_up_views_a_cut_off_command_left_behind_first(workspace, tmp_path):
    """Regression: after a command cut off between its append and its fold (a kill -9), `replay --check` compared the
    views where they stood: "rebuilt to seq 0: no differences" after an import cut off (about nothing), and
    "DIFFERENT" after a redaction cut off (the log had removed bodies the views still held), though nothing was
    damaged. It catches them up first, as the next command would, and says so."""
    from eventstore.envelope import new_event
    from eventstore.kinds import Redaction

    with Memory.open(workspace) as mem:
        mem.log.append([mem.writer.always_add("appended, never folded")])
    checked = run_mem("-w", workspace, "replay", "--check")
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.decode().splitlines()[:2] == [
        "the views were at seq 0, behind the log (a `replay --to`, or a command cut off): caught them up first",
        "rebuilt to seq 1: no differences (and 1 file not yet written, which the next command writes)"]
    with Memory.open(workspace) as mem:
        message = mem.loop_append("user", [{"type": "text", "text": "my pin is 4711"}])
        mem.log.append([new_event(Redaction(target_ids=[message.id], reason="pin"), agent="alice", layer=message.layer)])
        assert "4711" in json.dumps(mem.views.dump(), default=str)  # still in the views: the redaction is not folded
    report = json.loads(run_mem("-w", workspace, "replay", "--check", "--json").stdout)
    assert (report["same"], report["caught_up_from"], report["checkpoint"]) == (True, 2, 3), report
    with Memory.open(workspace) as mem:
        assert "4711" not in json.dumps(mem.views.dump(), default=str)
    assert json.loads(run_mem("-w", workspace, "replay", "--check", "--json").stdout)["caught_up_from"] is None


def test_replay_refuses_to_clobber_a_hand_edit_unless_forced(workspace, tmp_path):
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "a", "--file", page, check=True)
    (workspace / "mind/a.md").write_text("mine\n")
    result = run_mem("-w", workspace, "replay")
    assert result.returncode == 1 and b"edited by hand" in result.stderr
    assert (workspace / "mind/a.md").read_text() == "mine\n"
    out = run_mem("-w", workspace, "replay", "--force", check=True).stdout
    assert b"replayed 1 event;" in out and (workspace / "mind/a.md").read_bytes() == PAGE


def test_a_hand_edit_between_the_replays_check_and_its_writes_is_still_seen(memory):
    """A replay hashes each file on disk once for both its passes (materialize.disk_hash), unless the file
    changed between them: an edit made after the check is refused, not taken for the bytes checked."""
    from projections import materialize as materializing

    memory.write_page("a", PAGE)
    memory.write_page("a", PAGE.replace(b"# ", b"# Later ", 1))  # a replay to seq 1 writes the first one again
    checked = []

    def edit_after_the_check(*args, **kwargs):
        report = materializing.materialize(*args, **kwargs)
        if kwargs.get("dry_run"):
            checked.append(dict(kwargs["seen"]))
            (memory.root / "mind/a.md").write_text("mine\n")
        return report

    with patch("projections.replay.materialize", edit_after_the_check):
        report = replay(memory, 1)
    assert memory.root / "mind/a.md" in checked[0]  # hashed by the check
    assert report.files.refused == ["mind/a.md"] and (memory.root / "mind/a.md").read_text() == "mine\n"


def test_a_replay_records_the_files_it_leaves_as_they_are_before_it_swaps_the_views_in(memory):
    """Files whose bytes are already the rebuilt views' are recorded in the new views before the swap (without a
    journal); after it only the others are written. What is recorded is what a replay recorded before."""
    from projections import materialize as materializing

    memory.write_page("a", PAGE)
    memory.write_page("b", PAGE)
    memory.always_add("keep")
    (memory.root / "mind/b.md").unlink()
    recorded = "SELECT * FROM wiki_files ORDER BY path", "SELECT * FROM file_state ORDER BY path"
    before = [memory.views.db.execute(sql).fetchall() for sql in recorded]
    left = []

    def after_the_swap(views, *args, **kwargs):
        if not kwargs.get("dry_run"):
            left.append([path for path, _hash in views.written.dirty()])
        return materializing.materialize(views, *args, **kwargs)

    with patch("projections.replay.materialize", after_the_swap):
        report = replay(memory)
    assert left == [["mind/b.md"]] and report.files.written == ["mind/b.md"]
    assert [memory.views.db.execute(sql).fetchall() for sql in recorded] == before
    assert (memory.root / "mind/b.md").read_bytes() == PAGE


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(op, min_size=1, max_size=20))
def test_the_wiki_files_times_read_at_once_are_each_pages_first_and_last_versions(steps):
    """Views.wiki_files_meta (a replay's records of its files, in one statement for all pages): a page's adf_files
    times are those of its first and its last version (a tombstone too) as of each seq; mind.md and mind/log.md
    are no_delete, created with the workspace."""
    with tempfile.TemporaryDirectory() as tmp, Memory.init(Path(tmp) / "ws", "alice") as memory:
        for step in steps:
            perform(memory, step)
        views = memory.views
        versions = views.db.execute("SELECT slug, seq, ts FROM page_versions ORDER BY seq").fetchall()
        created = views.adf_meta().get("adf_created_at", adf.EPOCH_ISO)
        for as_of in range(views.checkpoint() + 1):
            times: dict[str, list[int]] = {}
            for slug, seq, ts in versions:
                if seq <= as_of:
                    times.setdefault(f"mind/{slug}.md", []).append(ts)
            metas = views.wiki_files_meta([*times, "mind.md", "mind/log.md"], as_of)
            assert {path: meta for path, meta in metas.items() if path in times} == {
                path: ("none", 0, format_instant(stamps[0]), format_instant(stamps[-1]))
                for path, stamps in times.items()}
            assert metas["mind.md"][:3] == metas["mind/log.md"][:3] == ("no_delete", 0, created)


def test_a_replay_renders_a_file_missing_on_disk_once(memory):
    """The check before the swap renders only files on disk (one could be a hand edit, or already the views'
    bytes): a file missing there (every file of a first pull) is rendered once, when it is written."""
    from projections.views import Views

    memory.write_page("a", PAGE)
    memory.write_page("b", PAGE)
    (memory.root / "mind/b.md").unlink()
    rendered, chunks = [], Views.file_chunks

    def rendering(views, path, *args):
        rendered.append(path)
        return chunks(views, path, *args)

    with patch.object(Views, "file_chunks", rendering):
        report = replay(memory)
    assert rendered.count("mind/b.md") == 1 and rendered.count("mind/a.md") == 1
    assert report.files.written == ["mind/b.md"] and (memory.root / "mind/b.md").read_bytes() == PAGE


def test_replay_after_the_views_database_is_lost(memory):
    memory.write_page("a", PAGE)
    memory.always_add("x")
    memory.views.close()
    memory.ws.views_path.unlink()
    with Memory.open(memory.root) as fresh:
        replay(fresh)
        assert fresh.views.checkpoint() == 2 and check(fresh).same


def test_a_replay_killed_midway_leaves_the_views_in_place(workspace):
    """A rebuild is written into a new file without journal or syncing (and the fold's tables into a scratch
    file beside it): killed in the middle, it leaves the views in place untouched, and the next replay
    deletes what it left."""
    import random
    import subprocess
    import time

    from conftest import mem_command

    with Memory.open(workspace) as memory:
        memory.log.append(page_history(30000, pages=200))
        memory.refresh()
        before, checkpoint = memory.views.dump(), memory.views.checkpoint()
    rebuild = workspace / ".mem" / "views.db.rebuild"
    scratch = Path(f"{rebuild}-fold")
    proc = subprocess.Popen([*mem_command(), "-w", str(workspace), "replay"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not scratch.exists():  # the fold is under way
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    time.sleep(random.Random(12).uniform(0, 0.2))
    assert proc.poll() is None, "the replay ended before it could be killed; lengthen the log"
    proc.kill()
    proc.wait()
    assert rebuild.exists()  # killed half-way: its new views file was never swapped in
    with Memory.open(workspace) as memory:
        assert memory.views.checkpoint() == checkpoint and memory.views.dump() == before
    assert run_mem("-w", workspace, "replay", "--check", check=True).stdout.startswith(b"rebuilt to seq 30000: no diff")
    assert b"replayed 30000 events" in run_mem("-w", workspace, "replay", check=True).stdout
    assert not rebuild.exists() and not scratch.exists()


def page_history(count: int, pages: int) -> list:
    """`count` mind-layer page versions spread over `pages` pages, each update naming its page's last."""
    from eventstore.envelope import new_event
    from eventstore.kinds import PageIngest, PageUpdate

    heads, events = {}, []
    for i in range(count):
        slug = f"page-{i % pages}"
        fm = {"type": "note", "description": f"hook {i}"}
        parent = heads.get(slug)
        body = (PageUpdate(slug=slug, frontmatter=fm, text=f"# P\n\nv{i}\n", note=f"v{i}", parents=[parent])
                if parent else PageIngest(slug=slug, frontmatter=fm, text="# P\n\nnew\n", note="new"))
        event = new_event(body, agent="alice", layer="mind")
        heads[slug] = event.id
        events.append(event)
    return events


def test_the_pipe_to_the_writers_child_holds_a_megabyte(tmp_path):
    """A batch of a few megabytes crosses to the writer's child in a few writes, not fifty of 64 KB, each of which
    waits for the child's reader to wake (bulk.PIPE_SIZE); whether the child was started now or ahead."""
    import fcntl

    from projections.views import Views
    for ahead in (None, bulk.spawn_writer()):
        path = tmp_path / f"views-{ahead is None}.db"
        views = Views(path, fast=True)
        writer = bulk.HistoryWriter(views.db, str(path), apart=True, child=ahead)
        views.close()
        writer.start()
        assert fcntl.fcntl(writer.child.stdin.fileno(), fcntl.F_GETPIPE_SZ) == bulk.PIPE_SIZE
        writer.join()


def test_the_writers_child_runs_sqlite_without_its_locks(tmp_path):
    """bulk.unshared_sqlite (the writer's and builder's children call it first): SQLite counts no memory (its
    memory-status lock is off); a process that did not call it does."""
    probe = ("import ctypes, sqlite3, sys, _sqlite3\n"
             "from projections import bulk\n"
             "if sys.argv[1] == 'unshared': bulk.unshared_sqlite()\n"
             "db = sqlite3.connect(sys.argv[2])\n"
             "db.execute('CREATE TABLE t (x)')\n"
             "db.executemany('INSERT INTO t VALUES (?)', [(str(i),) for i in range(1000)])\n"
             "assert db.execute('SELECT count(*) FROM t').fetchone() == (1000,)\n"
             "lib = ctypes.CDLL(_sqlite3.__file__)\n"
             "lib.sqlite3_memory_used.restype = ctypes.c_int64\n"
             "print(lib.sqlite3_memory_used())\n")
    used = {}
    for mode in ("unshared", "as-built"):
        out = subprocess.run([sys.executable, "-c", probe, mode, str(tmp_path / f"{mode}.db")], capture_output=True,
                             text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(Path(bulk.__file__).parent.parent)})
        used[mode] = int(out.stdout)
    assert used == {"unshared": 0, "as-built": used["as-built"]} and used["as-built"] > 0


def test_a_process_that_keeps_its_memory_open_follows_a_replay_made_by_another(memory):
    """`mem pull --follow` (or `mem watch`, the MCP server, `mem ui`) keeps its views open. A `mem replay` in
    another process renames a new views file into place: the follower went on folding into the old one,
    deleted, and `mem status` found the real views behind the log and the shared file "edited by hand". The
    process now reopens the views it finds replaced, under the workspace lock, before it reads or writes."""
    memory.write_page("deploy", PAGE)
    run_mem("-w", memory.root, "replay", check=True)
    memory.write_page("after", PAGE.replace(b"Deploy procedure", b"After the replay"))
    status = json.loads(run_mem("-w", memory.root, "status", "--json", check=True).stdout)
    assert status["checkpoint"] == status["head"] == memory.head() and status["behind"] == 0, status
    assert status["clean"] and not status["hand_edited"], status
    with Memory.open(memory.root) as fresh:
        assert fresh.page_text("after") is not None


def test_a_replay_over_a_linked_mind_folder_says_so_and_not_to_force_it(workspace, tmp_path):
    """Regression (nc17a): with mind/ a link to a folder outside the workspace, a replay said every file was edited by
    hand and to pass --force, and `mem replay --force` said the same again."""
    run_mem("-w", workspace, "always", "add", "one", check=True)
    (workspace / "mind").rename(tmp_path / "elsewhere")
    (workspace / "mind").symlink_to(tmp_path / "elsewhere")
    said = ("error: mind/log.md resolves outside the workspace (a linked directory leads out of it): a replay writes "
            "no file there, --force neither (the views are as they were)\n")
    for args in (["replay"], ["replay", "--force"]):
        result = run_mem("-w", workspace, *args)
        assert (result.returncode, result.stderr.decode()) == (1, said), args


def test_a_replay_refused_over_hand_edits_says_what_keeps_each(workspace):
    """Regression: a replay refused over a hand-edited mind.md advised `mem page write`, which refuses
    (`slug 'mind' is reserved`); `mem adopt` keeps it. Two files were each told "overwrite it"."""
    run_mem("-w", workspace, "always", "add", "one", check=True)
    mind = workspace / "mind.md"
    mind.write_text(mind.read_text().replace("- one\n", "- one\n- two added by hand\n"))
    log = (workspace / "mind/log.md").read_text()
    (workspace / "mind/log.md").write_text("mine\n")
    result = run_mem("-w", workspace, "replay")
    assert result.returncode == 1
    assert result.stderr.decode() == (
        "error: mind.md was edited by hand since mindlog wrote it: `mem adopt` records its `## Always` lines, or pass "
        "--force to overwrite it; mind/log.md was edited by hand since mindlog wrote it: it is derived from the log "
        "and cannot be adopted: `mem show mind/log.md > mind/log.md` puts mindlog's version back (a write's --force "
        "overwrites it) (a replay would overwrite them; `mem replay --force` does)\n")
    (workspace / "mind/log.md").write_text(log)
    run_mem("-w", workspace, "adopt", check=True)
    assert "two added by hand" in run_mem("-w", workspace, "always", "list", check=True).stdout.decode()


def test_a_replay_from_a_log_edited_by_hand_points_at_verify(workspace):
    """Regression: `mem replay` rebuilt from a log whose page body was edited in log.db without a word, writing the
    edited text to the files; only `mem verify` told. Checking every digest would cost a replay a third more CPU
    (bench_replay.py, 200,000 events), so a replay says in one line that it did not, and which command does."""
    import sqlite3

    from eventstore.envelope import encode_body
    from eventstore.kinds import PageIngest

    page = workspace.parent / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    forged = encode_body(PageIngest(slug="deploy", frontmatter={"type": "note"}, text="# Deploy\n\nSkip staging.\n"))
    db = sqlite3.connect(workspace / ".mem" / "log.db")
    with db:
        db.execute("UPDATE events SET body = ?, codec = 0 WHERE seq = 1", (forged,))
    db.close()
    result = run_mem("-w", workspace, "replay", check=True)
    assert result.stderr.decode() == ("note: the views were rebuilt from the log as stored, its digests unchecked: "
                                      "`mem verify` checks them and names an event changed outside mindlog\n")
    verify = run_mem("-w", workspace, "verify")
    assert verify.returncode == 1 and verify.stdout.startswith(b"BAD at seq 1: digest mismatch"), verify.stdout
