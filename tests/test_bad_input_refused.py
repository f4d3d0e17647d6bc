"""Bad input a newcomer typed that used to read as an empty answer (or change something): each one is
refused with one `error:` line and a non-zero exit, and the log stays as it was."""

import datetime as dt
import json
import sqlite3

from conftest import PAGE, log_rows, run_mem
from eventstore.errors import MemError

LAYER_UNKNOWN = "layer 'nosuch' is not in the contract"


def test_unknown_names_past_and_future_moments_are_refused(workspace):
    def mem(*args, **kw):
        return run_mem("-w", workspace, *args, **kw)

    mem("page", "write", "deploy", "--file", "-", input=PAGE, check=True)
    mem("always", "add", "staging first", check=True)
    mem("loop", "append", "--role", "user", "--text", "hello", check=True)
    mem("layer", "add", "notes", "notes.md", check=True)
    mem("loop", "append", "--role", "user", "--text", "aside", "--loop", "side", check=True)
    rows = log_rows(workspace)
    head = len(rows)
    future = (dt.datetime.now() + dt.timedelta(hours=2)).isoformat(timespec="minutes")
    refusals = {
        ("log", "--layer", "nosuch"): LAYER_UNKNOWN,
        ("search", "staging", "--layer", "nosuch"): LAYER_UNKNOWN,
        ("redact", "--match", "staging", "--layer", "nosuch", "--reason", "r"): LAYER_UNKNOWN,
        ("entry", "list", "nosuch"): "there is no layer 'nosuch' declared here (`mem layer list`) (layers: notes)",
        ("page", "list", "--layer", "drafts", "--seq", "1"): "there is no layer 'drafts' declared here",
        ("loop", "show", "--loop", "nosuch"): "there is no loop 'nosuch'",
        ("loop", "show", "--loop", "side", "--seq", "4"):  # regression (nc14b): an empty loop, exit 0
            "loop 'side' did not exist then: its first message is seq 5, after seq 4",
        ("loop", "clear", "--loop", "nosuch"): "there is no loop 'nosuch'",
        ("loop", "clear", "5", "9"): "rows[5:9] selects none, so there is nothing to clear",
        ("log", "--kind", "nosuch"): "there is no event kind 'nosuch'",
        ("log", "--since", future): "is in the future",
        ("file", "write", ".mem/config.json", "--file", "-"): ".mem/config.json belongs to mindlog itself",
        ("file", "write", ".MEM/config.json", "--file", "-"): ".MEM/config.json belongs to mindlog itself",
        ("file", "write", "Mind.md", "--file", "-"): "Mind.md belongs to the mind wiki",
        ("file", "write", ".git/hooks/pre-commit", "--file", "-"): "is inside a .git directory",
        ("file", "write", "x:y.txt", "--file", "-"):  # said relative (nc32a): it is, but for a Windows drive
            "file path 'x:y.txt' must be a relative path like 'notes/today.md' (it begins as a Windows drive does)",
        ("diff", "nosuch.md", "--from", "seq:1", "--to", "seq:2"): "nosuch.md exists at neither moment",
        ("config", "set", "nosuch.key", "1"): "there is no config key 'nosuch.key'",
        ("config", "set", "audit", "false"): "audit is a group of keys (files, inbox, loop, outbox)",
        ("config", "set", "audit", '{"loop": 1}'): "audit.loop is a switch",
        ("config", "set", "lint", '{"nosuch": 1}'): "there is no config key lint.nosuch",
        ("config", "set", "lint.mind_max_lines", "9" * 30): "a number too large to record",
        ("loop", "append", "--role", "user", "--text", "x", "--tokens", '{"in": 1%s}' % ("0" * 25)):
            "a number too large to record",
        ("config", "set", "layers.x", '"\\ud800"'): "not valid Unicode ('\\ud800', a lone surrogate)",
        ("loop", "append", "--role", "user", "--content-json", '[{"type": "text", "text": "\\udfff"}]'): "a lone surrogate",
        ("show", "mind.md", "--seq", "0"): "seq 0 is before the first event",
        ("show", ""): "give a file: mind.md, mind/log.md",  # was `mind/.md does not exist`
        ("show", "mind/deploy.md\nX", "--seq", "1"): "mind/deploy.md\\nX did not exist then",  # two lines (nc29a)
        ("history", "a\rb\u2028c"): "mind/a\\rb\\u2028c.md never existed",
        ("show", "mind.md", "--seq", "-1"): "seq -1 is before the first event",
        ("show", "mind.md", "--at", "2030-01-01"): "is in the future",
        ("search", "staging", "--at", future): "is in the future",
        ("log", "-n", "-3"): "-n must be 0 or more",
        ("cite", "adf-file://nosuch.md"): "nosuch.md: no such file",
        ("replay", "--to", str(head + 100)): f"seq {head + 100} is past the log head ({head})",
        ("replay", "--to", "-5"): "seq -5 is before the first event",
        ("replay", "--check", "--to", "2"): "--check compares the views as they are with a rebuild",
        ("loop", "compact", "--summary-file", "-", "--preserve", "99"): "nothing to compact",
    }
    for args, why in refusals.items():
        refused = mem(*args, input=b"a summary")
        err = refused.stderr.decode()
        assert refused.returncode != 0 and err.startswith("error: ") and why in err, (args, refused)
        assert len(err.strip().splitlines()) == 1 and not refused.stdout.strip(), (args, refused)
    assert log_rows(workspace) == rows
    missing = mem("audit", "read", "99999")
    assert missing.returncode == 1 and b"missing" in missing.stdout
    # the names that exist still answer
    assert b"staging first" in mem("log", "--layer", "mind", check=True).stdout
    mem("entry", "list", "notes", check=True)
    mem("loop", "show", "--loop", "main", check=True)
    assert mem("replay", "--check", check=True).returncode == 0
    assert mem("status", check=True).returncode == 0


