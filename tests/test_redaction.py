"""Redaction: the bodies leave the log, the views, the files and the hub; the chain still verifies."""

import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, NamedTuple

import pytest

from eventstore.blobs import blob_json
from eventstore.ids import uuid_text

from conftest import log_rows, run_mem
from test_mcp import call, run_stdio
from test_adf_file import build_adf, text_row

SECRET = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
PAGE = f"---\ntype: reference\n---\n# Staging access\n\nThe bot logs in with {SECRET} for now.\n"


def files_holding(root: Path, needle: str) -> list[str]:
    """Every file under root (databases, their WAL and journal included) whose bytes hold the needle."""
    return [str(p.relative_to(root)) for p in sorted(root.rglob("*")) if p.is_file()
            and needle.encode() in p.read_bytes()]


def mem(workspace, *args, **kw):
    return run_mem("-w", workspace, *args, **kw)


@pytest.fixture
def leaky(workspace, tmp_path):
    """A workspace whose page, log note, loop (compacted into an audit blob), file and message hold a secret."""
    page = tmp_path / "access.md"
    page.write_text(PAGE)
    mem(workspace, "config", "set", "audit.loop", "true", check=True)
    mem(workspace, "page", "write", "staging-access", "--file", page, "--allow-secret", check=True)
    page.write_text("---\ntype: reference\n---\n# Staging access\n\nThe token is in the vault now.\n")
    mem(workspace, "page", "write", "staging-access", "--file", page, "--note", f"rotated {SECRET}",
        "--allow-secret", check=True)
    mem(workspace, "loop", "append", "--role", "user", "--text", f"use {SECRET}", "--allow-secret", check=True)
    mem(workspace, "loop", "append", "--role", "assistant", "--text", "noted", check=True)
    summary = tmp_path / "summary.txt"
    summary.write_text("we talked about access")
    mem(workspace, "loop", "compact", "--summary-file", summary, check=True)
    secret_file = tmp_path / "creds"
    secret_file.write_text(f"token={SECRET}\n")
    mem(workspace, "file", "write", "notes/creds.txt", "--file", secret_file, "--allow-secret", check=True)
    message = tmp_path / "message.json"
    message.write_text(json.dumps({"from": "bob", "content": f"here: {SECRET}"}))
    mem(workspace, "message", "receive", "--file", message, "--allow-secret", check=True)
    mem(workspace, "always", "add", "Staging first.", check=True)
    return workspace


def test_redact_by_match_removes_every_byte_and_keeps_the_chain(leaky):
    listed = mem(leaky, "redact", "--match", "ghp_[A-Za-z0-9]+", "--reason", "leaked token", check=True)
    assert b"would redact 5 events" in listed.stdout
    assert files_holding(leaky / ".mem", SECRET)  # only listed, nothing done yet
    done = mem(leaky, "redact", "--match", "ghp_[A-Za-z0-9]+", "--reason", "leaked token", "--yes", check=True)
    assert b"redacted 5 events" in done.stdout
    assert files_holding(leaky, SECRET) == []
    assert files_holding(leaky, "leaked token")  # the reason is what remains

    verify = mem(leaky, "verify", check=True)
    assert b"(5 redacted)" in verify.stdout
    assert mem(leaky, "replay", "--check").returncode == 0
    assert "[redacted: leaked token]" in mem(leaky, "show", "mind/staging-access.md", "--seq", "2", check=True).stdout.decode()
    log_md = (leaky / "mind" / "log.md").read_text()
    assert "| staging-access" in log_md and "rotated" not in log_md
    events = json.loads(mem(leaky, "log", "--json", check=True).stdout)
    pasted = next(e["seq"] for e in events if e["body"].get("original") == "loop.append")
    audit = json.loads(mem(leaky, "audit", "read", str(pasted), "--json", check=True).stdout)
    assert audit["source"] == "audit" and "[redacted: leaked token]" in json.dumps(audit["entry"])
    mem(leaky, "checkout", leaky.parent / "after", check=True)
    assert files_holding(leaky.parent / "after", SECRET) == []
    mem(leaky, "export", "adf", leaky.parent / "after.adf", check=True)
    assert SECRET.encode() not in (leaky.parent / "after.adf").read_bytes()


def test_what_a_redaction_lists_names_the_events_and_never_shows_their_text(workspace):
    """Regression (nc26b): `mem redact` listed each event with its summary, which for an Always line, an entry or a
    message is the text the redaction removes: the secret went to the terminal (and any log of it) once more."""
    mem(workspace, "always", "add", f"the key is {SECRET}", "--allow-secret", check=True)
    message = workspace / "message.json"
    message.write_text(json.dumps({"from": "bob", "content": f"here: {SECRET}"}))
    mem(workspace, "message", "receive", "--file", message, "--allow-secret", check=True)
    message.unlink()
    preview = mem(workspace, "redact", "--match", "ghp_", "--reason", "leaked token", check=True).stdout.decode()
    assert "would redact 2 events" in preview and "always.add" in preview and SECRET not in preview
    done = mem(workspace, "redact", "1", "2", "--reason", "leaked token", check=True).stdout.decode()
    assert "redacted 2 events" in done and SECRET not in done
    assert files_holding(workspace, SECRET) == []


def test_redact_by_seq_keeps_the_loop_seq_and_says_redacted_in_the_past(leaky):
    rows = [e for e in json.loads(mem(leaky, "log", "--json", check=True).stdout) if e["body"]["kind"] == "loop.append"]
    target = rows[0]["seq"]
    mem(leaky, "redact", str(target), "--reason", "pasted a key", check=True)
    row = json.loads(mem(leaky, "audit", "read", str(target), "--json", check=True).stdout)
    assert row["seq"] == target and "[redacted: pasted a key]" in json.dumps(row["entry"])
    event = [e for e in json.loads(mem(leaky, "log", "--json", check=True).stdout) if e["seq"] == target][0]
    assert event["body"]["kind"] == "redacted" and event["body"]["original"] == "loop.append"
    assert mem(leaky, "replay", "--check").returncode == 0


def test_refusals_leave_the_log_as_it_was(leaky):
    from conftest import log_rows

    before = log_rows(leaky)
    for args, expect in ((["999", "--reason", "r"], "no event"), (["1"], "--reason"),
                         (["--reason", "r"], "give seqs or ids"), (["1", "--reason", " "], "needs a --reason"),
                         (["--match", "(", "--reason", "x"], "not a regular expression")):
        result = mem(leaky, "redact", *args)
        err = result.stderr.decode()
        assert result.returncode != 0 and "Traceback" not in err and expect in err, err
    assert log_rows(leaky) == before
    mem(leaky, "redact", "1", "--reason", "r", check=True)
    seq = max(row[0] for row in log_rows(leaky))
    again = mem(leaky, "redact", str(seq), "--reason", "r")
    assert again.returncode == 1 and "is a redaction event" in again.stderr.decode()
    assert len(log_rows(leaky)) == len(before) + 1


def test_a_match_that_backtracks_is_given_up_on_one_text_and_refused_by_the_cli_and_the_tool(workspace):
    """Regression: `(a|aa)+$` on forty a's took hours (re cannot be stopped; an MCP client has no Ctrl-C). Each
    text is searched for at most MATCH_SECONDS, then the redaction is refused naming the seq, nothing written."""
    from conftest import log_rows

    mem(workspace, "loop", "append", "--role", "user", "--text", "a" * 40 + "b", check=True)
    before = log_rows(workspace)
    said = ("'(a|aa)+$' ran over 2 s (and a second a million characters) on the text of seq 1: it may backtrack (a "
            "repeat inside a repeat, like (a|aa)+ or (x+)+); write it so that each part can match only one way")
    started = time.monotonic()
    refused = mem(workspace, "redact", "--match", "(a|aa)+$", "--reason", "r", "--yes")
    assert refused.returncode == 1 and refused.stderr.decode() == f"error: --match {said}\n", refused.stderr

    async def session_body(session):
        return [await call(session, "redact", reason="r", match="(a|aa)+$", confirm=True)]

    assert run_stdio(workspace, session_body) == [(True, f"match {said}")]
    assert time.monotonic() - started < 30
    assert log_rows(workspace) == before
    listed = mem(workspace, "redact", "--match", "a{40}b", "--reason", "r", "--json", check=True)
    assert [t["seq"] for t in json.loads(listed.stdout)["targets"]] == [1]
    large = workspace / "large.txt"  # regression (nc16a): a linear pattern on an 8 MB file ran past the 2 s, refused
    large.write_text(" ".join(["alpha", "beta", "deploy", "token"][i % 4] for i in range(1_300_000)))
    mem(workspace, "file", "write", "large.txt", "--file", large, check=True)
    listed = mem(workspace, "redact", "--match", "[a-z]+ [a-z]+ [a-z]+ [a-z]+ secret", "--reason", "r", "--json",
                 check=True)
    assert json.loads(listed.stdout)["targets"] == []


def test_a_redaction_reason_is_one_line_of_at_most_2000_characters_for_the_cli_the_tool_and_the_hub(workspace):
    """`redact` took a reason of any size (a 5 MiB one was accepted, and stands in every redacted event's place); the
    hub took one pushed to it as well (found by a newcomer run). Refused as a note is: one line, 2,000 characters."""
    from conftest import log_rows
    from eventstore.envelope import new_event
    from eventstore.errors import MemError
    from eventstore.kinds import Redaction
    from eventstore.layers import Contract, ContractLayer
    from sync.hub import check_batch

    mem(workspace, "loop", "append", "--role", "user", "--text", "secret", check=True)
    before = log_rows(workspace)
    long = "x " * 1000 + "y"  # 2,001 characters once collapsed; "x\n" * 1000 collapses to 1,999, which passes
    expected = "a redaction's reason is longer than 2000 characters"
    for args in (["1"], ["--match", "secret"], ["--match", "secret", "--yes"]):
        result = mem(workspace, "redact", *args, "--reason", long)
        assert result.returncode != 0 and result.stderr.decode() == f"error: {expected}\n", result.stderr

    async def session_body(session):
        return [await call(session, "redact", reason="r" * 5_000_000, targets=[1]),
                await call(session, "redact", reason=long, match="secret", confirm=True)]

    assert run_stdio(workspace, session_body) == [(True, expected)] * 2
    assert log_rows(workspace) == before
    pushed = new_event(Redaction(target_ids=["01a2270a-c5b3-7eca-9806-1025c3bb9d81"], reason="r" * 2001),
                       agent="alice", layer="notes")
    layer = ContractLayer(path="team/notes.md", format="entries", producers=["*"], consumers=["*"])
    with pytest.raises(MemError) as refused:  # the hub's check of every pushed event
        check_batch([pushed], "alice", Contract(layers={"notes": layer}))
    assert "body.reason is longer than 2000 characters" in str(refused.value)
    assert refused.value.field == "events[0].body.reason"
    mem(workspace, "redact", "1", "--reason", "x\n" * 1000, check=True)  # one line once collapsed: taken


