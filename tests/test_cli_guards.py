"""Guards found by trying mindlog as a new user: checkout never writes into a workspace, hub admin
commands never create a hub by accident, and small commands say what is true."""

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import PAGE, log_rows, mem_command, run_mem


def test_checkout_never_writes_into_a_workspace(workspace, tmp_path):
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    run_mem("-w", workspace, "always", "add", "later", check=True)
    before = {p: (workspace / p).read_bytes() for p in ("mind.md", "mind/deploy.md", "mind/log.md")}
    rows = log_rows(workspace)
    for target in (".", "mind", "sub/dir"):
        refused = run_mem("checkout", target, "--seq", "1", "--force", cwd=workspace)
        assert refused.returncode == 1 and b"inside the workspace" in refused.stderr, refused.stderr
    assert {p: (workspace / p).read_bytes() for p in before} == before and log_rows(workspace) == rows
    assert not (workspace / "sub").exists()

    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    refused = run_mem("-w", workspace, "checkout", used, "--seq", "1")
    assert refused.returncode == 1 and b"not empty" in refused.stderr and b"--force" in refused.stderr
    assert sorted(p.name for p in used.iterdir()) == ["keep.txt"]
    run_mem("-w", workspace, "checkout", used, "--seq", "1", "--force", check=True)
    assert (used / "keep.txt").read_text() == "mine" and "later" not in (used / "mind.md").read_text()
    run_mem("-w", workspace, "checkout", tmp_path / "new", "--seq", "1", check=True)
    assert (tmp_path / "new/mind/deploy.md").read_bytes() == before["mind/deploy.md"]


def test_checkout_resolves_dot_dot_and_links_before_it_judges_a_target(workspace, tmp_path):
    """Regression: `../out` from inside a workspace was refused as inside it ('..' not normalised), and a link
    leading into the workspace let the files be written into mind/."""
    run_mem("-w", workspace, "always", "add", "a rule", check=True)
    outside = run_mem("checkout", "../out", "--seq", "1", cwd=workspace)
    assert outside.returncode == 0, outside.stderr
    assert "a rule" in (workspace.parent / "out/mind.md").read_text()
    (tmp_path / "links").mkdir()
    (tmp_path / "links/into").symlink_to(workspace / "mind")
    refused = run_mem("-w", workspace, "checkout", tmp_path / "links/into/sub", "--seq", "1")
    assert refused.returncode == 1 and b"inside the workspace" in refused.stderr, refused.stderr
    assert not (workspace / "mind/sub").exists()


def test_hub_admin_commands_never_create_a_hub(tmp_path):
    for args in (["hub", "agent", "list"], ["hub", "agent", "add", "x"], ["hub", "believed", "nobody"],
                 ["hub", "contract", "show"], ["hub", "agent", "revoke", "x"]):
        refused = run_mem(*args, cwd=tmp_path)
        assert refused.returncode == 1 and f"no hub database at {tmp_path / 'hub.db'}".encode() in refused.stderr, \
            (args, refused.stderr)
        assert b"mem hub init" in refused.stderr
    assert list(tmp_path.iterdir()) == []
    created = run_mem("hub", "init", cwd=tmp_path, check=True)
    assert b"created hub database" in created.stdout and (tmp_path / "hub.db").is_file()
    again = run_mem("hub", "init", cwd=tmp_path)
    assert again.returncode == 1 and b"exists already" in again.stderr
    run_mem("hub", "agent", "add", "ana", cwd=tmp_path, check=True)
    assert [a["name"] for a in json.loads(run_mem("hub", "agent", "list", "--json", cwd=tmp_path).stdout)] == ["ana"]
    for args in (["hub", "believed", "nobody"], ["hub", "agent", "revoke", "nobody"]):  # revoke named no agent
        refused = run_mem(*args, cwd=tmp_path)
        assert (refused.returncode, refused.stderr) == (1, b"error: no agent 'nobody' on this hub (agents: ana)\n")
    assert b"position 0" in run_mem("hub", "believed", "ana", cwd=tmp_path, check=True).stdout
    # the limits an agent name breaks are said (a long name of letters was told it must be letters)
    for name in ("x" * 65, "_x"):
        refused = run_mem("hub", "agent", "add", name, cwd=tmp_path)
        assert refused.returncode == 1 and b"must be 1 to 64 ASCII letters" in refused.stderr and b"'_'" in refused.stderr
    # revoking twice: the agent is there, revoked (it was told "no agent")
    run_mem("hub", "agent", "add", "bo", cwd=tmp_path, check=True)
    run_mem("hub", "agent", "revoke", "bo", cwd=tmp_path, check=True)
    again = run_mem("hub", "agent", "revoke", "bo", cwd=tmp_path)
    assert again.returncode == 1 and again.stderr.decode().startswith("error: agent 'bo' was revoked already (")