def test_status_refuses_views_ahead_of_a_short_log(workspace):
    run_mem("-w", workspace, "always", "add", "one", check=True)
    run_mem("-w", workspace, "always", "add", "two", check=True)
    db = sqlite3.connect(workspace / ".mem" / "log.db")
    with db:
        db.execute("DELETE FROM events WHERE seq = (SELECT MAX(seq) FROM events)")
    db.close()
    for args in (["status"], ["status", "--json"]):
        status = run_mem("-w", workspace, *args)
        assert status.returncode == 1, status
        assert b"error: the views are at seq" in status.stderr and b"run `mem verify`" in status.stderr



def test_no_write_lands_in_a_log_emptied_or_removed_under_its_views(workspace):
    """A log emptied or deleted after its views folded it: a write would start again at seq 1 beside
    views that say 12 (and that never show it). Every write is refused until `mem verify`/`mem replay`."""
    for text in ("one", "two"):
        run_mem("-w", workspace, "always", "add", text, check=True)
    log = workspace / ".mem" / "log.db"
    for part in ("-wal", "-shm"):
        (workspace / ".mem" / f"log.db{part}").unlink(missing_ok=True)
    for emptied in (True, False):  # emptied, then removed
        if emptied:
            log.write_bytes(b"")
        for args in (["always", "add", "three"], ["loop", "append", "--role", "user", "--text", "hi"],
                     ["page", "write", "deploy", "--file", "-"]):
            result = run_mem("-w", workspace, *args, input=PAGE)
            err = result.stderr.decode()
            assert result.returncode == 1 and err.startswith("error: the views are at seq 2, past the log head 0"), err
            assert len(err.strip().splitlines()) == 1
        assert log_rows(workspace) == []
        log.unlink(missing_ok=True)


def test_hub_contract_before_the_hub_or_in_the_future_is_refused(tmp_path):
    run_mem("hub", "init", cwd=tmp_path, check=True)
    for at, why in (("1 min ago", b"before this hub had a contract"), ("2030-01-01", b"is in the future")):
        refused = run_mem("hub", "contract", "show", "--at", at, cwd=tmp_path)
        assert refused.returncode == 1 and refused.stderr.startswith(b"error: ") and why in refused.stderr, refused
        assert not refused.stdout


