"""`mem show --at/--seq`, `checkout` and `diff`: any file as of any moment, by index lookup."""

import datetime as dt
import json
import time

import pytest

from eventstore.errors import InvalidInput
from eventstore.instants import format_instant, parse_instant

from projections.memory import Memory

from conftest import PAGE, run_mem

V2 = PAGE.replace(b"Staging first.", b"Staging first. Prod needs an ack.")


@pytest.fixture
def history(workspace):
    """Three moments: after ingest (t1), after an Always edit and update (t2), after delete (t3). Written
    in-process: what is seen end to end here is reading them back through `mem`."""
    marks = {}
    with Memory.open(workspace) as memory:
        memory.write_page("deploy", PAGE, "first")
        time.sleep(0.02)
        marks["t1"] = time.time()
        time.sleep(0.02)
        memory.always_add("Ack before prod.")
        memory.write_page("deploy", V2, "ack")
        time.sleep(0.02)
        marks["t2"] = time.time()
        time.sleep(0.02)
        memory.delete_page("deploy", "gone")
    return workspace, {k: format_instant(int(v * 1000)) for k, v in marks.items()}


def show(workspace, *args):
    return run_mem("-w", workspace, "show", *args)


def test_show_page_as_of_times_and_seqs(history):
    ws, t = history
    assert show(ws, "mind/deploy.md", "--at", t["t1"]).stdout == PAGE
    assert show(ws, "mind/deploy.md", "--at", t["t2"]).stdout == V2
    assert show(ws, "mind/deploy.md", "--seq", "1").stdout == PAGE
    assert show(ws, "mind/deploy.md", "--seq", "3").stdout == V2
    gone = show(ws, "mind/deploy.md")  # it said "does not exist" and no more
    assert gone.returncode == 1 and gone.stderr == (b"error: mind/deploy.md was deleted at seq 4; `mem show "
                                                    b"mind/deploy.md --seq 3` shows it as it was\n")
    assert show(ws, "mind/nothing.md").stderr == b"error: mind/nothing.md does not exist\n"
    for moment in (("--seq", "4"), ("--at", "now")):  # as of a moment after it: said "did not exist then" (nc19b)
        assert show(ws, "mind/deploy.md", *moment).stderr.endswith(gone.stderr), moment  # --at says its seq first
    assert show(ws, "mind/nothing.md", "--seq", "4").stderr == b"error: mind/nothing.md did not exist then\n"
    before = show(ws, "mind/deploy.md", "--at", "2000-01-01")
    assert before.returncode == 1 and b"before this workspace existed" in before.stderr


def test_a_renamed_page_reads_as_renamed_and_its_new_name_names_the_old_one_then(workspace, tmp_path):
    """Regression (nc24b): `mem show oncall` after `mem page rename oncall oncall-roster` said "was deleted", and
    `mem show oncall-roster --seq` of a moment before the rename "did not exist then", naming neither name."""
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "oncall", "--file", page, check=True)
    run_mem("-w", workspace, "page", "rename", "oncall", "oncall-roster", check=True)
    assert show(workspace, "oncall").stderr == (
        b"error: mind/oncall.md was renamed to mind/oncall-roster.md at seq 2 (`mem show mind/oncall-roster.md`); "
        b"`mem show mind/oncall.md --seq 1` shows it as it was\n")
    assert show(workspace, "oncall-roster", "--seq", "1").stderr == (
        b"error: mind/oncall-roster.md did not exist then: the page was mind/oncall.md (`mem show mind/oncall.md "
        b"--seq 1`)\n")
    assert show(workspace, "mind/oncall.md", "--seq", "1").stdout == PAGE
    run_mem("-w", workspace, "page", "rename", "oncall-roster", "rota", check=True)  # named the name between (nc25a)
    assert show(workspace, "oncall").stderr == (
        b"error: mind/oncall.md was renamed at seq 2, and is mind/rota.md by then (`mem show mind/rota.md`); "
        b"`mem show mind/oncall.md --seq 1` shows it as it was\n")
    assert show(workspace, "oncall", "--seq", "2").stderr.startswith(  # and the moment asked for is kept
        b"error: mind/oncall.md was renamed to mind/oncall-roster.md at seq 2 (`mem show mind/oncall-roster.md "
        b"--seq 2`)")
    run_mem("-w", workspace, "page", "delete", "rota", check=True)  # nc34a: it named a show that failed too
    assert show(workspace, "oncall").stderr == (
        b"error: mind/oncall.md was renamed at seq 2, and is mind/rota.md by then, deleted at seq 4 (`mem show "
        b"mind/rota.md --seq 3`); `mem show mind/oncall.md --seq 1` shows it as it was\n")
    assert show(workspace, "rota", "--seq", "3").returncode == 0


