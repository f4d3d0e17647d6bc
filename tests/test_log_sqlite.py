"""The SQLite event log passes the recorder conformance suite, plus SQLite-specific checks."""

import hashlib
import json
import sqlite3
import threading

import msgspec
import pytest

from eventstore.envelope import CODEC_ZSTD, compute_digest, encode_body, new_event
from eventstore.errors import IdConflict, InvalidInput
from eventstore.kinds import AlwaysAdd, ImportGap, PageIngest
from eventstore.recorder import ZERO_CHAIN, plan_rows, rows_of
from eventstore.sqlite import COLUMNS, FORMAT, SQLiteLog

from recorder_conformance import RecorderConformance, ev


@pytest.fixture
def recorder(tmp_path):
    with SQLiteLog(tmp_path / "log.db") as log:
        yield log


@pytest.fixture
def untrusted_recorder(tmp_path):
    with SQLiteLog(tmp_path / "log.db", trusted=False) as log:
        yield log


@pytest.fixture
def tamper(recorder):
    def change_body(seq):
        raw = encode_body(AlwaysAdd(line="something else"))
        recorder.db.execute("UPDATE events SET body = ?, codec = 0 WHERE seq = ?", (raw, seq))
    return change_body


@pytest.fixture
def execute(recorder):
    return lambda sql, params=(): recorder.db.execute(sql, params)


class TestSQLiteLog(RecorderConformance):
    def test_wal_and_full_sync_by_default(self, recorder):
        assert recorder.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert recorder.db.execute("PRAGMA synchronous").fetchone()[0] == 2

    def test_large_bodies_are_compressed(self, recorder):
        recorder.append([new_event(PageIngest(slug="s", frontmatter={"type": "t"}, text="word " * 2000),
                                   agent="a", layer="mind")])
        codec, stored = recorder.db.execute("SELECT codec, length(body) FROM events").fetchone()
        assert codec == CODEC_ZSTD and stored < 1000

    def test_verify_finds_a_removed_event(self, recorder):
        recorder.append([ev(i) for i in range(5)])
        recorder.db.execute("DELETE FROM events WHERE seq = 3")
        report = recorder.verify()
        assert not report.ok and report.first_bad_seq == 4 and "gap" in report.problem

    def test_verify_finds_a_changed_digest_through_the_chain(self, recorder):
        recorder.append([ev(i) for i in range(5)])
        event = recorder.get_by_seq(2)
        body = encode_body(AlwaysAdd(line="forged"))
        body_hash = hashlib.sha256(body).digest()
        digest = compute_digest(event.id, event.ts, event.agent, event.layer, event.kind, body_hash)
        recorder.db.execute("UPDATE events SET body = ?, codec = 0, digest = ? WHERE seq = 2",
                            (body, bytes.fromhex(digest)))
        report = recorder.verify()
        assert not report.ok and report.first_bad_seq == 2 and "chain" in report.problem

    def test_events_encode_as_json(self, recorder):
        recorder.append([ev(1)])
        data = msgspec.json.decode(msgspec.json.encode(list(recorder.read())))
        assert data[0]["body"] == {"kind": "always.add", "line": "line 1"}


def test_two_connections_appending_in_turn_keep_one_chain(tmp_path):
    """Each connection remembers the head it last wrote; the other's appends (an import gap among
    them) make that memory stale every turn, and the append must notice and number after the real head."""
    first, second = SQLiteLog(tmp_path / "log.db"), SQLiteLog(tmp_path / "log.db")
    seqs = []
    for i in range(6):
        seqs += (first if i % 2 == 0 else second).append([ev(i)])
    seqs += second.append([new_event(ImportGap(source="other", skipped=5), agent="alice", layer="agent")])
    seqs += first.append([ev(6)])
    seqs += second.append([ev(7), ev(8)])
    seqs += first.append([ev(9)])
    assert seqs == [1, 2, 3, 4, 5, 6, 12, 13, 14, 15, 16]
    times = [e.recorded_at for e in first.read()]
    assert times == sorted(times)
    assert first.verify().ok and second.verify().ok
    first.close()
    second.close()


