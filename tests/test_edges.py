"""Refusals at the edges, through a real `mem`: damaged files, bad or busy ports, unopenable paths.
Each is one `error: ...` line naming the file, port or URL, a non-zero exit, no traceback, nothing
claimed before it, and the log as it was."""

import os
import select
import shlex
import socket
import subprocess

import pytest

from conftest import PAGE, damage_table, log_rows, mem_command, run_mem


def refused(result, *names: str) -> str:
    err = result.stderr.decode()
    assert result.returncode != 0, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for name in names:
        assert name in lines[0], err
    return lines[0]


@pytest.fixture
def written(workspace):
    run_mem("page", "write", "deploy", "-f", "-", "-w", workspace, input=PAGE, check=True)
    return workspace


def test_damaged_config_is_named(written):
    (written / ".mem" / "config.json").write_text("{bad")
    refused(run_mem("status", "-w", written), str(written / ".mem" / "config.json"), "damaged")


def test_damaged_remotes_is_named(written):
    before = log_rows(written)
    (written / ".mem" / "remotes.json").write_text("{bad")
    for command in (["push"], ["remote", "list"]):
        refused(run_mem(*command, "-w", written), str(written / ".mem" / "remotes.json"))
    assert log_rows(written) == before


@pytest.fixture
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_refuses_a_port_out_of_range_before_anything(tmp_path):
    for port in ("99999", "0", "-5"):
        result = run_mem("serve", "--db", tmp_path / "hub.db", "--port", port)
        refused(result, "port", "1 to 65535")
        assert b"http://" not in result.stdout + result.stderr
    assert not (tmp_path / "hub.db").exists()


def test_a_busy_port_is_one_error_line(tmp_path, written, busy_port):
    for command in (["serve", "--db", tmp_path / "hub.db", "--port", busy_port],
                    ["ui", "-w", written, "--port", busy_port],
                    ["mcp", "-w", written, "--http", f"127.0.0.1:{busy_port}"]):
        result = run_mem(*command)
        refused(result, f"127.0.0.1:{busy_port}", "in use")
        assert b"http://" not in result.stdout + result.stderr


