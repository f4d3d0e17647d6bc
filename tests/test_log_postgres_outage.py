"""The PostgreSQL server of an agent's own log stops for a while, then starts again, under its long-running processes:
`mem pull --follow` and `mem watch` say so once and go on (nc35a: each ended, with the first read while it was down),
and what came meanwhile is recorded once it is back."""

import signal
import subprocess
import time

import pytest

from conftest import mem_command, run_mem
from hubserver import mem_serve
from pg import started, url_of
from teamhub import layer

PAGE = "---\ntype: note\n---\n# {0}\n\n{0}\n"


def waited(check, seconds: float = 30.0):
    """Polls `check()` until it is true (returns it) or `seconds` pass (returns its last answer)."""
    end = time.monotonic() + seconds
    while True:
        found = check()
        if found or time.monotonic() > end:
            return found
        time.sleep(0.2)


def running(*args, cwd=None) -> subprocess.Popen:
    return subprocess.Popen([*mem_command(), *map(str, args)], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def ended(process: subprocess.Popen) -> tuple[int, str, str]:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
def own_log(own_postgres):
    """A database of its own for an agent's log on the test's own server."""
    import psycopg

    with psycopg.connect(url_of(own_postgres), autocommit=True) as admin:
        admin.execute("CREATE DATABASE agentlog")
    return url_of(own_postgres).rsplit("/", 1)[0] + "/agentlog"


def test_a_follower_on_a_postgresql_log_waits_out_its_database_and_records_what_came_meanwhile(
        own_postgres, own_log, tmp_path):
    hub_db = tmp_path / "hub.db"
    (tmp_path / "c.toml").write_text(layer("insights", "memory/insights.md"))
    run_mem("hub", "init", "--db", hub_db, check=True)
    run_mem("hub", "contract", "apply", tmp_path / "c.toml", "--db", hub_db, check=True)
    for agent in ("a", "b"):
        run_mem("hub", "agent", "add", agent, "--token-file", tmp_path / f"{agent}.token", "--db", hub_db, check=True)
    with mem_serve(str(hub_db)) as hub:
        run_mem("init", "-w", tmp_path / "a", "--agent", "a", "--log", own_log, check=True)
        run_mem("init", "-w", tmp_path / "b", "--agent", "b", check=True)
        for agent in ("a", "b"):
            run_mem("remote", "add", "origin", hub, "--token-file", tmp_path / f"{agent}.token", "-w",
                    tmp_path / agent, check=True)
        follower = running("pull", "--follow", "-w", tmp_path / "a")
        try:
            time.sleep(2)
            own_postgres.stop()
            run_mem("entry", "add", "insights", "[FACT] 2026-12-04: while it was down", "-w", tmp_path / "b",
                    check=True)
            run_mem("push", "-w", tmp_path / "b", check=True)
            time.sleep(3)
            started(own_postgres)
            insights = tmp_path / "a/memory/insights.md"
            assert waited(lambda: insights.exists() and "while it was down" in insights.read_text()), \
                ended(follower)
            assert follower.poll() is None
        finally:
            code, _out, err = ended(follower)
    assert "does not answer" in err and "retrying until it does" in err and err.count("does not answer") == 1, err
    assert "the event log answers again; following" in err and "Traceback" not in err, err


def test_a_watch_on_a_postgresql_log_says_its_database_is_down_and_adopts_once_it_answers(
        own_postgres, own_log, tmp_path):
    ws = tmp_path / "w"
    run_mem("init", "-w", ws, "--agent", "a", "--log", own_log, check=True)
    watcher = running("watch", "-w", ws)
    try:
        time.sleep(2)
        own_postgres.stop()
        (ws / "mind/down.md").write_text(PAGE.format("down"))
        time.sleep(3)
        started(own_postgres)
        (ws / "mind/after.md").write_text(PAGE.format("after"))

        def adopted():
            listed = run_mem("log", "--json", "-w", ws)
            return listed.returncode == 0 and len(listed.stdout) > 2 and b'"after"' in listed.stdout \
                and b'"down"' in listed.stdout
        assert waited(adopted), ended(watcher)
        assert watcher.poll() is None
    finally:
        code, out, err = ended(watcher)
    assert "does not answer" in err and "an edit once it answers adopts this one too (watching on)" in err, err
    assert "Traceback" not in err and "adopted mind/down.md" in out, out