def test_a_reader_delays_the_scrub_and_the_next_write_finishes_it(leaky):
    """A read held open by another process keeps the WAL from being emptied: `mem redact` does not wait on it
    for long (it waited 60 s a try, 50 tries), says the text is still on disk, and a later write erases it."""
    reader = sqlite3.connect(leaky / ".mem" / "log.db")
    held = reader.execute("SELECT seq FROM events")
    held.fetchone()  # a read in progress: its snapshot pins the WAL
    try:
        done = mem(leaky, "redact", "--match", "ghp_[A-Za-z0-9]+", "--reason", "leaked token", "--yes")
        assert done.returncode == 0 and b"redacted 5 events" in done.stdout, done.stderr
        assert b"may still be in .mem/log.db" in done.stderr and b"Traceback" not in done.stderr
        assert files_holding(leaky / ".mem", SECRET)
    finally:
        held.close()
        reader.close()
    mem(leaky, "always", "add", "Rotate tokens monthly.", check=True)
    assert files_holding(leaky, SECRET) == []
    mem(leaky, "always", "add", "And yearly.", check=True)  # nothing pending: no scrub any more
    assert mem(leaky, "verify", check=True).returncode == 0


def test_a_hand_edited_file_that_may_still_hold_the_redacted_text_is_named_with_the_way_out(workspace, tmp_path):
    """Regression: a page edited in place (as ADF agents do) keeps its file through a redaction, with it the text just
    redacted, and `mem redact` said only the usual hand-edit warning. It names the file, says it may still hold what
    was redacted, and how to put back mindlog's version without it; that way out leaves no byte of it."""
    page = tmp_path / "access.md"
    page.write_text(PAGE)
    mem(workspace, "page", "write", "staging-access", "--file", page, "--allow-secret", check=True)
    with open(workspace / "mind/staging-access.md", "a") as edited:
        edited.write("Also: ask in #deploys.\n")
    redacted = mem(workspace, "redact", "--match", "ghp_", "--reason", "leak", "--yes", check=True)
    assert redacted.stderr.decode() == (
        "warning: mind/staging-access.md edited by hand, so not rewritten: it may still hold what was redacted; remove "
        "it from the file, or put back mindlog's version without it (`mem show mind/staging-access.md > "
        "mind/staging-access.md`)\n"
        "note: mind/staging-access.md shows `[redacted: leak]` now, its current version redacted: `mem page write "
        "staging-access --file FILE` writes it anew\n")
    shown = mem(workspace, "show", "mind/staging-access.md", check=True).stdout
    (workspace / "mind/staging-access.md").write_bytes(shown)
    assert files_holding(workspace, SECRET) == []
    report = json.loads(mem(workspace, "redact", "--match", "nothing-here-now", "--reason", "r", "--json").stdout)
    assert report["hand_edited"] == []


def test_a_hand_edit_made_on_redacted_text_is_not_adopted(workspace, tmp_path):
    """Regression (nc14b): after a redaction, `mem status` said `mem adopt` keeps a hand edit made before it, and the
    adopt recorded the whole edited file, the redacted text in it, as a new version (text no secret scanner flags).
    Status, adopt and the MCP adopt tool refuse it now, until mindlog has written the file again."""
    page = tmp_path / "p.md"
    page.write_text("---\ntype: note\n---\n# P\n\nmy home address is 12 lemur street\n")
    mem(workspace, "page", "write", "p", "--file", page, check=True)
    mem(workspace, "page", "write", "q", "--file", page, check=True)
    for slug in ("p", "q"):
        with open(workspace / f"mind/{slug}.md", "a") as edited:
            edited.write("hand line\n")
    mem(workspace, "redact", "1", "--reason", "pii", "--yes", check=True)
    said = ("the edit was made on text redacted since (pii) and may hold it, so `mem adopt` does not take it: take "
            "that text out and `mem page write p --file mind/p.md`, or `mem show mind/p.md > mind/p.md` drops the edit")
    status = mem(workspace, "status").stdout.decode()
    assert f"mind/p.md  (edited by hand, but {said})" in status, status
    events = len(json.loads(mem(workspace, "log", "--json", check=True).stdout))
    adopted = mem(workspace, "adopt")
    assert adopted.returncode == 1 and adopted.stdout.decode() == f"adopted mind/q.md\nleft mind/p.md: {said}\n"
    async def adopt_tool(session):
        return await call(session, "adopt")

    is_error, text = run_stdio(workspace, adopt_tool)
    told = json.loads(text)
    assert told["refused"] == {"mind/p.md": "the edit was made on text redacted since (pii) and may hold it, so the "
                                            "adopt tool does not take it; a person must take that text out of the "
                                            "file, or delete the file (it is written again from the log)"}
    assert len(json.loads(mem(workspace, "log", "--json", check=True).stdout)) == events + 1  # q's edit alone
    assert mem(workspace, "search", "lemur", "--json", check=True).stdout.count(b"mind/p.md") == 0
    (workspace / "mind/p.md").write_bytes(mem(workspace, "show", "mind/p.md", check=True).stdout)
    assert mem(workspace, "adopt", check=True).stdout.decode() == "nothing edited by hand\n"
    with open(workspace / "mind/p.md", "a") as edited:
        edited.write("a new hand line\n")
    assert mem(workspace, "adopt", check=True).stdout.decode() == "adopted mind/p.md\n"


@pytest.mark.parametrize("named", ["1", "3"], ids=["the-add", "the-removal"])
def test_an_always_line_is_redacted_with_every_event_holding_it(workspace, named):
    """Regression (nc14b): redacting the add of a line removed later left the removal holding the text, and the removal
    (which names its line by its text) no longer removed the add's `[redacted: leak]` line: it came back into
    `## Always`, now and as of every seq after the removal. Both go, whichever is named, and the CLI says so."""
    mem(workspace, "always", "add", "Keep badger line", check=True)
    mem(workspace, "always", "add", "Other line", check=True)
    mem(workspace, "always", "remove", "1", check=True)
    other = "3" if named == "1" else "1"
    kind = "always.remove" if named == "1" else "always.add"
    redacted = mem(workspace, "redact", named, "--reason", "leak", check=True)
    assert redacted.stderr.decode() == f"note: seq {other} ({kind}) holds the same `## Always` line: it is redacted " \
                                       "with it\n"
    assert redacted.stdout.decode().endswith("redacted 2 events (redaction seq 4)\n")
    for seq in ((), ("--seq", "3"), ("--seq", "4")):
        assert mem(workspace, "always", "list", *seq, check=True).stdout.decode() == "  1  Other line\n", seq
    assert mem(workspace, "always", "list", "--seq", "2", check=True).stdout.decode() == \
        "  1  [redacted: leak]\n  2  Other line\n"
    assert files_holding(workspace, "badger") == []
    assert "no differences" in mem(workspace, "replay", "--check", check=True).stdout.decode()


# --- truncation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("drop", [1, 2, "all"])
def test_verify_detects_a_truncated_log(workspace, drop):
    for i in range(5):
        mem(workspace, "always", "add", f"line {i}", check=True)
    assert mem(workspace, "verify").returncode == 0
    db = sqlite3.connect(workspace / ".mem" / "log.db")
    db.execute("DELETE FROM events" + ("" if drop == "all" else f" WHERE seq > {5 - drop}"))
    db.commit()
    db.close()
    result = mem(workspace, "verify")
    assert result.returncode == 1 and b"missing" in result.stdout, result.stdout


def test_verify_detects_a_log_rewritten_behind_the_views(workspace):
    for i in range(3):
        mem(workspace, "always", "add", f"line {i}", check=True)
    db = sqlite3.connect(workspace / ".mem" / "log.db")
    db.execute("DELETE FROM events WHERE seq = 3")
    db.commit()
    db.close()
    refused = mem(workspace, "always", "add", "another line 3")  # mem writes nothing beside views past the log
    assert refused.returncode == 1 and b"past the log head 2" in refused.stderr
    from projections.memory import Memory

    with Memory.open(workspace) as memory:  # another writer does: a new seq 3, and the chain verifies alone
        memory.log.append([memory.writer.always_add("another line 3")])
        assert memory.log.head() == 3 and memory.log.verify().ok
    result = mem(workspace, "verify")
    assert result.returncode == 1 and b"truncated or rewritten" in result.stdout, result.stdout


def test_verify_is_not_fooled_by_a_writer_appending_meanwhile(workspace):
    """Another process appends and folds while `verify` checks the log: the views' checkpoint then moves past
    the head the check read. The witnesses are read before the log, so only a truncation makes them ahead."""
    from projections.memory import Memory

    with Memory.open(workspace) as memory, Memory.open(workspace) as writer:
        memory.always_add("line 0")
        check = memory.log.verify

        def check_then_append(progress=None):
            report = check(progress=progress)
            writer.always_add("written during the check")
            return report

        memory.log.verify = check_then_append
        report = memory.verify()
        assert report.ok, report.problem
        assert writer.views.checkpoint() == report.head + 1


# --- shared layers through a hub ------------------------------------------------------------------

CONTRACT = """
[layers.insights]
path = "memory/insights.md"
format = "entries"
producers = ["writer", "main"]
consumers = ["*"]

[layers.notes]
path = "memory/notes.md"
format = "entries"
producers = ["writer"]
consumers = ["*"]
"""
PRIVATE = "Jane's phone is 555-0199"


class Served(NamedTuple):
    root: Path
    url: str
    stop: Callable[[], None]  # stops `mem serve`
    db: str
    mirror: Path  # the mirror the hub's pages read


@pytest.fixture
def served(tmp_path):
    """Three agents on a hub that `mem serve` serves (its pages too, over a mirror in hub.db.ui) until `stop`."""
    yield from serve_team(tmp_path, str(tmp_path / "hub.db"))


@pytest.fixture
def served_on_postgresql(tmp_path, pg_url):
    """`served`, the hub in PostgreSQL: `mem serve` keeps its pages' mirror in a temporary directory (under
    tmp_path/tmp, its TMPDIR)."""
    (tmp_path / "tmp").mkdir()
    yield from serve_team(tmp_path, pg_url, env={"TMPDIR": str(tmp_path / "tmp")})


@pytest.fixture
def served_with_ui_dir(tmp_path):
    """`served`, its pages' mirror where `mem serve --ui-dir` says (not beside the SQLite hub)."""
    yield from serve_team(tmp_path, str(tmp_path / "hub.db"), ui_dir=tmp_path / "pages")


def serve_team(root: Path, db: str, env=None, ui_dir: Path | None = None):
    from hubserver import mem_serve

    (root / "contract.toml").write_text(CONTRACT)
    run_mem("hub", "init", "--db", db, check=True)
    run_mem("hub", "contract", "apply", root / "contract.toml", "--db", db, check=True)
    with ExitStack() as serving:
        url = serving.enter_context(mem_serve(db, env=env, args=("--ui-dir", ui_dir) if ui_dir else ()))
        for agent in ("main", "writer", "late"):
            token = run_mem("hub", "agent", "add", agent, "--db", db, check=True).stdout.decode().strip()
            (root / f"{agent}.token").write_text(token + "\n")
            run_mem("init", "-w", root / agent, "--agent", agent, check=True)
            run_mem("remote", "add", "origin", url, "--token-file", root / f"{agent}.token", "-w", root / agent,
                    check=True)
        mirror = ui_dir or (next((root / "tmp").glob("mindlog-hub-ui-*")) if env else Path(f"{db}.ui"))
        yield Served(root, url, serving.close, db, mirror)