def test_hub_believed_before_the_hub_had_a_contract_is_refused(tmp_path):
    (tmp_path / "contract.toml").write_text('[layers.notes]\npath = "notes.md"\nformat = "entries"\n'
                                            'producers = ["*"]\nconsumers = ["*"]\n')
    for args in (["hub", "init"], ["hub", "contract", "apply", "contract.toml"], ["hub", "agent", "add", "ana"]):
        run_mem(*args, cwd=tmp_path, check=True)
    refused = run_mem("hub", "believed", "ana", "--at", "2001-01-01", cwd=tmp_path)
    assert refused.returncode == 1 and not refused.stdout, refused
    [line] = refused.stderr.decode().splitlines()
    assert line.startswith("error: '2001-01-01' (") and line.endswith(") is before this hub had a contract"), line
    now = run_mem("hub", "believed", "ana", "--at", "now", cwd=tmp_path, check=True)
    assert b"ana had received hub events up to position 0" in now.stdout


def test_loop_clear_takes_negative_slice_bounds_as_its_help_promises(workspace):
    """`mem loop clear -1` (rows[-1:], a Python slice) was `No such option: -1`: it needed `--`."""
    def mem(*args, **kw):
        return run_mem("-w", workspace, *args, **kw)

    for text in ["one", "two", "three", "four"]:
        mem("loop", "append", "--role", "user", "--text", text, check=True)

    def texts():
        return [m["content"][0]["text"] for m in json.loads(mem("loop", "show", "--json", check=True).stdout)]

    assert mem("loop", "clear", "-1", check=True).stdout.decode().startswith("cleared loop main[-1:] ")
    assert texts() == ["one", "two", "three"]
    assert mem("loop", "clear", "-3", "-2", "--loop", "main", check=True).stdout.decode().startswith(
        "cleared loop main[-3:-2] ")
    assert texts() == ["two", "three"]
    rows = log_rows(workspace)
    refused = mem("loop", "clear", "-x")
    assert refused.returncode == 2 and refused.stderr.decode().count("\n") == 1 and "'-x'" in refused.stderr.decode()
    assert mem("loop", "clear", "-9", "-5").stderr.decode() == \
        "error: loop 'main' has 2 messages; rows[-9:-5] selects none, so there is nothing to clear\n"
    assert log_rows(workspace) == rows


def test_config_set_refuses_keys_and_values_mindlog_would_not_read(workspace):
    """`mem config set layers.x 1` was accepted and then ignored (local_layers.declared skips what it cannot
    read), as were a switch that is no boolean under context.audit and a group that is no object."""
    def mem(*args, **kw):
        return run_mem("-w", workspace, *args, **kw)

    rows = log_rows(workspace)
    refusals = {
        ("layers.x", "1"): 'layers.x declares a local layer: give {"path": PATH, "format": "entries" or "pages"}',
        ("layers.x", '{"path": "x.md", "size": 3}'): "layers.x declares a local layer",
        ("layers.x.path", "x.md"): "there is no config key 'layers.x.path': a local layer is set whole",
        ("layers.x", '{"path": "../x.md"}'): "layer path '../x.md': the path must stay inside the workspace",
        ("context.audit.files", "abc"): "context.audit.files is a switch: give true or false, not 'abc'",
        ("audit", "5"): "audit is a group of keys (files, inbox, loop, outbox)",
        ("audit", '{"nope": true}'): "there is no config key audit.nope (the keys of audit: files, inbox,",
        ("lint", '{"mind_max_lines": 0}'): "lint.mind_max_lines is a budget",
    }
    for args, why in refusals.items():
        refused = mem("config", "set", *args)
        err = refused.stderr.decode()
        assert refused.returncode == 1 and err.startswith("error: ") and why in err, (args, err)
        assert len(err.splitlines()) == 1 and not refused.stdout, (args, refused)
    assert log_rows(workspace) == rows
    mem("config", "set", "layers.decisions", '{"path": "memory/decisions.md"}', check=True)
    mem("config", "set", "audit", '{"files": true}', check=True)
    mem("config", "set", "context.audit.loop", "false", check=True)
    mem("entry", "add", "decisions", "[DECISION] ship on fridays", check=True)
    assert "ship on fridays" in (workspace / "memory/decisions.md").read_text()
    config = json.loads(mem("config", "show", "--json", check=True).stdout)
    assert config["layers"]["decisions"] == {"path": "memory/decisions.md", "format": "entries"}
    assert config["audit"]["files"] is True and config["context"]["audit"]["loop"] is False


