"""A failed command leaves no event, and a command reports exactly whether its append committed: on a
real full disk (a small tmpfs), with the log on the full disk or elsewhere (PostgreSQL), and in-process
with the views database unable to grow."""

import json
import os
import random
import string
import subprocess

import pytest

from eventstore.errors import StorageFailure, storage_failure

from conftest import PAGE, log_rows, run_mem


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs of our own (needs root, as CI runs)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk, leave: int = 0):
    """Fills the disk until at most `leave` bytes are free. Unbuffered: a write cut short by others' use of the
    disk in the meantime (a hub's mirror) leaves nothing for the close to flush, and fail on."""
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            f.write(b"\0" * max(free - leave, 0))
            f.flush()
            os.fsync(f.fileno())
        except OSError:
            pass


def big_page(tmp_path, size=400_000):
    text = "".join(random.Random(1).choices(string.ascii_letters + " ", k=size))
    path = tmp_path / "big.md"
    path.write_bytes(PAGE + text.encode())
    return path


def test_a_full_disk_refuses_in_one_line_and_records_nothing(small_disk, tmp_path):
    ws = small_disk / "ws"
    run_mem("init", "-w", ws, check=True)
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", ws, "page", "write", "deploy", "--file", page, check=True)
    before = log_rows(ws)
    fill(small_disk, leave=131_072)
    result = run_mem("-w", ws, "page", "write", "big", "--file", big_page(tmp_path))
    err = result.stderr.decode()
    assert result.returncode == 1, (result.stdout, err)
    assert err.startswith("error: the disk is full") and err.count("\n") == 1 and "Traceback" not in err
    (small_disk / "filler").unlink()
    assert log_rows(ws) == before
    assert json.loads(run_mem("-w", ws, "status", "--json", check=True).stdout)["clean"]


def test_a_full_disk_is_still_read_and_a_change_refused_in_one_line(small_disk, tmp_path):
    """Regression: on a full disk every read failed, `mem log` too: `cannot open the event log ...: the disk is full
    (SQLITE_IOERR_SHMSIZE)`, SQLite having no room for a closed workspace's -shm files. The databases are opened
    read-only there, as on read-only storage; a change is refused in one line that names the full disk."""
    ws = small_disk / "ws"
    run_mem("init", "-w", ws, check=True)
    page = tmp_path / "p.md"
    page.write_bytes(PAGE + b"The zebra crossing.\n")
    run_mem("-w", ws, "page", "write", "deploy", "--file", page, check=True)
    fill(small_disk)
    for args, shows in ((["status"], b"views at   1\n"), (["search", "zebra"], b"mind/deploy.md (page)"),
                        (["show", "mind/deploy.md"], b"The zebra crossing."), (["log"], b"page.ingest"),
                        (["verify"], b"ok: 1 event"), (["always", "list"], b"")):
        read = run_mem("-w", ws, *args)
        said = b"no Always lines\n" if args == ["always", "list"] else b""  # an empty listing says so, on stderr
        assert (read.returncode, read.stderr) == (0, said) and shows in read.stdout, (args, read.stderr)
    for args in (["always", "add", "a rule"], ["replay"]):
        refused = run_mem("-w", ws, *args)
        assert (refused.returncode, refused.stderr.decode()) == (1, f"error: cannot change the workspace {ws}: the "
                                                                    "disk is full (its databases could be opened "
                                                                    "only to read)\n"), args
    (small_disk / "filler").unlink()
    assert run_mem("-w", ws, "always", "add", "a rule", check=True).stdout.startswith(b"always + a rule (seq 2)")
    assert len(log_rows(ws)) == 2


