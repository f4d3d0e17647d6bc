"""`mem replay --check` as an operator runs it: stopped by a signal, beside writers, over damaged full-text indexes,
with views lost or a hand edit pending."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from projections.memory import Memory

from conftest import PAGE, damage_table, mem_command, run_mem
from test_replay import page_history

TOKEN = "ghp_" + "Xq7Lm2Rt9Vb4Nc8Kd3Pw6Zs1Hy5Jf0Ag2Ue7Ti"


@pytest.fixture(scope="module")
def long_log(tmp_path_factory) -> Path:
    """A workspace whose check takes a while (20,000 page versions), a token in a page at seq 1."""
    root = tmp_path_factory.mktemp("long") / "ws"
    with Memory.init(root, "alice") as memory:
        memory.write_page("access", PAGE + f"Token {TOKEN}.\n".encode(), allow_secret=True)
        memory.log.append(page_history(20000, pages=200))
        memory.refresh()
    return root


@pytest.fixture
def leaky(long_log, tmp_path) -> tuple[Path, Path]:
    """A copy of `long_log`, and the temporary directory its `mem` processes are given (TMPDIR)."""
    root, temp = tmp_path / "ws", tmp_path / "tmp"
    shutil.copytree(long_log, root)
    temp.mkdir()
    return root, temp


def _scratch_files(root: Path, temp: Path) -> list[Path]:
    """The files of a check's rebuilt copy, wherever it was made."""
    return [p for d in [*root.joinpath(".mem").glob("views.db.check-*"), *temp.iterdir()] for p in d.rglob("*")]


def _check_reaching(root: Path, temp: Path, name: str) -> subprocess.Popen:
    """`mem replay --check`, running, once its rebuilt copy holds a file named `name`."""
    check = subprocess.Popen([*mem_command(), "-w", str(root), "replay", "--check"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**os.environ, "TMPDIR": str(temp)})
    deadline = time.monotonic() + 120
    while not any(p.name == name for p in _scratch_files(root, temp)):
        assert check.poll() is None, "the check ended before it could be stopped; lengthen the log"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    return check


def _check_stopped_in_its_files(root: Path, temp: Path, sig: signal.Signals) -> subprocess.CompletedProcess:
    """Runs `mem replay --check` and sends it `sig` once it writes the files of its rebuilt copy."""
    check = _check_reaching(root, temp, "files")
    check.send_signal(sig)
    out, err = check.communicate(timeout=60)
    return subprocess.CompletedProcess(check.args, check.returncode, out, err)


def _holding(paths, text: str) -> list[Path]:
    return [p for p in paths if p.is_file() and text.encode() in p.read_bytes()]


def test_a_check_killed_leaves_nothing_a_redaction_does_not_remove(leaky):
    """Regression: a check rebuilt into a temporary directory (/tmp/mem-replay-check-*), which a kill left holding
    the whole memory, secrets included, where a later `mem redact` never reached. It rebuilds beside the views, and
    a redaction (as a replay) removes what a killed check left there."""
    root, temp = leaky
    stopped = _check_stopped_in_its_files(root, temp, signal.SIGKILL)
    assert stopped.returncode == -signal.SIGKILL
    run_mem("-w", root, "redact", "--match", "ghp_[A-Za-z0-9]+", "--reason", "leaked token", "--yes", check=True)
    assert _holding([*root.rglob("*"), *temp.rglob("*")], TOKEN) == []
    assert _scratch_files(root, temp) == []


def test_a_check_terminated_cleans_up_as_after_ctrl_c(leaky):
    """Regression: SIGTERM (`timeout`, `kill`, a service manager) ended a check without its clean-up, leaving its
    rebuilt copy of the memory behind; it now ends as Ctrl-C does: the copy removed, exit 130, one line said."""
    root, temp = leaky
    stopped = _check_stopped_in_its_files(root, temp, signal.SIGTERM)
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.decode().endswith(  # not that what was recorded stays recorded: it recorded nothing (nc19b)
        "error: interrupted; a check changes nothing (its rebuilt copy is removed)\n"), stopped.stderr
    assert _scratch_files(root, temp) == []


