"""The PostgreSQL event log passes the same recorder conformance suite as the SQLite one."""

import pytest

from eventstore.envelope import encode_body
from eventstore.kinds import AlwaysAdd
from eventstore.postgres import PostgresLog

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
