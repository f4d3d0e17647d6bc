"""The CLI as a new user meets it: the demo, listings and their --json."""

import json

from conftest import PAGE, run_mem


def test_demo_runs_end_to_end_and_prints_what_the_real_commands_print(tmp_path):
    out = run_mem("demo", "--keep", tmp_path / "demo", check=True).stdout.decode()
    for expected in ("ingest mind/deploy-procedure.md (seq 1)", "update | Deploy procedure", "delete | Monitor agent",
                     "0 files written, 0 removed", "no differences", "[Loop Compacted, audited]",
                     "S10: in audit blob 1 (loop main)", "digests and chain intact",
                     "$ mem hub contract apply contract.toml --db hub.db\ncontract applied at hub position 1",
                     "\nmindlog hub on http://127.0.0.1:", "remote hub -> http://127.0.0.1:",
                     "$ mem -w research conflicts\ndrafts/launch: winner ", "$ mem -w research conflicts\nno conflicts",
                     "We launch on Tuesday at 10:00. Tell support first.",
                     "research had received hub events up to position"):
        assert expected in out, expected
    assert out.startswith("An event log keeps every change")
    for term in ("seq N is the event's position", "an audit blob holds", "the contract lists", "a hub position counts",
                 "the token is written once", "a remote is a hub", "both versions stay (two heads)"):
        assert out.count(term) == 1, term
    assert "can be read by other users" not in out  # its own token files, mode 644 (nc30b)
    assert out.index("(seq 1)") < out.index("seq N is the event's position")
    assert out.index("an audit blob holds") < out.index("$ mem audit list")
    assert out.index("contract applied at hub position") < out.index("a hub position counts")

    # The demo's commands, run again as real `mem` processes on the workspaces it kept, print the same
    # (what they say on stderr, like the instant an --at was understood as, first).
    demo = tmp_path / "demo"
    moment = out.split("$ mem show deploy-procedure --at ")[1].split()[0]
    for args in (["show", "deploy-procedure", "--at", moment], ["show", "mind.md", "--at", moment],
                 ["audit", "list"], ["loop", "show"], ["cite", "[S10]"], ["verify"]):
        shown = run_mem("-w", demo / "artemis", *args, check=True)
        typed = "$ mem " + " ".join(f"'{a}'" if "[" in a else a for a in args) + "\n"
        assert typed + shown.stderr.decode() + shown.stdout.decode() in out, args
    assert "as of " in out.split("$ mem show deploy-procedure --at ")[1].splitlines()[1]
    team = demo / "team"
    moment = out.split("$ mem -w research show content/drafts/launch.md --at ")[1].split()[0]
    for args in (["-w", "research", "show", "content/drafts/launch.md", "--at", moment],
                 ["-w", "research", "conflicts"], ["hub", "believed", "research", "--at", moment, "--db", "hub.db"]):
        shown = run_mem(*args, cwd=team, check=True)
        assert "$ mem " + " ".join(args) + "\n" + shown.stderr.decode() + shown.stdout.decode() in out, args