def test_at_accepts_offsets(history):
    ws, t = history
    utc = dt.datetime.fromisoformat(t["t1"].replace("Z", "+00:00"))
    plus_two = utc.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat()
    naive = utc.replace(tzinfo=None).isoformat()
    assert show(ws, "mind/deploy.md", "--at", plus_two).stdout == PAGE
    assert show(ws, "mind/deploy.md", "--at", naive).stdout == PAGE


def test_mind_and_log_as_of(history):
    ws, t = history
    with Memory.open(ws) as memory:
        def at(path, moment=None):
            return memory.show(path, memory.seq_at(parse_instant(moment) if moment else None))

        mind1 = at("mind.md", t["t1"])
        assert "Ack before prod" not in mind1 and "[Deploy procedure]" in mind1
        assert "- Ack before prod.\n" in at("mind.md", t["t2"])
        assert "[Deploy procedure]" not in at("mind.md")
        log1 = at("mind/log.md", t["t1"])
        assert log1.count("## [") == 1 and "ingest | Deploy procedure" in log1
        assert at("mind/log.md").count("## [") == 3


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
    assert parse_instant("1796354686391") == parse_instant("2026-12-04T03:24:46.391Z")  # as --json gives it (nc26b)
    assert parse_instant("20261129") == parse_instant("2026-11-29")  # a date's digits stay ISO 8601's
    with pytest.raises(InvalidInput):
        parse_instant("202612041402")  # a compact time's 12 digits: refused, not read as ms of 1976 (nc27a)


def test_a_time_from_json_output_is_taken_back_by_at(history):
    """Regression (nc26b): `recorded_at` in `--json` output is milliseconds since 1970, which --at refused."""
    workspace, _marks = history
    event = json.loads(run_mem("-w", workspace, "log", "--json", check=True).stdout)[-1]  # the newest: no later one
    by_time = run_mem("-w", workspace, "show", "mind.md", "--at", str(event["recorded_at"]), check=True).stdout
    assert by_time == run_mem("-w", workspace, "show", "mind.md", "--seq", str(event["seq"]), check=True).stdout


@pytest.mark.parametrize("moment, says", [
    ("0001-01-01", "is too far from today for a calendar (years 1970 to 9999)"),
    ("10000000 days ago", "is before 1970-01-01: no event is that old"),
    ("1969-12-31", "is before 1970-01-01: no event is that old"),
    ("9999-12-31T23:59:59-12:00", "is in the future"),  # was "too far from today for a calendar" (nc22b)
    ("9999-12-31", "is in the future"),
])
def test_a_moment_outside_the_calendar_is_refused_in_one_line(history, moment, says):
    """Regression: Python's datetime raised 'year -25353 is out of range' as a traceback."""
    workspace, _marks = history
    for args in (("show", "mind.md", "--at", moment), ("log", "--since", moment), ("search", "deploy", "--at", moment)):
        result = run_mem("-w", workspace, *args)
        lines = result.stderr.decode().splitlines()
        assert result.returncode != 0 and len(lines) == 1 and says in lines[0], (args, lines)