@pytest.fixture
def team(served):
    return served.root


def entry_id(root, agent, layer, text):
    entries = json.loads(mem(root / agent, "entry", "list", layer, "--json", check=True).stdout)
    return next(e["id"] for e in entries if text in e["content"])


def shared_private_entry(team, layer):
    """The writer adds the private entry to `layer` and pushes it; main pulls it: its id."""
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    mem(team / "writer", "entry", "add", layer, f"[FACT] {PRIVATE}", check=True)
    mem(team / "writer", "push", check=True)
    mem(team / "main", "pull", check=True)
    return entry_id(team, "main", layer, "555-0199")


def test_a_redaction_travels_through_the_hub_and_every_copy_loses_the_body(team):
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    mem(team / "writer", "entry", "add", "insights", f"[FACT] {PRIVATE}", check=True)
    mem(team / "writer", "entry", "add", "insights", "[FACT] Staging first", check=True)
    mem(team / "writer", "entry", "add", "notes", "[FACT] only the writer produces notes", check=True)
    mem(team / "writer", "push", check=True)
    mem(team / "main", "pull", check=True)
    assert PRIVATE in (team / "main/memory/insights.md").read_text()

    # main produces insights, so it may redact the writer's entry there; not the writer's note.
    note = entry_id(team, "main", "notes", "only the writer")
    refused = mem(team / "main", "redact", note, "--reason", "mine now")
    assert refused.returncode == 1 and "does not produce" in refused.stderr.decode()
    mem(team / "main", "redact", entry_id(team, "main", "insights", "555-0199"), "--reason", "private", check=True)
    assert files_holding(team / "main", "555-0199") == []
    mem(team / "main", "push", check=True)
    left = files_holding(team, "555-0199")
    assert left and all(p.startswith("writer/") for p in left)  # the hub dropped it; the writer has not pulled
    mem(team / "writer", "pull", check=True)
    mem(team / "late", "pull", check=True)  # never saw it: gets the redacted form
    assert files_holding(team, "555-0199") == []
    rendered = {agent: (team / agent / "memory/insights.md").read_text() for agent in ("main", "writer", "late")}
    assert len(set(rendered.values())) == 1 and "[redacted: private]" in rendered["main"]
    for agent in ("main", "writer", "late"):
        verify = mem(team / agent, "verify", check=True)
        assert b"(1 redacted)" in verify.stdout
        assert mem(team / agent, "replay", "--check").returncode == 0


def test_the_hub_administrator_redacts(team):
    target = shared_private_entry(team, "notes")
    done = run_mem("hub", "redact", target, "--reason", "private", "--db", team / "hub.db", check=True)
    assert b"redaction at hub position" in done.stdout
    left = files_holding(team, "555-0199")
    assert left and all(p.startswith(("main/", "writer/")) for p in left)  # not on the hub any more
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    assert files_holding(team, "555-0199") == []
    assert "[redacted: private]" in (team / "writer/memory/notes.md").read_text()
    again = run_mem("hub", "redact", target, "--reason", "again", "--db", team / "hub.db")
    assert again.returncode == 1 and again.stderr.decode().strip() == \
        f"error: event {target} is redacted already; it cannot be redacted"
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    assert "[redacted: private]" in (team / "writer/memory/notes.md").read_text()
    missing = run_mem("hub", "redact", "01a2270a-c5b3-7eca-9806-1025c3bb9d81", "--reason", "x", "--db", team / "hub.db")
    assert missing.returncode == 1 and b"no event" in missing.stderr
    position = run_mem("hub", "redact", "1", "--reason", "x", "--db", team / "hub.db")  # said "no event 1" as if none
    assert position.returncode == 2 and b"1 is a number, not an event id: the hub redacts by id" in position.stderr


REPORTS = """
[layers.reports]
path = "memory/reports.md"
format = "entries"
producers = ["writer", "main"]
consumers = ["main"]
"""


def test_a_producer_that_does_not_consume_a_layer_pulls_its_redactions(team, tmp_path):
    """Regression (found at 4b17926): the author of an event that the hub's administrator or another producer
    redacted kept its own copy's text when it did not consume the layer: its pulls brought nothing of the layer,
    redactions included. They now bring its redactions, and nothing else of it."""
    (tmp_path / "reports.toml").write_text(CONTRACT + REPORTS)
    run_mem("hub", "contract", "apply", tmp_path / "reports.toml", "--db", team / "hub.db", check=True)
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    mem(team / "writer", "entry", "add", "reports", f"[FACT] {PRIVATE}", check=True)
    mem(team / "writer", "entry", "add", "reports", "[FACT] Bob's code is 4242-77", check=True)
    mem(team / "writer", "entry", "add", "reports", "[FACT] Staging first", check=True)
    mem(team / "writer", "push", check=True)
    mem(team / "main", "pull", check=True)
    mem(team / "main", "redact", entry_id(team, "main", "reports", "4242-77"), "--reason", "mine to drop", check=True)
    mem(team / "main", "push", check=True)
    run_mem("hub", "redact", entry_id(team, "main", "reports", "555-0199"), "--reason", "private", "--db",
            team / "hub.db", check=True)
    assert files_holding(team / "writer", "555-0199") and files_holding(team / "writer", "4242-77")

    pulled = mem(team / "writer", "pull", check=True)
    assert b"pulled 2 events" in pulled.stdout and b"already" not in pulled.stdout, pulled  # not twice (nc20a)
    believed = json.loads(run_mem("hub", "believed", "writer", "--db", team / "hub.db", "--json", check=True).stdout)
    assert [e["body"]["reason"] for e in believed["events"] if e["layer"] == "reports"] == [
        "mine to drop", "private"]  # what the hub sent it, as `mem hub believed` counts it (nc18b)
    assert files_holding(team / "writer", "555-0199") == [] and files_holding(team / "writer", "4242-77") == []
    reports = (team / "writer/memory/reports.md").read_text()
    assert "[redacted: private]" in reports and "[redacted: mine to drop]" in reports and "Staging first" in reports
    mem(team / "writer", "entry", "add", "reports", "[FACT] Staging second", check=True)
    assert mem(team / "writer", "push", check=True).stdout.startswith(b"pushed 1 event")  # not the redactions back
    assert mem(team / "writer", "verify", check=True).returncode == 0
    assert mem(team / "writer", "replay", "--check").returncode == 0
    mem(team / "main", "pull", check=True)
    assert files_holding(team / "main", "555-0199") == [] and files_holding(team / "main", "4242-77") == []


@pytest.mark.parametrize("dropped", ["as a producer", "with its layer"])
def test_an_author_the_contract_dropped_still_loses_the_text_of_its_redacted_events(team, tmp_path, dropped):
    """Regression (nc18a): a redaction reached the author of the events it named only while the contract listed it
    as a producer of the layer: one dropped since (or whose layer was) kept its own copy's text. Pulls now also ask
    the hub for the redactions of the agent's own events (GET /v1/redactions), whatever the contract says."""
    (tmp_path / "reports.toml").write_text(CONTRACT + REPORTS)
    run_mem("hub", "contract", "apply", tmp_path / "reports.toml", "--db", team / "hub.db", check=True)
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    mem(team / "writer", "entry", "add", "reports", f"[FACT] {PRIVATE}", check=True)
    mem(team / "writer", "entry", "add", "reports", "[FACT] Staging first", check=True)
    mem(team / "writer", "push", check=True)
    mem(team / "main", "pull", check=True)
    target = entry_id(team, "main", "reports", "555-0199")
    later = CONTRACT + REPORTS.replace('producers = ["writer", "main"]', 'producers = ["main"]') \
        if dropped == "as a producer" else CONTRACT
    (tmp_path / "later.toml").write_text(later)
    run_mem("hub", "contract", "apply", tmp_path / "later.toml", "--db", team / "hub.db", check=True)
    mem(team / "writer", "pull", check=True)
    run_mem("hub", "redact", target, "--reason", "private", "--db", team / "hub.db", check=True)
    assert files_holding(team / "writer", "555-0199")

    pulled = mem(team / "writer", "pull", check=True)
    assert b"pulled 1 event" in pulled.stdout, pulled
    assert files_holding(team / "writer", "555-0199") == []
    assert files_holding(team / "writer" / ".mem", "Staging first")  # the redaction's alone
    assert mem(team / "writer", "pull", check=True).stdout.startswith(b"pulled 0 events")  # its cursor moved on
    assert mem(team / "writer", "push", check=True).stdout.startswith(b"pushed 0 events")  # not sent back
    assert mem(team / "writer", "verify", check=True).returncode == 0
    assert mem(team / "writer", "replay", "--check").returncode == 0


def test_a_consumer_dropped_before_it_pulled_a_redaction_still_loses_the_text(team, tmp_path):
    """Regression (nc20a): a redaction of an event a consumer held reached it only through its pulls of the layer: one
    the contract dropped as a consumer (or whose layer it dropped) before it pulled the redaction kept the text for
    good, in its log, its file and its search. GET /v1/redactions also hands an agent the redactions of the layers it
    consumed under an earlier contract."""
    (tmp_path / "reports.toml").write_text(CONTRACT + REPORTS)
    run_mem("hub", "contract", "apply", tmp_path / "reports.toml", "--db", team / "hub.db", check=True)
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    mem(team / "writer", "entry", "add", "reports", f"[FACT] {PRIVATE}", check=True)
    mem(team / "writer", "push", check=True)
    mem(team / "main", "pull", check=True)
    target = entry_id(team, "main", "reports", "555-0199")
    later = REPORTS.replace('consumers = ["main"]', 'consumers = ["writer"]').replace('"writer", "main"', '"writer"')
    (tmp_path / "later.toml").write_text(CONTRACT + later)  # main neither consumes nor produces it now
    run_mem("hub", "contract", "apply", tmp_path / "later.toml", "--db", team / "hub.db", check=True)
    run_mem("hub", "redact", target, "--reason", "private", "--db", team / "hub.db", check=True)
    assert files_holding(team / "main", "555-0199")

    pulled = mem(team / "main", "pull", check=True)
    assert b"pulled 1 event" in pulled.stdout, pulled
    assert files_holding(team / "main", "555-0199") == []
    assert mem(team / "main", "search", "555-0199").stdout.startswith(b"no matches")
    assert mem(team / "main", "verify", check=True).returncode == 0
    assert mem(team / "main", "replay", "--check").returncode == 0