def test_listings_have_json(workspace, tmp_path):
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    w = ("-w", workspace)
    run_mem(*w, "page", "write", "deploy", "--file", page, check=True)
    run_mem(*w, "always", "add", "be brief", check=True)
    run_mem(*w, "loop", "append", "--role", "user", "--content-json", '[{"type": "text", "text": "hi"}]', "--model", "m1",
            "--tokens", '{"input": 3}', check=True)
    run_mem(*w, "file", "write", "notes/a.md", "--file", page, check=True)

    events = json.loads(run_mem(*w, "log", "--json", check=True).stdout)
    assert [e["body"]["kind"] for e in events] == ["page.ingest", "always.add", "loop.append", "file.write"]
    assert [e["seq"] for e in json.loads(run_mem(*w, "log", "--json", "-n", "2", check=True).stdout)] == [3, 4]
    only = json.loads(run_mem(*w, "log", "--json", "--kind", "always.add", check=True).stdout)
    assert [e["body"]["line"] for e in only] == ["be brief"]
    assert [e["seq"] for e in json.loads(run_mem(*w, "log", "--json", "--layer", "loop", check=True).stdout)] == [3]
    assert json.loads(run_mem(*w, "log", "--json", "--since", "now", check=True).stdout) == []
    assert run_mem(*w, "log", "--json", "--since", "2999-01-01").returncode == 1  # still to come: refused
    text = run_mem(*w, "log", check=True).stdout.decode().splitlines()
    assert len(text) == 4 and "page.ingest" in text[0] and "deploy" in text[0]

    assert json.loads(run_mem(*w, "page", "list", "--json", check=True).stdout) == [
        {"slug": "deploy", "title": "Deploy procedure", "hook": "staging first"}]
    assert json.loads(run_mem(*w, "always", "list", "--json", check=True).stdout) == ["be brief"]
    # as of a moment, as every other read (these two had no --at/--seq)
    assert json.loads(run_mem(*w, "page", "list", "--json", "--seq", "1", check=True).stdout)[0]["slug"] == "deploy"
    assert json.loads(run_mem(*w, "always", "list", "--json", "--seq", "1", check=True).stdout) == []
    assert json.loads(run_mem(*w, "always", "list", "--json", "--at", "now", check=True).stdout) == ["be brief"]
    loop = json.loads(run_mem(*w, "loop", "show", "--json", check=True).stdout)
    assert loop[0]["seq"] == 3 and loop[0]["content"] == [{"text": "hi", "type": "text"}]
    files = {f["path"] for f in json.loads(run_mem(*w, "file", "list", "--json", check=True).stdout)}
    assert files == {"mind.md", "mind/log.md", "mind/deploy.md", "notes/a.md"}
    believed = json.loads(run_mem(*w, "believed", "--seq", "2", "--json", check=True).stdout)
    assert believed["seq"] == 2 and "- be brief" in believed["mind"] and believed["loop"] == []
    assert json.loads(run_mem(*w, "audit", "list", "--json", check=True).stdout) == []
    assert json.loads(run_mem(*w, "verify", "--json", check=True).stdout)["ok"] is True
    run_mem(*w, "config", "set", "audit.files", "true", check=True)
    run_mem(*w, "file", "delete", "notes/a.md", check=True)  # audited: one entry, said as one
    assert " 1 entry " in run_mem(*w, "audit", "list", check=True).stdout.decode()
    assert [r["entry_count"] for r in json.loads(run_mem(*w, "audit", "list", "--json", check=True).stdout)] == [1]


def test_an_empty_listing_says_so_and_its_json_is_an_empty_list(workspace, tmp_path):
    """Regression: a listing with nothing to list printed nothing at all, as if the command had not run (or had
    run somewhere else): `mem page list` in a new workspace, `mem log --kind` matching nothing. Said on stderr: a
    script reading the lines takes none for a row (nc22a)."""
    w = ("-w", workspace)
    hub = tmp_path / "hub.db"
    run_mem("hub", "init", "--db", hub, check=True)
    for args, said in ((("page", "list"), "no pages"), (("always", "list"), "no Always lines"),
                       (("loop", "show"), "no rows in loop main"), (("message", "list"), "no messages in the inbox"),
                       (("audit", "list"), "no audit rows"), (("log",), "no events"),
                       (("log", "--kind", "page.ingest"), "no events match"),
                       (("layer", "list"), "no layers: a hub's layers come with `mem pull`"),
                       (("remote", "list"), "no remotes: `mem remote add NAME URL` adds one")):
        listed = run_mem(*w, *args, check=True)
        said_there = listed.stderr.decode()
        assert listed.stdout == b"" and said_there.startswith(said) and said_there.count("\n") == 1, (args, said_there)
        assert json.loads(run_mem(*w, *args, "--json", check=True).stdout) == [], args
    run_mem(*w, "layer", "add", "notes", "memory/notes.md", check=True)
    assert run_mem(*w, "entry", "list", "notes", check=True).stderr == b"no entries in layer notes\n"
    assert run_mem("hub", "agent", "list", "--db", hub, check=True).stderr.startswith(b"no agents: `mem hub agent add")
    assert run_mem(*w, "always", "add", "be brief", check=True)
    assert run_mem(*w, "always", "list", check=True).stdout == b"  1  be brief\n"  # something to list: no such line