def test_a_database_that_is_not_a_hubs_is_refused_and_left_untouched(tmp_path):
    """A non-empty SQLite file of another program given as --db got the hub's tables (and WAL mode) added: the
    commands refuse it, and so does the hub's storage itself, before writing anything."""
    import sqlite3

    from eventstore.errors import InvalidInput
    from sync.server import free_port
    from sync.storage_sqlite import SQLiteHubStorage

    other = tmp_path / "notes.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
        db.execute("INSERT INTO notes VALUES ('mine')")
    db.close()
    before = other.read_bytes()
    for args in (["hub", "init"], ["hub", "agent", "add", "ana"], ["hub", "agent", "list"], ["hub", "contract", "show"],
                 ["serve", "--port", free_port()]):
        refused = run_mem(*args, "--db", other, cwd=tmp_path)
        assert (refused.returncode, refused.stderr.decode()) == (
            1, f"error: {other} is not a hub database (it holds notes); a hub needs a file of its own\n"), args
    with pytest.raises(InvalidInput, match=f"^{other} is not a hub database \\(it holds notes\\); a hub needs a "
                       "file of its own$"):
        SQLiteHubStorage(other)
    assert other.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]
    empty = tmp_path / "empty.db"
    empty.touch()
    run_mem("hub", "init", "--db", empty, check=True)
    run_mem("hub", "agent", "add", "ana", "--db", empty, check=True)
    assert b"ana" in run_mem("hub", "agent", "list", "--db", empty, check=True).stdout


def test_a_workspace_log_is_never_taken_for_a_hub(workspace):
    """`mem hub agent list --db ws/.mem/log.db` answered an empty list and `mem serve --db` it added the
    hub's tables to the workspace's log, as if it were a hub."""
    import sqlite3

    from hubserver import free_port

    log = workspace / ".mem" / "log.db"

    def tables():
        with sqlite3.connect(log) as db:
            return sorted(name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))

    before = tables()
    for args in (["hub", "agent", "list"], ["hub", "init"], ["serve", "--port", str(free_port())]):
        refused = run_mem(*args, "--db", log)
        assert refused.returncode == 1 and refused.stderr.decode() == (
            f"error: {log} is not a hub database (it holds {', '.join(before)}); a hub needs a file of its own\n")
    assert tables() == before


def test_a_postgresql_hub_is_created_only_by_hub_init(pg_url):
    from eventstore.backends import shown

    refused = run_mem("hub", "agent", "list", "--db", pg_url)
    where = pg_url.split("@")[-1]
    assert (refused.returncode, refused.stderr.decode()) == (1, (
        f"error: no hub was set up in {where} (the database is there, without a hub); set one up with "
        f"`mem hub init --db {shown(pg_url)}` or pass another --db (or MEM_HUB_DB)\n"))
    scheme, _, rest = pg_url.partition("://")
    user, _, host = rest.partition("@")
    with_password = f"{scheme}://{user.split(':')[0]}:s3cret-pw@{host}"  # trusted: the password goes unchecked
    refused = run_mem("hub", "agent", "list", "--db", with_password)
    assert refused.stderr.decode().endswith(  # regression (nc15a): the masked command failed as pasted, unsaid
        f"`mem hub init --db {shown(with_password)}` (the password put back) or pass another --db (or MEM_HUB_DB)\n")
    assert "s3cret-pw" not in refused.stderr.decode()
    run_mem("hub", "init", "--db", pg_url, check=True)
    run_mem("hub", "agent", "add", "ana", "--db", pg_url, check=True)
    assert b"ana" in run_mem("hub", "agent", "list", "--db", pg_url, check=True).stdout
    assert b"exists already" in run_mem("hub", "init", "--db", pg_url).stderr


def test_init_keeps_an_existing_workspace_agent(workspace):
    refused = run_mem("init", "--agent", "other", "-w", workspace)
    assert refused.returncode == 1 and b"already the workspace of agent 'alice'" in refused.stderr
    assert b"already a workspace (agent alice)" in run_mem("init", "-w", workspace, check=True).stdout
    assert b"already a workspace (agent alice)" in run_mem("init", "--agent", "alice", "-w", workspace,
                                                            check=True).stdout


