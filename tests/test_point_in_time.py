"""`mem show --at/--seq`, `checkout` and `diff`: any file as of any moment, by index lookup."""

import datetime as dt
import time

import pytest

from eventstore.instants import format_instant, parse_instant

from conftest import PAGE, run_mem

V2 = PAGE.replace(b"Staging first.", b"Staging first. Prod needs an ack.")


@pytest.fixture
def history(workspace, tmp_path):
    """Three moments: after ingest (t1), after an Always edit and update (t2), after delete (t3)."""
    v1, v2 = tmp_path / "v1.md", tmp_path / "v2.md"
    v1.write_bytes(PAGE)
    v2.write_bytes(V2)
    marks = {}
    run_mem("-w", workspace, "page", "write", "deploy", "--file", v1, "--note", "first", check=True)
    time.sleep(0.02)
    marks["t1"] = time.time()
    time.sleep(0.02)
    run_mem("-w", workspace, "always", "add", "Ack before prod.", check=True)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", v2, "--note", "ack", check=True)
    time.sleep(0.02)
    marks["t2"] = time.time()
    time.sleep(0.02)
    run_mem("-w", workspace, "page", "delete", "deploy", "--note", "gone", check=True)
    return workspace, {k: format_instant(int(v * 1000)) for k, v in marks.items()}


def show(workspace, *args):
    return run_mem("-w", workspace, "show", *args)


def test_show_page_as_of_times_and_seqs(history):
    ws, t = history
    assert show(ws, "mind/deploy.md", "--at", t["t1"]).stdout == PAGE
    assert show(ws, "mind/deploy.md", "--at", t["t2"]).stdout == V2
    assert show(ws, "mind/deploy.md", "--seq", "1").stdout == PAGE
    assert show(ws, "mind/deploy.md", "--seq", "3").stdout == V2
    gone = show(ws, "mind/deploy.md")
    assert gone.returncode == 1 and b"does not exist" in gone.stderr
    before = show(ws, "mind/deploy.md", "--at", "2000-01-01")
    assert before.returncode == 1 and b"before this workspace existed" in before.stderr


def test_at_accepts_offsets(history):
    ws, t = history
    utc = dt.datetime.fromisoformat(t["t1"].replace("Z", "+00:00"))
    plus_two = utc.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat()
    naive = utc.replace(tzinfo=None).isoformat()
    assert show(ws, "mind/deploy.md", "--at", plus_two).stdout == PAGE
    assert show(ws, "mind/deploy.md", "--at", naive).stdout == PAGE


def test_mind_and_log_as_of(history):
    ws, t = history
    mind1 = show(ws, "mind.md", "--at", t["t1"]).stdout.decode()
    assert "Ack before prod" not in mind1 and "[Deploy procedure]" in mind1
    mind2 = show(ws, "mind.md", "--at", t["t2"]).stdout.decode()
    assert "- Ack before prod.\n" in mind2
    assert "[Deploy procedure]" not in show(ws, "mind.md").stdout.decode()
    log1 = show(ws, "mind/log.md", "--at", t["t1"]).stdout.decode()
    assert log1.count("## [") == 1 and "ingest | Deploy procedure" in log1
    assert show(ws, "mind/log.md").stdout.decode().count("## [") == 3


def test_checkout_writes_the_whole_memory_as_it_was(history, tmp_path):
    ws, t = history
    out = tmp_path / "then"
    result = run_mem("-w", ws, "checkout", out, "--at", t["t2"], check=True)
    assert b"wrote 3 files" in result.stdout
    assert (out / "mind/deploy.md").read_bytes() == V2
    assert (out / "mind.md").read_bytes() == show(ws, "mind.md", "--at", t["t2"]).stdout
    assert (out / "mind/log.md").read_bytes() == show(ws, "mind/log.md", "--at", t["t2"]).stdout


def test_diff_between_two_moments(history):
    ws, t = history
    out = run_mem("-w", ws, "diff", "mind/deploy.md", "--from", t["t1"], "--to", t["t2"], check=True).stdout.decode()
    assert "-Staging first.\n+Staging first. Prod needs an ack.\n" in out
    by_seq = run_mem("-w", ws, "diff", "mind.md", "--from", "seq:1", "--to", "seq:2", check=True).stdout.decode()
    assert "+- Ack before prod." in by_seq


def test_page_as_of_is_an_index_lookup(memory):
    memory.write_page("a", PAGE)
    plan = memory.views.db.execute(
        "EXPLAIN QUERY PLAN SELECT doc FROM page_versions WHERE slug = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
        ("a", 1)).fetchall()
    detail = " ".join(row[-1] for row in plan)
    assert "SEARCH page_versions USING INDEX page_versions_by_slug (slug=? AND seq<?)" in detail
    assert "TEMP B-TREE" not in detail


def test_parse_instant():
    assert parse_instant("2026-11-29") == parse_instant("2026-11-29T00:00:00Z")
    assert parse_instant("2026-11-29T02:00:00+02:00") == parse_instant("2026-11-29T00:00:00")
    assert format_instant(parse_instant("2026-08-13T14:02:00.250Z")) == "2026-08-13T14:02:00.250Z"
