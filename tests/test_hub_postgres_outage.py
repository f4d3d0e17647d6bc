"""The PostgreSQL of a running `mem serve` stops, then starts again: every request is answered at once with a
503 problem, `mem push` says so in one line, the hub's log says it once as it goes and once as it comes back
(never a traceback), nothing is written meanwhile, and the first push after it is back goes through."""

import asyncio
import time

import httpx
import msgspec

from conftest import run_mem
from pg import started, url_of
from hubserver import mem_serve
from eventstore.errors import StorageUnavailable
from sync.committer import GroupCommitter
from sync.fanout import Fanout
from sync.storage_postgres import PostgresHubStorage
from sync.wire import PushRequest
from two_hubs import CONTRACT, fact, hub_with

PROMPT = 5.0
"""Seconds within which a request is answered while the database is down (the pool's default wait was 30)."""


def test_a_hub_whose_database_stops_answers_503_at_once_and_serves_again_when_it_is_back(own_postgres, tmp_path):
    url = url_of(own_postgres)
    (token,) = hub_with(PostgresHubStorage(url), ["writer"])
    (tmp_path / "writer.token").write_text(token)
    workspace = ("-w", tmp_path / "writer")
    hub_log = tmp_path / "hub.log"
    with mem_serve(url, log=hub_log) as hub:
        run_mem("init", *workspace, "--agent", "writer", check=True)
        run_mem("remote", "add", "origin", hub, "--token-file", tmp_path / "writer.token", *workspace, check=True)
        run_mem("entry", "add", "insights", "[FACT] before the outage", *workspace, check=True)
        run_mem("push", *workspace, check=True)

        own_postgres.stop()
        lost = fact("writer", "pushed over HTTP while the database is down")
        asked_at = time.monotonic()
        answer = httpx.post(hub + "/v1/push", content=msgspec.json.encode(PushRequest(events=[lost])), timeout=60,
                            headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
        assert time.monotonic() - asked_at < PROMPT
        assert answer.status_code == 503
        problem = answer.json()
        assert problem["type"].endswith("/storage-unavailable") and "does not answer" in problem["detail"]
        page = httpx.get(f"{hub}/ui/asof?token={token}", timeout=60)  # the pages read the hub through a mirror
        assert page.status_code == 503 and page.json()["type"].endswith("/storage-unavailable"), page.text

        run_mem("entry", "add", "insights", "[FACT] written while the database is down", *workspace, check=True)
        asked_at = time.monotonic()
        push = run_mem("push", *workspace)
        assert time.monotonic() - asked_at < PROMPT + 3  # a `mem` process starts in about a second
        said = push.stderr.decode()
        assert push.returncode != 0 and said.count("\n") == 1, said
        assert said.startswith("error: hub failed: Storage unavailable") and "database does not answer" in said, said

        started(own_postgres)
        pushed = run_mem("push", *workspace)
        assert pushed.returncode == 0 and "pushed 1 event" in pushed.stdout.decode(), pushed.stderr.decode()

    held = PostgresHubStorage(url)
    try:
        texts = [event.body.content for event in held.pull(0, ["insights"], 100)]
    finally:
        held.close()
    assert texts == ["before the outage", "written while the database is down"]
    logged = hub_log.read_text()
    assert "Traceback" not in logged and logged.count("does not answer") == 1 and logged.count("answers again") == 1, \
        logged


def test_group_commits_during_an_outage_answer_each_push_and_resume_after_it(own_postgres):
    storage = PostgresHubStorage(url_of(own_postgres))
    storage.apply_contract(CONTRACT)

    async def pushes():
        committer = GroupCommitter(storage, Fanout())
        assert [result.position for result in await committer.push([fact("writer", "before")])] == [2]
        own_postgres.stop()
        lost = await asyncio.gather(*(committer.push([fact("writer", f"lost {i}")]) for i in range(3)),
                                    return_exceptions=True)
        assert all(isinstance(outcome, StorageUnavailable) for outcome in lost), lost
        started(own_postgres)
        assert [result.position for result in await committer.push([fact("writer", "after")])] == [3]

    try:
        asyncio.run(pushes())
        assert [event.body.content for event in storage.pull(0, ["insights"], 10)] == ["before", "after"]
    finally:
        storage.close()