def test_wordings_a_newcomer_misread_say_what_to_do(workspace, tmp_path):
    """Each of these was refused in words that sent a newcomer the wrong way (found by a newcomer run): an Always line
    `- [x] done` was `No such option: -`; `redact --match ''` asked for --match; `file delete mind/deploy.md` pointed at
    `page write`; `cite adf-file://` said `: no such file`; a 15 MB message was `event body is 15252975 bytes`;
    `--content-json '[]'` said its text was empty. The log stays as it was."""
    def mem(*args, **kw):
        return run_mem("-w", workspace, *args, **kw)

    mem("page", "write", "deploy", "--file", "-", input=PAGE, check=True)
    huge = tmp_path / "huge.txt"
    huge.write_text("x" * (9 * 2**20))
    bom = tmp_path / "bom.md"
    bom.write_bytes(b"\xef\xbb\xbf" + PAGE)
    before = log_rows(workspace)
    said = {
        ("always", "add", "- [x] done"): "No such option: -: a value that starts with '-' goes after `--` (`mem always "
                                         "add -- '- [x] done'`, `mem config set lint.mind_max_lines -- -1`)",
        ("config", "set", "lint.mind_max_lines", "-1"): "No such option: -1: a value that starts with '-' goes after",
        ("redact", "--match", "", "--reason", "r"): "--match needs a pattern (a regular expression)",
        ("file", "delete", "mind/deploy.md"): "mind/deploy.md belongs to the mind wiki: a page is written, deleted or "
                                              "renamed with `mem page write|delete|rename`",
        ("cite", "adf-file://"): "'adf-file://' names no file: adf-file://PATH, like adf-file://mind/deploy.md",
        ("loop", "append", "--role", "user", "--file", huge): "the input is more than 8 MiB; an event (a message, a "
                                                             "page, a file) may be at most 8 MiB",
        ("loop", "append", "--role", "user", "--content-json", "[]"): "a loop message needs some content: its list of "
                                                                      "blocks is empty",
        ("page", "write", "bom", "--file", bom): "the page starts with a byte order mark (U+FEFF, as some editors save "
                                                 "UTF-8) before its '---': save it as UTF-8 without one",
    }
    for args, expected in said.items():
        refused = mem(*args)
        line = refused.stderr.decode()
        assert refused.returncode in (1, 2) and line.count("\n") == 1 and f"error: {expected}" in line, (args, line)
    assert mem("always", "add", "--", "- [x] done", check=True).returncode == 0
    assert len(log_rows(workspace)) == len(before) + 1


def test_an_agent_name_no_contract_could_name_is_refused_by_init_and_by_the_hub(tmp_path):
    """Regression: `mem init --agent ünï` and `mem hub agent add ünï` took a name a contract refuses (its producers and
    consumers are ASCII names), so the agent could be reached only through `*`; and `MAIN` was a second agent beside
    `main`. Each is refused in one line; nothing is made or registered."""
    hub = tmp_path / "hub.db"
    run_mem("hub", "init", "--db", hub, check=True)
    run_mem("hub", "agent", "add", "main", "--db", hub, check=True)
    for name in ("ünï", "_under", "a b", "a.b", "x" * 65):
        made = run_mem("init", "-w", tmp_path / "ws", "--agent", name)
        assert made.returncode == 1 and made.stderr.decode().count("\n") == 1, made.stderr
        assert "must be 1 to 64 ASCII letters, digits, '-' or '_'" in made.stderr.decode()
        assert not (tmp_path / "ws" / ".mem").exists()
        added = run_mem("hub", "agent", "add", name, "--db", hub)
        assert added.returncode == 1 and "must be 1 to 64 ASCII letters" in added.stderr.decode(), added.stderr
    added = run_mem("hub", "agent", "add", "MAIN", "--db", hub)
    assert added.returncode == 1 and "differs only in case from the agent 'main'" in added.stderr.decode()
    listed = json.loads(run_mem("hub", "agent", "list", "--db", hub, "--json", check=True).stdout)
    assert [agent["name"] for agent in listed] == ["main"]
    run_mem("init", "-w", tmp_path / "ws", "--agent", "Ana-2_b", check=True)