def _replay_killed_in_its_fold(root: Path) -> None:
    """Runs `mem replay` and kills it (SIGKILL) while it builds the new views."""
    replay = subprocess.Popen([*mem_command(), "-w", str(root), "replay"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    fold = root / ".mem" / "views.db.rebuild-fold"
    deadline = time.monotonic() + 120
    while not fold.exists():
        assert replay.poll() is None, "the replay ended before it could be killed; lengthen the log"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    replay.kill()
    replay.wait()


def _leftovers(root: Path) -> list[str]:
    """What rebuilds left in .mem/: a replay's files, a check's directory."""
    return sorted(str(p.relative_to(root)) for pattern in ("views.db.rebuild*", "views.db.check-*")
                  for p in root.joinpath(".mem").glob(pattern))


@pytest.mark.parametrize("killed, then", [("replay", ["always", "add", "a rule"]), ("check", ["always", "list"])])
def test_what_a_killed_replay_or_check_left_is_told_by_status_and_removed_by_the_next_command(leaky, killed, then):
    """Regression: a replay killed mid-way left its new views and its fold's scratch file in .mem/ (a check its
    rebuilt copy), megabytes that a full disk needs, which only the next `mem replay` or `mem redact` removed and
    `mem status` did not tell. Status names them; the next command that takes the projector lock (a write, or a
    read that catches the views up) removes them."""
    root, temp = leaky
    if killed == "replay":
        _replay_killed_in_its_fold(root)
    else:
        assert _check_stopped_in_its_files(root, temp, signal.SIGKILL).returncode == -signal.SIGKILL
    left = _leftovers(root)
    assert left and (killed == "replay" or _scratch_files(root, temp))
    assert json.loads(run_mem("-w", root, "status", "--json", check=True).stdout)["leftovers"] == left
    assert f"left over:       {', '.join(left)} (" in run_mem("-w", root, "status", check=True).stdout.decode()
    run_mem("-w", root, *then, check=True)
    assert _leftovers(root) == [] and _scratch_files(root, temp) == []
    assert json.loads(run_mem("-w", root, "status", "--json", check=True).stdout)["leftovers"] == []


def test_a_replay_leaves_the_scratch_of_a_check_still_running(leaky):
    """Regression: a `mem replay` removed the scratch directory of a check running in another process, which then
    failed with a raw `[Errno 2] No such file or directory`. A running check holds a lock on its directory, which a
    clean-up leaves; the check ends as usual and removes it itself. The check is stopped (SIGSTOP) while it builds,
    so that the replay runs whole in between."""
    root, temp = leaky
    check = _check_reaching(root, temp, "views.db")
    check.send_signal(signal.SIGSTOP)
    try:
        assert b"replayed 20001 events" in run_mem("-w", root, "replay", check=True).stdout
        assert _scratch_files(root, temp) != []
    finally:
        check.send_signal(signal.SIGCONT)
    out, err = check.communicate(timeout=120)
    assert (check.returncode, out, err) == (0, b"rebuilt to seq 20001: no differences\n", b"")
    assert _scratch_files(root, temp) == []


def test_a_check_beside_a_writer_compares_one_moment(leaky):
    """Regression: a check rebuilt to the seq it read first, then compared the live views, which another process
    had moved on meanwhile: "DIFFERENT" (exit 1) while nothing was wrong. It reads the views at one seq and
    rebuilds to that seq; a file another process rewrote since is no difference."""
    root, _temp = leaky
    mem = " ".join(f"'{part}'" for part in mem_command())
    writer = subprocess.Popen(["sh", "-c", f"i=0; while true; do {mem} -w '{root}' loop append --role user --text "
                               f"\"m $i\" >/dev/null; {mem} -w '{root}' always add \"line $i\" >/dev/null; "
                               "i=$((i+1)); done"], start_new_session=True)
    try:
        reports = [json.loads(run_mem("-w", root, "replay", "--check", "--json").stdout) for _ in range(3)]
    finally:
        os.killpg(writer.pid, signal.SIGKILL)
        writer.wait()
    assert [r["differences"] for r in reports] == [[], [], []], reports
    assert len({r["checkpoint"] for r in reports}) > 1, "the writer wrote nothing during the checks"


@pytest.fixture
def searchable(workspace, tmp_path) -> Path:
    page = tmp_path / "p.md"
    page.write_bytes(PAGE + b"A green canary.\n")
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    run_mem("-w", workspace, "loop", "append", "--role", "user", "--text", "canary in the loop", check=True)
    return workspace


@pytest.mark.parametrize("index", ["search_docs_fts", "search_history_fts"])
def test_a_check_finds_a_full_text_index_emptied(searchable, index):
    """Regression: the check compared the search tables' rows but not their full-text indexes: emptied (its rows
    intact), search said "no matches" and the check "no differences"."""
    import sqlite3

    db = sqlite3.connect(searchable / ".mem/views.db")
    db.execute(f"INSERT INTO {index}({index}) VALUES ('delete-all')")
    db.commit()
    db.close()
    checked = run_mem("-w", searchable, "replay", "--check")
    assert checked.returncode == 1
    assert checked.stdout.decode().splitlines()[1:] == [f"  full-text index {index} differs from a rebuild"]


def test_a_check_finds_a_damaged_full_text_index(searchable):
    """Regression: a damaged page of search_docs_fts's sizes made every search fail ("the views database is
    damaged"), and the check said "no differences"."""
    damage_table(searchable / ".mem/views.db", "search_docs_fts_docsize")
    assert run_mem("-w", searchable, "search", "canary").returncode == 1
    checked = run_mem("-w", searchable, "replay", "--check")
    assert checked.returncode == 1
    assert "  full-text index search_docs_fts is damaged (database disk image is malformed)" in (
        checked.stdout.decode().splitlines())


def test_a_check_says_a_hand_edit_is_one(searchable):
    (searchable / "mind/deploy.md").write_text("edited by hand\n")
    checked = run_mem("-w", searchable, "replay", "--check")
    assert checked.returncode == 1
    assert checked.stdout.decode().splitlines()[1:] == ["  file mind/deploy.md differs from a rebuild (edited by hand)"]


def test_a_check_says_a_missing_file_is_missing_and_lists_at_most_twenty(workspace):
    """Regression: with the wiki's files deleted, each was 'differs from a rebuild', and all 1,100 of a large wiki were
    printed; --json still lists them all."""
    with Memory.open(workspace) as memory:
        for number in range(30):
            memory.write_page(f"p{number:02}", PAGE)
    for path in (workspace / "mind").iterdir():
        path.unlink()
    checked = run_mem("-w", workspace, "replay", "--check")
    lines = checked.stdout.decode().splitlines()
    assert checked.returncode == 1 and len(lines) == 22, lines
    assert lines[1:3] == ["  file mind/log.md is missing (`mem replay` writes it)",
                          "  file mind/p00.md is missing (`mem replay` writes it)"]
    assert lines[-1] == "  ... and 11 more (`mem replay --check --json` lists them all)"
    every = json.loads(run_mem("-w", workspace, "replay", "--check", "--json").stdout)["differences"]
    assert len(every) == 31 and every[-1] == "file mind/p29.md is missing (`mem replay` writes it)"


def test_status_with_the_views_lost_tells_no_hand_edit(searchable):
    """Regression: with views.db gone, `mem status` listed mind.md and mind/log.md as edited by hand (advising
    `mem adopt`, which found nothing edited) and every page as untracked: views that know no file judge none."""
    for name in ("views.db", "views.db-wal", "views.db-shm"):
        (searchable / ".mem" / name).unlink(missing_ok=True)
    report = json.loads(run_mem("-w", searchable, "status", "--json", check=True).stdout)
    assert (report["behind"], report["hand_edited"], report["untracked"], report["skipped"]) == (2, [], [], [])
    assert report["pending"] == ["mind.md", "mind/log.md"]
    run_mem("-w", searchable, "always", "list", check=True)  # catches the views up
    assert json.loads(run_mem("-w", searchable, "status", "--json", check=True).stdout)["clean"]


def test_the_rows_a_check_compares_hash_alike_exactly_when_they_are_alike(memory):
    """`mem replay --check` compares each view table's rows by a hash taken as they stream (both builds' rows held at
    once took 3 GB on a million events): the hash of two tables' rows is the same exactly when the rows are."""
    from projections.views import rows_digest

    memory.always_add("first rule")
    tables = memory.views.dump()
    assert {table: rows_digest(rows) for table, rows in tables.items()} == memory.views.digests()
    assert rows_digest([(1, "a", None, b"x")]) != rows_digest([(1, "a", None, b"y")])
    assert rows_digest([(1, "ab")]) != rows_digest([(1, "a"), ("b",)])  # each row a frame of its own
    before = memory.views.digests()
    memory.always_add("second rule")
    after = memory.views.digests()
    assert {table for table in before if before[table] != after[table]} >= {"always_versions"}