def test_json_is_output_everywhere_and_input_has_its_own_name(workspace, tmp_path):
    """Regression: `--json` printed JSON in every command but read it in `mem loop append` (the content) and
    `mem message receive/send` (the message file). Input now has its own name (`--content-json`, `--file`);
    the old spelling is refused without touching the log, and `mem history` (a listing only the MCP tool
    and the web UI had) lists a file's versions, with `--json`."""
    from conftest import log_rows

    w = ("-w", workspace)
    message = tmp_path / "m.json"
    message.write_text('{"from": "ops", "content": "deploy window moved"}')
    for old in (("loop", "append", "--role", "user", "--json", '[{"type": "text", "text": "hi"}]'),
                ("message", "receive", "--json", message), ("message", "send", "--json", message)):
        refused = run_mem(*w, *old)
        assert refused.returncode == 2 and "No such option: --json" in refused.stderr.decode(), old
    assert log_rows(workspace) == []
    assert run_mem(*w, "loop", "append", "--role", "user", "--content-json", '[{"type": "text", "text": "hi"}]',
                   check=True).stdout.decode() == "[S1] user appended to loop main\n"
    assert run_mem(*w, "message", "receive", "--file", message, check=True).stdout.decode() == \
        "received message (seq 2)\n"
    assert run_mem(*w, "message", "send", "--file", "-", input=b'{"from": "artemis", "to": "ops", "content": "noted"}',
                   check=True).stdout.decode() == "sent message (seq 3)\n"

    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem(*w, "page", "write", "deploy", "--file", page, check=True)
    page.write_bytes(PAGE.replace(b"Staging first.", b"Staging first, always."))
    run_mem(*w, "page", "write", "deploy", "--file", page, check=True)
    run_mem(*w, "page", "rename", "deploy", "deploy-procedure", check=True)
    versions = json.loads(run_mem(*w, "history", "deploy-procedure", "--json", check=True).stdout)
    assert [(v["path"], v["seq"], v["kind"]) for v in versions] == [
        ("mind/deploy.md", 4, "page.ingest"), ("mind/deploy.md", 5, "page.update"),
        ("mind/deploy-procedure.md", 6, "page.rename")]
    lines = run_mem(*w, "history", "mind/deploy.md", "--seq", "5", check=True).stdout.decode().splitlines()
    assert [line.split()[0] for line in lines] == ["4", "5"] and lines[1].endswith("page.update    mind/deploy.md")
    assert run_mem(*w, "history", "nosuch").stderr.decode() == "error: mind/nosuch.md never existed\n"


def test_every_listing_command_has_json_output_and_no_json_option_reads_input():
    """Every command that lists (`list`, `show` of a table, `log`, `history`, `search`, ...) has a `--json` flag,
    and `--json` is a flag everywhere: it never takes a value."""
    import typer._click as click

    from cli.app import register_commands, root_command

    register_commands()
    root = root_command()
    context = click.Context(root)
    commands = {}

    def walk(command, path):
        if hasattr(command, "list_commands"):
            for name in command.list_commands(context):
                walk(command.get_command(context, name), [*path, name])
        else:
            commands[" ".join(path)] = {opt: param for param in command.params for opt in param.opts}

    for name in root.list_commands(context):
        walk(root.get_command(context, name), [name])
    listings = [name for name in commands if name.split()[-1] in ("list", "show", "log", "history", "search",
                                                                    "conflicts", "status", "believed")]
    assert len(listings) >= 17 and "show" in listings and "history" in listings
    missing = [name for name in listings if name != "show" and "--json" not in commands[name]]
    assert missing == []
    takes_a_value = [name for name, options in commands.items() if "--json" in options
                     and not options["--json"].is_flag]
    assert takes_a_value == []


