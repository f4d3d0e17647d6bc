"""The SQLite event log passes the recorder conformance suite, plus SQLite-specific checks."""

import hashlib

import msgspec
import pytest

from eventstore.envelope import CODEC_ZSTD, compute_digest, encode_body, new_event
from eventstore.kinds import AlwaysAdd, ImportGap, PageIngest
from eventstore.sqlite import SQLiteLog

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


@pytest.mark.parametrize("count", [1, 2, 100, 203])
def test_a_batch_goes_in_whole_and_in_order(recorder, count):
    events = [ev(i) for i in range(count)]
    assert recorder.append(events) == list(range(1, count + 1))
    assert [e.id for e in recorder.read()] == [e.id for e in events]
    assert recorder.verify().ok