@pytest.mark.parametrize("command", ["serve", "ui", "mcp"])
def test_each_server_says_its_url_on_stdout_and_notes_on_stderr(tmp_path, written, command):
    """Regression: `mem serve` and `mem mcp --http` said their URL on stderr, `mem ui` on stdout; a script
    reading the URL a user opens had to know which. Now all say it on stdout, and notes go to stderr."""
    from hubserver import free_port

    port = free_port()
    args = {"serve": ["serve", "--db", str(tmp_path / "hub.db"), "--port", str(port)],
            "ui": ["ui", "-w", str(written), "--port", str(port)],
            "mcp": ["mcp", "-w", str(written), "--http", f"127.0.0.1:{port}"]}[command]
    server = subprocess.Popen([*mem_command(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert select.select([server.stdout], [], [], 30)[0], f"mem {command} printed nothing on stdout"
        url = f"http://127.0.0.1:{port}"
        assert server.stdout.readline().decode() == {
            "serve": f"mindlog hub on {url} ({tmp_path / 'hub.db'}); pages at {url}/ui/\n",
            "ui": f"mindlog ui: {url}/asof\n", "mcp": f"mindlog mcp: {url}/mcp\n"}[command]
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
    assert out == b""
    assert err.decode() == (f"created a new hub database at {tmp_path / 'hub.db'}\n" if command == "serve" else "")


def test_unopenable_paths_are_named(tmp_path, written):
    hub = "/nonexistent-mindlog-dir/hub.db"
    result = run_mem("serve", "--db", hub, "--port", "1")  # the port is checked first: bind would need root
    refused(result)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_mem("serve", "--db", hub, "--port", port)
    refused(result, hub)
    assert b"created" not in result.stdout + result.stderr
    refused(run_mem("export", "adf", "/nonexistent-mindlog-dir/x.adf", "-w", written), "/nonexistent-mindlog-dir/x.adf")
    for command in ("hub", "init"), ("hub", "agent", "list"):  # SQLite's "unable to open database file" (nc21a)
        assert refused(run_mem(*command, "--db", hub)) == (
            f"error: cannot open the hub database {hub}: the directory /nonexistent-mindlog-dir does not exist")


def test_damaged_views_are_named_and_replay_rebuilds_them(written):
    before = log_rows(written)
    views = written / ".mem" / "views.db"
    for part in ("-wal", "-shm"):
        (written / ".mem" / f"views.db{part}").unlink(missing_ok=True)
    views.write_bytes(b"not a database at all, not even close" * 10)
    refused(run_mem("status", "-w", written), str(views), "mem replay")
    refused(run_mem("show", "mind.md", "-w", written), str(views), "mem replay")
    replayed = run_mem("replay", "-w", written, check=True)
    assert b"views at seq 1" in replayed.stdout
    assert run_mem("verify", "-w", written, check=True).returncode == 0
    assert b"Staging first." in run_mem("show", "mind/deploy.md", "-w", written, check=True).stdout
    assert log_rows(written) == before


def test_damaged_log_is_named(written):
    log = written / ".mem" / "log.db"
    for part in ("-wal", "-shm"):
        (written / ".mem" / f"log.db{part}").unlink(missing_ok=True)
    log.write_bytes(b"not a database at all, not even close" * 10)
    for command in (["status"], ["replay"]):
        refused(run_mem(*command, "-w", written), str(log), "damaged")


def test_damage_found_by_a_later_query_names_its_file(written):
    views, log = written / ".mem" / "views.db", written / ".mem" / "log.db"
    before = log_rows(written)
    damage_table(views, "pages")
    for command in (["status"], ["page", "list"]):
        line = refused(run_mem(*command, "-w", written), f"the views database {views} is damaged", "run `mem replay`")
        assert "SQLITE_CORRUPT" not in line
    run_mem("replay", "-w", written, check=True)
    assert b"Staging first." in run_mem("show", "mind/deploy.md", "-w", written, check=True).stdout
    assert log_rows(written) == before

    damage_table(log, "events")
    for command in (["status"], ["log"]):
        refused(run_mem(*command, "-w", written), f"the event log {log} is damaged")


def test_failed_init_leaves_no_half_made_workspace(tmp_path):
    root = tmp_path / "pgws"
    url = "postgresql://nobody:secret@127.0.0.1:1/x"
    line = refused(run_mem("init", "--log", url, "-w", root), "postgresql://nobody:***@127.0.0.1:1/x")
    assert "secret" not in line
    assert not root.exists()
    run_mem("init", "-w", root, check=True)
    assert run_mem("status", "-w", root).returncode == 0


def test_init_of_an_existing_workspace_says_so(written):
    result = run_mem("init", "-w", written, check=True)
    assert b"already a workspace" in result.stdout and b"initialised" not in result.stdout


def test_demo_keep_on_a_file(tmp_path):
    (tmp_path / "somefile").write_text("x")
    refused(run_mem("demo", "--keep", tmp_path / "somefile"), "somefile", "is a file")


def test_contract_errors_name_the_layer(tmp_path):
    hub = tmp_path / "hub.db"
    run_mem("hub", "init", "--db", hub, check=True)
    contract = tmp_path / "c.toml"
    contract.write_text('[layers.notes]\npath = "memory/notes.md"\nformat = "blob"\n'
                        'producers = ["a"]\nconsumers = ["b"]\n')
    line = refused(run_mem("hub", "contract", "apply", contract, "--db", hub), "layers.notes.format")
    assert "$" not in line


def test_the_same_contract_applied_again_changes_nothing(tmp_path):
    """Regression: applying an identical file appended another contract change (`contract show --at` history
    filled with changes that changed nothing)."""
    hub = tmp_path / "hub.db"
    run_mem("hub", "init", "--db", hub, check=True)
    contract = tmp_path / "c.toml"
    contract.write_text('[layers.notes]\npath = "memory/notes.md"\nformat = "entries"\nproducers = ["*"]\n'
                        'consumers = ["*"]\n')
    first = run_mem("hub", "contract", "apply", contract, "--db", hub, check=True).stdout
    again = run_mem("hub", "contract", "apply", contract, "--db", hub, check=True).stdout
    assert first == b"contract applied at hub position 1: notes\n"
    assert again == b"contract unchanged: the hub's, since hub position 1, is this one\n"
    assert b"# hub position 1\n" in run_mem("hub", "contract", "show", "--db", hub, check=True).stdout


def test_serve_refuses_unmade_directories_and_a_token_that_is_no_text(tmp_path):
    """--admin-token-file and --ui-dir are made when missing, but not the directories they go in (as with
    --db): a mistyped path is refused before the port is taken or the hub made."""
    hub, nowhere = tmp_path / "hub.db", tmp_path / "nowhere"
    (tmp_path / "binary.token").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "a-file").write_text("x")
    for option, path, why in (("--admin-token-file", nowhere / "a.token", f"there is no directory {nowhere}"),
                              ("--ui-dir", nowhere / "ui", f"there is no directory {nowhere}"),
                              ("--admin-token-file", tmp_path, "a directory is there, not a file"),
                              ("--ui-dir", tmp_path / "a-file", "a file is there, not a directory")):
        result = run_mem("serve", "--db", hub, "--port", "1", option, path)  # checked before the port
        refused(result, option, why)
        assert not nowhere.exists() and not hub.exists()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_mem("hub", "init", "--db", hub, check=True)
    refused(run_mem("serve", "--db", hub, "--port", port, "--admin-token-file", tmp_path / "binary.token"),
            "binary.token", "not UTF-8")


def test_remote_add_refuses_a_token_file_that_is_no_text(written, tmp_path):
    (tmp_path / "binary.token").write_bytes(b"x\xff")
    refused(run_mem("remote", "add", "origin", "http://127.0.0.1:1", "--token-file", tmp_path / "binary.token",
                    "-w", written), "binary.token", "not UTF-8")
    refused(run_mem("remote", "add", "origin", "http://127.0.0.1:1", "--token-file", tmp_path, "-w", written),
            str(tmp_path), "is a directory")
    # an empty file, or two lines: "cannot reach remote origin ...: Illegal header value b'Bearer '" before
    for name, text, why in (("empty.token", b"", "it is empty"), ("two.token", b"mlg_a\nmlg_b\n", "one word")):
        (tmp_path / name).write_bytes(text)
        refused(run_mem("remote", "add", "origin", "http://127.0.0.1:1", "--token-file", tmp_path / name, "-w",
                        written), name, why)
    assert not (written / ".mem" / "remotes.json").exists()


@pytest.mark.parametrize("port", ["0", "65536", "74301"])
def test_remote_add_refuses_a_port_out_of_range(written, tmp_path, port):
    """Regression (nc21a): a URL's port past 65535 was kept, and the socket layer wrapped it round to another port
    (74301 reached a hub on 8765); it is refused as `mem serve --port` refuses it, before anything is asked."""
    (tmp_path / "t.token").write_text("mlg_x\n")
    refused(run_mem("remote", "add", "origin", f"http://127.0.0.1:{port}", "--token-file", tmp_path / "t.token",
                    "-w", written), f"port {port} is out of range: give a port from 1 to 65535")
    assert not (written / ".mem" / "remotes.json").exists()


def test_a_log_damaged_inside_its_pages_is_one_line(written):
    """SQLite's quick check reports deep damage on several lines; the refusal stays one. `mem status` (no
    quick check: it is meant to be cheap) refuses too: the head it reads from a damaged page holds no event."""
    for text in ("one", "two", "three"):
        run_mem("always", "add", text, "-w", written, check=True)
    log = written / ".mem" / "log.db"
    sqlite = __import__("sqlite3").connect(log)
    sqlite.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    sqlite.close()
    data = bytearray(log.read_bytes())
    data[5000:9000] = b"\xde\xad" * 2000
    log.write_bytes(bytes(data))
    for command in (["status"], ["status", "--json"], ["log"], ["show", "mind.md"], ["always", "add", "four"]):
        refused(run_mem(*command, "-w", written), f"the event log {log} is damaged")


def test_init_on_a_file_is_one_line(tmp_path):
    (tmp_path / "a-file").write_text("x")
    refused(run_mem("init", "-w", tmp_path / "a-file"), f"{tmp_path / 'a-file'} is a file; a workspace is a directory")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "mind").write_text("x")
    refused(run_mem("init", "-w", tmp_path / "ws"), "keeps its pages in a directory")
    assert not (tmp_path / "ws" / ".mem").exists()


def test_a_damaged_or_empty_hub_database_is_named(tmp_path):
    """A hub database damaged inside a table is named as a workspace's damaged files are; an empty file
    is no hub (an admin command opening it made one, and listed no agents, rc 0)."""
    empty = tmp_path / "empty.db"
    empty.touch()
    refused(run_mem("hub", "agent", "list", "--db", empty), f"no hub was set up in {empty} (the file is there, "
            f"without a hub); set one up with `mem hub init --db {empty}`")
    assert empty.stat().st_size == 0
    hub = tmp_path / "hub.db"
    run_mem("hub", "init", "--db", hub, check=True)
    run_mem("hub", "agent", "add", "a", "--db", hub, check=True)
    damage_table(hub, "hub_agents")
    for command in (["agent", "list"], ["agent", "add", "b"], ["agent", "revoke", "a"]):
        refused(run_mem("hub", *command, "--db", hub), f"the hub database {hub} is damaged")


def test_a_db_url_of_an_unknown_scheme_is_refused(tmp_path):
    """A mistyped scheme (`postgresq://`) reached libpq, whose error was a missing "=" after the URL."""
    from hubserver import free_port

    typo = "postgresq://me:secret@127.0.0.1:5499/hub"
    for args in (["serve", "--port", str(free_port())], ["hub", "init"], ["hub", "agent", "list"]):
        line = refused(run_mem(*args, "--db", typo, cwd=tmp_path))
        assert line == ("error: --db postgresq://me:***@127.0.0.1:5499/hub: postgresq:// is no scheme a hub knows; "
                        "give a postgresql:// URL or a SQLite file path"), args
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(params=["mount", "chmod", "immutable"])
def read_only(request, written):
    """Runs `mem` on the workspace `written` as on read-only storage: a read-only bind mount in a user and
    mount namespace of the `mem` process alone (`unshare -rm`), the workspace without write permission
    (not for root, whom permissions do not stop), or its two databases immutable (`chattr +i`, which stops root too;
    regression: every read failed on SQLITE_READONLY, the folder being writable)."""
    if request.param == "immutable":
        databases = [str(written / ".mem" / name) for name in ("log.db", "views.db")]
        probe = subprocess.run(["chattr", "-i", *databases], capture_output=True)
        if probe.returncode != 0:
            pytest.skip(f"no immutable files here: {probe.stderr.decode().strip()}")

        def immutable(command):  # made so at the first command: the test may append before it
            subprocess.run(["chattr", "+i", *databases], check=True)
            return run_mem(*shlex.split(command), "-w", written)
        try:
            yield immutable
        finally:
            subprocess.run(["chattr", "-i", *databases], check=True)
        return
    if request.param == "mount":
        remount = f"mount --bind {written} {written} && mount -o remount,bind,ro {written}"
        probe = subprocess.run(["unshare", "-rm", "sh", "-c", remount], capture_output=True)
        if probe.returncode != 0:
            pytest.skip(f"no read-only bind mount in a user namespace here: {probe.stderr.decode().strip()}")
        mem = shlex.join(mem_command())
        yield lambda command: subprocess.run(["unshare", "-rm", "sh", "-c", f"{remount} && exec {mem} {command} "
                                              f"-w {written}"], capture_output=True, timeout=120)
        return
    if os.geteuid() == 0:
        pytest.skip("root writes whatever the permissions say")
    paths = [written, *written.rglob("*")]
    for path in paths:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        yield lambda command: run_mem(*shlex.split(command), "-w", written)
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | 0o200)