def test_a_redactions_cursor_ahead_of_a_restored_hub_starts_again(team, tmp_path):
    """Regression (nc19a): the cursor of GET /v1/redactions moves to the hub's head at each answer, so an agent that
    pulls nothing else (it produces a layer without consuming it) kept one past the head of a hub restored from a
    backup, and every pull failed with `409 cursor-ahead`. The client asks again from the hub's start."""
    from projections.memory import Memory
    from sync.hub import encode_cursor

    (tmp_path / "reports.toml").write_text(CONTRACT + REPORTS)
    run_mem("hub", "contract", "apply", tmp_path / "reports.toml", "--db", team / "hub.db", check=True)
    mem(team / "writer", "pull", check=True)
    mem(team / "writer", "entry", "add", "reports", f"[FACT] {PRIVATE}", check=True)
    mem(team / "writer", "push", check=True)
    mem(team / "main", "pull", check=True)
    run_mem("hub", "redact", entry_id(team, "main", "reports", "555-0199"), "--reason", "private", "--db",
            team / "hub.db", check=True)
    with Memory.open(team / "writer") as writer:
        writer.log.set_state("redactions:origin", encode_cursor(10**6))  # as a hub that lost positions leaves it
    pulled = mem(team / "writer", "pull")
    assert pulled.returncode == 0 and b"cursor-ahead" not in pulled.stderr, pulled
    assert files_holding(team / "writer", "555-0199") == []


def test_a_consumer_dropped_from_a_layer_redacts_its_own_copy(team, tmp_path):
    """Regression (nc10b M3): an agent dropped as a consumer keeps its copy of the layer, and was refused when it
    redacted that copy itself (not its event, not its layer)."""
    target = shared_private_entry(team, "notes")
    head, _ = CONTRACT.rsplit('consumers = ["*"]', 1)  # the notes layer's, the last
    (tmp_path / "dropped.toml").write_text(head + 'consumers = ["writer", "late"]\n')
    run_mem("hub", "contract", "apply", tmp_path / "dropped.toml", "--db", team / "hub.db", check=True)
    mem(team / "main", "pull", check=True)
    assert files_holding(team / "main", "555-0199")  # no redaction yet (the hub's reaches it now: nc20a)
    rows = mem(team / "main", "log", "--json", check=True).stdout
    mem(team / "main", "redact", target, "--reason", "left the layer", check=True)
    assert files_holding(team / "main", "555-0199") == []
    pushed = mem(team / "main", "push", check=True)  # refused: the redaction was held back as "cannot be pushed"
    assert pushed.stdout.startswith(b"pushed 0 events") and pushed.stderr == b"", pushed
    assert b"held back" not in mem(team / "main", "status", check=True).stdout
    assert len(json.loads(mem(team / "main", "log", "--json", check=True).stdout)) == len(json.loads(rows)) + 1
    assert mem(team / "main", "verify", check=True).returncode == 0


def test_the_first_of_two_redactions_of_one_event_in_a_batch_wins_as_across_batches(workspace):
    """A consumer can pull two producers' redactions of one entry in one batch (each redacted it before
    seeing the other's); the hub applies the first, so the consumer must too, not the last."""
    from eventstore.envelope import new_event
    from eventstore.kinds import Redaction
    from projections.memory import Memory

    mem(workspace, "loop", "append", "--role", "user", "--text", PRIVATE, check=True)
    with Memory.open(workspace) as memory:
        target = memory.log.get_by_seq(1)
        memory.log.append([new_event(Redaction(target_ids=[target.id], reason=reason), agent="alice", layer="loop")
                           for reason in ("first", "second")])
        assert memory.log.get_by_seq(1).body.reason == "first"


def stand_ins(team, agents, target) -> dict[str, tuple[str, str]]:
    """(reason, by) of the target's stand-in in each agent's log and on the hub."""
    from eventstore.sqlite import SQLiteLog
    from sync.storage import decode_stored
    from sync.storage_sqlite import SQLiteHubStorage

    found = {}
    for agent in agents:
        with SQLiteLog(team / agent / ".mem" / "log.db") as log:
            body = log.get(target).body
        found[agent] = (body.reason, body.by)
    hub = SQLiteHubStorage(str(team / "hub.db"))
    try:
        body = decode_stored(hub.stored(target)[1], 0, 0).body
    finally:
        hub.close()
    found["hub"] = (body.reason, body.by)
    return found


def two_producers_redact_one_entry(team, add_consumer) -> str:
    """writer and main each redact the writer's entry before seeing the other's redaction; the writer's
    reaches the hub first. `late` holds the entry and pulls both redactions at once, `step` one by one."""
    url = json.loads(mem(team / "main", "remote", "list", "--json", check=True).stdout)[0]["url"]
    add_consumer("step", url)
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    mem(team / "writer", "entry", "add", "insights", f"[FACT] {PRIVATE}", check=True)
    mem(team / "writer", "push", check=True)
    for agent in ("main", "late", "step"):
        mem(team / agent, "pull", check=True)
    target = entry_id(team, "main", "insights", "555-0199")
    mem(team / "main", "redact", target, "--reason", "main's", check=True)
    mem(team / "writer", "redact", target, "--reason", "writer's", check=True)
    mem(team / "writer", "push", check=True)
    mem(team / "step", "pull", check=True)
    mem(team / "main", "push", check=True)
    for agent in ("late", "step", "writer", "main"):
        mem(team / agent, "pull", check=True)
    return target


@pytest.fixture
def add_consumer(team):
    def add(agent, url):
        token = run_mem("hub", "agent", "add", agent, "--db", team / "hub.db", check=True).stdout.decode().strip()
        (team / f"{agent}.token").write_text(token + "\n")
        run_mem("init", "-w", team / agent, "--agent", agent, check=True)
        run_mem("remote", "add", "origin", url, "--token-file", team / f"{agent}.token", "-w", team / agent,
                check=True)
    return add


def test_consumers_pulling_two_redactions_at_once_or_one_by_one_show_the_hubs_stand_in(team, add_consumer):
    """The first redaction of a target in hub order wins everywhere: on the hub, on a consumer that pulls both
    redactions in one batch (it showed the second's reason), on one that pulls them one by one, and on the
    producer whose redaction came first, and on the one whose came second (main: its own redaction came first in
    its log, but it comes back from the hub after the writer's, in the batch that brings the writer's, as `mem
    sync` has it). The bytes are gone everywhere; the stand-ins and the rendered files agree."""
    target = two_producers_redact_one_entry(team, add_consumer)
    found = stand_ins(team, ("late", "step", "writer", "main"), target)
    assert found["hub"][0] == "writer's"
    assert set(found.values()) == {found["hub"]}, found
    rendered = {agent: (team / agent / "memory/insights.md").read_text() for agent in ("late", "step", "writer", "main")}
    assert len(set(rendered.values())) == 1 and "[redacted: writer's]" in rendered["late"], rendered
    assert files_holding(team, "555-0199") == []
    for agent in ("late", "step", "main"):
        assert mem(team / agent, "replay", "--check").returncode == 0
        assert b"(1 redacted)" in mem(team / agent, "verify", check=True).stdout



def test_a_producer_that_pulls_the_first_redaction_before_pushing_its_own_shows_it(team):
    """main redacts the writer's entry; the writer redacts it too and pushes first; main pulls (its own
    redaction not pushed yet), then pushes. The hub keeps the writer's stand-in, so main must too: it kept
    its own, as its redaction came first in its log."""
    target = shared_private_entry(team, "insights")
    mem(team / "main", "redact", target, "--reason", "main's", check=True)
    mem(team / "writer", "redact", target, "--reason", "writer's", check=True)
    mem(team / "writer", "push", check=True)
    mem(team / "main", "pull", check=True)
    assert stand_ins(team, ("main",), target)["main"][0] == "writer's"
    mem(team / "main", "push", check=True)
    for agent in ("writer", "main", "late"):
        mem(team / agent, "pull", check=True)
    found = stand_ins(team, ("writer", "main", "late"), target)
    assert found["hub"][0] == "writer's" and set(found.values()) == {found["hub"]}, found
    rendered = {agent: (team / agent / "memory/insights.md").read_text() for agent in ("writer", "main", "late")}
    assert len(set(rendered.values())) == 1 and "[redacted: writer's]" in rendered["main"], rendered
    assert files_holding(team, "555-0199") == []
    assert mem(team / "main", "replay", "--check").returncode == 0


def test_an_own_redaction_that_reached_the_hub_before_its_push_cursor_moved_keeps_its_place(team):
    """Regression (left by mend): main's redaction reached the hub first, but main stopped before its push
    cursor moved; the writer's redaction of the same entry came after it on the hub. main's next pull, which
    brings both back, counted its own as not pushed yet (to land after the writer's) and showed the writer's
    stand-in, where the hub keeps main's."""
    from eventstore.sqlite import SQLiteLog

    target = shared_private_entry(team, "insights")
    with SQLiteLog(team / "main" / ".mem" / "log.db") as log:
        before = log.state("push:origin")
    mem(team / "main", "redact", target, "--reason", "main's", check=True)
    mem(team / "main", "push", check=True)
    with SQLiteLog(team / "main" / ".mem" / "log.db") as log:
        log.set_state("push:origin", before or "0")  # the hub has it; the cursor's commit did not happen
    mem(team / "writer", "redact", target, "--reason", "writer's", check=True)
    mem(team / "writer", "push", check=True)
    for agent in ("main", "writer", "late"):
        mem(team / agent, "pull", check=True)
    found = stand_ins(team, ("main", "writer", "late"), target)
    assert found["hub"][0] == "main's" and set(found.values()) == {found["hub"]}, found
    assert mem(team / "main", "replay", "--check").returncode == 0


def imported_workspace(tmp_path, adf: Path) -> Path:
    workspace = tmp_path / "ws"
    run_mem("init", "-w", workspace, "--agent", "me", check=True)
    mem(workspace, "import", "adf", adf, "--allow-secret", check=True)
    return workspace


def archived(seqs, text) -> bytes:
    """A loop audit blob of user messages at these seqs, each text(seq)."""
    import brotli

    return brotli.compress(json.dumps([{"seq": seq, "role": "user", "created_at": 7,
                                        "content_json": [{"type": "text", "text": text(seq)}]} for seq in seqs]).encode())


def test_a_redacted_imported_config_folds_to_the_default_and_says_so(tmp_path):
    """The imported config is one `config.set` of the whole object: redacted, it folded to None and every
    later command was a traceback."""
    adf = build_adf(tmp_path / "agent.adf", config=json.dumps({"provider": "anthropic", "audit": {"loop": False}}),
                    loop=[text_row(seq, f"message {seq}") for seq in (1, 2, 3)])
    workspace = imported_workspace(tmp_path, adf)
    mem(workspace, "redact", "--match", "anthropic", "--reason", "vendor name", "--yes", check=True)
    shown = mem(workspace, "config", "show", check=True).stdout.decode()
    assert json.loads(shown.splitlines()[0].removeprefix("audit = ")) == {"loop": True, "inbox": False,
                                                                           "outbox": False, "files": False}
    assert "provider" not in shown and "(redacted: the whole config, set at seq 4: vendor name)" in shown
    (tmp_path / "s.txt").write_text("summary")
    assert b"in audit 1" in mem(workspace, "loop", "compact", "--summary-file", tmp_path / "s.txt",
                                check=True).stdout  # loop audit is the default's again: on
    assert b"no differences" in mem(workspace, "replay", "--check", check=True).stdout