def test_a_local_time_the_clocks_skipped_is_refused_not_moved_an_hour(history):
    """Regression (nc10c L3): in Europe/Berlin 2026-03-29 02:30 never happened (the clocks went from 02:00 to 03:00);
    it was read silently as an instant an hour away. Regression (nc14b): one that happened twice (2026-10-25 02:30,
    the clocks going back from 03:00 to 02:00) was taken for the first, as silently; it is refused, naming both."""
    workspace, _marks = history
    berlin = {"TZ": "Europe/Berlin"}
    for moment, instead in (("2026-03-29 02:30", "2026-03-29T02:30:00+01:00"),
                            ("2026-03-29T02:59:59", "2026-03-29T02:59:59+01:00")):
        result = run_mem("-w", workspace, "log", "--since", moment, env=berlin)
        lines = result.stderr.decode().splitlines()
        assert result.returncode == 1 and lines == [
            f"error: {moment!r} never happened here: the clocks skipped it (daylight saving); give the offset, e.g. "
            f"{instead}"], lines
    twice = run_mem("-w", workspace, "log", "--since", "2026-10-25 02:30", env=berlin)
    assert twice.returncode == 1 and twice.stderr.decode() == (
        "error: '2026-10-25 02:30' happened twice here: the clocks went back (daylight saving); give the offset: "
        "2026-10-25T02:30:00+02:00 (the first) or 2026-10-25T02:30:00+01:00\n")
    for moment in ("2026-03-29 03:00", "2026-03-29 01:59", "2026-10-25 01:59", "2026-10-25 03:00",
                   "2026-10-25T02:30+01:00", "2026-10-25T02:30+02:00", "2026-03-29T02:30+01:00"):
        run_mem("-w", workspace, "log", "--since", moment, env=berlin, check=True)


def test_a_file_is_named_as_a_shell_completes_it(history):
    """Regression: `./mind.md`, an absolute path into the workspace and `mind/../mind.md` "did not exist"."""
    workspace, _marks = history
    expected = show(workspace, "mind/deploy.md", "--seq", "1").stdout
    for given in ("./mind/deploy.md", str(workspace / "mind" / "deploy.md"), "mind/../mind/deploy.md", "deploy",
                  "mind/deploy"):  # regression (nc13b): `mind/deploy` did not exist, `deploy` did
        result = show(workspace, given, "--seq", "1")
        assert result.returncode == 0 and result.stdout == expected, (given, result.stderr)
    assert show(workspace, "./mind.md").stdout == show(workspace, "mind.md").stdout == show(workspace, "mind").stdout
    folder = show(workspace, "mind/")
    assert folder.returncode == 1 and folder.stderr.startswith(b"error: mind/ is a folder: give a file in it")
    versions = run_mem("-w", workspace, "history", "./mind/deploy.md", "--json", check=True).stdout
    assert versions == run_mem("-w", workspace, "history", "deploy", "--json", check=True).stdout
    for outside, says in (("../x.md", b"leads out of the workspace"), ("/etc/hostname", b"is not in the workspace")):
        result = show(workspace, outside)
        assert result.returncode == 1 and says in result.stderr and result.stderr.count(b"\n") == 1, result.stderr


def test_show_writes_a_binary_files_bytes_to_a_pipe_as_they_were(workspace, tmp_path):
    """Regression: `mem show notes/logo.png > logo.png` wrote the placeholder `<9 bytes of image/png>`, exit 0."""
    first, second = b"\x89PNG\r\n\x1a\n\x00\xfe", b"\x89PNG\r\n\x1a\n\xff\xfe"
    for number, data in enumerate((first, second)):
        (tmp_path / f"{number}.png").write_bytes(data)
        run_mem("-w", workspace, "file", "write", "notes/logo.png", "--file", tmp_path / f"{number}.png", check=True)
    assert show(workspace, "notes/logo.png").stdout == second
    assert show(workspace, "notes/logo.png", "--seq", "1").stdout == first
    with Memory.open(workspace) as memory:  # a tool that answers in text still gets the placeholder
        assert memory.file_text("notes/logo.png") == "<10 bytes of image/png>"
    # regressions (nc13b): two versions of one size read as one placeholder: no difference, one version
    diffed = run_mem("-w", workspace, "diff", "notes/logo.png", "--from", "seq:1", "--to", "seq:2", check=True)
    assert diffed.stdout == b"Binary files notes/logo.png@1 and notes/logo.png@2 differ\n"
    versions = json.loads(run_mem("-w", workspace, "history", "notes/logo.png", "--json", check=True).stdout)
    assert [v["seq"] for v in versions] == [1, 2]