def test_a_workspace_on_read_only_storage_is_read_and_refuses_writes(written, read_only):
    """Reads on read-only storage were refused (SQLite reads a WAL database through the -shm it writes beside
    it): the databases are opened read-only there, and only a change is refused, naming the workspace."""
    reads = ["show mind.md", "show mind/deploy.md --seq 1", "log --json", "status", "search staging --json",
             "page list", "verify", "believed", "diff mind/deploy.md --from seq:1", "cite adf-file://mind/deploy.md",
             "lint --json", "replay --check"]
    expected = {command: run_mem(*shlex.split(command), "-w", written) for command in reads}
    before, files = log_rows(written), {p: p.read_bytes() for p in written.rglob("*") if p.is_file()}
    for command in reads:
        result = read_only(command)
        assert (result.returncode, result.stdout, result.stderr) == (
            expected[command].returncode, expected[command].stdout, b""), command
    for command in ("always add hello", "page delete deploy", "adopt"):
        refused(read_only(command), f"cannot change the workspace {written}: ")
    assert log_rows(written) == before
    after = {p: p.read_bytes() for p in written.rglob("*") if p.is_file()}
    made = [p.name for p in set(after) - set(files)]  # a reader's -shm and -wal, where the folder can take them
    assert all(name in ("log.db-shm", "log.db-wal", "views.db-shm", "views.db-wal") for name in made), made
    assert {p: after[p] for p in files} == files