def test_demo_keep_refuses_a_used_directory(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    refused = run_mem("demo", "--keep", tmp_path)
    assert refused.returncode == 1 and refused.stderr.startswith(b"error: ") and b"not empty" in refused.stderr
    assert b"Traceback" not in refused.stderr and [p.name for p in tmp_path.iterdir()] == ["old.txt"]


def test_show_diff_and_cite_say_what_is_true(workspace, tmp_path):
    note = tmp_path / "note.txt"
    note.write_text("today's note\n")
    run_mem("-w", workspace, "always", "add", "one", check=True)                          # seq 1
    run_mem("-w", workspace, "file", "write", "notes/today.md", "--file", note, check=True)  # seq 2
    run_mem("-w", workspace, "file", "delete", "notes/today.md", check=True)              # seq 3
    assert run_mem("-w", workspace, "show", "notes/today.md", "--seq", "2", check=True).stdout == b"today's note\n"
    gone = run_mem("-w", workspace, "show", "notes/today.md", "--seq", "3")
    assert gone.returncode == 1 and gone.stderr == (  # the way back to it, as without a moment (nc19b)
        b"error: notes/today.md was deleted at seq 3; `mem show notes/today.md --seq 2` shows it as it was\n")
    past = run_mem("-w", workspace, "diff", "mind.md", "--from", "seq:1", "--to", "seq:9")
    assert past.returncode == 1 and b"seq 9 is past the log head (3)" in past.stderr
    cited = run_mem("-w", workspace, "cite", "S1")
    assert cited.returncode == 1 and b"S1: not a loop message: event 1 is an always.add in layer mind" in cited.stdout
    run_mem("-w", workspace, "loop", "append", "--role", "user", "--text", "hi", "--loop", "side", check=True)  # 4
    for citation in ("adf-audit://seq/4?loop=main", "[S4]"):
        cited = run_mem("-w", workspace, "cite", citation)
        assert (cited.returncode, cited.stdout.splitlines()[0]) == (
            (1, b"S4: not in the loop cited: it is a message of loop side") if "main" in citation
            else (0, b"S4: live in the loop (loop side)")), cited
    odd = "notes/café #1 & más.md"  # the command it gives works pasted into a shell (nc21a: `&` and `#` broke it)
    run_mem("-w", workspace, "file", "write", odd, "--file", note, check=True)                # seq 5
    run_mem("-w", workspace, "file", "delete", odd, check=True)                               # seq 6
    gone = run_mem("-w", workspace, "show", odd).stderr.decode()
    assert gone == f"error: {odd} was deleted at seq 6; `mem show '{odd}' --seq 5` shows it as it was\n"
    pasted = subprocess.run(["sh", "-c", f"{shlex.join(mem_command())} -w {shlex.quote(str(workspace))} "
                             f"{gone.split('`')[1][4:]}"], capture_output=True, timeout=60)
    assert pasted.returncode == 0 and pasted.stdout == b"today's note\n", pasted.stderr


def test_hand_edit_refusals_name_what_applies(workspace, tmp_path):
    (workspace / "mind.md").write_text("# Mind\n\n## Always\n\n- mine\n")
    refused = run_mem("-w", workspace, "always", "add", "x")
    assert refused.returncode == 1 and b"mem adopt" in refused.stderr and b"mem page write" not in refused.stderr
    (workspace / "mind.md").unlink()
    run_mem("-w", workspace, "always", "add", "x", check=True)
    with open(workspace / "mind/log.md", "a") as f:
        f.write("scribble\n")
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    refused = run_mem("-w", workspace, "page", "write", "deploy", "--file", page)
    assert refused.returncode == 1 and b"mind/log.md was edited by hand" in refused.stderr
    assert b"cannot be adopted: `mem show mind/log.md > mind/log.md` puts mindlog's version back (a write's --force " \
        b"overwrites it)" in refused.stderr and b"mem page write" not in refused.stderr
    (workspace / "mind/new.md").write_bytes(PAGE)  # adopt has no --force: told the way back (nc30b: "pass --force")
    adopted = run_mem("-w", workspace, "adopt")
    assert adopted.returncode == 1 and b"--force to overwrite" not in adopted.stderr + adopted.stdout
    (workspace / "mind/log.md").write_bytes(run_mem("-w", workspace, "show", "mind/log.md", check=True).stdout)
    assert b"adopted mind/new.md" in run_mem("-w", workspace, "adopt", check=True).stdout


def test_checkout_never_writes_through_a_link_below_its_directory_into_another_workspace(workspace, tmp_path):
    """Regression: with `out/mind` a link to another workspace's mind/, `mem checkout out --force` wrote this agent's
    old pages into it (the other agent's `mem adopt` then recorded them as its own edits). Refused, nothing written."""
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "deploy", "--file", page, check=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    run_mem("init", "--agent", "bob", cwd=victim, check=True)
    run_mem("-w", victim, "page", "write", "deploy", "--file", page, check=True)
    before = {p.relative_to(victim): p.read_bytes() for p in victim.rglob("*") if p.is_file() and ".mem" not in p.parts}
    out = tmp_path / "out"
    out.mkdir()
    (out / "mind").symlink_to(victim / "mind")
    refused = run_mem("-w", workspace, "checkout", out, "--seq", "1", "--force")
    assert refused.returncode == 1 and refused.stderr.startswith(b"error: ") and b"nothing written" in refused.stderr
    assert b"Traceback" not in refused.stderr and not (out / "mind.md").exists()
    assert {p.relative_to(victim): p.read_bytes() for p in victim.rglob("*") if p.is_file() and ".mem" not in p.parts} \
        == before


def test_checkout_over_another_moment_tells_the_files_that_moment_does_not_hold(workspace, tmp_path):
    """Regression: `mem checkout out --seq 1 --force` over a checkout of seq 2 said it wrote the moment, and left a page
    made at seq 2 beside a mind.md that does not list it, silently. It still deletes nothing, and says what it left."""
    for slug in ("a", "b"):
        page = tmp_path / f"{slug}.md"
        page.write_bytes(PAGE.replace(b"# ", f"# {slug} ".encode(), 1))
        run_mem("-w", workspace, "page", "write", slug, "--file", page, check=True)
    out = tmp_path / "out"
    run_mem("-w", workspace, "checkout", out, "--seq", "2", check=True)
    told = run_mem("-w", workspace, "checkout", out, "--seq", "1", "--force", check=True).stdout.decode()
    assert told.splitlines()[1] == ("left 1 file there that seq 1 does not hold (a checkout deletes nothing): "
                                    "mind/b.md"), told
    assert (out / "mind/b.md").exists() and "b" not in (out / "mind.md").read_text().split("## ")[-1].split()


def test_checkout_under_a_file_says_so_in_one_line(workspace, tmp_path):
    """Regression: `mem checkout afile/sub` printed Python's `[Errno 20] Not a directory: ...`."""
    run_mem("-w", workspace, "always", "add", "a rule", check=True)
    (tmp_path / "afile").write_text("x")
    refused = run_mem("-w", workspace, "checkout", tmp_path / "afile/sub", "--seq", "1")
    assert refused.returncode == 1 and refused.stderr.startswith(b"error: ") and b"Errno" not in refused.stderr \
        and b"afile" in refused.stderr, refused.stderr


def test_checkout_never_writes_into_a_root_a_home_or_a_directory_holding_the_workspace(workspace, tmp_path):
    """Regression (newcomer9): `mem checkout / --force` wrote mind.md into the disk's root, then walked all its
    940,276 files to list what it left. The disk's root, the home directory and a directory that holds the
    workspace are refused, --force or not; a directory of many files is looked at up to LEFT_LOOKED_AT files."""
    from projections.memory import LEFT_LOOKED_AT, _not_for_a_checkout

    run_mem("-w", workspace, "always", "add", "a rule", check=True)
    assert _not_for_a_checkout(Path("/"), workspace) == "the file system's root"
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    for target, cwd, env, why in ((home, None, {"HOME": str(home)}, b"your home directory"),
                                  ("..", workspace, {}, b"a directory holding the workspace")):
        for force in (["--force"], []):  # without it too: not "pass --force", which leads here (nc33b)
            refused = run_mem("-w", workspace, "checkout", target, "--seq", "1", *force, cwd=cwd, env=env)
            assert refused.returncode == 1 and refused.stderr.startswith(b"error: ") and why in refused.stderr, \
                refused.stderr
    assert [p.name for p in home.iterdir()] == ["notes.txt"] and not (workspace.parent / "mind.md").exists()

    crowded = tmp_path / "crowded"
    for n in range(LEFT_LOOKED_AT // 100 + 1):
        folder = crowded / f"d{n:03}"
        folder.mkdir(parents=True)
        for m in range(100):
            (folder / f"f{m:02}").touch()
    told = run_mem("-w", workspace, "checkout", crowded, "--seq", "1", "--force", check=True).stdout.decode()
    assert told.splitlines()[1].startswith(f"left {LEFT_LOOKED_AT:,} or more files there"), told


def test_a_file_named_with_a_line_break_stays_on_one_line_in_status_adopt_and_lint(workspace):
    """Regression (nc30a): `mem status`, `mem adopt` and `mem lint` printed such a name raw, over two lines, where an
    error quoting it was one line."""
    (workspace / "mind/a\nb.md").write_bytes(PAGE)
    status = run_mem("-w", workspace, "status").stdout.decode()
    adopted = run_mem("-w", workspace, "adopt").stdout.decode()
    linted = run_mem("-w", workspace, "lint").stdout.decode()
    assert "untracked:       mind/a\\nb.md\n" in status, status
    assert adopted.startswith("left mind/a\\nb.md: slug 'a\\nb' is not safe") and adopted.count("\n") == 1, adopted
    assert linted.startswith("[orphans] mind/a\\nb.md: is in mind/ but is no page of the log") \
        and linted.count("\n") == 2, linted