def test_a_single_append_after_another_connection_s_import_gap_goes_after_the_gap(tmp_path):
    """The seq after the head a connection remembers is free although that head is stale when the other
    connection's append was an import gap (it skips the seqs after the head and lands beyond them): the single
    append went in below the gap, its recording time and chain link made from the stale head (verify failed)."""
    first, second = SQLiteLog(tmp_path / "log.db"), SQLiteLog(tmp_path / "log.db")
    assert first.append([ev(0)]) == [1]
    assert second.append([new_event(ImportGap(source="other", skipped=5), agent="alice", layer="agent")]) == [7]
    assert first.append([ev(1)]) == [8]
    assert [e.seq for e in second.read()] == [1, 7, 8] and second.verify().ok
    first.close()
    second.close()


def test_a_refused_single_append_leaves_the_log_to_the_next_writer(recorder):
    """The appends take turns on the one connection; a single append that fails (here an id already stored with
    another digest) must give its turn back, or every later append of the process waits forever."""
    event = ev(1)
    recorder.append([event])
    forged = new_event(AlwaysAdd(line="other"), agent="alice", layer="mind", id=event.id, ts=event.ts)
    with pytest.raises(IdConflict):
        recorder.append([forged])
    appended = []
    writer = threading.Thread(target=lambda: appended.append(recorder.append([ev(2)])), daemon=True)
    writer.start()
    writer.join(30)
    assert appended == [[2]]


def test_a_pending_scrub_that_meets_another_writer_lets_the_append_go_ahead(tmp_path):
    """A redaction's scrub left pending is tried again before each append; another connection holding the write
    lock then makes it give up (and stay pending) rather than fail the append it comes with."""
    log = SQLiteLog(tmp_path / "log.db")
    log.unscrubbed = True
    other = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        assert log.scrub(wait=0) is False and log.unscrubbed
    finally:
        other.execute("ROLLBACK")
        other.close()


    class LockedAtTheDelete:
        """The connection, but another writer takes the lock between the checkpoint and the DELETE."""

        def __init__(self, db):
            self.db = db

        def execute(self, sql, *args):
            if sql.startswith("DELETE FROM sync_state"):
                raise sqlite3.OperationalError("database is locked")
            return self.db.execute(sql, *args)

    real, log.db = log.db, LockedAtTheDelete(log.db)
    try:
        assert log.scrub(wait=0) is False and log.unscrubbed
    finally:
        log.db = real
    assert log.append([ev(1)]) == [1]
    assert not log.unscrubbed and log.state("scrub-pending") is None
    log.close()


@pytest.mark.parametrize("count", [1, 2, 7, 100, 203])
def test_a_batch_goes_in_whole_and_in_order(recorder, count):
    events = [ev(i) for i in range(count)]
    assert recorder.append(events) == list(range(1, count + 1))
    assert [e.id for e in recorder.read()] == [e.id for e in events]
    assert recorder.verify().ok


# The log's table as main's code made it before format 2 (PRAGMA user_version 0): a twelfth column
# held each event's body hash. Kept here verbatim so the upgrade is tested against the real old shape.
FORMAT_0 = """
CREATE TABLE events (
    seq INTEGER PRIMARY KEY,
    id BLOB NOT NULL UNIQUE,
    ts INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    agent TEXT NOT NULL,
    layer TEXT NOT NULL,
    kind TEXT NOT NULL,
    codec INTEGER NOT NULL,
    body BLOB NOT NULL,
    digest BLOB NOT NULL,
    chain BLOB NOT NULL,
    body_hash BLOB NOT NULL
);
CREATE TABLE sync_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def format_0_log(path, events):
    """A log written the way main's code wrote it: the same rows plus each body's hash."""
    values, _seqs, _seq, _chain = plan_rows(events, None, 0, ZERO_CHAIN, 1_795_000_000_000)
    rows = rows_of(values)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.executescript(FORMAT_0)
    db.executemany(f"INSERT INTO events VALUES ({','.join('?' * 12)})",
                   [(*row, e.body_hash()) for row, e in zip(rows, events)])
    db.execute("INSERT INTO sync_state VALUES ('pull:origin', '7')")
    db.close()


def old_events():
    return [ev(1), new_event(PageIngest(slug="s", frontmatter={"type": "t"}, text="word " * 500), agent="a", layer="mind"),
            new_event(ImportGap(source="other", skipped=3), agent="alice", layer="agent"), ev(2)]


def columns(path):
    with sqlite3.connect(path) as db:
        return [row[1] for row in db.execute("PRAGMA table_info(events)")], db.execute("PRAGMA user_version").fetchone()[0]


def test_a_format_0_log_is_upgraded_in_place_and_still_verifies(tmp_path):
    path = tmp_path / "log.db"
    events = old_events()
    format_0_log(path, events)
    assert "body_hash" in columns(path)[0]
    with SQLiteLog(path) as log:
        assert columns(path) == (COLUMNS.split(", "), FORMAT)
        report = log.verify()
        assert report.ok and report.checked == 4 and report.head == 7
        assert [(e.id, e.digest, e.body, e.seq) for e in log.read()] == [
            (e.id, e.digest, e.body, seq) for e, seq in zip(events, [1, 2, 6, 7])]
        assert log.state("pull:origin") == "7"
        assert log.append([ev(3)]) == [8] and log.append([ev(4), ev(5)]) == [9, 10]
        assert log.verify().ok
    with SQLiteLog(path) as again:  # a second open finds format 2 and changes nothing
        assert again.head() == 10 and again.verify().ok


def test_a_body_changed_in_a_format_0_log_still_fails_verify_after_the_upgrade(tmp_path):
    """The stored hash went; the digest over the body's hash still catches the change, at its seq."""
    path = tmp_path / "log.db"
    format_0_log(path, [ev(1), ev(2), ev(3)])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE events SET body = ? WHERE seq = 2", (encode_body(AlwaysAdd(line="forged")),))
    with SQLiteLog(path) as log:
        report = log.verify()
    assert not report.ok and report.first_bad_seq == 2 and "digest mismatch" in report.problem