def test_a_redacted_config_key_folds_as_if_never_set(workspace):
    mem(workspace, "config", "set", "audit.files", "true", check=True)
    mem(workspace, "config", "set", "audit.inbox", "true", check=True)
    mem(workspace, "redact", "1", "--reason", "wrong switch", "--yes", check=True)
    shown = mem(workspace, "config", "show", check=True).stdout.decode().splitlines()
    assert json.loads(shown[0].removeprefix("audit = ")) == {"loop": True, "inbox": True, "outbox": False,
                                                             "files": False}
    assert shown[1:] == ["(redacted: audit.files, set at seq 1: wrong switch)"]
    assert b"no differences" in mem(workspace, "replay", "--check", check=True).stdout


def test_a_redacted_imported_audit_blob_reads_as_redacted_entries_and_exports_a_valid_file(tmp_path):
    """The stand-in of a redacted `audit.import` had 0 bytes of blob: audit read, cite and lint failed with
    "not valid brotli", and an export wrote a blob the import refused. Now its entries keep all but their
    content, as a redacted native message does, and read `[redacted: reason]`."""
    page = b"---\ntype: procedure\n---\n# Deploy\n\nThe owner acks prod [S2].\n"
    adf = build_adf(tmp_path / "agent.adf", files=[("mind/deploy.md", page)],
                    audit=[("loop:main", 1, 4, archived((1, 2, 4), lambda seq: f"archived {seq}: pager 5550199"))])
    workspace = imported_workspace(tmp_path, adf)
    blob_event = next(line.split()[0] for line in mem(workspace, "log", check=True).stdout.decode().splitlines()
                      if "audit.import" in line)
    mem(workspace, "redact", blob_event, "--reason", "leaked token", "--yes", check=True)
    for command in (["audit", "read", "2"], ["cite", "[S2]"]):
        shown = mem(workspace, *command, check=True).stdout.decode()
        assert shown.startswith("S2: in audit blob 1 (loop main)\n"), shown
        assert json.loads(shown.splitlines()[1]) == {"seq": 2, "role": "user", "created_at": 7, "content_json": [
            {"type": "text", "text": "[redacted: leaked token]"}]}
    assert b"no findings" in mem(workspace, "lint", "--check", "citations", check=True).stdout
    assert files_holding(workspace, "5550199") == []
    mem(workspace, "export", "adf", tmp_path / "out.adf", check=True)
    exported = sqlite3.connect(tmp_path / "out.adf").execute("SELECT data FROM adf_audit").fetchone()[0]
    assert [e["seq"] for e in blob_json(exported)] == [1, 2, 4]
    run_mem("init", "-w", tmp_path / "again", "--agent", "me", check=True)
    mem(tmp_path / "again", "import", "adf", tmp_path / "out.adf", check=True)
    assert b"[redacted: leaked token]" in mem(tmp_path / "again", "cite", "[S4]", check=True).stdout
    assert b"no differences" in mem(workspace, "replay", "--check", check=True).stdout


def test_a_token_in_an_imported_audit_blob_is_found_by_match_and_its_seq_names_the_blob(tmp_path):
    """`--match` ran its regex over the blob's brotli bytes (it found nothing), and `mem redact 123` for the
    archived message said there was no such event."""
    blob = archived(range(100, 130), lambda seq: f"the bot token is {SECRET}" if seq == 123 else f"message {seq}")
    adf = build_adf(tmp_path / "agent.adf", audit=[("loop:main", 100, 129, blob)], loop=[text_row(200, "live")])
    workspace = imported_workspace(tmp_path, adf)
    listed = mem(workspace, "redact", "--match", "ghp_[A-Za-z0-9]+", "--reason", "leaked token", check=True)
    assert b"audit.import" in listed.stdout and b"would redact 1 event" in listed.stdout, listed.stdout
    holder = listed.stdout.decode().split()[0]
    refused = mem(workspace, "redact", "123", "--reason", "leaked token")
    assert refused.returncode == 1 and refused.stderr.decode() == (
        f"error: seq 123 is no event of the log but a message archived in audit blob 1 (loop main), which event "
        f"{holder} holds: `mem redact {holder}` removes the whole blob; `mem redact --match` finds the events "
        "whose text matches\n")
    mem(workspace, "redact", "--match", "ghp_[A-Za-z0-9]+", "--reason", "leaked token", "--yes", check=True)
    assert files_holding(workspace, SECRET) == []
    assert b"[redacted: leaked token]" in mem(workspace, "audit", "read", "123", check=True).stdout


# --- the mirror the hub's pages read -------------------------------------------------------------

