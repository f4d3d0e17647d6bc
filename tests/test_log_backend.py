"""A workspace keeps its log where its config says: SQLite in `.mem/log.db` by default, or PostgreSQL
(`mem init --log postgresql://...`), seen end to end through real `mem` subprocesses."""

import json

import psycopg

from eventstore.backends import open_log, place, shown
from eventstore.postgres import PostgresLog
from eventstore.sqlite import SQLiteLog

from conftest import PAGE, run_mem
from teamhub import Team, layer

V2 = PAGE.replace(b"Staging first.", b"Staging first. Prod needs an ack.")


def test_the_factory_picks_the_backend_by_location(tmp_path, pg_url):
    with open_log(tmp_path / "log.db") as log:
        assert isinstance(log, SQLiteLog)
    with open_log(pg_url) as log:
        assert isinstance(log, PostgresLog)
    assert shown("postgresql://me:secret@host:5/db") == "postgresql://me:***@host:5/db"
    assert place("postgresql://me:secret@host:5/db") == place("postgres://host:5/db?password=secret") == "host:5/db"


def test_a_workspace_with_its_log_in_postgresql(tmp_path, pg_url):
    ws = tmp_path / "ws"
    out = run_mem("init", "-w", ws, "--agent", "alice", "--log", pg_url, check=True).stdout.decode()
    assert "log in postgresql://" in out
    assert json.loads((ws / ".mem" / "config.json").read_text())["log"] == pg_url
    assert (ws / ".mem" / "config.json").stat().st_mode & 0o077 == 0  # the URL may hold a password
    v1, v2 = tmp_path / "v1.md", tmp_path / "v2.md"
    v1.write_bytes(PAGE)
    v2.write_bytes(V2)
    w = ("-w", ws)
    assert b"(seq 1)" in run_mem(*w, "page", "write", "deploy", "--file", v1, check=True).stdout
    run_mem(*w, "always", "add", "Ack before prod.", check=True)
    assert b"update mind/deploy.md (seq 3)" in run_mem(*w, "page", "write", "deploy", "--file", v2, check=True).stdout
    assert not (ws / ".mem" / "log.db").exists()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT seq, kind FROM events ORDER BY seq").fetchall() == [
            (1, "page.ingest"), (2, "always.add"), (3, "page.update")]

    assert (ws / "mind" / "deploy.md").read_bytes() == V2
    assert run_mem(*w, "show", "mind/deploy.md", "--seq", "1", check=True).stdout == PAGE
    replayed = json.loads(run_mem(*w, "replay", "--json", check=True).stdout)
    assert replayed["checkpoint"] == 3
    assert b"no differences" in run_mem(*w, "replay", "--check", check=True).stdout
    assert (ws / "mind" / "deploy.md").read_bytes() == V2
    assert json.loads(run_mem(*w, "verify", "--json", check=True).stdout) == {
        "ok": True, "checked": 3, "head": 3, "first_bad_seq": None, "problem": None, "redacted": 0,
        "later": [], "more": 0}
    assert [e["seq"] for e in json.loads(run_mem(*w, "log", "--json", check=True).stdout)] == [1, 2, 3]

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE events SET digest = %s WHERE seq = 2", (bytes(32),))
    bad = run_mem(*w, "verify")
    assert bad.returncode == 1 and b"BAD at seq 2" in bad.stdout


def test_init_refuses_a_log_that_is_not_a_postgresql_url(tmp_path):
    result = run_mem("init", "-w", tmp_path / "ws", "--log", "mysql://x/y")
    assert result.returncode == 1
    assert result.stderr.decode().startswith("error: --log takes a postgresql:// URL")
    assert not (tmp_path / "ws" / ".mem").exists()


def test_init_refuses_another_agents_log_and_takes_up_its_own(tmp_path, pg_url):
    """A second workspace on a PostgreSQL log that holds agent alice's memory: another agent is refused
    (it would write into alice's mind); alice again rebuilds her workspace from her log."""
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("init", "-w", tmp_path / "alice", "--agent", "alice", "--log", pg_url, check=True)
    run_mem("-w", tmp_path / "alice", "page", "write", "deploy", "--file", page, check=True)
    with psycopg.connect(pg_url) as conn:
        before = conn.execute("SELECT seq, agent, kind FROM events ORDER BY seq").fetchall()

    refused = run_mem("init", "-w", tmp_path / "bob", "--agent", "bob", "--log", pg_url)
    assert refused.returncode == 1
    assert refused.stderr.decode().startswith("error: the log postgresql://")
    assert "holds the memory of agent 'alice'" in refused.stderr.decode() and len(refused.stderr.decode().splitlines()) == 1
    assert not (tmp_path / "bob" / ".mem").exists()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT seq, agent, kind FROM events ORDER BY seq").fetchall() == before

    run_mem("init", "-w", tmp_path / "again", "--agent", "alice", "--log", pg_url, check=True)
    assert (tmp_path / "again" / "mind" / "deploy.md").read_bytes() == PAGE