def test_views_behind_the_log_on_read_only_storage_are_refused_not_read(written, read_only):
    from projections.memory import Memory

    with Memory.open(written) as memory:
        memory.log.append([memory.writer.always_add("appended behind the views")])
    refused(read_only("show mind.md"), f"the views {written / '.mem' / 'views.db'} are at seq 1, the log at 2, and the "
            "storage is read-only")


def test_mem_ui_on_read_only_storage_shows_the_timeline_and_the_contract(written):
    """Regression: on a read-only mount `/timeline` and `/contract` were a 500 (`the storage is read-only`):
    their counts were caught up into the views, which take no row there; they are caught up in memory."""
    import httpx

    from hubserver import free_port

    remount = f"mount --bind {written} {written} && mount -o remount,bind,ro {written}"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", remount], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no read-only bind mount in a user namespace here: {probe.stderr.decode().strip()}")
    port = free_port()
    server = subprocess.Popen(["unshare", "-rm", "sh", "-c", f"{remount} && exec {shlex.join(mem_command())} ui "
                               f"--port {port} -w {written}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert select.select([server.stdout], [], [], 30)[0], server.stderr.read1()
        url = server.stdout.readline().decode().split()[-1].rsplit("/", 1)[0]
        for page in ("timeline", "contract", "asof"):
            answer = httpx.get(f"{url}/{page}", timeout=30)
            assert answer.status_code == 200, (page, answer.text)
        assert "1 event ·" in httpx.get(f"{url}/timeline", timeout=30).text
    finally:
        server.terminate()
        server.communicate(timeout=30)


def test_serve_on_postgresql_hides_the_password_and_removes_its_mirror(tmp_path, pg_url):
    """`mem serve --db postgresql://user:PASSWORD@...` printed the password in its start line, and its
    pages' mirror (a temporary directory when no --ui-dir is given) stayed behind after every run."""
    import os
    import time

    import httpx

    from hubserver import free_port

    scheme, rest = pg_url.split("://", 1)
    credentials, _, place = rest.rpartition("@")
    url = f"{scheme}://{credentials.split(':')[0]}:s3cret-pw@{place}"  # the test server trusts loopback
    run_mem("hub", "init", "--db", url, check=True)
    temp = tmp_path / "tmp"
    temp.mkdir()
    port = free_port()
    server = subprocess.Popen([*mem_command(), "serve", "--db", url, "--port", str(port)], stderr=subprocess.PIPE,
                              stdout=subprocess.PIPE, env={**os.environ, "TMPDIR": str(temp)})
    try:
        for _ in range(150):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ui/asof", timeout=1).status_code == 401:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert [p.name[:15] for p in temp.iterdir()] == ["mindlog-hub-ui-"]
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
    assert "s3cret-pw" not in (out + err).decode() and ":***@" in out.decode(), (out, err)
    assert list(temp.iterdir()) == []


@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_an_ipv6_address_is_printed_as_a_url_that_opens(workspace, host):
    """`mem ui --host ::1` printed `http://::1:PORT/asof`, which no browser or curl opens; `--host '[::1]'`, the
    form that URL writes, failed with "Name or service not known" (found by a newcomer run)."""
    import httpx

    from hubserver import free_port

    port = free_port()
    server = subprocess.Popen([*mem_command(), "-w", workspace, "ui", "--host", host, "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = server.stdout.readline().decode()
        assert line == f"mindlog ui: http://[::1]:{port}/asof\n", (line, server.stderr.read1())
        assert httpx.get(line.split()[-1], timeout=30).status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_init_inside_another_workspaces_pages_is_refused(written):
    """A workspace made in another's mind/ was taken by it for an untracked page for good (`mem adopt`
    exited 1 on every run); `mem checkout` refuses such a place for the same reason."""
    for inner in (written / "mind" / "inner", written / ".mem" / "x"):
        refused(run_mem("init", "-w", inner, "--agent", "inner"), f"{inner} is inside ", str(written))
        assert not inner.exists()
    assert run_mem("adopt", "-w", written).returncode == 0


@pytest.mark.parametrize("stored", [b'{"layers": 5}', b"garbage{", b"[]"])
def test_a_damaged_contract_copy_is_named_not_read_as_no_layers(tmp_path, stored):
    """Regression: `{"layers": 5}` read as a contract with no layers ("layer 'insights' is not in the contract
    (layers: )"), as if the hub had none."""
    run_mem("init", "-w", tmp_path / "ws", check=True)
    (tmp_path / "ws/.mem/contract.json").write_bytes(stored)
    line = refused(run_mem("entry", "add", "insights", "[FACT] x", "-w", tmp_path / "ws"), "contract.json is damaged")
    assert "the next `mem pull` fetches the hub's contract again" in line


def test_a_directory_or_file_in_a_views_way_is_named_and_replay_writes_it_once_moved(written):
    """Regression: a directory at mind/deploy.md, or a file at the folder of a layer's entries file, was a bare
    `[Errno 21] Is a directory` (or `[Errno 20]`) from status, replay, adopt and every write."""
    run_mem("layer", "add", "decisions", "memory/decisions.md", "-w", written, check=True)
    run_mem("entry", "add", "decisions", "[FACT] 2026-11-01: first", "-w", written, check=True)
    before = log_rows(written)
    page = written / "mind" / "deploy.md"
    page.unlink()
    page.mkdir()
    new_page = ("page", "write", "deploy", "-f", "-")
    for command in (["replay"], ["replay", "--check"], ["adopt"], new_page):
        line = refused(run_mem(*command, "-w", written, input=PAGE), str(page))
        assert line.endswith("is a directory where mindlog writes a file; move it away (`mem replay` then writes "
                             "the file)"), line
    said = run_mem("status", "-w", written, check=True).stdout.decode()  # said, not failed with (nc33a)
    assert f"in the way:      {page} is a directory where mindlog writes a file; move it away" in said, said
    page.rmdir()
    (written / "memory").rename(written / "moved")
    (written / "memory").write_text("not a folder")
    for command in (["replay"], ["entry", "add", "decisions", "[FACT] 2026-11-01: x"]):
        line = refused(run_mem(*command, "-w", written))
        assert line == (f"error: {written / 'memory'} is a file where mindlog needs a folder (for decisions.md); "
                        "move it away (`mem replay` then writes the files)"), line
    said = run_mem("status", "-w", written, check=True).stdout.decode()
    assert (f"in the way:      {written / 'memory'} is a file where mindlog needs a folder (for decisions.md); "
            "move it away (`mem replay` then writes the files)") in said, said
    assert log_rows(written) == before
    (written / "memory").unlink()
    (written / "moved").rename(written / "memory")
    run_mem("replay", "-w", written, check=True)
    assert page.is_file() and (written / "memory" / "decisions.md").is_file()


def test_a_checkout_that_cannot_be_written_is_one_line_naming_why(written, tmp_path):
    """Regression: a directory at a page's path, or a target the system refuses, was a bare `[Errno 21]` or
    `[Errno 2]` line."""
    (tmp_path / "out" / "mind" / "deploy.md").mkdir(parents=True)
    line = refused(run_mem("checkout", tmp_path / "out", "--force", "-w", written))
    assert line.endswith("/out/mind/deploy.md: a directory stands where the checkout writes a file; nothing written")
    # regression (nc13b): mind.md, mind/log.md and a temporary file had been written before the refusal
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == ["deploy.md", "mind"]
    line = refused(run_mem("checkout", "/proc/mindlog-checkout", "-w", written))
    assert line == ("error: /proc/mindlog-checkout: the checkout cannot be written there (No such file or "
                    "directory)"), line


def test_a_write_whose_new_file_something_stands_in_the_way_of_is_refused_before_it_is_recorded(written):
    """Regression (nc13b): with a directory at mind/y.md, `mem page write y` said `error:` and exit 1, yet had
    recorded the page (so did a rename onto it, and the first entry of a layer whose folder is a file): a user
    who tried again recorded it twice."""
    (written / "mind" / "y.md").mkdir()
    before = log_rows(written)
    line = refused(run_mem("page", "write", "y", "-f", "-", "-w", written, input=PAGE))
    assert line.endswith("/mind/y.md is a directory where mindlog writes a file; move it away (`mem replay` then "
                         "writes the file)"), line
    refused(run_mem("page", "rename", "deploy", "y", "-w", written), "mind/y.md is a directory")
    run_mem("layer", "add", "notes", "notes/e.md", "-w", written, check=True)
    (written / "notes").write_text("a file where the layer's folder goes")
    before = log_rows(written)
    refused(run_mem("entry", "add", "notes", "[FACT] 2026-11-01: x", "-w", written),
            f"{written / 'notes'} is a file where mindlog needs a folder (for e.md)")
    assert log_rows(written) == before


def test_init_inside_another_workspace_says_so(written):
    """Regression: a workspace made in a folder of another (not its pages) was made without a word, and every command
    run below it then used the new one."""
    inner = written / "notes" / "inner"
    made = run_mem("init", "-w", inner, "--agent", "inner")
    assert made.returncode == 0 and made.stdout.decode() == f"initialised {inner} for agent inner\n"
    assert made.stderr.decode() == (f"note: {inner} is inside the workspace {written} (agent alice): commands run in "
                                    "it or below it use the new one, and the outer one keeps none of its files\n")
    again = run_mem("init", "-w", inner)
    assert again.returncode == 0 and again.stderr == b""


def from_a_deleted_directory(tmp_path, *args) -> subprocess.CompletedProcess:
    """`mem ARGS` run from a directory (made in `tmp_path`) deleted under its shell, MEM_WORKSPACE unset."""
    gone = tmp_path / "gone"
    gone.mkdir()
    command = shlex.join([*mem_command(), *map(str, args)])
    env = {k: v for k, v in os.environ.items() if k != "MEM_WORKSPACE"}
    script = f"cd {shlex.quote(str(gone))} && rmdir {shlex.quote(str(gone))} && exec {command}"
    return subprocess.run(["sh", "-c", script], capture_output=True, env=env, timeout=120)


@pytest.mark.parametrize("args", [("status",), ("init",), ("-w", "ws", "status"), ("hub", "init", "--db", "hub.db"),
                                  ("demo",)])
def test_a_deleted_current_directory_is_one_line(tmp_path, args):
    """A shell whose cwd was deleted under it ran `mem` into a FileNotFoundError traceback (nc20b); a hub's --db or a
    workspace named relatively from there means nothing, so it is refused, and nothing is made."""
    assert "the current directory no longer exists" in refused(from_a_deleted_directory(tmp_path, *args))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [("checkout", "out"), ("export", "adf", "out.adf"), ("import", "adf", "in.adf")])
def test_a_relative_path_from_a_deleted_current_directory_says_why_it_names_nothing(written, tmp_path, args):
    """With an absolute --workspace, a relative path given from a deleted cwd failed as "[Errno 2] No such file or
    directory", SQLITE_CANTOPEN or "in.adf does not exist", with nothing saying why (nc21b)."""
    said = refused(from_a_deleted_directory(tmp_path, "-w", written, *args))
    assert said.endswith("(the current directory no longer exists: cd to one that does, or give absolute paths "
                         "(--workspace, --db))")