def open_a_page(served: Served, path: str = "memory/notes.md") -> str:
    """main asks the hub's pages for a shared file now: the mirror copies what the hub holds (the page's HTML)."""
    import httpx

    token = (served.root / "main.token").read_text().strip()
    answer = httpx.get(f"{served.url}/ui/asof", params={"file": path}, headers={"authorization": f"Bearer {token}"},
                       timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.text


def mirrored(served: Served) -> Path:
    return served.mirror


def test_a_redaction_by_the_hub_administrator_leaves_the_pages_mirror_at_once(served):
    """Regression: `mem hub redact` cleaned the hub's database, but the mirror of its pages (log WAL, views) kept the
    text until a page was asked for, while `mem serve` ran in another process."""
    target = shared_private_entry(served.root, "notes")
    assert "555-0199" in open_a_page(served)
    assert files_holding(mirrored(served), "555-0199")  # the mirror holds it, as the hub's pages showed it
    run_mem("hub", "redact", target, "--reason", "private", "--db", served.root / "hub.db", check=True)
    assert files_holding(mirrored(served), "555-0199") == []  # no page asked for since
    assert files_holding(served.root, "555-0199") and all(
        p.startswith(("main/", "writer/")) for p in files_holding(served.root, "555-0199"))
    page = open_a_page(served)
    assert "555-0199" not in page and "[redacted: private]" in page
    assert files_holding(mirrored(served), "555-0199") == []


def test_a_redaction_by_the_hub_administrator_leaves_a_postgresql_hubs_pages_mirror_at_once(served_on_postgresql):
    """Regression: a PostgreSQL hub's pages keep their mirror in a temporary directory that only the running `mem
    serve` knows of: `mem hub redact` (no --ui-dir) cleaned the database, and the mirror kept the text in its log, its
    WAL and its views until a page was asked for."""
    served = served_on_postgresql
    target = shared_private_entry(served.root, "notes")
    assert "555-0199" in open_a_page(served)
    assert files_holding(mirrored(served), "555-0199")
    run_mem("hub", "redact", target, "--reason", "private", "--db", served.db, check=True)
    deadline = time.monotonic() + 30
    while files_holding(mirrored(served), "555-0199") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert files_holding(mirrored(served), "555-0199") == []  # no page asked for since
    page = open_a_page(served)
    assert "555-0199" not in page and "[redacted: private]" in page


def test_a_redaction_by_the_hub_administrator_leaves_the_mirror_mem_serve_ui_dir_reads(served_with_ui_dir):
    """Regression: `mem hub redact` on a SQLite hub scrubs the mirror beside it, or the one its --ui-dir names; one
    that only a running `mem serve --ui-dir` reads kept the text (its log's WAL, its views) until a page was asked
    for, when the administrator did not name it. The running hub now learns of the redaction, as a PostgreSQL hub's
    does."""
    served = served_with_ui_dir
    first, second = (shared_private_entry(served.root, layer) for layer in ("notes", "insights"))
    assert "555-0199" in open_a_page(served) and files_holding(mirrored(served), "555-0199")
    run_mem("hub", "redact", first, "--reason", "private", "--db", served.db, "--ui-dir", mirrored(served), check=True)
    assert not Path(f"{served.db}.ui").exists()
    assert "555-0199" not in open_a_page(served) and "555-0199" in open_a_page(served, "memory/insights.md")
    run_mem("hub", "redact", second, "--reason", "private", "--db", served.db, check=True)
    deadline = time.monotonic() + 30
    while files_holding(mirrored(served), "555-0199") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert files_holding(mirrored(served), "555-0199") == []  # no page asked for since
    page = open_a_page(served, "memory/insights.md")
    assert "555-0199" not in page and "[redacted: private]" in page


def test_a_redaction_by_the_hub_administrator_leaves_the_pages_mirror_with_no_hub_running(served):
    target = shared_private_entry(served.root, "notes")
    open_a_page(served)
    served.stop()
    assert files_holding(mirrored(served), "555-0199")
    run_mem("hub", "redact", target, "--reason", "private", "--db", served.root / "hub.db", check=True)
    assert files_holding(mirrored(served), "555-0199") == []


def test_a_pushed_redaction_leaves_the_pages_mirror_with_no_page_asked_for(served):
    target = shared_private_entry(served.root, "insights")
    open_a_page(served, "memory/insights.md")
    assert files_holding(mirrored(served), "555-0199")
    mem(served.root / "main", "redact", target, "--reason", "private", check=True)
    mem(served.root / "main", "push", check=True)
    deadline = time.monotonic() + 30
    while files_holding(mirrored(served), "555-0199") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert files_holding(mirrored(served), "555-0199") == []


def test_a_pushed_redaction_leaves_the_mirror_of_another_mem_serve_on_the_same_sqlite_hub(served_with_ui_dir):
    """Regression: two `mem serve` processes on one SQLite file, each its pages over a mirror of its own (--ui-dir):
    a redaction pushed to one scrubbed that one's mirror only; the other's kept the text (its log, its WAL, its
    views) until a page was asked for. Each process now learns of any redaction committed, as on PostgreSQL."""
    from hubserver import mem_serve

    served = served_with_ui_dir
    target = shared_private_entry(served.root, "insights")
    other_mirror = served.root / "pages2"
    with mem_serve(served.db, args=("--ui-dir", other_mirror)) as other_url:
        for url in (served.url, other_url):
            assert "555-0199" in open_a_page(Served(served.root, url, served.stop, served.db, served.mirror),
                                             "memory/insights.md")
        assert files_holding(mirrored(served), "555-0199") and files_holding(other_mirror, "555-0199")
        mem(served.root / "main", "redact", target, "--reason", "private", check=True)
        mem(served.root / "main", "push", check=True)  # to the first `mem serve`
        deadline = time.monotonic() + 30
        while (files_holding(mirrored(served), "555-0199") or files_holding(other_mirror, "555-0199")) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert files_holding(mirrored(served), "555-0199") == []
        assert files_holding(other_mirror, "555-0199") == []  # no page asked for since
        page = open_a_page(Served(served.root, other_url, served.stop, served.db, served.mirror), "memory/insights.md")
        assert "555-0199" not in page and "[redacted: private]" in page


def test_a_files_history_lists_its_redacted_version_as_a_pages_does(workspace, tmp_path):
    """Regression: `mem history PATH` after a `file.write` of PATH was redacted ended in a traceback
    (`'Redacted' object has no attribute 'path'`), and the MCP history tool in an error."""
    for n, text in enumerate((b"first version\n", b"second version\n"), 1):
        (tmp_path / f"f{n}.txt").write_bytes(text)
        run_mem("file", "write", "notes/t.txt", "--file", tmp_path / f"f{n}.txt", "--workspace", workspace, check=True)
    run_mem("redact", "1", "--reason", "wrong", "--workspace", workspace, check=True)
    listed = run_mem("history", "notes/t.txt", "--json", "--workspace", workspace, check=True)
    assert [(v["seq"], v["kind"]) for v in json.loads(listed.stdout)] == [(1, "redacted"), (2, "file.write")]

    async def session_body(session):
        return await call(session, "history", path="notes/t.txt")

    is_error, text = run_stdio(workspace, session_body)
    assert not is_error and [(v["seq"], v["kind"]) for v in json.loads(text)] == [(1, "redacted"), (2, "file.write")]


def test_a_match_in_a_pages_name_or_a_files_path_is_said_to_stay_not_claimed_redacted(workspace, tmp_path):
    """Regression (nc13c): `--match acme-merger` said "redacted 2 events" of a rename and a file write whose match was
    in the page's new name and the file's path, which a redaction keeps: the text stayed in the log, mind.md and the
    file list, and the next `--match` said "nothing matches". The MCP tool did the same."""
    (tmp_path / "q.md").write_text("---\ntype: note\n---\n# P\n\nbody\n")
    (tmp_path / "x.txt").write_text("acme-merger draft\n")
    mem = lambda *args, **kw: run_mem("-w", workspace, *args, **kw)  # noqa: E731
    mem("page", "write", "p", "--file", tmp_path / "q.md", check=True)
    mem("page", "rename", "p", "acme-merger-secret", check=True)
    mem("file", "write", "notes/acme-merger-secret.txt", "--file", tmp_path / "x.txt", check=True)
    said = mem("redact", "--match", "acme-merger", "--reason", "gone", "--yes", check=True)
    assert said.stdout.decode().splitlines()[-1] == "redacted 1 event (redaction seq 4)", said.stdout  # the file's text
    assert said.stderr.decode().splitlines() == [
        f"warning: seq {seq} keeps a match in its {field}, which a redaction leaves in the log (a page's name, a file's "
        "path): rename or delete the page or file so that the views no longer show it"
        for seq, field in ((2, "new"), (3, "path"))]
    again = mem("redact", "--match", "acme-merger", "--reason", "gone", check=True)
    assert again.stdout == b"nothing matches that a redaction removes\n" and again.stderr.count(b"keeps a match") == 2

    async def body(session):
        return await call(session, "redact", reason="gone", match="acme-merger", confirm=True)

    error, text = run_stdio(workspace, body)
    assert not error and text.splitlines()[0] == "nothing matches that a redaction removes" and \
        text.count("keeps a match") == 2, text


def test_the_redact_tool_takes_no_true_for_a_seq_nor_yes_for_confirm(workspace):
    """Regression (nc13c): `targets: [true]` was read as seq 1 and forgot it for good; `confirm: "yes"` as true."""
    run_mem("-w", workspace, "always", "add", "keep me", check=True)

    async def body(session):
        return [await call(session, "redact", reason="oops", targets=[True]),
                await call(session, "redact", reason="oops", match="keep", confirm="yes"),
                await call(session, "show", path="mind.md", seq="1")]

    for error, text in run_stdio(workspace, body):
        assert error and "valid" in text.lower(), text
    assert [row["body"]["kind"] for row in json.loads(run_mem("-w", workspace, "log", "--json").stdout)] == [
        "always.add"]


STOPPED_BEFORE_THE_FILES = """
import os, sys
from projections import redact
from projections.memory import Memory

with Memory.open(sys.argv[1]) as memory:
    events = redact.search(memory, "lemur").events
    memory.refresh = lambda *args, **kwargs: os._exit(9)  # committed, the files not rewritten: as a kill may land
    redact.redact(memory, events, "pii")
"""


def test_a_redaction_stopped_before_it_rewrote_the_files_is_told_until_they_are(workspace, tmp_path):
    """Regression (nc14c): a redaction killed after it committed left the redacted text in the files it had not
    rewritten yet, and `mem status` called them only "not yet written". It says they may hold what was removed, until
    a command that writes files has rewritten them."""
    page = tmp_path / "p.md"
    page.write_text("---\ntype: note\n---\n# P\n\nmy home address is 12 lemur street\n")
    mem(workspace, "page", "write", "p", "--file", page, check=True)
    died = subprocess.run([sys.executable, "-c", STOPPED_BEFORE_THE_FILES, str(workspace)], capture_output=True,
                          cwd=tempfile.gettempdir())
    assert died.returncode == 9, died.stderr
    assert files_holding(workspace / "mind", "lemur") == ["p.md"]
    told = json.loads(mem(workspace, "status", "--json").stdout)
    assert told["redaction_cut_off"] and told["behind"] == 1, told
    assert "warning: a redaction was cut off before it rewrote the files" in mem(workspace, "status").stdout.decode()
    mem(workspace, "adopt", check=True)
    assert files_holding(workspace / "mind", "lemur") == []
    told = json.loads(mem(workspace, "status", "--json").stdout)
    assert not told["redaction_cut_off"] and told["clean"], told


PULL_STOPPED_BEFORE_THE_FILES = """
import os, sys
from projections.memory import Memory
from sync.client import get_remote, pull

with Memory.open(sys.argv[1]) as memory:
    memory.follow = lambda *args, **kwargs: os._exit(9)  # the pulled redaction committed, no file written
    pull(memory, get_remote(memory, None))
"""


def test_a_pulled_redaction_stopped_before_it_rewrote_the_files_is_told_until_they_are(team):
    """Regression: a pull killed after it stored a redaction left the redacted text in the files, and `mem status`
    called them only "not yet written" (a redaction made here said more)."""
    shared_private_entry(team, "insights")
    mem(team / "main", "redact", entry_id(team, "main", "insights", "555-0199"), "--reason", "private", check=True)
    mem(team / "main", "push", check=True)
    died = subprocess.run([sys.executable, "-c", PULL_STOPPED_BEFORE_THE_FILES, str(team / "writer")],
                          capture_output=True, cwd=tempfile.gettempdir())
    assert died.returncode == 9, died.stderr
    assert "555-0199" in (team / "writer/memory/insights.md").read_text()
    told = json.loads(mem(team / "writer", "status", "--json").stdout)
    assert told["redaction_cut_off"] and told["behind"] >= 1, told
    mem(team / "writer", "show", "memory/insights.md", check=True)  # a command that writes files
    assert files_holding(team / "writer", "555-0199") == []
    told = json.loads(mem(team / "writer", "status", "--json").stdout)
    assert not told["redaction_cut_off"], told


def test_a_hand_edit_of_an_entries_file_a_pulled_redaction_changed_is_told_how_to_drop_it(team):
    """Regression (nc16a): the advice for a hand-edited entries file under a pulled redaction was `mem page write None
    --file memory/insights.md` (an entries file is no page)."""
    shared_private_entry(team, "insights")
    with open(team / "main/memory/insights.md", "a") as edited:
        edited.write("[FACT] 2026-12-03: added by hand\n")
    mem(team / "writer", "redact", entry_id(team, "writer", "insights", "555-0199"), "--reason", "private", check=True)
    mem(team / "writer", "push", check=True)
    mem(team / "main", "pull", check=True)
    said = ("edited by hand, but the edit was made on text redacted since (private) and may hold it, so `mem adopt` "
            "does not take it: `mem show memory/insights.md > memory/insights.md` drops the edit")
    status = mem(team / "main", "status").stdout.decode()
    assert f"memory/insights.md  ({said})" in status and "None" not in status, status


def test_redacting_a_pages_current_version_says_it_shows_the_stub_and_how_to_bring_the_one_before_back(workspace):
    """Regression (nc26b): a version written by mistake and redacted left the page showing `[redacted: ...]` as its
    current version (on every agent, for a shared page, once pushed) without a word; the note says so and names the
    write that brings the version before back. A version no longer current gets no note."""
    page = workspace / "p.md"
    page.write_text("---\ntype: note\n---\n# X\n\ngood\n")
    mem(workspace, "page", "write", "x", "--file", page, check=True)
    page.write_text("---\ntype: note\n---\n# X\n\noops\n")
    mem(workspace, "page", "write", "x", "--file", page, check=True)
    done = mem(workspace, "redact", "2", "--reason", "mistake", check=True)
    assert done.stderr.decode() == ("note: mind/x.md shows `[redacted: mistake]` now, its current version redacted: "
                                    "`mem show mind/x.md --seq 1 > page.md`, then `mem page write x --file page.md`, "
                                    "brings the version before back\n")
    (workspace / "page.md").write_bytes(mem(workspace, "show", "mind/x.md", "--seq", "1", check=True).stdout)
    mem(workspace, "page", "write", "x", "--file", workspace / "page.md", check=True)
    assert "good" in (workspace / "mind/x.md").read_text()
    report = json.loads(mem(workspace, "redact", "1", "--reason", "old", "--json", check=True).stdout)
    assert report["stubs"] == [] and report["done"]


def test_redacting_the_version_a_renamed_page_shows_says_so_under_its_name_now(workspace):
    """Regression (nc35b): a page renamed after its current version keeps that version's text, so redacting it put
    the stub in the renamed page with no note (the note looked for the version as the head of its old name)."""
    page = workspace / "p.md"
    for text in ("good", "oops"):
        page.write_text(f"---\ntype: note\n---\n# X\n\n{text}\n")
        mem(workspace, "page", "write", "x", "--file", page, check=True)
    mem(workspace, "page", "rename", "x", "y", check=True)
    done = mem(workspace, "redact", "2", "--reason", "mistake", check=True)
    assert done.stderr.decode() == ("note: mind/y.md shows `[redacted: mistake]` now, its current version redacted: "
                                    "`mem show mind/x.md --seq 1 > page.md`, then `mem page write y --file page.md`, "
                                    "brings the version before back\n"), done.stderr
    assert "[redacted: mistake]" in (workspace / "mind/y.md").read_text()
    assert "good" in mem(workspace, "show", "mind/x.md", "--seq", "1", check=True).stdout.decode()


def test_the_redact_tool_says_a_page_shows_the_stub_and_how_to_bring_the_one_before_back_in_tools_words(workspace):
    """Regression (nc34b): the MCP redact tool answered `redacted 1 event` alone; an agent was not told its page now
    reads `[redacted: ...]` (the CLI's note), nor how to bring the version before back with its own tools. The way it
    names works when followed (nc35a: `create` of a page that exists is refused)."""
    page = workspace / "p.md"
    for text in ("good", "oops"):
        page.write_text(f"---\ntype: note\n---\n# X\n\n{text}\n")
        mem(workspace, "page", "write", "x", "--file", page, check=True)

    async def body(session):
        said = [await call(session, "redact", targets=[2], reason="mistake")]
        before = (await call(session, "show", path="mind/x.md", seq=1))[1]
        stub = (await call(session, "show", path="mind/x.md"))[1]
        said.append(await call(session, "str_replace", path="/memories/mind/x.md", old_str=stub, new_str=before))
        return said

    (error, text), (replaced, _) = run_stdio(workspace, body)
    assert not error and text.splitlines()[1:] == [
        "mind/x.md shows `[redacted: mistake]` now, its current version redacted: the show tool with path mind/x.md "
        "and seq 1 gives the version before, and str_replace of /memories/mind/x.md's whole text (the show tool with "
        "path mind/x.md gives it) with that text brings it back"], text
    assert not replaced and "good" in mem(workspace, "show", "mind/x.md", check=True).stdout.decode()

def test_a_producer_demoted_after_a_leak_takes_it_back_itself(team, tmp_path):
    """Regression (nc28b): a producer made a consumer could not redact what it had pushed: its redaction was held
    back for good (`mem sync` exiting 1 each time) and the text stayed with every other agent. Its redaction of its own
    event goes out; of another agent's event it stays its own copy's, held back, and the push still sends the rest."""
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    mem(team / "main", "entry", "add", "insights", f"[FACT] {PRIVATE}", check=True)
    mem(team / "writer", "entry", "add", "insights", "[FACT] the writer's own", check=True)
    for agent in ("main", "writer", "late", "main"):
        mem(team / agent, "sync", check=True)
    demoted = CONTRACT.replace('producers = ["writer", "main"]', 'producers = ["writer"]')
    (tmp_path / "demoted.toml").write_text(demoted)
    run_mem("hub", "contract", "apply", tmp_path / "demoted.toml", "--db", team / "hub.db", check=True)
    mem(team / "main", "redact", entry_id(team, "main", "insights", "555-0199"), "--reason", "leak", check=True)
    mem(team / "main", "redact", entry_id(team, "main", "insights", "the writer's own"), "--reason", "mine alone",
        check=True)
    synced = mem(team / "main", "sync")
    assert synced.stdout.startswith(b"pushed 1,"), synced
    assert synced.returncode == 1 and synced.stderr.decode() == (
        "error: 1 event in layer insights cannot be pushed: the hub's contract does not list 'main' among the "
        "producers of 'insights'\n")  # the redaction of the writer's entry: its own copy's
    for agent in ("writer", "late"):
        mem(team / agent, "sync", check=True)
        assert files_holding(team / agent, "555-0199") == [], agent
        assert "the writer's own" in (team / agent / "memory/insights.md").read_text()


def test_a_producer_demoted_before_it_pushed_takes_its_writes_back_by_redacting_them(team, tmp_path):
    """Regression (nc28b): a producer made a consumer before it pushed was held back for good: `mem sync` exited 1 at
    every call, and redacting the writes only added the redaction to what was held. What it redacts before it went
    out is taken back: never sent, no longer held, said once; what another agent wrote stays held as before."""
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    mem(team / "main", "entry", "add", "insights", "[FACT] pushed while a producer", check=True)
    mem(team / "main", "sync", check=True)
    mem(team / "main", "entry", "add", "insights", f"[FACT] {PRIVATE}", check=True)
    demoted = CONTRACT.replace('producers = ["writer", "main"]', 'producers = ["writer"]')
    (tmp_path / "demoted.toml").write_text(demoted)
    run_mem("hub", "contract", "apply", tmp_path / "demoted.toml", "--db", team / "hub.db", check=True)
    held = mem(team / "main", "sync")
    assert held.returncode == 1 and "1 event in layer insights cannot be pushed" in held.stderr.decode(), held
    mem(team / "main", "redact", entry_id(team, "main", "insights", "555-0199"), "--reason", "not ours to say",
        check=True)
    synced = mem(team / "main", "sync")
    assert synced.returncode == 0 and synced.stderr.decode() == (
        "note: 2 events held back from the hub taken back before they went out (redacted here, and their "
        "redactions): never sent\n"), synced
    assert "held back" not in mem(team / "main", "status", check=True).stdout.decode()
    again = mem(team / "main", "sync", "--json")
    assert again.returncode == 0 and again.stderr == b"" and json.loads(again.stdout)["push"]["taken_back"] == 0
    mem(team / "writer", "sync", check=True)
    assert files_holding(team, "555-0199") == []
    assert [path for path in files_holding(team, "not ours to say") if not path.startswith("main/")] == []
    assert "pushed while a producer" in (team / "writer" / "memory/insights.md").read_text()


def demote_main(team, tmp_path, back: bool = False) -> None:
    contract = CONTRACT if back else CONTRACT.replace('producers = ["writer", "main"]', 'producers = ["writer"]')
    (tmp_path / "c.toml").write_text(contract)
    run_mem("hub", "contract", "apply", tmp_path / "c.toml", "--db", team / "hub.db", check=True)


def producing_again(team, tmp_path, text: str, sync: bool = True):
    """Main, a producer of insights again, pulls the contract, adds the entry `text` and (`sync`) syncs: the sync's
    result."""
    demote_main(team, tmp_path, back=True)
    mem(team / "main", "pull", check=True)
    mem(team / "main", "entry", "add", "insights", text, check=True)
    return mem(team / "main", "sync") if sync else None


def test_one_redaction_of_a_pushed_and_an_unpushed_write_takes_back_the_one_and_sends_the_other(team, tmp_path):
    """Regression (nc30a): a demoted producer's `mem redact` naming an event it had pushed and one it had not made
    one redaction, which (its unpushed target taken back) went to the hub at the next push and was refused whole
    there, at every push from then on, for every layer: the agent could push nothing again, and the pushed text
    stayed with the others. The two get a redaction each: the one of the pushed event goes, the other is taken back."""
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    mem(team / "main", "entry", "add", "insights", f"[FACT] {PRIVATE}", check=True)
    mem(team / "main", "sync", check=True)
    mem(team / "main", "entry", "add", "insights", "[FACT] never pushed", check=True)
    demote_main(team, tmp_path)
    assert mem(team / "main", "sync").returncode == 1
    ids = [entry_id(team, "main", "insights", text) for text in ("555-0199", "never pushed")]
    redacted = mem(team / "main", "redact", *ids, "--reason", "both", check=True).stdout.decode()
    assert redacted.splitlines()[-1].startswith("redacted 2 events (redaction seq "), redacted
    synced = mem(team / "main", "sync")
    assert synced.returncode == 0 and synced.stdout.startswith(b"pushed 1,"), synced
    for agent in ("writer", "late"):
        mem(team / agent, "sync", check=True)
        assert files_holding(team / agent, "555-0199") == [], agent
    again = producing_again(team, tmp_path, "[FACT] after it")
    assert again.returncode == 0 and again.stdout.startswith(b"pushed 1,"), again
    mem(team / "writer", "sync", check=True)
    assert "after it" in (team / "writer" / "memory/insights.md").read_text()
    assert "never pushed" not in (team / "writer" / "memory/insights.md").read_text()


def test_a_write_that_names_a_taken_back_one_is_held_back_saying_so_not_refused_by_the_hub(team, tmp_path):
    """Regression (nc30a): an entry reversing an entry taken back went to the hub once its author produced the layer
    again, and the hub refused the whole push for it, at every push. It is held back, saying why and how to take it
    back too; taken back, the agent's pushes go again."""
    mem(team / "main", "pull", check=True)
    first = mem(team / "main", "entry", "add", "insights", "[FACT] first", check=True).stdout.split()[0].decode()
    mem(team / "main", "entry", "add", "insights", "[FACT] second", "--reverses", first, check=True)
    demote_main(team, tmp_path)
    mem(team / "main", "push")
    mem(team / "main", "redact", first, "--reason", "taken back", check=True)
    mem(team / "main", "push")
    demote_main(team, tmp_path, back=True)
    held = mem(team / "main", "push")
    second = entry_id(team, "main", "insights", "second")
    seq = next(row[0] for row in log_rows(team / "main") if uuid_text(row[1]) == second)
    assert held.returncode == 1 and held.stderr.decode() == (
        "error: 1 event in layer insights cannot be pushed: it names seq 1, which this agent took back before it went "
        f"out: the hub never had it; `mem redact {seq} --reason \"...\"` takes this one back too\n"), held

    async def body(session):  # nc37a: the sync tool said `mem redact`, which an agent cannot run
        return await call(session, "sync", direction="push")

    said = json.loads(run_stdio(team / "main", body)[1])["warnings"]
    assert said == ["error: 1 event in layer insights cannot be pushed: it names seq 1, which this agent took back "
                    f"before it went out: the hub never had it; the redact tool with targets [{seq}] takes this one "
                    "back too"], said
    mem(team / "main", "redact", second, "--reason", "with it", check=True)
    mem(team / "main", "entry", "add", "insights", "[FACT] third", check=True)
    pushed = mem(team / "main", "push")
    assert pushed.returncode == 0 and pushed.stdout == b"pushed 1 event to origin\n", pushed


def drafts_contract(producers: str) -> str:
    return CONTRACT + f'\n[layers.drafts]\npath = "content/drafts/"\nformat = "pages"\nproducers = {producers}\n' \
                      'consumers = ["*"]\n'


def apply_drafts(team, tmp_path, producers: str) -> None:
    (tmp_path / "drafts.toml").write_text(drafts_contract(producers))
    run_mem("hub", "contract", "apply", tmp_path / "drafts.toml", "--db", team / "hub.db", check=True)


def draft(team, agent: str, slug: str, text: str, tmp_path) -> int:
    """Writes drafts/SLUG in `agent`'s workspace; its seq."""
    page = tmp_path / f"{slug}.md"
    page.write_text(f"---\ntitle: {slug}\ntype: note\n---\n{text}\n")
    mem(team / agent, "page", "write", slug, "--layer", "drafts", "--file", page, check=True)
    return json.loads(mem(team / agent, "history", f"content/drafts/{slug}.md", "--json", check=True).stdout)[-1]["seq"]


def test_taking_back_a_page_version_does_not_say_every_agents_copy_will_show_the_stub(team, tmp_path):
    """Regression (found last stop): the note of a redacted current page version said every agent's copy would show
    the stub once pushed, of a version taken back before it went out (its redaction is never pushed); a version that
    went out keeps the note. Neither names a write the agent, a consumer of the layer now, is refused (nc32b). A
    version taken back is withdrawn: the page shows what every other copy shows (here none: it was the first)."""
    apply_drafts(team, tmp_path, '["writer", "main"]')
    mem(team / "main", "pull", check=True)
    later = draft(team, "main", "later", "later text", tmp_path)
    unpushed = mem(team / "main", "redact", str(later), "--reason", "oops", check=True).stderr.decode()
    assert "and so will every agent's copy once it is pushed" in unpushed, unpushed  # nc33a: its push sends it
    mem(team / "main", "push", check=True)
    sent = draft(team, "main", "sent", "sent text", tmp_path)
    mem(team / "main", "push", check=True)
    kept = draft(team, "main", "kept", "kept text", tmp_path)
    apply_drafts(team, tmp_path, '["writer"]')
    assert mem(team / "main", "push").returncode == 1  # the unpushed version is held back
    taken = mem(team / "main", "redact", str(kept), "--reason", "not ours", check=True).stderr.decode()
    assert taken == (f"note: content/drafts/kept.md: its version at seq {kept} never went out, and is withdrawn: the "
                     "page has no version here now\n"), taken
    assert not (team / "main/content/drafts/kept.md").exists()
    mem(team / "main", "push", check=True)
    assert "taken back" not in mem(team / "main", "status", check=True).stdout.decode()
    went = mem(team / "main", "redact", str(sent), "--reason", "leaked", check=True).stderr.decode()
    assert "and so will every agent's copy once it is pushed" in went, went
    # nc32b: not `mem page write --layer drafts`, which a consumer is refused
    assert went.endswith(": this agent does not produce drafts now, so a producer of it writes the page anew\n")


def test_a_version_taken_back_by_a_redaction_that_does_not_withdraw_it_is_said_by_status(team, tmp_path):
    """A redaction made before withdrawals were (a library caller's, which names no event as apart) leaves the version
    taken back as this copy's head: `mem status` says the copy differs from every other (nc33a)."""
    from projections import redact
    from projections.memory import Memory

    apply_drafts(team, tmp_path, '["writer", "main"]')
    mem(team / "main", "pull", check=True)
    kept = draft(team, "main", "kept", "kept text", tmp_path)
    apply_drafts(team, tmp_path, '["writer"]')
    assert mem(team / "main", "push").returncode == 1
    with Memory.open(team / "main") as memory:
        redact.redact(memory, [memory.log.get_by_seq(kept)], "not ours")
    mem(team / "main", "push")
    status = mem(team / "main", "status", check=True).stdout.decode()
    assert ("  taken back: content/drafts/kept.md shows this agent's version it took back before it went out "
            "(redacted); the others show the version before it, until a producer writes the page anew") in status, status
    assert json.loads(mem(team / "main", "status", "--json", check=True).stdout)["remotes"][0]["taken_back"] == [
        "content/drafts/kept.md"]


def test_a_page_version_taken_back_is_withdrawn_so_no_conflict_outlives_it(team, tmp_path):
    """Regression (nc31a, the last stops' open item): a producer made a consumer took back its unpushed version of a
    page by redacting it, and its copy kept that version (the stub) as the page's head while every other copy showed
    the version before; once a producer wrote the page anew, the copy showed a conflict it could never resolve (it
    produces the layer no more), and a write of its own, once a producer again, named the version taken back and
    was held back for good. The redaction withdraws the version: from it on the version counts as never having come,
    as on every other copy; as of before it, the copy shows what it showed then."""
    apply_drafts(team, tmp_path, '["writer", "main"]')
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    first = draft(team, "main", "plan", "v1 text", tmp_path)
    mem(team / "main", "push", check=True)
    taken = draft(team, "main", "plan", "v2 text", tmp_path)
    apply_drafts(team, tmp_path, '["writer"]')
    assert mem(team / "main", "sync").returncode == 1  # held back
    said = mem(team / "main", "redact", str(taken), "--reason", "not ours", check=True).stderr.decode()
    assert said.endswith(f"its version at seq {taken} never went out, and is withdrawn: the page shows its version at "
                         f"seq {first}\n"), said  # nc35a: "what every other copy shows", of an own one not sent
    plan = team / "main/content/drafts/plan.md"
    assert "v1 text" in plan.read_text()
    assert "[redacted: not ours]" in mem(team / "main", "show", "content/drafts/plan.md", "--seq", str(taken),
                                         check=True).stdout.decode()  # what it showed then
    mem(team / "main", "sync", check=True)
    mem(team / "writer", "sync", check=True)
    draft(team, "writer", "plan", "v3 text", tmp_path)
    mem(team / "writer", "sync", check=True)
    synced = mem(team / "main", "sync", check=True)
    assert b"conflict" not in synced.stderr, synced
    assert "v3 text" in plan.read_text()
    assert json.loads(mem(team / "main", "conflicts", "--json", check=True).stdout) == []
    apply_drafts(team, tmp_path, '["writer", "main"]')
    mem(team / "main", "pull", check=True)
    draft(team, "main", "plan", "v4 text", tmp_path)
    pushed = mem(team / "main", "push")
    assert pushed.returncode == 0 and pushed.stdout == b"pushed 1 event to origin\n", pushed
    mem(team / "writer", "sync", check=True)
    assert "v4 text" in (team / "writer/content/drafts/plan.md").read_text()
    writer_log = json.loads(mem(team / "writer", "log", "--json", check=True).stdout)
    assert [e["seq"] for e in writer_log if e["body"]["kind"] in ("redaction", "redacted")] == []  # never went out
    assert first < taken and mem(team / "main", "replay", "--check").returncode == 0


def test_a_version_built_on_a_withdrawn_one_is_held_back_when_the_agent_produces_again(team, tmp_path):
    """Regression (nc35a): a producer again before its first push after a withdrawal sent a version built on the
    withdrawn one (the push chose what to send before it found the withdrawal): the hub took it, the other copies
    showed it and a lasting conflict while this one showed the version before. It is held back with it."""
    apply_drafts(team, tmp_path, '["writer", "main"]')
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    draft(team, "main", "plan", "v1 text", tmp_path)
    mem(team / "main", "push", check=True)
    withdrawn = draft(team, "main", "plan", "v2 text", tmp_path)
    built = draft(team, "main", "plan", "v3 text", tmp_path)
    apply_drafts(team, tmp_path, '["writer"]')
    mem(team / "main", "pull", check=True)
    mem(team / "main", "redact", str(withdrawn), "--reason", "not ours", check=True)
    apply_drafts(team, tmp_path, '["writer", "main"]')
    mem(team / "main", "pull", check=True)
    status = mem(team / "main", "status", check=True).stdout.decode()
    assert "withdrew" not in status, status  # nc35a: the withdrawal was "held back" until the next push
    synced = mem(team / "main", "sync")
    assert synced.returncode == 1 and synced.stderr.decode() == (
        f"note: 2 events held back from the hub taken back before they went out (redacted here, and their "
        f"redactions): never sent\nerror: 1 event in layer drafts cannot be pushed: it names seq {withdrawn}, which "
        f"this agent took back before it went out: the hub never had it; `mem redact {built} --reason \"...\"` "
        "takes this one back too\n"), synced.stderr
    mem(team / "writer", "sync", check=True)
    for agent in ("main", "writer"):
        assert "v1 text" in (team / agent / "content/drafts/plan.md").read_text(), agent
    assert json.loads(mem(team / "writer", "conflicts", "--json").stdout) == []


def test_a_reversal_of_a_withdrawn_entry_is_held_back_and_the_rest_of_the_push_goes(team, tmp_path):
    """Regression (nc35a): sent with the batch that withdrew the entry it reverses, the reversal made the hub refuse
    the whole push, at every push: nothing of the agent's reached the hub again."""
    withdraw_a_reversed_entry(team, tmp_path)
    synced = producing_again(team, tmp_path, "[FACT] 2026-12-04: unrelated later")
    assert synced.returncode == 1 and synced.stdout.startswith(b"pushed 1,"), synced
    mem(team / "writer", "sync", check=True)
    text = (team / "writer" / "memory/insights.md").read_text()
    assert "unrelated later" in text and "second" not in text, text


def withdraw_a_reversed_entry(team, tmp_path) -> None:
    """Main pushes an entry, writes a second and its reversal, is dropped from the layer's producers and takes the
    second back (a withdrawal: it never went out)."""
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    mem(team / "main", "entry", "add", "insights", "[FACT] 2026-12-04: first", check=True)
    mem(team / "main", "push", check=True)
    second = entry_id_of(mem(team / "main", "entry", "add", "insights", "[FACT] 2026-12-04: second", check=True))
    mem(team / "main", "entry", "add", "insights", "[FACT] 2026-12-04: second is wrong", "--reverses", second,
        check=True)
    demote_main(team, tmp_path)
    mem(team / "main", "pull", check=True)
    mem(team / "main", "redact", second, "--reason", "mine", check=True)


def entry_id_of(added) -> str:
    return added.stdout.split()[0].decode()


def test_after_a_remote_is_added_again_own_events_its_hub_brought_back_count_as_sent(served, tmp_path):
    """Regression (nc35a): after `mem remote remove` and `add` (its push cursor at 0), this agent's own events a pull
    brought back from the hub still counted as never sent: a demoted producer's redaction of a leaked version it had
    pushed was made a withdrawal, never sent, while the hub and every other copy kept the leak (and the agent's copy
    said it showed what theirs did). They count as at that hub: the redaction goes, as any own one does."""
    team = served.root
    apply_drafts(team, tmp_path, '["writer", "main"]')
    for agent in ("main", "writer"):
        mem(team / agent, "pull", check=True)
    draft(team, "main", "plan", "v1 text", tmp_path)
    leaked = draft(team, "main", "plan", "v2 LEAKED", tmp_path)
    mem(team / "main", "push", check=True)
    mem(team / "main", "remote", "remove", "origin", check=True)
    mem(team / "main", "remote", "add", "origin", served.url, "--token-file", team / "main.token", check=True)
    apply_drafts(team, tmp_path, '["writer"]')
    assert b"2 of this agent's own came back" in mem(team / "main", "pull", check=True).stdout
    note = mem(team / "main", "redact", str(leaked), "--reason", "leak", check=True).stderr.decode()
    assert "and so will every agent's copy once it is pushed" in note, note
    mem(team / "main", "sync", check=True)
    mem(team / "writer", "sync", check=True)
    assert "LEAKED" not in (team / "writer/content/drafts/plan.md").read_text()
    assert "[redacted: leak]" in (team / "writer/content/drafts/plan.md").read_text()


def status_then_push(root: Path):
    """(what `mem status` says the next push sends and holds back, what that push then sends and holds back)."""
    from projections.memory import Memory
    from sync.client import get_remote, outgoing, push

    with Memory.open(root) as memory:
        remote = get_remote(memory, "origin")
        to_push, held = outgoing(memory, remote)
        report = push(memory, remote)
    return (to_push, sum(h.count for h in held)), (report.pushed + report.duplicates, sum(h.count for h in report.held))


def test_status_says_what_the_next_push_does_with_a_reversal_of_a_withdrawn_entry(team, tmp_path):
    """Regression (nc37a): status judged apart from the push: it counted a withdrawn entry and a reversal of it to
    push ("3 to push"), where the push sent one, took two back and held the reversal. Both go by one plan now."""
    withdraw_a_reversed_entry(team, tmp_path)
    producing_again(team, tmp_path, "[FACT] 2026-12-04: unrelated later", sync=False)
    said, done = status_then_push(team / "main")
    assert said == done == (1, 1), (said, done)


def test_status_says_what_the_next_push_does_once_a_held_chains_first_event_goes(team, tmp_path):
    """Regression (nc37a): after the contract stopped refusing the first of two held versions, status still said the
    second was held for naming it, and the push sent both."""
    apply_drafts(team, tmp_path, '["writer", "main"]')
    mem(team / "main", "pull", check=True)
    draft(team, "main", "plan", "v1 text", tmp_path)
    draft(team, "main", "plan", "v2 text", tmp_path)
    apply_drafts(team, tmp_path, '["writer"]')
    assert mem(team / "main", "push").returncode == 1  # both held
    apply_drafts(team, tmp_path, '["writer", "main"]')
    mem(team / "main", "pull", check=True)
    said, done = status_then_push(team / "main")
    assert said == done == (2, 0), (said, done)
