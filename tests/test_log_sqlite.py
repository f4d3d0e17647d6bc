"""The SQLite event log passes the recorder conformance suite, plus SQLite-specific checks."""

import hashlib

import msgspec
import pytest

from eventstore.envelope import CODEC_ZSTD, compute_digest, encode_body, new_event
from eventstore.kinds import AlwaysAdd, PageIngest
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
        recorder.db.execute("UPDATE events SET body = ?, codec = 0, digest = ?, body_hash = ? WHERE seq = 2",
                            (body, bytes.fromhex(digest), body_hash))
        report = recorder.verify()
        assert not report.ok and report.first_bad_seq == 2 and "chain" in report.problem

    def test_events_encode_as_json(self, recorder):
        recorder.append([ev(1)])
        data = msgspec.json.decode(msgspec.json.encode(list(recorder.read())))
        assert data[0]["body"] == {"kind": "always.add", "line": "line 1"}