def test_a_replay_that_fills_the_disk_leaves_no_half_built_views(small_disk, tmp_path):
    """A replay that runs out of room while it builds the new views removes what it built (it held the room a
    write needs, until the next replay), and the views it would have replaced still serve reads."""
    ws = small_disk / "ws"
    run_mem("init", "-w", ws, check=True)
    run_mem("-w", ws, "page", "write", "big", "--file", big_page(tmp_path), check=True)
    views = (ws / ".mem" / "views.db").stat().st_size
    fill(small_disk, leave=views // 2)
    result = run_mem("-w", ws, "replay")
    assert result.returncode == 1 and result.stderr.decode().startswith("error: the disk is full"), result.stderr
    assert list((ws / ".mem").glob("views.db.rebuild*")) == []
    assert b"# " in run_mem("-w", ws, "show", "mind/big.md", check=True).stdout


def test_an_append_that_committed_is_reported_as_recorded(small_disk, tmp_path, pg_url):
    """The log is elsewhere (PostgreSQL) and takes the event; the workspace's disk cannot take the
    views or the file: the command succeeds, says the views are behind, and the next command catches up."""
    ws = small_disk / "ws"
    run_mem("init", "-w", ws, "--log", pg_url, check=True)
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", ws, "page", "write", "deploy", "--file", page, check=True)
    fill(small_disk, leave=131_072)
    result = run_mem("-w", ws, "page", "write", "big", "--file", big_page(tmp_path))
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, err
    assert out == "ingest mind/big.md (seq 2)\n"
    assert err.startswith("warning: recorded, but the views and files are behind the log (the disk is full")
    assert "Traceback" not in err
    (small_disk / "filler").unlink()
    assert json.loads(run_mem("-w", ws, "status", "--json", check=True).stdout)["behind"] == 1
    run_mem("-w", ws, "page", "list", check=True)
    status = json.loads(run_mem("-w", ws, "status", "--json", check=True).stdout)
    assert status["head"] == 2 and status["behind"] == 0 and status["clean"], status
    assert (ws / "mind" / "big.md").read_bytes() == big_page(tmp_path).read_bytes() + b"\n"


def test_views_that_cannot_grow_leave_the_event_standing(memory):
    memory.write_page("deploy", PAGE)
    pages = memory.views.db.execute("PRAGMA page_count").fetchone()[0]
    memory.views.db.execute(f"PRAGMA max_page_count = {pages}")
    event = memory.write_page("other", PAGE.replace(b"Deploy", b"Other" * 2000))
    assert event.seq == 2 and memory.log.head() == 2
    assert memory.behind.startswith("recorded, but the views and files are behind the log (the disk is full")
    assert memory.views.checkpoint() == 1
    memory.views.db.execute("PRAGMA max_page_count = 1073741823")
    memory.refresh()
    assert memory.views.checkpoint() == 2 and (memory.root / "mind" / "other.md").exists()


def test_storage_failures_read_as_one_line():
    import sqlite3

    full = storage_failure(sqlite3.OperationalError("database or disk is full"))
    assert isinstance(full, StorageFailure) and str(full) == "the disk is full (database or disk is full)"
    shm = sqlite3.OperationalError("disk I/O error")
    shm.sqlite_errorname = "SQLITE_IOERR_SHMSIZE"
    assert str(storage_failure(shm)) == "the disk is full (SQLITE_IOERR_SHMSIZE)"
    other = sqlite3.OperationalError("no such table: x")
    other.sqlite_errorname = "SQLITE_ERROR"
    assert str(storage_failure(other)) == "no such table: x (SQLITE_ERROR)"
    assert str(storage_failure(OSError(28, "No space left on device"))).startswith("the disk is full")
    assert str(storage_failure(sqlite3.OperationalError("database is locked"))).startswith("the database is locked")
    assert str(storage_failure(sqlite3.OperationalError("attempt to write a readonly database"))).startswith(
        "the storage is read-only")
    assert "\n" not in str(storage_failure(sqlite3.OperationalError("a\nb")))


def test_a_sqlite_hub_on_a_full_disk_answers_503_naming_it_and_logs_one_line(small_disk, tmp_path):
    import httpx
    import msgspec

    from hubserver import mem_serve
    from sync.storage_sqlite import SQLiteHubStorage
    from sync.wire import PushRequest
    from two_hubs import fact, hub_with

    db = small_disk / "hub.db"
    (token,) = hub_with(SQLiteHubStorage(db), ["writer"])
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    batch = PushRequest(events=[fact("writer", "y" * 1900 + str(i)) for i in range(200)])
    hub_log = tmp_path / "hub.log"
    with mem_serve(db, log=hub_log) as hub:
        fill(small_disk)
        answer = httpx.post(hub + "/v1/push", content=msgspec.json.encode(batch), headers=headers, timeout=60)
        assert answer.status_code == 503 and answer.json()["detail"].startswith("the disk is full"), answer.text
        (small_disk / "filler").unlink()
        assert httpx.post(hub + "/v1/push", content=msgspec.json.encode(batch), headers=headers,
                          timeout=60).status_code == 200
    logged = hub_log.read_text()
    assert "Traceback" not in logged and logged.count("the hub's storage failed: the disk is full") == 1, logged


@pytest.fixture
def pg_workspace_on_a_small_disk(small_disk, tmp_path, pg_url):
    """A workspace whose log is in PostgreSQL and whose views and files are on the small disk, holding a big page."""
    ws = small_disk / "ws"
    run_mem("init", "-w", ws, "--log", pg_url, check=True)
    run_mem("-w", ws, "page", "write", "big", "--file", big_page(tmp_path, 200_000), check=True)
    return ws


def test_a_redaction_that_committed_is_reported_as_recorded(pg_workspace_on_a_small_disk, small_disk):
    """Regression (nc17a): a redaction whose views could not follow (a full disk) said `error: the disk is full` and
    exited 1 though it was committed; it now says it was done and that the views are behind, as a page write does."""
    ws = pg_workspace_on_a_small_disk
    fill(small_disk, leave=131_072)
    result = run_mem("-w", ws, "redact", "1", "--reason", "too big")
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, err
    assert "\nredacted 1 event (redaction seq 2)" in out and "warning: recorded, but the views and files are behind the log " \
        "(the disk is full" in err, (out, err)
    assert "warning: the views and files could not follow the redaction, so they still hold what it removed until " \
        "the next command catches them up\n" in err  # redacted, yet the text was there: said (nc18b)
    (small_disk / "filler").unlink()
    run_mem("-w", ws, "page", "list", check=True)
    status = json.loads(run_mem("-w", ws, "status", "--json", check=True).stdout)
    assert status["head"] == 2 and status["behind"] == 0 and status["clean"], status
    assert "[redacted: too big]" in (ws / "mind" / "big.md").read_text()


def test_an_import_that_committed_is_reported_as_recorded(small_disk, tmp_path, pg_url):
    """Regression (nc17a): `mem import adf` said `error: the disk is full` after its events were committed."""
    source = tmp_path / "source"
    run_mem("init", "-w", source, check=True)
    run_mem("-w", source, "page", "write", "big", "--file", big_page(tmp_path), check=True)
    run_mem("-w", source, "export", "adf", tmp_path / "big.adf", check=True)
    ws = small_disk / "ws"
    run_mem("init", "-w", ws, "--log", pg_url, check=True)
    fill(small_disk, leave=131_072)
    result = run_mem("-w", ws, "import", "adf", tmp_path / "big.adf")
    err = result.stderr.decode()
    assert result.returncode == 0 and "warning: recorded, but the views and files are behind the log (the disk is " \
        "full" in err, (result.stdout, err)
    (small_disk / "filler").unlink()
    run_mem("-w", ws, "page", "list", check=True)  # the next command catches up
    status = json.loads(run_mem("-w", ws, "status", "--json", check=True).stdout)
    assert status["behind"] == 0 and status["clean"], status
    assert (ws / "mind" / "big.md").read_bytes() == (source / "mind" / "big.md").read_bytes()


def test_a_redaction_or_a_pull_is_refused_up_front_when_the_views_are_read_only(workspace, tmp_path):
    """Regression (nc17a): `mem redact` appended its redaction, then failed on views it could not write ("the views
    are at seq 1, the log at 2 ... cannot catch up"), a state it had made; every other change is refused first."""
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    from hubserver import HubServer
    from sync.storage import open_storage

    hub = open_storage(str(tmp_path / "hub.db"))
    (tmp_path / "token").write_text(hub.add_agent("alice") + "\n")
    hub.close()
    with HubServer(str(tmp_path / "hub.db")) as server:
        run_mem("-w", workspace, "remote", "add", "origin", server.url, "--token-file", tmp_path / "token", check=True)
    before = log_rows(workspace)  # the hub is gone: the refusal comes first
    views = workspace / ".mem" / "views.db"
    subprocess.run(["chattr", "+i", str(views)], check=False)
    try:
        if os.access(views, os.W_OK) and subprocess.run(["lsattr", str(views)], capture_output=True).stdout[:20] \
                .count(b"i") == 0:
            pytest.skip("needs chattr +i (root on a filesystem that has it)")
        results = [run_mem("-w", workspace, *args) for args in (["redact", "1", "--reason", "x"], ["pull"])]
    finally:
        subprocess.run(["chattr", "-i", str(views)], check=False)
    for result in results:  # a pull said `the storage is read-only (SQLITE_READONLY)`
        assert (result.returncode, result.stderr.decode()) == (1, f"error: cannot change the workspace {workspace}: "
                                                                  f"{views} can be opened only to read (the file or "
                                                                  "its folder is read-only)\n"), result.args
    assert log_rows(workspace) == before


def test_an_export_to_a_full_disk_leaves_no_file(small_disk, workspace, tmp_path):
    """Regression (nc17a): with no room for its journal, `mem export adf` said so and left an empty FILE.tmp."""
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    fill(small_disk)
    result = run_mem("-w", workspace, "export", "adf", small_disk / "e.adf")
    assert result.returncode == 1 and result.stderr.decode().startswith(
        f"error: cannot write {small_disk / 'e.adf'}: the disk is full"), result.stderr
    assert sorted(path.name for path in small_disk.iterdir()) == ["filler"]


def test_reads_go_on_from_the_views_when_the_files_cannot_be_written(workspace, tmp_path):
    """Regression (nc17a): with mind/ on a read-only mount, a write was recorded and said the files were behind, and
    then every command failed on writing them, reads (lint, export, search) too."""
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    mind = workspace / "mind"
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", "-o", "ro", str(mind), str(mind)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount mind/ read-only")
    try:
        page.write_bytes(PAGE.replace(b"Staging first.", b"Staging first, zebra."))
        wrote = run_mem("-w", workspace, "page", "write", "deploy", "--file", page)
        assert wrote.returncode == 0 and wrote.stderr.decode().startswith(
            "warning: recorded, but the files are behind the log (the storage is read-only"), wrote.stderr
        for args in (["search", "zebra"], ["export", "adf", tmp_path / "out.adf"]):
            read = run_mem("-w", workspace, *args)
            assert read.returncode == 0, (args, read.stderr)
            assert read.stderr.decode().startswith("warning: the files could not be brought up to date (the storage "
                                                   "is read-only"), read.stderr
        assert b"mind/deploy.md" in run_mem("-w", workspace, "search", "zebra").stdout
    finally:
        subprocess.run(["umount", "-l", str(mind)], check=False)
    run_mem("-w", workspace, "page", "list", check=True)
    assert b"zebra" in (mind / "deploy.md").read_bytes()