def test_a_command_recording_behind_a_log_stamped_ahead_of_the_clock_says_so(tmp_path):
    """Regression (nc15b): one command run while the clock was a year ahead stamped every later event of the workspace
    a year ahead (a log's recorded times never go back), and nothing said so; `--at` now was then refused as before
    the workspace existed. Each command that records while the log is ahead of the clock now warns."""
    import time

    from eventstore.envelope import new_event
    from eventstore.kinds import AlwaysAdd

    root = tmp_path / "ws"
    with Memory.init(root, "b") as memory:
        ahead = int(time.time() * 1000) + 365 * 86_400_000
        memory.log.append([new_event(AlwaysAdd(line="written a year ahead"), agent="b", layer="mind")],
                          recorded_at=ahead)
    added = run_mem("-w", root, "always", "add", "later", check=True)
    warning = added.stderr.decode()
    assert warning.startswith("warning: this machine's clock is 365 days behind the log's last recorded time (") \
        and "was the clock ahead when it was recorded?" in warning, warning
    assert run_mem("-w", root, "always", "list", check=True).stderr == b""  # nothing recorded: nothing said
    with Memory.open(root) as memory:
        assert memory.log.recorded_at(2) == ahead


def test_a_root_file_asked_for_before_it_was_written_is_named_as_asked(workspace, tmp_path):
    """Regression (nc19b): `mem show document.md --seq N` before the root file document.md was written said
    "mind/document.md did not exist then": a bare `x.md` no root file held at the moment read as a page's name."""
    source = tmp_path / "document.md"
    source.write_text("# Document\n")
    run_mem("-w", workspace, "always", "add", "first", check=True)
    run_mem("-w", workspace, "file", "write", "document.md", "--file", source, check=True)
    early = show(workspace, "document.md", "--seq", "1")
    assert early.returncode == 1 and early.stderr == b"error: document.md did not exist then\n", early.stderr
    assert show(workspace, "document.md").stdout == b"# Document\n"
    assert show(workspace, "nosuch.md").stderr == b"error: mind/nosuch.md does not exist\n"  # a page's name


def test_believed_says_when_the_loop_was_empty_as_it_does_of_pages(workspace):
    """Regression (nc19b): `mem believed` printed `loop (last 10):` and nothing under it, where pages say (none)."""
    out = run_mem("-w", workspace, "believed", check=True).stdout.decode()
    assert "pages: (none)" in out and "loop (last 10): (none)" in out, out
    run_mem("-w", workspace, "loop", "append", "--role", "user", "--text", "hello", check=True)
    out = run_mem("-w", workspace, "believed", check=True).stdout.decode()
    assert "loop (last 10):\n[S1] user: hello" in out, out


def test_at_now_reads_the_events_recorded_while_the_clock_was_ahead(tmp_path):
    """Regression (nc29a): after an event recorded while the clock was an hour ahead (and the ones after it, stamped
    with its time), `--at now` read the memory from before them without a word, and their own times were refused as
    in the future: `--at` could not reach the current memory until the clock caught up. Up to the log's newest time
    is the past, and `now` is at least that."""
    import time

    from eventstore.envelope import new_event
    from eventstore.instants import format_instant
    from eventstore.kinds import AlwaysAdd

    root = tmp_path / "ws"
    with Memory.init(root, "b") as memory:
        memory.log.append([new_event(AlwaysAdd(line="before"), agent="b", layer="mind")])
        ahead = int(time.time() * 1000) + 3_600_000
        memory.log.append([new_event(AlwaysAdd(line="written an hour ahead"), agent="b", layer="mind")],
                          recorded_at=ahead)
    run_mem("-w", root, "always", "add", "after it", check=True)
    current = run_mem("-w", root, "always", "list", check=True).stdout
    assert run_mem("-w", root, "always", "list", "--at", "now", check=True).stdout == current
    assert b"after it" in current
    at_ahead = run_mem("-w", root, "always", "list", "--at", format_instant(ahead), check=True)
    assert b"written an hour ahead" in at_ahead.stdout
    later = run_mem("-w", root, "always", "list", "--at", format_instant(ahead + 3_600_000))
    assert later.returncode == 1 and later.stderr.decode().endswith("is in the future\n"), later.stderr