def test_a_path_is_never_a_file_and_a_folder_at_once(workspace):
    """Regression: `notes/a.md` and `notes/a.md/b.md` were both written (and `mind.md/x`, under the index): no
    filesystem holds both, and the memory tool then took `notes/a.md` for a folder (not viewable, editable or
    deletable). The CLI and the memory tool alike refuse, the log untouched."""
    from projections.memory import Memory
    from projections.memory_tool import MemoryTool

    def mem(*args, **kw):
        return run_mem("-w", workspace, *args, **kw)

    mem("file", "write", "notes/a.md", "--file", "-", input=b"a\n", check=True)
    rows = log_rows(workspace)
    for path, why in (("notes/a.md/b.md", "notes/a.md is a file, and notes/a.md/b.md would make it a folder too"),
                      ("notes", "it is a folder, holding notes/a.md"),
                      ("mind.md/x", "mind.md/x belongs to the mind wiki")):
        refused = mem("file", "write", path, "--file", "-", input=b"x\n")
        err = refused.stderr.decode()
        assert refused.returncode == 1 and err.startswith("error: ") and why in err, (path, err)
        assert len(err.strip().splitlines()) == 1
    with Memory.open(workspace) as memory:
        tool = MemoryTool(memory)
        for path, why in (("/memories/notes/a.md/b.md", "notes/a.md is a file"),
                          ("/memories/notes", "File /memories/notes already exists")):  # the folder it holds
            try:
                tool.create(path, "x")
            except MemError as exc:
                assert why in str(exc), str(exc)
            else:
                raise AssertionError(f"{path} was created")
    assert log_rows(workspace) == rows
    assert mem("show", "notes/a.md", check=True).stdout == b"a\n"
    mem("file", "delete", "notes/a.md", check=True)
    mem("file", "write", "notes/a.md/b.md", "--file", "-", input=b"b\n", check=True)  # once the file is gone


def test_two_files_whose_names_differ_only_in_case_or_normalization_are_refused(workspace):
    """Regression: `notes/Readme.md` beside `notes/readme.md`, and `café.md` in NFC beside NFD, were two files:
    one on macOS and Windows (a checkout or export there keeps one), two a reader cannot tell apart anywhere."""
    def mem(*args, **kw):
        return run_mem("-w", workspace, *args, **kw)

    nfc, nfd = "notes/caf\u00e9.md", "notes/cafe\u0301.md"
    mem("file", "write", "notes/readme.md", "--file", "-", input=b"a\n", check=True)
    mem("file", "write", nfc, "--file", "-", input=b"b\n", check=True)
    rows = log_rows(workspace)
    for given, path, twin in (("notes/Readme.md", "notes/Readme.md", "notes/readme.md"),
                              ("NOTES/README.MD", "NOTES/README.MD", "notes/readme.md"),
                              (nfd, ascii(nfd), ascii(nfc))):  # regression (nc13b): the two printed alike
        refused = mem("file", "write", given, "--file", "-", input=b"x\n")
        err = refused.stderr.decode()
        assert refused.returncode == 1 and err == (f"error: {path} cannot be written: {twin} is there, the same name "
                                                   "but for letter case or Unicode normalization (write to it, or "
                                                   "delete it first)\n"), err
    assert log_rows(workspace) == rows
    mem("file", "write", "notes/readme.md", "--file", "-", input=b"again\n", check=True)  # itself: a new version
    # regression (nc13b): the file written in NFC "did not exist" when named in NFD, as macOS names it
    assert mem("show", nfd, check=True).stdout == b"b\n" and mem("show", "notes/README.md", check=True).stdout == b"again\n"