def test_an_upgrade_that_fails_leaves_the_format_0_log_as_it_was(tmp_path):
    """The upgrade is one transaction: a trigger that names body_hash makes SQLite refuse to drop the
    column, and the log keeps its old table, rows and format."""
    path = tmp_path / "log.db"
    format_0_log(path, [ev(1), ev(2)])
    with sqlite3.connect(path) as db:
        db.execute("CREATE TRIGGER keep AFTER UPDATE ON events BEGIN SELECT NEW.body_hash; END")
        before = db.execute("SELECT * FROM events ORDER BY seq").fetchall()
    with pytest.raises(sqlite3.OperationalError):
        SQLiteLog(path)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT * FROM events ORDER BY seq").fetchall() == before
    assert columns(path) == (COLUMNS.split(", ") + ["body_hash"], 0)


def test_a_log_from_a_newer_format_is_refused(tmp_path):
    path = tmp_path / "log.db"
    SQLiteLog(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {FORMAT + 1}")
    with pytest.raises(InvalidInput, match="newer"):
        SQLiteLog(path)


def test_a_redacted_event_appended_alone_keeps_its_original_kind(tmp_path):
    """The single-event path stores a travelled redacted event as the general path does."""
    from eventstore.kinds import Redacted, Redaction

    events = [ev(0), ev(1)]
    with SQLiteLog(tmp_path / "a.db") as source:
        source.append(events)
        source.append([new_event(Redaction(target_ids=[events[1].id], reason="r"), agent="alice", layer="mind")])
        travelled = source.get(events[1].id)
    travelled.seq = travelled.recorded_at = travelled.chain = None
    with SQLiteLog(tmp_path / "b.db") as log:
        assert log.append([events[0]]) == [1] and log.append([travelled]) == [2]
        kind, codec = log.db.execute("SELECT kind, codec FROM events WHERE seq = 2").fetchone()
        back = log.get(events[1].id)
        assert (kind, codec) == ("always.add", 2) and isinstance(back.body, Redacted)
        assert back.digest == events[1].digest and log.verify().ok


def test_an_event_resent_through_a_connection_whose_head_is_stale_keeps_its_first_seq(tmp_path):
    """The single append goes in at the head it remembers + 1: when another connection has appended
    since (that seq is taken) and that append was this very event, the answer is the event's seq, once."""
    first, second = SQLiteLog(tmp_path / "log.db"), SQLiteLog(tmp_path / "log.db")
    first.append([ev(0)])
    event = ev(1)
    assert second.append([event]) == [2]
    assert first.append([event]) == [2]  # first still believes the head is 1
    assert first.append([ev(2)]) == [3]
    assert [e.seq for e in first.read()] == [1, 2, 3]
    assert first.verify().ok
    first.close()
    second.close()


def _stored_rows(log):
    return log.db.execute("SELECT id, ts, agent, layer, kind, codec, body, digest FROM events ORDER BY seq").fetchall()


def test_single_appends_store_every_kind_of_event_as_a_batch_does(tmp_path):
    """The one-row path (an event made here, stored as is) and its careful fallback (a large body, a
    redacted stand-in, an event that travelled as JSON and carries no cached keys, an event whose digest
    was replaced) store exactly the rows the batch path stores, and the chain verifies."""
    from eventstore.envelope import Event
    from eventstore.kinds import Redaction

    redacted = ev(2)
    with SQLiteLog(tmp_path / "source.db") as source:
        source.append([redacted, new_event(Redaction(target_ids=[redacted.id], reason="r"), agent="alice",
                                           layer="mind")])
        redacted = source.get(redacted.id)
    redacted.seq = redacted.recorded_at = redacted.chain = None
    events = [ev(0), new_event(PageIngest(slug="s", frontmatter={"type": "t"}, text="word " * 500), agent="a",
                               layer="mind"),
              redacted, msgspec.json.decode(msgspec.json.encode(ev(3)), type=Event), ev(4)]
    events[4].digest = events[4].digest.upper().lower()  # equal text, another string object: keys are parsed
    with SQLiteLog(tmp_path / "one.db") as one, SQLiteLog(tmp_path / "batch.db") as batch:
        assert [one.append([event])[0] for event in events] == batch.append(events) == [1, 2, 3, 4, 5]
        assert _stored_rows(one) == _stored_rows(batch)
        assert [row[5] for row in _stored_rows(one)] == [0, CODEC_ZSTD, 2, 0, 0]
        assert one.verify().ok and batch.verify().ok


def test_a_single_append_leaves_no_read_transaction_behind(tmp_path):
    """The kept cursor holds no statement open after an append: another connection's checkpoint can
    empty the WAL at once (a held read transaction would pin it)."""
    with SQLiteLog(tmp_path / "log.db") as log:
        log.append([ev(0)])
        log.append([ev(1)])
        assert not log.db.in_transaction
        with sqlite3.connect(tmp_path / "log.db") as other:
            busy, _frames, _moved = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0 and (tmp_path / "log.db-wal").stat().st_size == 0
        assert log.append([ev(2)]) == [3] and log.verify().ok


def test_threads_appending_through_one_log_lose_nothing(tmp_path):
    """One SQLiteLog shared by threads (its connection allows it): each append is whole and numbered
    once, single and batch alike, the chain gapless. Unserialized, two threads' transactions mixed on the
    one connection (an event lost, or a false IntegrityError)."""
    with SQLiteLog(tmp_path / "log.db", synchronous="OFF") as log:
        def writer(n):
            for i in range(150):
                log.append([ev(n * 1000 + i)] if i % 3 else [ev(n * 1000 + i), ev(n * 1000 + 500 + i)])
        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [e.seq for e in log.read()] == list(range(1, 4 * 200 + 1)) and log.verify().ok


def test_a_column_rewritten_as_text_that_is_not_utf8_is_a_bad_seq_not_a_decoding_error(tmp_path, workspace):
    """Regression: a body changed in place by SQL (`replace(body, ...)` makes it TEXT) that is not UTF-8 made `mem
    verify` print sqlite3's "Could not decode to UTF-8 column 'body' with text '<the bytes>'", naming no seq, and
    every other reader the same. verify reads stored bytes whatever their type: BAD at that seq; other commands say
    in one line that the file was changed outside mindlog, without its bytes."""
    from conftest import run_mem

    for n in range(3):
        run_mem("-w", workspace, "loop", "append", "--role", "user", "--text", f"Deploy é{n}", check=True)
    with sqlite3.connect(workspace / ".mem" / "log.db") as db:
        db.execute("UPDATE events SET body = CAST(body || x'ff' AS TEXT), agent = CAST(agent || x'ff' AS TEXT) "
                   "WHERE seq = 2")
        assert db.execute("SELECT typeof(body), typeof(agent) FROM events WHERE seq = 2").fetchone() == ("text", "text")
    verified = run_mem("-w", workspace, "verify")
    assert verified.returncode == 1
    assert verified.stdout.decode().startswith("BAD at seq 2: ") and verified.stderr == b"", verified
    read = run_mem("-w", workspace, "log")
    assert read.returncode == 1 and read.stderr.decode() == (
        "error: a stored row's agent column is not the UTF-8 text mindlog wrote: the file was changed outside mindlog "
        "(`mem verify` names the first bad seq)\n"), read.stderr


@pytest.mark.parametrize("tamper, commands", [
    ("codec = 1", ("log", "replay")),  # a plain body marked compressed: zstd's own error
    ("codec = 2", ("replay",)),  # a plain body marked redacted: AttributeError ('reason')
    ("body = 'hello'", ("log", "replay")),  # a TEXT body: TypeError in decode_bodies
    ("digest = 'abc'", ("log",)),  # a TEXT digest: AttributeError ('str' has no 'hex')
])
def test_a_row_changed_outside_mindlog_is_one_line_naming_its_seq_not_a_traceback(workspace, tamper, commands):
    """Regression (nc10c M1): `mem log` and `mem replay` crashed with a Python traceback on rows `mem verify` reports
    cleanly. Every reader of rows (row_to_event, the fold's batch) says in one line which seq is damaged and points
    at `mem verify`."""
    from conftest import run_mem

    for n in range(3):
        run_mem("-w", workspace, "loop", "append", "--role", "user", "--text", f"Deploy {n}", check=True)
    with sqlite3.connect(workspace / ".mem" / "log.db") as db:
        db.execute(f"UPDATE events SET {tamper} WHERE seq = 2")
    verified = run_mem("-w", workspace, "verify")
    assert verified.returncode == 1 and verified.stdout.decode().startswith("BAD at seq 2: "), verified
    for command in commands:
        read = run_mem("-w", workspace, command, env={"MEM_PLAIN": "1"})
        err = read.stderr.decode()
        assert read.returncode == 1 and err.count("\n") == 1, (command, err)
        assert err.startswith("error: the event log's row at seq 2 is damaged (") and "`mem verify`" in err, err


def test_mem_verify_prints_a_line_for_each_damaged_row(workspace):
    from conftest import run_mem

    for n in range(5):
        run_mem("-w", workspace, "always", "add", f"Rule {n}", check=True)
    with sqlite3.connect(workspace / ".mem" / "log.db") as db:
        db.execute("UPDATE events SET codec = 9 WHERE seq IN (2, 4)")
    verified = run_mem("-w", workspace, "verify")
    assert verified.returncode == 1 and verified.stdout.decode().splitlines() == [
        "BAD at seq 2: unknown codec 9", "BAD at seq 4: unknown codec 9"], verified
    as_json = json.loads(run_mem("-w", workspace, "verify", "--json").stdout)
    assert (as_json["first_bad_seq"], as_json["later"], as_json["more"]) == (2, [[4, "unknown codec 9"]], 0)


def test_verify_names_a_body_stored_as_text_and_a_tail_deleted_after_a_damaged_row(workspace):
    """Regressions (nc13a): a body rewritten as TEXT holding its very bytes verified (its digest holds) while every
    reader failed on it, and verify itself failed on the views' anchor row with the readers' error; a log whose tail
    was deleted after an earlier row was changed was reported for the change alone."""
    from conftest import run_mem

    for n in range(5):
        run_mem("-w", workspace, "always", "add", f"Rule {n}", check=True)
    with sqlite3.connect(workspace / ".mem" / "log.db") as db:
        db.execute("DELETE FROM events WHERE seq = 5")
        db.execute("UPDATE events SET body = CAST(replace(CAST(body AS TEXT), 'Rule 1', 'Rule X') AS BLOB) WHERE seq = 2")
    assert run_mem("-w", workspace, "verify").stdout.decode().splitlines() == [
        "BAD at seq 2: digest mismatch: the event's header or body was changed after it was appended",
        "BAD at seq 5: the views' checkpoint is seq 5 but the log ends at seq 4: 1 event(s) at its end are missing"]
    with sqlite3.connect(workspace / ".mem" / "log.db") as db:
        db.execute("UPDATE events SET body = CAST(body AS TEXT) WHERE seq = 4")
    lines = run_mem("-w", workspace, "verify").stdout.decode().splitlines()
    assert "BAD at seq 4: the body column holds text where mindlog wrote bytes: the file was changed outside mindlog " \
           "(every reader of the row fails on it)" in lines, lines