def test_a_busy_or_forbidden_file_is_not_said_to_be_a_locked_database():
    import errno

    busy = OSError(errno.EBUSY, "Device or resource busy")
    assert str(storage_failure(busy)).startswith("the file is in use or a mount point (")
    assert str(storage_failure(OSError(errno.EACCES, "Permission denied"))).startswith("permission denied (")


def test_a_pull_that_committed_is_reported_as_recorded(small_disk, tmp_path, pg_url):
    """Regression (nc17a, nc18b): a pull whose events committed but whose views could not follow (a full disk) said
    `error: the disk is full` and exited 1, its count never told; it now says what it pulled and that the views are
    behind."""
    from hubserver import HubServer
    from sync.storage import open_storage
    from hub_storage_conformance import CONTRACT

    hub = open_storage(str(tmp_path / "hub.db"))
    hub.apply_contract(CONTRACT)
    (tmp_path / "token").write_text(hub.add_agent("main") + "\n")
    hub.push([new_entry(f"fact {i} " + "x" * 1900) for i in range(200)])
    hub.close()
    ws = small_disk / "ws"
    run_mem("init", "-w", ws, "--agent", "main", "--log", pg_url, check=True)
    with HubServer(str(tmp_path / "hub.db")) as server:
        run_mem("-w", ws, "remote", "add", "origin", server.url, "--token-file", tmp_path / "token", check=True)
        fill(small_disk, leave=131_072)
        result = run_mem("-w", ws, "pull")
        (small_disk / "filler").unlink()
        assert (result.returncode, result.stdout) == (0, b"pulled 200 events from origin\n"), result.stderr
        assert result.stderr.decode().startswith("warning: recorded, but the views and files are behind the log (the "
                                                 "disk is full"), result.stderr
        run_mem("-w", ws, "pull", check=True)
    status = json.loads(run_mem("-w", ws, "status", "--json", check=True).stdout)
    assert status["behind"] == 0 and status["clean"], status
    assert "fact 199" in (ws / "memory" / "insights.md").read_text()


def new_entry(text: str):
    from eventstore.envelope import new_event
    from eventstore.kinds import EntryAppend

    return new_event(EntryAppend(type="FACT", date="2026-11-29", content=text), agent="alice", layer="insights")