def test_what_a_newcomer_met_without_a_next_step_says_one(workspace, tmp_path):
    """Each of these left a newcomer without the next step, or said something untrue (nc22a, nc22b): `mem export adf -`
    wrote a file named `-`; a new hub's `contract show` printed `# hub position 0` alone; a directory as --db was sent
    to `mem hub init`, which failed; a layer format of `entry` did not name `entries`; `mem log -n 0` said "no events"
    of a log that holds some; `--at 9999-12-31` was "too far from today for a calendar (years 1970 to 9999)"; a new
    workspace's files were dated 1970 (in `--json` too); a remote's URL with a path, and a revoked token, were a bare
    refusal; the hub's own URL was a 404."""
    import httpx

    from hubserver import mem_serve

    w = ("-w", workspace)
    listed = run_mem(*w, "file", "list", check=True).stdout.decode().splitlines()
    assert listed[0].endswith("no_delete before any event")
    as_json = json.loads(run_mem(*w, "file", "list", "--json", check=True).stdout)
    assert {f["path"]: f["updated_at"] for f in as_json} == {"mind.md": None, "mind/log.md": None}
    run_mem(*w, "always", "add", "be brief", check=True)
    before = log_rows(workspace)
    refused = run_mem(*w, "export", "adf", "-", cwd=tmp_path)
    assert refused.stderr.decode() == ("error: an ADF file is an SQLite database, which cannot be written to stdout: "
                                       "give a file name\n") and not (tmp_path / "-").exists()
    assert run_mem(*w, "log", "-n", "0", check=True).stderr == b"no events: -n 0 asks for none\n"
    assert run_mem(*w, "show", "mind.md", "--at", "9999-12-31").stderr == b"error: '9999-12-31' is in the future\n"
    assert log_rows(workspace) == before
    hub = tmp_path / "hub.db"
    run_mem("hub", "init", "--db", hub, check=True)
    shown = run_mem("hub", "contract", "show", "--db", hub, check=True)
    assert shown.stderr == b"no contract yet: `mem hub contract apply FILE` applies one\n"
    assert run_mem("hub", "agent", "list", "--db", tmp_path).stderr.decode() == (
        f"error: {tmp_path} is a directory: a hub database is a file, such as {tmp_path / 'hub.db'}\n")
    (tmp_path / "c.toml").write_text('[layers.x]\npath = "memory/x.md"\nformat = "entry"\nproducers = ["*"]\n'
                                     'consumers = ["*"]\n')
    assert run_mem("hub", "contract", "apply", tmp_path / "c.toml", "--db", hub).stderr.decode() == (
        "error: the contract is not valid: layers.x.format: Invalid enum value 'entry' (a layer's format is 'pages' or "
        "'entries')\n")
    token = tmp_path / "alice.token"
    token.write_text(run_mem("hub", "agent", "add", "alice", "--db", hub, check=True).stdout.decode().split()[-1])
    with mem_serve(hub) as url:
        assert httpx.get(url + "/").headers["location"] == "/ui/"
        with_path = run_mem(*w, "remote", "add", "origin", url + "/v1", "--token-file", token).stderr.decode()
        assert with_path == (f"error: remote origin at {url}/v1 has no /v1/contract: a hub's URL is the one "
                             "`mem serve` prints, with no path\n"), with_path
        run_mem(*w, "remote", "add", "origin", url, "--token-file", token, check=True)
        run_mem("hub", "agent", "revoke", "alice", "--db", hub, check=True)
        revoked = run_mem(*w, "push").stderr.decode()
        assert revoked.endswith("the token is unknown or was revoked: ask the hub's administrator for a new token "
                                f"(`mem hub agent add`), then `mem remote add origin {url} --token-file FILE` again\n")
