"""The PostgreSQL event log passes the same recorder conformance suite as the SQLite one."""

import pytest

from eventstore.envelope import encode_body, new_event
from eventstore.kinds import AlwaysAdd, Redaction
from eventstore.postgres import PostgresLog

from pg import table_bytes
from recorder_conformance import RecorderConformance


@pytest.fixture
def recorder(pg_url):
    log = PostgresLog(pg_url)
    yield log
    log.close()


@pytest.fixture
def untrusted_recorder(pg_url):
    log = PostgresLog(pg_url, trusted=False)
    yield log
    log.close()


@pytest.fixture
def tamper(recorder):
    def change_body(seq):
        recorder.conn.execute("UPDATE events SET body = %s, codec = 0 WHERE seq = %s",
                              (encode_body(AlwaysAdd(line="something else")), seq))
    return change_body


@pytest.fixture
def execute(recorder):
    return lambda sql, params=(): recorder.conn.execute(sql.replace("?", "%s"), params)


class TestPostgresLog(RecorderConformance):
    pass


def test_a_redaction_leaves_no_copy_of_the_text_in_the_table_files(recorder):
    """Regression: the UPDATE that redacts leaves the old row version dead in the events table's file, where it
    stayed until the log VACUUMed after the redaction."""
    secret = new_event(AlwaysAdd(line="SECRETPHONE 555-0199 is the on-call"), agent="alice", layer="mind")
    recorder.append([secret])
    assert b"SECRETPHONE" in table_bytes(recorder.url, "events")
    recorder.append([new_event(Redaction(target_ids=[secret.id], reason="private"), agent="alice", layer="mind")])
    assert b"SECRETPHONE" not in table_bytes(recorder.url, "events")


def test_a_log_made_with_the_body_hash_column_loses_it_and_still_verifies(pg_url):
    """The events table as it was before the body hash was dropped from the row (see
    eventstore.sqlite.upgrade): opening it drops the column; the rows verify and appends go on."""
    import psycopg

    from eventstore.recorder import ZERO_CHAIN, plan_rows, rows_of
    from recorder_conformance import ev

    events = [ev(1), ev(2), ev(3)]
    values, _seqs, seq, chain = plan_rows(events, None, 0, ZERO_CHAIN, 1_795_000_000_000)
    rows = rows_of(values)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("""
            CREATE TABLE log_counter (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), seq BIGINT NOT NULL,
                                      chain BYTEA NOT NULL, recorded_at BIGINT NOT NULL);
            CREATE TABLE events (
                seq BIGINT PRIMARY KEY, id BYTEA NOT NULL UNIQUE, ts BIGINT NOT NULL, recorded_at BIGINT NOT NULL,
                agent TEXT NOT NULL, layer TEXT NOT NULL, kind TEXT NOT NULL, codec SMALLINT NOT NULL,
                body BYTEA NOT NULL, digest BYTEA NOT NULL, chain BYTEA NOT NULL, body_hash BYTEA NOT NULL)""")
        conn.execute("INSERT INTO log_counter VALUES (TRUE, %s, %s, %s)", (seq, chain, 1_795_000_000_000))
        with conn.cursor() as cursor:
            cursor.executemany(f"INSERT INTO events VALUES ({', '.join(['%s'] * 12)})",
                               [(*row, e.body_hash()) for row, e in zip(rows, events)])
    log = PostgresLog(pg_url)
    try:
        names = [r[0] for r in log.conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'events'")]
        assert "body_hash" not in names and len(names) == 11
        assert log.verify().ok and [e.id for e in log.read()] == [e.id for e in events]
        assert log.append([ev(4)]) == [4] and log.verify().ok
    finally:
        log.close()


def test_verify_reports_a_row_past_the_counter(recorder):
    """Regression (nc10c H2): verify checked rows only up to log_counter.seq: a row inserted above it passed (and
    `mem log` listed it as the newest event), and still did after the next append."""
    from recorder_conformance import ev

    recorder.append([ev(i) for i in range(4)])
    recorder.conn.execute("INSERT INTO events SELECT 100, decode(md5('x') || md5('y'), 'hex')::bytea, ts, recorded_at, "
                          "agent, layer, kind, codec, body, digest, chain FROM events WHERE seq = 4")
    for _ in range(2):
        report = recorder.verify()
        assert not report.ok and report.first_bad_seq == 100 and "past the log's head" in report.problem, report
        recorder.append([ev(9)])


@pytest.mark.parametrize("cut", ["DELETE FROM events WHERE seq >= 4", "TRUNCATE events"])
def test_verify_reports_rows_missing_below_the_counter(recorder, cut):
    """Regression (nc10c H2): rows deleted at the end left a chain that verifies on its own, and verify said ok
    though the log's own counter still named seq 5 and its chain."""
    from recorder_conformance import ev

    recorder.append([ev(i) for i in range(5)])
    recorder.conn.execute(cut)
    report = recorder.verify()
    assert not report.ok and report.first_bad_seq == (4 if "DELETE" in cut else 1), report
    assert "counter says it ends at seq 5" in report.problem, report


def test_verify_reports_a_last_row_whose_chain_is_not_the_counter_s(recorder):
    from recorder_conformance import ev

    recorder.append([ev(i) for i in range(3)])
    recorder.conn.execute("UPDATE log_counter SET chain = decode(md5('x') || md5('y'), 'hex')")
    report = recorder.verify()
    assert not report.ok and report.first_bad_seq == 3 and "counter" in report.problem, report


def cut_off(url: str) -> None:
    """Ends every other session of the log's database, as a restart of the server does (`terminating connection due
    to administrator command`)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                      "AND pid <> pg_backend_pid()")


def test_a_log_whose_connections_the_database_closed_goes_on_through_new_ones(recorder):
    """Regression (nc34b): once its database restarted, a long-running process's log failed every read and write
    with `the connection is closed`, for good (`mem mcp` answered every tool call so, `mem pull --follow` ended). The
    log opens its connections anew, and the call that found one closed runs again on them."""
    first = new_event(AlwaysAdd(line="before"), agent="alice", layer="mind")
    recorder.append([first])
    recorder.set_state("k", "v")
    assert recorder.head() == 1
    for step in ("head", "append", "state", "read", "append again"):
        cut_off(recorder.url)
        if step == "head":
            assert recorder.head() == 1
        elif step == "state":
            assert recorder.state("k") == "v"
        elif step == "read":
            recorder.head()  # the reader's connection, opened anew; the generator below reads through it
            assert [row[0] for row in recorder.read_rows()] == [1, 2]
        else:
            recorder.append([new_event(AlwaysAdd(line=step), agent="alice", layer="mind")])
    assert recorder.head() == 3 and recorder.verify().ok