def test_a_log_and_a_hub_never_share_a_database(tmp_path, pg_url):
    """`mem init --log` on a hub's database made the log's tables beside the hub's; `mem hub init` or `mem
    serve --db` on a workspace's log database made the hub's beside the log's."""
    import uuid

    ws = tmp_path / "ws"
    run_mem("init", "-w", ws, "--agent", "alice", "--log", pg_url, check=True)
    for args in (["hub", "init"], ["hub", "agent", "list"]):
        refused = run_mem(*args, "--db", pg_url)
        assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
        assert b"is not a hub database (it holds events, log_counter)" in refused.stderr
    hub_db = f"hub_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {hub_db}")
    hub_url = pg_url.rsplit("/", 1)[0] + "/" + hub_db
    try:
        run_mem("hub", "init", "--db", hub_url, check=True)
        refused = run_mem("init", "-w", tmp_path / "other", "--agent", "bob", "--log", hub_url)
        assert refused.returncode == 1 and "holds other tables (hub_agents" in refused.stderr.decode()
        assert not (tmp_path / "other" / ".mem").exists()
        with psycopg.connect(hub_url) as conn:
            assert conn.execute("SELECT to_regclass('log_counter')").fetchone()[0] is None
        with psycopg.connect(pg_url) as conn:
            assert conn.execute("SELECT to_regclass('hub_events')").fetchone()[0] is None
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {hub_db} WITH (FORCE)")


def test_a_workspace_made_again_on_its_postgresql_log_writes_its_shared_layers_files(tmp_path, pg_url):
    """Regression (newcomer7 L1): the hub's contract was kept only in `.mem/contract.json` (the log recorded one only
    when a change moved a file), so a workspace made again on its log wrote no shared file, `mem show` answered an
    entries file that was not on disk, `mem entry add` said no contract was known, and `mem status` said clean."""
    team = Team(tmp_path, agents=("writer",))
    try:
        ws, again = tmp_path / "ws", tmp_path / "again"
        run_mem("init", "-w", ws, "--agent", "writer", "--log", pg_url, check=True)
        run_mem("-w", ws, "remote", "add", "origin", team.url, "--token-file", tmp_path / "writer.token", check=True)
        run_mem("-w", ws, "entry", "add", "insights", "[FACT] 2026-11-01: shared fact", check=True)
        run_mem("-w", ws, "sync", check=True)

        run_mem("init", "-w", again, "--agent", "writer", "--log", pg_url, check=True)
        assert (again / "memory/insights.md").read_bytes() == (ws / "memory/insights.md").read_bytes()
        status = run_mem("-w", again, "status", check=True).stdout.decode()
        assert status.endswith("clean: every file is what the log says\n"), status
        run_mem("-w", again, "entry", "add", "insights", "[FACT] 2026-11-02: second", check=True)
        assert "second" in (again / "memory/insights.md").read_text()

        team.apply(layer("insights", "team/insights.md"))
        run_mem("-w", again, "remote", "add", "origin", team.url, "--token-file", tmp_path / "writer.token", check=True)
        assert "second" in (again / "team/insights.md").read_text()
        with psycopg.connect(pg_url, autocommit=True) as conn:  # a log kept before the state held the contract
            conn.execute("DELETE FROM sync_state WHERE key = 'hub-contract'")
        run_mem("init", "-w", tmp_path / "third", "--agent", "writer", "--log", pg_url, check=True)
        assert "second" in (tmp_path / "third/team/insights.md").read_text()
    finally:
        team.stop()


def test_status_says_a_layers_file_no_contract_places(tmp_path):
    team = Team(tmp_path, agents=("writer",))
    try:
        ws = tmp_path / "writer"
        team.mem("writer", "entry", "add", "insights", "[FACT] 2026-11-01: shared fact", check=True)
        (ws / ".mem/contract.json").unlink()
        (ws / "memory/insights.md").unlink()
        status = team.mem("writer", "status", check=True).stdout.decode()
        assert "not placed:      the log holds events of layer insights, but no hub contract is known here" in status
        assert "clean" not in status, status
        team.mem("writer", "pull", check=True)
        status = team.mem("writer", "status", check=True).stdout.decode()
        assert status.endswith("clean: every file is what the log says\n"), status
    finally:
        team.stop()


def test_mem_mcp_on_a_postgresql_log_goes_on_after_its_database_closed_its_connections(tmp_path, pg_url):
    """Regression (nc34b): after the log's database restarted, a running `mem mcp` answered every tool call, reads
    too, with `the connection is closed` until it was restarted. Its log opens its connections anew."""
    from test_log_postgres import cut_off
    from test_mcp import call, run_stdio

    ws = tmp_path / "ws"
    run_mem("init", "-w", ws, "--agent", "alice", "--log", pg_url, check=True)

    async def body(session):
        said = [await call(session, "loop_append", role="user", text="before")]
        cut_off(pg_url)
        said.append(await call(session, "loop_append", role="user", text="after"))
        cut_off(pg_url)
        said.append(await call(session, "loop_show"))
        return said

    said = run_stdio(ws, body)
    assert [error for error, _text in said] == [False, False, False], said
    assert "before" in said[2][1] and "after" in said[2][1], said


def test_a_command_on_a_log_whose_database_does_not_answer_says_so_in_one_line(tmp_path, pg_url):
    """Regression (nc35b): a command said `cannot open the event log ...: connection failed: ... Is the server
    running ...`, where the README (and the MCP tools) say the log does not answer and to try again."""
    from sync.server import free_port

    ws = tmp_path / "ws"
    run_mem("init", "-w", ws, "--agent", "alice", "--log", pg_url, check=True)
    config = json.loads((ws / ".mem/config.json").read_text())
    gone = f"postgresql://nobody@127.0.0.1:{free_port()}/mindlog"  # no server listens there
    (ws / ".mem/config.json").write_text(json.dumps({**config, "log": gone}))
    said = run_mem("always", "list", "-w", ws)
    assert said.returncode == 1 and said.stderr.decode().startswith(
        f"error: the event log {gone} does not answer (connection failed: ") and said.stderr.decode().endswith(
        "); try again once its database does\n") and said.stderr.count(b"\n") == 1, said.stderr