def test_workspace_option_before_or_after_the_command(tmp_path):
    target = tmp_path / "elsewhere"
    assert run_mem("init", "--workspace", target, "--agent", "bob", cwd=tmp_path, check=True).returncode == 0
    assert (target / ".mem" / "log.db").exists() and (target / "mind.md").exists()
    after = json.loads(run_mem("status", "-w", target, "--json", cwd=tmp_path, check=True).stdout)
    before = json.loads(run_mem("-w", target, "status", "--json", cwd=tmp_path, check=True).stdout)
    assert after == before and after["agent"] == "bob"
    inside = json.loads(run_mem("status", "--json", cwd=target / "mind", check=True).stdout)
    assert inside["workspace"] == str(target)


def test_a_sent_message_is_from_this_agent_unless_it_says(workspace):
    """Regression: `mem message send` of {"to": "ops", "content": "ack"} was refused: "the message needs 'from'
    (strings)", though an outgoing message is this agent's own."""
    from projections.memory import Memory

    run_mem("-w", workspace, "message", "send", "--file", "-", input=b'{"to": "ops", "content": "ack"}', check=True)
    refused = run_mem("-w", workspace, "message", "send", "--file", "-", input=b'{"to": "", "content": "ack"}')
    assert refused.stderr.decode() == "error: the message needs 'to': a non-empty string\n"
    with Memory.open(workspace) as mem:
        assert mem.event(1).body.message["from"] == mem.config.agent and mem.head() == 1


def test_status_lists_twenty_paths_of_a_kind_and_says_how_many_more_and_what_to_do(workspace, tmp_path):
    """Regression (nc24b): with ten thousand pages deleted by hand `mem status` printed ten thousand `missing:` lines,
    and none said what would become of them. It prints twenty of each kind, then how many more (--json has all),
    and what `mem adopt` and `mem replay` do with pages deleted by hand."""
    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    for number in range(23):
        run_mem("-w", workspace, "page", "write", f"p{number:02}", "--file", page, check=True)
    for deleted in (workspace / "mind").glob("p*.md"):
        deleted.unlink()
    lines = run_mem("-w", workspace, "status", check=True).stdout.decode().splitlines()
    missing = [line for line in lines if line.startswith("missing:")]
    assert len(missing) == 21 and missing[0] == "missing:         mind/p00.md"
    assert missing[-1] == "missing:         ... and 3 more (`mem status --json` lists them all)"
    assert lines[lines.index(missing[-1]) + 1] == (
        "                 (deleted by hand: `mem adopt` records a page's deletion; `mem show PATH > PATH` puts a file "
        "back, `mem replay` every one)")
    assert len(json.loads(run_mem("-w", workspace, "status", "--json", check=True).stdout)["missing"]) == 23


def test_status_owes_nothing_for_a_page_renamed_away_that_a_killed_replay_left_due(workspace, tmp_path):
    """Regression (nc24b): after a `mem replay` killed while it wrote files, `mem status` listed `not yet written:
    mind/oncall.md`, a page renamed away long before: its path was still marked due, though neither the disk nor the
    views hold it. Such a path owes nothing; a page due and absent from disk is still owed."""
    from projections.memory import Memory

    page = tmp_path / "p.md"
    page.write_bytes(PAGE)
    run_mem("-w", workspace, "page", "write", "oncall", "--file", page, check=True)
    run_mem("-w", workspace, "page", "rename", "oncall", "oncall-roster", check=True)
    (workspace / "mind/oncall-roster.md").unlink()
    with Memory.open(workspace) as mem:
        mem.views.written.mark_dirty(["mind/oncall.md", "mind/oncall-roster.md"])
    status = json.loads(run_mem("-w", workspace, "status", "--json", check=True).stdout)
    assert status["pending"] == ["mind/oncall-roster.md"] and status["missing"] == []
