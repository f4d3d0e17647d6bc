"""`mem mcp` driven by the MCP SDK's own client: over stdio in a subprocess, and over streamable HTTP."""

import json
import os
import select
import socket
import subprocess
import time
from importlib.metadata import version

import anyio
import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from cli.mcp_server import parse_http
from cli.output import TOO_LARGE
from conftest import PAGE, damage_table, log_rows, mem_command, run_mem
from eventstore.layers import Contract, ContractLayer
from projections.memory import Memory
from sync.server import free_port

MEMORY_TOOL = {"view", "create", "str_replace", "insert", "delete", "rename"}
MINDLOG_TOOLS = {"memory", "show", "history", "diff", "believed", "cite", "log", "entry_add", "loop_append", "sync",
                 "page_release", "adopt", "loop_show", "loop_compact", "loop_clear", "audit", "redact", "conflicts",
                 "resolve"}
EDITED = PAGE.replace(b"Staging first.", b"Staging first, always.")


def server_env() -> dict[str, str]:
    return {key: os.environ[key] for key in ("PYTHONPATH", "PATH") if key in os.environ}


def run_stdio(workspace, body):
    """Runs `body(session)` against `mem mcp --workspace W` started by the SDK's stdio client."""
    command = mem_command()
    params = StdioServerParameters(command=command[0], args=[*command[1:], "mcp", "--workspace", str(workspace)],
                                   env=server_env())

    async def main():
        with anyio.fail_after(60):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)

    return anyio.run(main)


async def call(session, tool, **arguments):
    result = await session.call_tool(tool, arguments)
    return result.is_error, result.content[0].text


def test_tools_and_a_session_over_stdio(workspace):
    heads = []

    async def session_body(session):
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert MEMORY_TOOL | MINDLOG_TOOLS <= names
        assert (session.server_info.name, session.server_info.version) == ("mindlog", version("mindlog"))
        steps = [("create", {"path": "/memories/mind/deploy.md", "file_text": PAGE.decode()}),
                 ("str_replace", {"path": "/memories/mind/deploy.md", "old_str": "Staging first.",
                                  "new_str": "Staging first, always."}),
                 ("insert", {"path": "/memories/mind.md", "insert_line": 4, "insert_text": "- Cite a seq."}),
                 ("rename", {"old_path": "/memories/mind/deploy.md", "new_path": "/memories/mind/deploy-procedure.md"}),
                 ("create", {"path": "/memories/notes/today.md", "file_text": "hello\n"}),
                 ("delete", {"path": "/memories/notes/today.md"})]
        for tool, arguments in steps:
            error, text = await call(session, tool, **arguments)
            assert not error, text
            heads.append(len(log_rows(workspace)))
            if tool == "create" and arguments["path"].startswith("/memories/mind/"):
                await anyio.sleep(0.5)  # the server writes the files just after answering
                assert (workspace / "mind/deploy.md").read_bytes() == PAGE
        error, text = await call(session, "view", path="/memories/mind/deploy-procedure.md")
        assert text.splitlines()[7] == "     7\tStaging first, always."
        run_mem("always", "add", "Written by the CLI meanwhile.", "--workspace", workspace, check=True)
        error, text = await call(session, "view", path="/memories/mind.md")
        assert "     6\t- Written by the CLI meanwhile." in text.splitlines()
        mind = await session.read_resource("adf-file://mind.md")
        page = await session.read_resource("adf-file://mind/deploy-procedure.md")
        uris = {str(r.uri) for r in (await session.list_resources()).resources}
        history = json.loads((await call(session, "history", path="/memories/mind/deploy-procedure.md"))[1])
        then = json.loads((await call(session, "history", path="/memories/mind/deploy.md", seq=2))[1])
        assert [v["seq"] for v in then] == [1, 2]  # as `mem history --seq 2`: the tool took no moment (nc17b)
        assert await call(session, "history", path="/memories/notes/today.md", seq=2) == (
            True, "notes/today.md had not existed by then")
        return mind.contents[0].text, page.contents[0].text, uris, history

    mind, page, uris, history = run_stdio(workspace, session_body)
    assert heads == [1, 2, 3, 4, 5, 6]
    assert (workspace / "mind/deploy-procedure.md").read_bytes() == EDITED  # written when the server stopped
    assert not (workspace / "mind/deploy.md").exists()
    assert "- Cite a seq.\n" in (workspace / "mind.md").read_text()
    assert "- Cite a seq.\n" in mind and "(adf-file://mind/deploy-procedure.md)" in mind
    assert page == EDITED.decode()
    assert uris == {"adf-file://mind.md", "adf-file://mind/deploy-procedure.md"}
    assert [(v["path"], v["seq"], v["kind"]) for v in history] == [
        ("mind/deploy.md", 1, "page.ingest"), ("mind/deploy.md", 2, "page.update"),
        ("mind/deploy-procedure.md", 4, "page.rename")]

    log = run_mem("log", "--workspace", workspace, check=True).stdout.decode()
    assert [line.split()[4] for line in log.splitlines()] == [
        "page.ingest", "page.update", "always.add", "page.rename", "file.write", "file.delete", "always.add"]
    assert all(line.split()[2] == "alice" for line in log.splitlines())
    assert run_mem("replay", "--check", "--workspace", workspace, check=True).stdout.decode() == \
        "rebuilt to seq 7: no differences\n"
    events = json.loads(run_mem("log", "--json", "--workspace", workspace, check=True).stdout)
    first_recorded = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(events[0]["recorded_at"] // 1000)) + \
        f".{events[0]['recorded_at'] % 1000:03d}Z"
    assert run_mem("show", "mind/deploy.md", "--at", first_recorded, "--workspace", workspace,
                   check=True).stdout == PAGE
    assert run_mem("show", "mind/deploy.md", "--seq", 2, "--workspace", workspace, check=True).stdout == EDITED


def cli_error(workspace, *args, input=None) -> str:
    result = run_mem(*args, "--workspace", workspace, input=input)
    assert result.returncode == 1
    return result.stderr.decode().removeprefix("error: ").rstrip("\n")


def test_a_hand_edit_is_kept_through_the_adopt_tool_as_the_refusal_says(workspace):
    """Regression: the refusal of a write over a hand-edited page told an MCP client to run `mem adopt` or
    pass --force, neither of which it has."""
    with Memory.open(workspace) as mem:
        mem.write_page("deploy", PAGE)
        mem.always_add("keep me")
    (workspace / "mind/deploy.md").write_bytes(PAGE + b"edited by hand\n")
    (workspace / "mind/bare.md").write_bytes(b"no frontmatter\n")
    (workspace / "mind/keys.md").write_text("---\ntype: note\n---\n# Keys\n\nkey AKIA4HXQ7ZT2LMNB3K5P\n")
    (workspace / "mind.md").write_text((workspace / "mind.md").read_text().replace("- keep me", "- kept by hand"))
    before = log_rows(workspace)

    async def session_body(session):
        refused = await call(session, "str_replace", path="/memories/mind/deploy.md", old_str="Staging", new_str="S")
        always = await call(session, "insert", path="/memories/mind.md", insert_line=5, insert_text="- more")
        unchanged = log_rows(workspace)
        adopted = await call(session, "adopt")
        again = await call(session, "str_replace", path="/memories/mind/deploy.md", old_str="edited by hand",
                           new_str="edited by hand, then kept")
        return refused, always, unchanged, adopted, again

    refused, always, unchanged, adopted, again = run_stdio(workspace, session_body)
    mind = "mind.md was edited by hand since mindlog wrote it: call the adopt tool to record its `## Always` lines"
    assert refused == (True, f"{mind}; mind/deploy.md was edited by hand since mindlog wrote it: call the adopt tool "
                             "to keep the edit as a new version; then call again")
    assert always == (True, f"{mind}; then call again")
    assert unchanged == before
    assert not adopted[0]
    report = json.loads(adopted[1])
    assert report["adopted"] == ["mind.md", "mind/deploy.md"] and sorted(report["refused"]) == ["mind/bare.md",
                                                                                                 "mind/keys.md"]
    assert "no frontmatter" in report["refused"]["mind/bare.md"]
    assert report["refused"]["mind/keys.md"].endswith(  # (nc13c) it said to leave the secret out and call again
        "(the file was written by hand: a person must take the secret out of it, or keep it with `mem adopt "
        "--allow-secret` in a shell)")
    assert not again[0] and again[1].startswith("The memory file has been edited.")
    with Memory.open(workspace) as mem:
        assert "edited by hand, then kept" in mem.page_text("deploy") and mem.always() == ["kept by hand"]


def test_a_layer_of_a_workspace_without_a_contract_is_refused_with_each_way_to_have_one(workspace):
    """Regression: `mem entry add notes ...` in a workspace with no layer said only `no contract is known yet:
    mem pull fetches it from the hub` (no layer named, no word of local layers), and so did the MCP tool."""
    said = cli_error(workspace, "entry", "add", "notes", "[FACT] 2026-11-30: x")
    assert said == ("there is no layer 'notes': no contract is known yet (`mem pull` fetches the hub's; `mem layer "
                    "add NAME PATH` declares a local layer)")

    async def session_body(session):
        return [await call(session, "entry_add", layer="notes", text="[FACT] 2026-11-30: x"),
                await call(session, "sync")]

    assert run_stdio(workspace, session_body) == [  # each saying what the agent cannot do itself (it went in circles)
        (True, "there is no layer 'notes': no contract is known yet (call sync to fetch the hub's, once a person has "
               "added a remote; or a person declares a local layer with `mem layer add NAME PATH`)"),
        (True, "no remote yet: a person adds one (`mem remote add NAME URL --token-file F`, with a token the hub's "
               "administrator gives); no tool can")]
    assert log_rows(workspace) == []


def test_a_count_below_zero_is_refused_in_the_words_of_each_side(workspace):
    """Regression: `mem believed --last -3` (and the believed tool's last=-3) answered `loop (last -3):`; the
    log and search tools refused n=-5 naming the CLI's `-n`."""
    assert cli_error(workspace, "believed", "--last", "-3") == "--last must be 0 or more, not -3"
    assert cli_error(workspace, "log", "-n", "-5") == "-n must be 0 or more, not -5"

    async def session_body(session):
        return [await call(session, "believed", last=-3), await call(session, "log", n=-5),
                await call(session, "search", query="x", n=-1)]

    assert run_stdio(workspace, session_body) == [(True, "last must be 0 or more, not -3"),
                                                  (True, "n must be 0 or more, not -5"),
                                                  (True, "n must be 1 or more (how many hits to show), not -1")]


def test_a_refusal_carries_the_tools_way_forward_from_where_it_is_raised(workspace):
    """Regression: the MCP edge reworded four CLI refusals by matching their text (a regex on `-n must` and
    on the `mem page release` command, the contract hint's words, the secret hint): the words were the
    CLI's, guessed back. Now the error raised at the cause carries both ways forward as data
    (`MemError.told`): `str()` and `told("cli")` name commands and flags, `told("tools")` tools and parameters."""
    from eventstore.errors import Held, InvalidInput
    from eventstore.secrets import SecretFound

    with Memory.open(workspace) as mem:
        mem.write_page("freeze", PAGE.replace(b"type: procedure", b"type: procedure\ngovernance: hold"))
        refusals = []
        for call_, kind in [(lambda: mem.entry_add("notes", "[FACT] 2026-11-30: x"), InvalidInput),
                            (lambda: mem.events(limit=-2), InvalidInput),
                            (lambda: mem.believed(mem.seq_at(), -1), InvalidInput),
                            (lambda: mem.delete_page("freeze", "thaw"), Held),
                            (lambda: mem.always_add("key AKIA4HXQ7ZT2LMNB3K5P"), SecretFound)]:
            with pytest.raises(kind) as refused:
                call_()
            refusals.append(refused.value)
    assert [(str(exc) == exc.told("cli"), exc.told("tools")) for exc in refusals] == [
        (True, "there is no layer 'notes': no contract is known yet (call sync to fetch the hub's, once a person has "
               "added a remote; or a person declares a local layer with `mem layer add NAME PATH`)"),
        (True, "n must be 0 or more, not -2"),
        (True, "last must be 0 or more, not -1"),
        (True, "page 'freeze' is held (governance: hold, seq 1); refusing to delete it. Release it first: call "
               "page_release with slug 'freeze' and a note saying why"),
        (True, "the write looks like it holds a secret: AWS Access Key in `line`, line 1; nothing was "
               "written (leave the secret out and call again: the MCP tools never store one)")]
    assert [str(exc)[:40] for exc in refusals[1:4]] == [
        "-n must be 0 or more, not -2", "--last must be 0 or more, not -1",
        "page 'freeze' is held (governance: hold,"]
    assert str(refusals[3]).endswith("Release it first: `mem page release freeze --note \"why\"`")
    assert len(log_rows(workspace)) == 1  # the page only: every refusal appended nothing


def test_a_number_past_what_the_log_holds_is_one_line_not_a_traceback(workspace):
    """Regression: `mem cite '[S99999999999999999999999]'`, `mem redact 9...9`, `mem log -n 9...9` and `mem audit
    read 9...9` ended in an OverflowError traceback (SQLite holds 64-bit integers); so did the cite tool."""
    huge = "99999999999999999999999"
    too_large = "a number given is past what the log holds: whole numbers go from -2**63 to 2**63 - 1"
    longest = "9" * 4301  # Python converts 4,300 digits at most: a ValueError traceback past them (nc28a)
    run_mem("page", "write", "deploy", "--file", "-", "--workspace", workspace, input=PAGE, check=True)
    for command in (["cite", f"[S{huge}]"], ["redact", huge, "--reason", "x"], ["cite", f"[S{longest}]"],
                    ["cite", f"adf-audit://seq/{longest}"], ["redact", longest, "--reason", "x"],
                    ["page", "write", "deploy", "--file", "-", "--if-version", longest]):
        assert cli_error(workspace, *command) == too_large
    assert cli_error(workspace, "redact", "\u00b2", "--reason", "x").startswith("there is no event '\u00b2' in the log")
    for command in (["log", "-n", huge], ["audit", "read", huge], ["show", "mind.md", "--seq", huge]):
        result = run_mem(*command, "--workspace", workspace)
        assert result.returncode == 2 and result.stderr.decode().endswith(
            f": {huge} is out of range: whole numbers go from -2**63 to 2**63 - 1.\n"), result.stderr
    for digits in ("\u0661", "\uff11", "1_0"):  # int() reads 1, 1, 10 (nc32a, nc33a): `diff seq:` refuses them
        result = run_mem("show", "mind.md", "--seq", digits, "--workspace", workspace)
        assert result.returncode == 2 and result.stderr.decode().endswith(
            f"'--seq': '{digits}' is not a valid integer.\n"), result.stderr
    for command, said in ((["cite", "[S\u0661]"], "is not a citation"), (["show", "mind.md", "--at", "\u0662 h ago"],
                          "is not a time mindlog understands"), (["mcp", "--http", "\u00b2"], "--http takes HOST:PORT"),
                         (["mcp", "--http", "127.0.0.1:\uff14\uff17"], "--http takes HOST:PORT")):
        result = run_mem(*command, "--workspace", workspace)
        assert result.returncode != 0 and said in result.stderr.decode() and b"Traceback" not in result.stderr, (
            command, result.stderr)

    async def session_body(session):
        return [await call(session, "cite", citation=f"[S{number}]") for number in (huge, longest)]

    assert run_stdio(workspace, session_body) == [(True, too_large)] * 2


def test_a_citation_that_resolves_to_nothing_is_a_tool_error_as_mem_cite_exits_1(workspace):
    """Regression (nc15a): the cite tool answered a missing seq, file or entry as a success (isError false) where
    `mem cite` exits 1: an agent that reads only isError took it as found."""
    with Memory.open(workspace) as mem:
        mem.loop_append("user", [{"type": "text", "text": "hello"}], "main", None)

    async def session_body(session):
        return [await call(session, "cite", citation=citation)
                for citation in ("[S1]", "[S99]", "adf-file://mind/nosuch.md", "01a23acc-5b7f-71f7",
                                 "adf-file://" + "b" * 10000)]

    found, *missing, (long_error, long_text) = run_stdio(workspace, session_body)
    told = json.loads(long_text)  # cut field by field (nc28a: cut as one run, the JSON was broken)
    assert long_error and told["path"] == "b" * 120 + "… (10,000 characters)", told
    assert told["citation"] == "adf-file://" + "b" * 109 + "… (10,011 characters)" and not told["resolved"]
    assert found[0] is False and json.loads(found[1])["resolved"] is True
    said = ("S99: missing: not yet written by seq 1", "mind/nosuch.md: no such file",
            "there is no entry 01a23acc-5b7f-71f7 in any layer of this workspace (view of a layer's file lists them)")
    for (error, text), citation, why in zip(missing, ("[S99]", "adf-file://mind/nosuch.md", "01a23acc-5b7f-71f7"), said):
        told = json.loads(text)  # nc34b: the JSON alone, where every other tool error is a sentence
        assert error is True and told["resolved"] is False and told["error"] == why, (citation, text)
        assert list(told)[0] == "error" and run_mem("cite", citation, "--workspace", workspace).returncode == 1


def test_an_empty_loop_message_is_refused_on_both_sides(workspace):
    """Regression: `mem loop append --role user --text ''` (and the loop_append tool with text "") appended an
    empty message, a seq that cites nothing."""
    said = "a loop message needs some content: its text is empty"
    assert cli_error(workspace, "loop", "append", "--role", "user", "--text", " ") == said
    assert cli_error(workspace, "loop", "append", "--role", "user", "--content-json", "[]") == (
        "a loop message needs some content: its list of blocks is empty")

    async def session_body(session):
        return await call(session, "loop_append", role="user", text="")

    assert run_stdio(workspace, session_body) == (True, said)
    assert log_rows(workspace) == []


def test_refusals_are_tool_errors_with_the_cli_message(workspace, tmp_path):
    with Memory.open(workspace) as mem:
        mem.set_contract(Contract(layers={"decisions": ContractLayer(
            path="memory/decisions.md", format="entries", producers=["bob"], consumers=["*"])}))
        mem.write_page("deploy", PAGE)
        mem.write_page("freeze", PAGE.replace(b"type: procedure", b"type: procedure\ngovernance: hold"))
    (workspace / "mind/deploy.md").write_bytes(PAGE + b"edited by hand\n")
    bare = tmp_path / "bare.md"
    bare.write_bytes(b"no frontmatter\n")
    secret = tmp_path / "keys.md"
    secret.write_text("the deploy key is AKIA4HXQ7ZT2LMNB3K5P for now\n")
    cases = [  # (tool, arguments, the CLI command refused for the same reason)
        ("create", {"path": "/memories/mind/bare.md", "file_text": "no frontmatter\n"},
         ("page", "write", "bare", "--file", bare)),
        ("create", {"path": "/memories/mind/../../escape.md", "file_text": PAGE.decode()},
         ("page", "write", "../../escape.md", "--file", bare)),
        ("create", {"path": "/memories/../outside.txt", "file_text": "x"},
         ("file", "write", "../outside.txt", "--file", bare)),
        ("entry_add", {"layer": "decisions", "text": "[DECISION] mine"},
         ("entry", "add", "decisions", "[DECISION] mine")),
        ("str_replace", {"path": "/memories/mind/deploy.md", "old_str": "Staging first.", "new_str": "x"},
         ("page", "delete", "deploy")),
        ("loop_append", {"role": "user", "text": "hi", "loop": "Main Loop"},
         ("loop", "append", "--role", "user", "--text", "hi", "--loop", "Main Loop")),
        ("sync", {}, ("sync",)),
        ("loop_append", {"role": "system", "text": "hi"}, ("loop", "append", "--role", "system", "--text", "hi")),
        ("create", {"path": "/memories/notes/keys.md", "file_text": secret.read_text()},
         ("file", "write", "notes/keys.md", "--file", secret)),
        ("delete", {"path": "/memories/mind/freeze.md"}, ("page", "delete", "freeze")),
        ("log", {"since": "2030-01-01"}, ("log", "--since", "2030-01-01")),
        ("log", {"kind": ["nosuch"]}, ("log", "--kind", "nosuch")),
    ]
    expected = [cli_error(workspace, *command) for _tool, _arguments, command in cases]
    before = log_rows(workspace)

    async def session_body(session):
        answers = [await call(session, tool, **arguments) for tool, arguments, _command in cases]
        answers.append(await call(session, "create", path="/memories/mind/deploy.md", file_text="x"))
        answers.append(await call(session, "str_replace", path="/memories/mind.md", old_str="## Pages", new_str="x"))
        answers.append(await call(session, "history", path="/memories/mind/nosuch.md"))
        return answers

    answers = run_stdio(workspace, session_body)
    assert all(error for error, _text in answers)
    assert expected[8].endswith(" (pass --allow-secret if it really belongs in memory)")
    expected[8] = expected[8].replace("pass --allow-secret if it really belongs in memory",
                                      "leave the secret out and call again: the MCP tools never store one")
    assert expected[9].endswith("Release it first: `mem page release freeze --note \"why\"`")
    expected[9] = expected[9].replace("`mem page release freeze --note \"why\"`",
                                      "call page_release with slug 'freeze' and a note saying why")
    assert expected[4].endswith("`mem adopt` keeps the edit (or `mem page write deploy --file mind/deploy.md`), "
                                "or pass --force to overwrite it")
    expected[4] = ("mind/deploy.md was edited by hand since mindlog wrote it: call the adopt tool to keep the edit as "
                   "a new version; then call again")
    assert expected[6] == "no remote yet: `mem remote add NAME URL --token-file F`"
    expected[6] = ("no remote yet: a person adds one (`mem remote add NAME URL --token-file F`, with a token the hub's "
                   "administrator gives); no tool can")
    assert [text for _error, text in answers[:len(cases)]] == expected
    assert not any(word in text for _error, text in answers
                   for word in ("--allow-secret", "mem page release", "--force", "mem adopt"))
    assert "edited by hand" in expected[4] and "does not produce layer 'decisions'" in expected[3]
    assert "AWS Access Key" in expected[8] and "hold" in expected[9]
    assert answers[-3][1] == "File /memories/mind/deploy.md already exists"
    assert "catalog is generated from the pages" in answers[-2][1]
    assert answers[-1][1] == "mind/nosuch.md never existed"
    assert "is in the future" in expected[10] and "there is no event kind 'nosuch'" in expected[11]
    assert log_rows(workspace) == before


def test_streamable_http_on_loopback(workspace):
    port = free_port()
    server = subprocess.Popen([*mem_command(), "mcp", "--http", str(port), "--workspace", str(workspace)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert server.poll() is None, server.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.05)

        async def main():
            with anyio.fail_after(60):
                async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                        ClientSession(read, write) as session:
                    await session.initialize()
                    names = {tool.name for tool in (await session.list_tools()).tools}
                    created = await call(session, "create", path="/memories/mind/deploy.md", file_text=PAGE.decode())
                    edited = await call(session, "str_replace", path="/memories/mind/deploy.md",
                                        old_str="Staging first.", new_str="Staging first, always.")
                    refused = await call(session, "str_replace", path="/memories/mind/deploy.md",
                                         old_str="nowhere", new_str="x")
                    shown = await call(session, "show", path="mind/deploy.md", seq=1)
                    return names, created, edited, refused, shown

        names, created, edited, refused, shown = anyio.run(main)
        # in a session, a request whose id is unusable was answered 202 Accepted (read as a notification)
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        url = f"http://127.0.0.1:{port}/mcp"
        opened = httpx.post(url, headers=headers, timeout=30, content=json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}))
        headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        httpx.post(url, headers=headers, content=b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
                   timeout=30).raise_for_status()
        unusable = [httpx.post(url, headers=headers, timeout=30,
                               content=b'{"jsonrpc": "2.0", "id": %s, "method": "ping"}' % bad)
                    for bad in (b"1.5", b"null", b'{"a": 1}', b"true", b"NaN", b"Infinity")]
        # a body past the SDK's limit is the SDK's to refuse, unread (read whole, one froze the server for a minute)
        too_large = httpx.post(url, headers=headers, timeout=30, content=b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping", '
                               b'"params": {"x": "' + b"a" * 5_000_000 + b'"}}')
        pinged = httpx.post(url, headers=headers, timeout=30, content=b'{"jsonrpc": "2.0", "id": 9, "method": "ping"}')
        batch = httpx.post(url, headers=headers, timeout=30, content=b'[{"jsonrpc": "2.0", "id": 3, "method": "ping"}]')
        listed = httpx.post(url, headers=headers, timeout=30,  # params a list: the validator's dump too (nc24a)
                            content=b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": ["a"]}')
        stringed = httpx.post(url, headers=headers, timeout=30,  # arguments a string: the SDK's bare -32602 (nc28a)
                              content=b'{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": '
                                      b'"show", "arguments": "{\\"path\\": \\"mind.md\\"}"}}')
        unnamed = httpx.post(url, headers=headers, timeout=30,  # no name: the SDK's bare -32602 (nc32a)
                             content=b'{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"arguments": {}}}')
        foreign = httpx.post(url, headers={**headers, "Host": f"evil.example:{port}"}, timeout=30,
                             content=b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}')  # refused first for its Host
        with socket.create_connection(("127.0.0.1", port)) as gone:  # a client that leaves before its body ends
            gone.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\nAccept: "
                         b"application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{\"jsonrpc\"" % port)
        time.sleep(0.5)
        pinged_after = httpx.post(url, headers=headers, timeout=30, content=b'{"jsonrpc": "2.0", "id": 10, "method": "ping"}')
    finally:
        server.terminate()
        server.wait(10)
    said = server.stderr.read().decode()
    assert "ClientDisconnect" not in said and "Error handling" not in said, said  # was a rich traceback
    assert pinged_after.status_code == 200
    assert MEMORY_TOOL | MINDLOG_TOOLS <= names
    assert [(answer.status_code, answer.json()["error"]["code"], answer.json()["id"]) for answer in unusable] == [
        (400, -32600, None)] * 6
    assert too_large.status_code == 413 and foreign.status_code == 421
    assert batch.status_code == 400 and batch.json()["error"] == {  # was -32602 and pydantic's validation dump
        "code": -32600, "message": "Invalid Request: the body is not a JSON-RPC 2.0 message"}
    assert listed.status_code == 400 and listed.json() == {"jsonrpc": "2.0", "id": 6, "error": {
        "code": -32600, "message": "Invalid Request: the body is not a JSON-RPC 2.0 message"}}
    assert pinged.status_code == 200 and '"id":9,"result":{}' in pinged.text
    assert stringed.status_code == 400 and stringed.json() == {"jsonrpc": "2.0", "id": 11, "error": {
        "code": -32602, "message": "Invalid params: a tool call's arguments must be a JSON object"}}
    assert unnamed.status_code == 400 and unnamed.json()["error"]["message"].startswith(
        "Invalid params: a tool call's name must be a string")
    assert created == (False, "File created successfully at: /memories/mind/deploy.md")
    assert not edited[0] and refused == (
        True, "No replacement was performed, old_str `nowhere` did not appear verbatim in /memories/mind/deploy.md.")
    assert shown == (False, PAGE.decode())
    assert len(log_rows(workspace)) == 2
    assert run_mem("replay", "--check", "--workspace", workspace).returncode == 0
    assert run_mem("show", "mind/deploy.md", "--workspace", workspace, check=True).stdout == EDITED


def test_http_binds_to_loopback_unless_told():
    assert parse_http("8000") == ("127.0.0.1", 8000)
    assert parse_http(":8000") == ("127.0.0.1", 8000)
    assert parse_http("0.0.0.0:9000") == ("0.0.0.0", 9000)
    assert parse_http("::1:9000") == parse_http("[::1]:9000") == ("::1", 9000)  # the URL's form failed to listen
    with pytest.raises(Exception, match="HOST:PORT"):
        parse_http("localhost")


def test_mindlog_tools_over_stdio(workspace, tmp_path):
    from hubserver import HubServer
    from sync.client import add_remote

    hub = HubServer(str(tmp_path / "hub.db")).start()
    try:
        hub.storage.apply_contract(Contract(layers={"insights": ContractLayer(
            path="memory/insights.md", format="entries", producers=["*"], consumers=["*"])}))
        (tmp_path / "alice.token").write_text(hub.storage.add_agent("alice") + "\n")
        with Memory.open(workspace) as mem:
            add_remote(mem, "origin", hub.url, str(tmp_path / "alice.token"))

        async def session_body(session):
            answers = {}
            for tool, arguments in [
                    ("loop_append", {"role": "user", "text": "Prod needs my ack."}),
                    ("cite", {"citation": "[S1]"}),
                    ("sync", {}),
                    ("entry_add", {"layer": "insights", "text": "[DECISION] 2026-11-01: The hub runs on SQLite"}),
                    ("sync", {"direction": "push"}),
                    ("believed", {"seq": 1}),
                    ("log", {"n": 1}),
                    ("memory", {"command": "view", "path": "/memories/memory/insights.md"}),
                    ("create", {"path": "/memories/mind/canary.md", "file_text": PAGE.decode().replace(
                        "Staging first.", "Every deploy waits for a green canary.")}),
                    ("search", {"query": "green canary"}),
                    ("search", {"query": "green canary", "seq": 2}),
                    ("search", {"query": "canary", "kinds": ["nonsense"]}),
                    ("memory", {"command": "create", "path": "/memories/notes.md"})]:
                answers.setdefault(tool, []).append(await call(session, tool, **arguments))
            either = await session.call_tool("search", {"query": "canary OR zebra"})
            answers["either"] = [content.text for content in either.content]
            return answers

        answers = run_stdio(workspace, session_body)
    finally:
        hub.stop()
    assert answers["either"] == ["[]", "no matches: OR is searched as text, not as an operator: every word of a query "
                                       "must appear (\"quoted phrases\" too); search for each alternative on its own"]
    assert answers["loop_append"] == [(False, "[S1] user appended to loop main")]
    cited = json.loads(answers["cite"][0][1])
    assert cited["resolved"] and cited["hit"]["source"] == "live" and cited["hit"]["seq"] == 1
    first_sync, push = (json.loads(text) for _error, text in answers["sync"])
    assert first_sync["push"]["pushed"] == 0 and push == {"push": {**push["push"], "pushed": 1}}
    assert "warnings" not in first_sync
    assert answers["entry_add"][0][1].endswith("[DECISION] 2026-11-01: The hub runs on SQLite (seq 2)")
    believed = json.loads(answers["believed"][0][1])
    assert believed["seq"] == 1 and [m["seq"] for m in believed["loop"]] == [1]
    assert [e["body"]["kind"] for e in json.loads(answers["log"][0][1])] == ["entry.append"]
    assert answers["memory"][0] == (False, "Here's the content of /memories/memory/insights.md with line numbers:\n"
                                           "     1\t# insights\n     2\t\n     3\t[DECISION] 2026-11-01: The hub runs "
                                           "on SQLite\n     4\t")
    assert answers["memory"][1] == (True, "create needs file_text")
    now, then, bad_kind = answers["search"]
    assert [(hit["path"], hit["citation"]) for hit in json.loads(now[1])] == [
        ("mind/canary.md", "adf-file://mind/canary.md")]
    assert json.loads(then[1]) == []
    assert bad_kind == (True, "kind must be one of page, shared-page, local-page, entry, loop, file, always, not "
                              "'nonsense'")
    assert [row[0] for row in log_rows(workspace)] == [1, 2, 3]


def test_tools_taking_a_moment_return_the_instant_they_read(workspace, monkeypatch):
    """`at` is understood as `--at` is (local time, relative forms), and the tool says which instant it read."""
    from mcp.client.client import Client

    from cli.mcp_server import build_server

    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()

    async def main():
        with Memory.open(workspace) as mem:
            mem.write_page("deploy", PAGE)
            async with Client(build_server(mem)) as client:
                session = client.session
                return {name: await session.call_tool(tool, arguments) for name, tool, arguments in [
                    ("show", "show", {"path": "mind/deploy.md", "at": "now"}),
                    ("show by seq", "show", {"path": "mind/deploy.md", "seq": 1}),
                    ("search", "search", {"query": "staging", "at": "now"}),
                    ("believed", "believed", {"at": "now"}),
                    ("cite", "cite", {"citation": "adf-file://mind/deploy.md", "at": "now"}),
                    ("diff", "diff", {"path": "mind/deploy.md", "old": "seq:1", "new": "now"}),
                    ("log", "log", {"since": "2h ago"}),
                    ("too early", "show", {"path": "mind.md", "at": "2000-01-01"})]}

    try:
        results = anyio.run(main)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert results["show"].content[0].text == PAGE.decode()
    assert [c.text for c in results["show by seq"].content] == [PAGE.decode()]
    for name in ("show", "search", "believed", "cite", "diff"):
        said = results[name].content[-1].text
        assert not results[name].is_error and said.startswith("as of ") and said.endswith("(seq 1)"), name
        assert said[6:35].endswith(("+01:00", "+02:00")), said  # the local time, with its offset
    assert results["log"].content[-1].text.startswith("since ")
    refused = results["too early"]
    assert refused.is_error and len(refused.content) == 1
    assert "'2000-01-01' (2000-01-01T00:00:00.000+01:00) is before this workspace existed" in refused.content[0].text


def test_show_history_and_diff_name_a_page_by_its_slug_as_the_cli_does(workspace):
    """Regression: `mem show deploy` and `mem show deploy.md` showed mind/deploy.md, the MCP tools said
    'deploy does not exist' (one rule now, Memory.named_file)."""
    from mcp.client.client import Client

    from cli.mcp_server import build_server

    async def main():
        with Memory.open(workspace) as mem:
            async with Client(build_server(mem)) as client:  # a new workspace: mind.md as it began, no versions
                began = await client.session.call_tool("history", {"path": "mind.md"})
                assert not began.is_error and began.content[0].text == "[]", began
            mem.write_page("deploy", PAGE)
            mem.write_page("deploy", PAGE + b"\nOne more step.\n")
            async with Client(build_server(mem)) as client:
                return {(tool, name): await client.session.call_tool(tool, {"path": name, **extra})
                        for name in ("deploy", "deploy.md", "/memories/deploy")
                        for tool, extra in (("show", {}), ("history", {}), ("diff", {"old": "seq:1"}))}

    results = anyio.run(main)
    for (tool, name), result in results.items():
        assert not result.is_error, (tool, name, result.content[0].text)
        assert {"show": "One more step.", "history": '"seq":2', "diff": "+One more step."}[tool] \
            in result.content[0].text, (tool, name)
        cli = run_mem(tool, name.replace("/memories/", ""), *(["--from", "seq:1"] if tool == "diff" else []),
                      "--workspace", workspace, check=True).stdout.decode()
        if tool != "history":
            assert cli == result.content[0].text, (tool, name)


def test_files_follow_a_burst_of_calls_when_it_pauses_and_at_most_max_lag_behind():
    import asyncio

    from cli.mcp_server import FileFlush

    class Refreshes:
        def __init__(self):
            self.at = []

        def refresh(self):
            self.at.append(asyncio.get_running_loop().time())
            return type("Report", (), {"refused": []})()

    async def burst():
        flush = FileFlush(refreshes)
        flush.QUIET, flush.MAX_LAG = 0.1, 0.4
        loop = asyncio.get_running_loop()
        start = late = loop.time()
        lateness = 0.0  # how late this loop woke (a loaded machine): the flush's timer is as late
        while loop.time() - start < 1.0:  # a call every 20 ms for a second
            flush.schedule()
            await asyncio.sleep(0.02)
            lateness, late = max(lateness, loop.time() - late - 0.02), loop.time()
        last = loop.time()
        await asyncio.sleep(0.3)
        return start, last, lateness

    refreshes = Refreshes()
    start, last, lateness = asyncio.run(burst())
    gaps = [b - a for a, b in zip([start, *refreshes.at], refreshes.at)]
    assert 2 <= len(refreshes.at) <= 5, refreshes.at  # not once per call, not only at the end
    assert max(gaps) < 0.4 + 0.15 + lateness, (gaps, lateness)  # at most MAX_LAG behind, but for the loop's lateness
    assert refreshes.at[-1] >= last  # the last after the burst


def test_a_failed_rewrite_of_the_files_is_one_line_on_stderr_and_the_server_goes_on(capsys):
    """The deferred rewrite ran as a bare event-loop callback: when it failed (mind/ not writable), asyncio printed a
    multi-screen traceback on stderr for each failure (found by a newcomer run)."""
    import asyncio

    from cli.mcp_server import FileFlush

    class Unwritable:
        ws = type("Ws", (), {"damage": staticmethod(lambda exc: None)})()

        def refresh(self):
            raise PermissionError(13, "Permission denied", "/w/mind/.log.md.mem-tmp-1")

    async def twice():
        loop = asyncio.get_running_loop()
        unhandled = []
        loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
        flush = FileFlush(Unwritable())
        flush.QUIET = 0.01
        for _ in range(2):
            flush.schedule()
            await asyncio.sleep(0.1)
        return unhandled, flush.pending

    unhandled, pending = asyncio.run(twice())
    assert unhandled == [] and pending is None
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["warning: the workspace's files were not rewritten: permission denied ([Errno 13] Permission "
                     "denied: '/w/mind/.log.md.mem-tmp-1') (the log holds every change; the files are written again after the "
                     "next change, and when the server stops)"] * 2


def test_page_release_lifts_a_hold_as_mem_page_release_does(workspace):
    """In process (the SDK's in-memory client): a held page of a shared layer and of the wiki, refused
    until `page_release`, whose refusals are the CLI's."""
    held = b"---\ntype: policy\ngovernance: hold\n---\n# Pricing\n\nNo discounts above 20%.\n"
    with Memory.open(workspace) as mem:
        mem.declare_layer("notes", "notes/", "pages")
        mem.shared_page_write("notes", "pricing", held)
        mem.write_page("freeze", PAGE.replace(b"type: procedure", b"type: procedure\ngovernance: hold"))
    expected = {"no note": cli_error(workspace, "page", "release", "freeze", "--note", " ").replace(
        "(--note)", "(the note argument)")}
    edit = {"path": "/memories/notes/pricing.md", "old_str": "above 20%", "new_str": "above 30%"}

    async def body(call_):
        before = log_rows(workspace)
        answers = {"held": await call_("str_replace", **edit),
                   "no note": await call_("page_release", slug="freeze", note=" "),
                   "missing": await call_("page_release", slug="missing", note="x", layer="notes")}
        unchanged = log_rows(workspace) == before
        answers["release"] = await call_("page_release", slug="pricing", note="owner agreed", layer="notes")
        answers["again"] = await call_("page_release", slug="pricing", note="x", layer="notes")
        answers["edit"] = await call_("str_replace", **edit)
        answers["wiki"] = await call_("page_release", slug="freeze", note="the freeze is over")
        answers["wiki edit"] = await call_("delete", path="/memories/mind/freeze.md")
        return answers, unchanged

    answers, unchanged = in_process(workspace, body)
    assert unchanged
    expected["again"] = cli_error(workspace, "page", "release", "pricing", "--layer", "notes", "--note", "x")
    expected["missing"] = cli_error(workspace, "page", "release", "missing", "--layer", "notes", "--note", "x")
    error, text = answers["held"]
    assert error and text.startswith("page 'pricing' of layer 'notes' is held")
    assert answers["release"] == (False, "release notes/pricing.md (seq 4)")
    for name in ("again", "missing", "no note"):
        assert answers[name] == (True, expected[name]), name
    assert not answers["edit"][0] and answers["wiki"] == (False, "release mind/freeze.md (seq 6)")
    assert not answers["wiki edit"][0]
    assert "above 30%" in run_mem("show", "notes/pricing.md", "--workspace", workspace, check=True).stdout.decode()
    assert run_mem("replay", "--check", "--workspace", workspace).returncode == 0


def test_a_damaged_views_database_is_named_as_the_cli_names_it(workspace):
    """Damage a query finds only after the server opened the workspace: the tool error names the file
    and what to do, word for word what `mem` says."""
    with Memory.open(workspace) as mem:
        mem.write_page("deploy", PAGE)
    damage_table(workspace / ".mem" / "views.db", "pages")
    expected = cli_error(workspace, "page", "list")
    assert expected.startswith(f"the views database {workspace / '.mem' / 'views.db'} is damaged")

    async def session_body(session):
        return await call(session, "believed")

    assert run_stdio(workspace, session_body) == (True, expected)


def raw_session(workspace, lines: list[bytes], answers: int) -> tuple[list[dict], bytes, int]:
    """Writes `lines` to a `mem mcp` over stdio and reads `answers` answers before closing its stdin: (the answers in
    order, its stderr, its exit code)."""
    server = subprocess.Popen([*mem_command(), "mcp", "--workspace", str(workspace)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server_env())
    server.stdin.write(b"\n".join(lines) + b"\n")
    server.stdin.flush()
    read, pending, deadline = [], b"", time.monotonic() + 30
    # Read from the descriptor, not with readline: lines the file object buffered would be invisible to select (and
    # to communicate), and answers that came in one chunk were lost when the machine was loaded.
    while sum("id" in a for a in read) < answers:
        if b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            read.append(json.loads(line))
        elif select.select([server.stdout], [], [], max(deadline - time.monotonic(), 0))[0]:
            chunk = os.read(server.stdout.fileno(), 65536)
            if not chunk:
                break
            pending += chunk
        else:
            break
    out, err = server.communicate(timeout=60)
    return read + [json.loads(line) for line in (pending + out).splitlines()], err, server.returncode


def test_a_line_that_is_no_json_rpc_message_is_answered_over_stdio(workspace):
    """JSON-RPC answers a line it cannot parse (-32700) or that is no request (-32600), with the id when it can be
    read, else null; the SDK's stdio reader dropped them and the client waited forever. A blank line is no message:
    skipped (nc27b: it was answered -32700)."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    lines = [b"", b"  \t", b"not json", b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"x": "\\ud800"}}',
             b'{"jsonrpc": "2.0", "id": 8, "method": 5}', b"[1, 2]", json.dumps(initialize).encode()]
    answers, _err, _code = raw_session(workspace, lines, 5)
    assert [(a.get("id"), a.get("error", {}).get("code")) for a in answers] == [
        (None, -32700), (7, -32700), (8, -32600), (None, -32600), (1, None)]
    assert all(a["jsonrpc"] == "2.0" for a in answers)
    assert answers[-1]["result"]["serverInfo"]["name"] == "mindlog"
    assert log_rows(workspace) == []


def test_every_call_read_before_stdin_ends_is_answered(workspace):
    """Regression (nc26b): a client that wrote its calls and closed stdin heard about half of them (the SDK cancels
    the calls still running at the end of its read stream) though each was in the log: a client that retries for
    want of an answer writes it twice. Every request read is answered before the server ends; one the client
    cancels is not waited for."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    calls = [{"jsonrpc": "2.0", "id": n, "method": "tools/call",
              "params": {"name": "loop_append", "arguments": {"role": "user", "text": f"call {n}"}}}
             for n in range(10, 40)]
    twins = [{**call, "id": 7, "params": {"name": "loop_append", "arguments": {"role": "user", "text": f"twin {n}"}}}
             for n, call in enumerate(calls[:10])]  # one id for ten calls, a client's mistake (nc27a: half lost)
    cancelled = [{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request}}
                 for request in (99, [1], {"a": 1}, True)]  # (nc27a: a list or an object ended the server)
    lines = [json.dumps(m).encode() for m in (initialize, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                                              *calls, *twins, *cancelled)]
    answers, err, code = raw_session(workspace, lines, 0)  # stdin closed at once
    assert code == 0 and b"Traceback" not in err
    assert sorted(a["id"] for a in answers if "id" in a) == [1, *[7] * 10, *range(10, 40)]
    assert all("result" in a and not a["result"].get("isError") for a in answers)
    assert len(log_rows(workspace)) == 40


def test_a_deeply_nested_line_and_a_request_with_an_unusable_id_are_answered_and_the_server_goes_on(workspace):
    """A line nested 100,000 levels deep killed `mem mcp` (reading it for its id, Python's json recursed past its
    limit), and a request whose id is neither a whole number nor a string (the SDK takes it for a notification) got
    no answer at all (found by a newcomer run; NaN and Infinity too, by the next): -32700 with the request's id,
    -32600 with id null, and the requests after them are answered."""
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    deep = 100_000
    lines = [json.dumps(initialize).encode(), b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
             b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": ' + b"[" * deep + b"]" * deep + b"}}",
             *(b'{"jsonrpc": "2.0", "id": %s, "method": "ping"}' % bad
               for bad in (b"1.5", b"null", b"true", b'{"a": 1}', b"[1]", b"1e400", b"NaN", b"-Infinity")),
             b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}',
             b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}']
    answers, err, code = raw_session(workspace, lines, 11)
    assert code == 0 and b"Traceback" not in err, err.decode()[-2000:]
    said = [(a.get("id"), a.get("error", {}).get("code")) for a in answers]
    assert said[:2] == [(0, None), (1, -32700)], said  # the session answers the last ping as the reader answers the
    assert sorted(said[2:], key=str) == sorted([*[(None, -32600)] * 8, (2, None)], key=str), said  # lines: any order
    assert {a["error"]["message"] for a in answers if a.get("id") is None} == {
        "Invalid Request: the id must be a whole number or a string"}
    assert [a["result"] for a in answers if a.get("id") == 2] == [{}]


def test_a_tool_call_whose_arguments_are_no_object_is_told_so_over_stdio(workspace):
    """Regression (nc28a): arguments given as a string holding JSON (or a list) got the SDK's bare -32602, "Invalid
    request parameters", which does not say what is wrong; nothing is written, and the next call is served."""
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    call = {"jsonrpc": "2.0", "method": "tools/call"}
    lines = [json.dumps(m).encode() for m in (
        initialize, {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {**call, "id": 1, "params": {"name": "loop_append", "arguments": json.dumps({"role": "user", "text": "x"})}},
        {**call, "id": 2, "params": {"name": "loop_append", "arguments": ["user", "x"]}},
        {**call, "id": 3, "params": {"name": "loop_append", "arguments": {"role": "user", "text": "y"}}},
        {**call, "id": 4, "params": {"name": 123, "arguments": {}}},  # nc32a: a bare -32602 too
        {**call, "id": 5, "params": {"arguments": {"role": "user", "text": "z"}}},
        {**call, "id": 6})]  # no params at all (nc33a)
    answers, err, code = raw_session(workspace, lines, 7)
    assert code == 0 and b"Traceback" not in err
    told = {"code": -32602, "message": "Invalid params: a tool call's arguments must be a JSON object"}
    assert [a.get("error") for a in answers if a.get("id") in (1, 2)] == [told, told]
    named = {"code": -32602, "message": "Invalid params: a tool call's name must be a string, the name of one of the "
                                        "tools tools/list gives"}
    assert [a.get("error") for a in answers if a.get("id") in (4, 5, 6)] == [named, named, named]
    assert [a["result"]["isError"] for a in answers if a.get("id") == 3] == [False]
    assert len(log_rows(workspace)) == 1


def test_a_line_past_16_mib_is_refused_unread_with_its_id_and_the_server_goes_on(workspace):
    """Regression (found, not fixed, last stop): a stdio request line had no bound; a 20 MiB ping was read whole and
    answered. A line past 16 MiB, as a request to the hub may be (in bytes: 9 million two-byte characters too), is
    answered -32600 with the id its head names (null when it names none), its rest skipped in pieces of that size;
    a line just under it is served."""
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    ping = '{"jsonrpc": "2.0", "id": %d, "method": "ping", "params": {"pad": "%s"}}'
    lines = [json.dumps(initialize).encode(), b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
             (ping % (5, "x" * (20 * 2**20))).encode(), (ping % (6, "\u00e9" * 9_000_000)).encode(),
             b'{"jsonrpc": "2.0", "method": "ping", "params": {"pad": "' + b"x" * (17 * 2**20) + b'"}, "id": 9}',
             (ping % (7, "x" * (16 * 2**20 - 100))).encode(), b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}']
    answers, err, code = raw_session(workspace, lines, 5)
    assert code == 0 and b"Traceback" not in err, err.decode()[-2000:]
    said = [(a.get("id"), a.get("error", {}).get("code")) for a in answers]
    assert said[0] == (0, None) and sorted(said[1:], key=str) == sorted(
        [(5, -32600), (6, -32600), (None, -32600), (7, None), (2, None)], key=str), said
    assert {a["error"]["message"] for a in answers if "error" in a} == {
        "Invalid Request: the line is more than 16777216 bytes"}
    assert log_rows(workspace) == []


def test_an_unknown_prompt_is_invalid_params_as_an_unknown_resource_is(workspace):
    """Regression (newcomer run): prompts/get of a name the server does not have was answered with error code 0 and
    printed a traceback on the server's stderr."""
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    lines = [json.dumps(initialize).encode(), b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
             b'{"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {"name": "nope"}}',
             b'{"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "adf-file://mind/nope.md"}}',
             b'{"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "' + b"x" * 5000 + b'"}}',
             b'{"jsonrpc": "2.0", "id": 4, "method": "ping"}']
    read, err, code = raw_session(workspace, lines, 5)
    assert code == 0 and b"Traceback" not in err, err.decode()[-2000:]
    answers = {answer["id"]: answer for answer in read}
    assert [answers[n].get("error", {}).get("code") for n in range(5)] == [None, -32602, -32602, -32602, None]
    assert answers[1]["error"]["message"] == "Unknown prompt: nope"
    assert len(answers[3]["error"]["message"]) < 200


def test_file_paths_and_numbers_are_refused_as_strictly_as_the_cli_refuses_them(workspace, tmp_path):
    """The memory tool stripped every slash after /memories (`/memories//etc/passwd` wrote etc/passwd), took "4"
    and true for insert_line, and ignored a view_range of three numbers or past the file; reserved paths were
    refused in lower case only (`.MEM/x`, `Mind.md`, `MIND/x.md`), and `.git/` taken (found by a newcomer run)."""
    note = tmp_path / "note.txt"
    note.write_text("x\n")
    paths = ["/etc/passwd", "notes//a.md", ".MEM/x", "Mind.md", "MIND/x.md", ".git/config", "a/.Git/hooks/x"]
    expected = [cli_error(workspace, "file", "write", path, "--file", note) for path in paths]
    before = log_rows(workspace)

    async def session_body(session):
        answers = [await call(session, "create", path=f"/memories/{path}", file_text="x") for path in paths]
        answers.append(await call(session, "memory", command="create", path="/memories/.Mem/x", file_text="x"))
        for line in ("4", True):
            answers.append(await call(session, "insert", path="/memories/mind.md", insert_line=line, insert_text="- x"))
        for view_range in ([1, 2, 3], [-1, 10**20], [2, 1], [1, True]):
            answers.append(await call(session, "view", path="/memories/mind.md", view_range=view_range))
        answers.append(await call(session, "memory", command="view", path="/memories", view_range=[1, 2]))
        answers.append(await call(session, "view", path="/memories/mind.md", view_range=[1, -1]))
        return answers

    answers = run_stdio(workspace, session_body)
    tools_way = ("a page is written, deleted or renamed with `mem page write|delete|rename`, mind.md's Always lines with "
                 "`mem always add|remove`", "a page is /memories/mind/<slug>.md, created, edited, deleted or renamed as "
                 "a page, and only the `## Always` lines of /memories/mind.md are edited")  # the CLI's way, the tool's
    assert [text for _error, text in answers[:len(paths)]] == [text.replace(*tools_way) for text in expected]
    assert expected[:3] == ["file path '/etc/passwd' must be a relative path like 'notes/today.md'",
                            "file path 'notes//a.md' contains an empty, '.' or '..' segment",
                            ".MEM/x belongs to mindlog itself (.mem/ holds the log and the views)"]
    assert expected[3].startswith("Mind.md belongs to the mind wiki") and expected[4].startswith("MIND/x.md belongs")
    assert all("is inside a .git directory" in text for text in expected[5:])
    rest = answers[len(paths):]
    assert all(error for error, _text in rest[:-1]) and not rest[-1][0], rest
    assert rest[0][1] == ".Mem/x belongs to mindlog itself (.mem/ holds the log and the views)"
    assert rest[1][1] == "insert: insert_line: input should be a valid integer (got '4')"
    assert rest[2][1] == "insert: insert_line: input should be a valid integer (got True)"
    assert rest[3][1].startswith("Invalid `view_range` parameter: [1, 2, 3]. It should be a list of two integers")
    assert rest[4][1].startswith(f"Invalid `view_range` parameter: [-1, {10**20}]. Its start should be within")
    assert rest[5][1].startswith("Invalid `view_range` parameter: [2, 1]. Its start should be within the range [1, ")
    assert rest[6][1] == "view: view_range.1: input should be a valid integer (got True)"
    assert rest[7][1] == "The `view_range` parameter is not allowed when `path` points to a directory."
    assert rest[8][1].startswith("Here's the content of /memories/mind.md with line numbers:\n     1\t# Mind")
    assert log_rows(workspace) == before


def test_arguments_that_do_not_fit_a_tools_schema_are_one_sentence(workspace):
    """An agent's slips in a call's shape (a missing argument, a word for a number, a string for a list) came back
    as pydantic's dump (and an argument the tool does not take was dropped unsaid): four lines naming its internal model and linking to its docs. One sentence now, as the
    memory tool's own checks say it; nothing is written."""
    before = log_rows(workspace)

    async def session_body(session):
        return [await call(session, "create", path="/memories/mind/deploy.md"),
                await call(session, "insert", path="/memories/mind.md", insert_line="four", insert_text="x"),
                await call(session, "search", query="deploy", types="procedure"),
                await call(session, "create", path="/memories/mind/deploy.md", file_text=PAGE.decode(), mode="overwrite")]

    answers = run_stdio(workspace, session_body)
    assert all(error and "\n" not in text and "pydantic" not in text and "Arguments" not in text
               for error, text in answers), answers
    assert answers[0][1] == "create needs file_text"
    assert answers[1][1].startswith("insert: insert_line: ") and "integer" in answers[1][1] and "'four'" in answers[1][1]
    assert answers[2][1].startswith("search: types: ") and "list" in answers[2][1] and "'procedure'" in answers[2][1]
    assert answers[3][1] == "create takes no mode (it takes path, file_text); nothing was done"  # was dropped unsaid
    assert log_rows(workspace) == before


def in_process(workspace, body):
    """Runs `body(call)` against build_server on the workspace through the SDK's in-memory client; `call(tool,
    **arguments)` gives (is_error, first text)."""
    from mcp.client.client import Client

    from cli.mcp_server import build_server

    async def main():
        with Memory.open(workspace) as mem:
            async with Client(build_server(mem)) as client:
                async def call_(tool, **arguments):
                    result = await client.session.call_tool(tool, arguments)
                    return result.is_error, result.content[0].text

                return await body(call_)

    return anyio.run(main)


def test_the_memory_tool_refuses_an_argument_its_command_does_not_take(workspace):
    """`memory` dropped what its command does not use: `delete` given `new_path` (an agent believing it renames)
    deleted the file, `create` took old_str, insert_line and view_range, `rename` a `path` (found by a newcomer run).
    Each is refused in one line naming the argument, and nothing is written."""
    with Memory.open(workspace) as mem:
        mem.file_write("notes/c.md", b"c\n")
    before = log_rows(workspace)
    calls = [{"command": "delete", "path": "/memories/notes/c.md", "new_path": "/memories/notes/keep.md"},
             {"command": "create", "path": "/memories/notes/d.md", "file_text": "d", "view_range": [1, 2],
              "old_str": "zzz", "insert_line": 3},
             {"command": "rename", "path": "/memories/notes/x.md", "old_path": "/memories/notes/c.md",
              "new_path": "/memories/notes/e.md"},
             {"command": "view", "path": "/memories/mind.md", "file_text": "x"},
             {"command": "str_replace", "path": "/memories/notes/c.md", "old_str": "c", "new_str": "d",
              "insert_text": "y"}]

    async def body(call_):
        answers = [await call_("memory", **arguments) for arguments in calls]
        answers.append(await call_("memory", command="view", path="/memories/mind.md", view_range=[1, -1]))
        return answers

    answers = in_process(workspace, body)
    assert answers[:-1] == [
        (True, "delete takes no new_path (it takes path); nothing was done"),
        (True, "create takes no view_range, old_str, insert_line (it takes path, file_text); nothing was done"),
        (True, "rename takes no path (it takes old_path, new_path); nothing was done"),
        (True, "view takes no file_text (it takes path, view_range); nothing was done"),
        (True, "str_replace takes no insert_text (it takes path, old_str, new_str); nothing was done")]
    assert not answers[-1][0]
    assert log_rows(workspace) == before


def test_a_tool_error_cuts_what_it_echoes_and_says_a_moment_and_a_number_as_the_others_do(workspace):
    """A tool error repeated its input whole (a loop name of 10,000 characters, a citation of 100,000, a layer or an
    agent of 50,000 came back into the agent's context); `diff` took `seq:-1` for "not a time" (and `mem diff --from
    seq:²` ended in a ValueError) where `show` says "before the first event"; `loop_clear` said whole numbers go up
    to 2**64 - 1, the other tools 2**63 - 1 (found by a newcomer run)."""
    with Memory.open(workspace) as mem:
        mem.loop_append("user", [{"type": "text", "text": "hello"}], "main", None)
    before = log_rows(workspace)

    async def body(call_):
        return {"loop": await call_("loop_append", role="user", text="x", loop="a" * 10_000),
                "cite": await call_("cite", citation="x" * 100_000),
                "layer": await call_("entry_add", layer="q" * 50_000, text="[FACT] x"),
                "agent": await call_("search", query="x", agent="y" * 50_000),
                "kinds": await call_("search", query="x", kinds=["k" * 50_000]),
                "path": await call_("history", path="/memories/" + "p" * 50_000),
                "old_str": await call_("str_replace", path="/memories/mind.md", old_str="o" * 10_000, new_str="x"),
                "name": await call_("show", path="mind.md", **{"z" * 1_000: 1}),
                "diff": await call_("diff", path="mind.md", old="seq:-1"),
                "show": await call_("show", path="mind.md", seq=-1),
                "seq:²": await call_("diff", path="mind.md", old="seq:²"),
                "clear": await call_("loop_clear", start=-10**23),
                "cited": await call_("cite", citation=f"[S{10**23}]")}

    answers = in_process(workspace, body)
    assert all(error for error, _text in answers.values()), answers
    long_ones = {name: text for name, (_error, text) in answers.items() if len(text) > 500}
    assert not long_ones, {name: len(text) for name, text in long_ones.items()}
    assert answers["loop"][1] == (f"loop name {'a' * 120!r}… (10,000 characters) must be lowercase letters, digits, "
                                  "'-' or '_' (like 'main')")
    assert answers["cite"][1].startswith(f"{'x' * 120!r}… (100,000 characters) is not a citation: use [S412]")
    assert answers["layer"][1].startswith(f"there is no layer {'q' * 120!r}… (50,000 characters)")
    assert answers["path"][1] == f"mind/{'p' * 120}… (50,000 characters).md never existed"  # as `mem history p…` says
    assert answers["old_str"][1] == (f"No replacement was performed, old_str `{'o' * 120}… (10,000 characters)` did not "
                                     "appear verbatim in /memories/mind.md.")
    assert answers["name"][1].startswith(f"show takes no {'z' * 120}… (1,000 characters) (it takes path, at, seq)")
    assert answers["diff"] == answers["show"] == (True, "seq -1 is before the first event (seqs start at 1)")
    assert answers["seq:²"] == (True, "'seq:²' is not a seq: seq:N takes a whole number N (seqs start at 1)")
    assert answers["clear"] == answers["cited"] == (True, TOO_LARGE)
    assert log_rows(workspace) == before
    refused = run_mem("diff", "mind.md", "--from", "seq:²", "--workspace", workspace)
    assert refused.returncode == 1 and refused.stderr.decode() == ("error: 'seq:²' is not a seq: seq:N takes a whole "
                                                                   "number N (seqs start at 1)\n")


def test_the_log_tool_clips_long_texts_and_says_how_to_read_them_whole(workspace):
    """`log` with no arguments gave the last 50 events whole: a 1 MB page and a 2 MB message made one tool result
    of three million characters, past most agents' context. Long texts are clipped, each saying how to read it."""
    with Memory.open(workspace) as mem:
        mem.write_page("big", PAGE + b"word " * 200_000)
        mem.loop_append("user", [{"type": "text", "text": "said " * 400_000}])
        mem.write_page("small", PAGE)

    async def session_body(session):
        clipped = await call(session, "log")
        return clipped, await call(session, "log", seq=json.loads(clipped[1])[-3]["seq"])

    (error, text), (whole_error, whole) = run_stdio(workspace, session_body)
    assert not error and len(text) < 20_000, len(text)
    big, said, small = json.loads(text)[-3:]
    page_text = small["body"]["text"]
    assert page_text == PAGE.decode().split("---\n", 2)[2]
    assert big["body"]["text"] == (f"{(page_text + 'word ' * 200_000)[:2_000]}… [{len(page_text) + 1_000_000 - 2_000:,} "
                                   f"more characters: call log with seq={big['seq']} for the whole event]")
    message = said["body"]["content"][0]["text"]
    assert message.startswith("said said") and message.endswith(f"call log with seq={said['seq']} for the whole event]")
    assert not whole_error and json.loads(whole)["body"]["text"] == page_text + "word " * 200_000


def test_the_loop_its_audit_and_forgetting_as_an_agent_runs_them(workspace):
    """The loop's compaction and clearing, the audit and redaction were CLI commands only: an agent over MCP could
    append to its transcript but never compact it, see what was archived, or forget what it should not keep."""
    with Memory.open(workspace) as mem:
        for n in range(1, 6):
            mem.loop_append("user" if n % 2 else "assistant", [{"type": "text", "text": f"message {n}"}])
        mem.loop_append("user", [{"type": "text", "text": "the vendor's phone is 555-0199, call after 9"}])
        mem.loop_append("assistant", [{"type": "text", "text": "long " * 1_000}])

    async def session_body(session):
        shown = await call(session, "loop_show", last=3)
        compacted = await call(session, "loop_compact", summary="Talked over messages 1-5 [S1].", preserve=2)
        audited = await call(session, "audit")
        cited = await call(session, "cite", citation="adf-audit://seq/2")
        cleared = await call(session, "loop_clear", start=-1)
        listed = await call(session, "redact", reason="a private number", match="555-01")
        kept = await call(session, "loop_show")
        redacted = await call(session, "redact", reason="a private number", match="555-01", confirm=True)
        return shown, compacted, audited, cited, cleared, listed, kept, redacted, await call(session, "loop_show")

    answers = run_stdio(workspace, session_body)
    assert not any(error for error, _text in answers), answers
    shown, compacted, audited, cited, cleared, listed, kept, redacted, after = (text for _error, text in answers)
    rows = json.loads(shown)
    assert [row["seq"] for row in rows] == [5, 6, 7] and rows[0]["content"][0]["text"] == "message 5"
    assert rows[2]["content"][0]["text"].endswith("more characters: call log with seq=7 for the whole event]")
    assert compacted == "[S8] compacted loop main; archived seqs 1..5 in audit 1"
    assert [(row["start_seq"], row["end_seq"], row["entry_count"]) for row in json.loads(audited)] == [(1, 5, 5)]
    hit = json.loads(cited)["hit"]
    assert (hit["source"], hit["audit_id"], hit["entry"]["content_json"][0]["text"]) == ("audit", 1, "message 2")
    assert cleared == "cleared loop main[-1:] (seq 9); archived in audit 2"
    assert listed.splitlines()[-1] == "would redact 1 event; call redact again with confirm=true to do it"
    assert "555-0199" in kept
    assert redacted.startswith("redacted 1 event (redaction seq 10)")
    assert "555-0199" not in after and "[redacted: a private number]" in after
    assert "555-0199" not in (workspace / ".mem" / "log.db").read_bytes().decode("latin-1")
    check = run_mem("replay", "--check", "--workspace", workspace)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_loop_audit_and_redact_tools_refuse_as_the_cli_does_and_change_nothing(workspace):
    with Memory.open(workspace) as mem:
        mem.loop_append("user", [{"type": "text", "text": "only one"}])
    before = log_rows(workspace)

    async def session_body(session):
        return [await call(session, "loop_compact", summary="s", preserve=1),
                await call(session, "loop_compact", summary="s", preserve=-1),
                await call(session, "loop_compact", summary="  "),
                await call(session, "loop_clear", start=5),
                await call(session, "loop_show", last=-1),
                await call(session, "redact", reason="r"),
                await call(session, "redact", reason="r", targets=["1"], match="x"),
                await call(session, "redact", reason="r", targets=["1"], layer="mind"),
                await call(session, "redact", reason=" ", targets=["1"]),
                await call(session, "redact", reason="r", match="("),
                await call(session, "redact", reason="r", targets=["99"]),
                await call(session, "redact", reason="r", targets=[99]),
                await call(session, "audit", seq=99)]

    answers = run_stdio(workspace, session_body)
    assert all(error and "\n" not in text for error, text in answers), answers
    texts = [text for _error, text in answers]
    assert texts[0] == "loop 'main' has 1 messages; with preserve 1 there is nothing to compact"
    assert texts[0].replace("preserve", "--preserve") == cli_error(workspace, "loop", "compact", "--summary-file", "-",
                                                                  "--preserve", "1", input=b"s")
    assert texts[1] == "preserve must be 0 or more, not -1"
    assert texts[2] == "a compaction needs a non-empty summary"
    assert texts[3] == cli_error(workspace, "loop", "clear", "5")
    assert texts[4] == "last must be 0 or more, not -1"
    assert texts[5] == texts[6] == ("give targets (seqs or event ids) or match (a regular expression), not both or "
                                    "neither")
    assert texts[7] == "layer goes with match"
    assert texts[8] == "a redaction needs a reason"
    assert texts[9].startswith("match '(' is not a regular expression: ")
    assert texts[10] == cli_error(workspace, "redact", "99", "--reason", "r")
    assert texts[11] == texts[10]  # a seq as a number, as an agent may well give it
    assert texts[12] == cli_error(workspace, "audit", "list", "--seq", "99")
    assert log_rows(workspace) == before


def test_the_sync_tool_says_what_a_person_running_mem_sync_would_hear(workspace, tmp_path):
    """Regression: the tool dropped the pull's warnings (a layer placed on the agent's own file, a rejected event):
    an agent syncing over MCP never heard them."""
    from hubserver import HubServer
    from sync.client import add_remote

    hub = HubServer(str(tmp_path / "hub.db")).start()
    try:
        (tmp_path / "alice.token").write_text(hub.storage.add_agent("alice") + "\n")
        with Memory.open(workspace) as mem:
            add_remote(mem, "origin", hub.url, str(tmp_path / "alice.token"))
        run_mem("-w", workspace, "file", "write", "memory/insights.md", "--file", "-", input=b"mine\n", check=True)
        hub.storage.apply_contract(Contract(layers={"insights": ContractLayer(
            path="memory/insights.md", format="entries", producers=["*"], consumers=["*"])}))

        async def session_body(session):
            return [await call(session, "sync"), await call(session, "sync")]

        (error, first), (_, second) = run_stdio(workspace, session_body)
    finally:
        hub.stop()
    assert not error
    assert json.loads(first)["warnings"] == [  # nc36b: in the tools' words, not `mem file delete`
        "warning: layer 'insights' is placed at memory/insights.md, where this agent's own file is: the layer's file is "
        "not written there and view of /memories/memory/insights.md shows the agent's file, until the delete tool "
        "removes it (to keep it, rename it first to a path outside the layer)"]
    assert "warnings" not in json.loads(second)


def test_an_agent_on_mcp_hears_of_a_conflict_reads_its_versions_and_resolves_it(workspace, tmp_path):
    """Regression (nc17b): the sync tool's answer said nothing of a conflict its pull opened (the file then showing
    the other agent's version, not the one this agent had written), and no tool listed or resolved conflicts."""
    from hubserver import HubServer
    from sync.client import add_remote

    hub = HubServer(str(tmp_path / "hub.db")).start()
    bob = tmp_path / "bob"
    try:
        hub.storage.apply_contract(Contract(layers={"drafts": ContractLayer(
            path="content/drafts/", format="pages", producers=["*"], consumers=["*"])}))
        for agent, root in (("alice", workspace), ("bob", bob)):
            (tmp_path / f"{agent}.token").write_text(hub.storage.add_agent(agent) + "\n")
            if root is bob:
                Memory.init(bob, "bob").close()
            with Memory.open(root) as mem:
                add_remote(mem, "origin", hub.url, str(tmp_path / f"{agent}.token"))
        launch = "---\ntype: plan\n---\n# Launch\n\nWe launch on {}.\n"
        for day, root in (("Tuesday", workspace), ("Wednesday", workspace), ("Thursday", bob)):
            run_mem("-w", root, "sync", check=True)
            run_mem("-w", root, "page", "write", "launch", "--layer", "drafts", "--file", "-",
                    input=launch.format(day).encode(), check=True)
            if day != "Wednesday":
                run_mem("-w", root, "sync", check=True)

        async def session_body(session):
            answers = [await call(session, "sync"), await call(session, "conflicts")]
            answers.append(await call(session, "resolve", page="drafts/launch", content=launch.format("Friday")))
            answers.append(await call(session, "resolve", page="launch", content=launch.format("Friday")))
            answers.append(await call(session, "resolve", page="drafts/launch", content=launch.format("Friday")))
            return answers + [await call(session, "sync"), await call(session, "conflicts")]

        (_, synced), (_, listed), (_, resolved), (refused, said), none, (_, again), (_, after) = run_stdio(
            workspace, session_body)
        run_mem("-w", bob, "sync", check=True)
    finally:
        hub.stop()
    [told] = json.loads(synced)["conflicts"]
    assert told.startswith("drafts/launch: 2 versions at once, the file shows the winner ")
    [conflict] = json.loads(listed)
    assert (conflict["layer"], conflict["slug"]) == ("drafts", "launch")
    assert sorted((head["agent"], head["text"].split("on ")[1]) for head in conflict["heads"]) == [
        ("alice", "Wednesday.\n"), ("bob", "Thursday.\n")]
    assert resolved.startswith("resolved drafts/launch (seq ")
    assert refused and said == "name the page as LAYER/SLUG (as conflicts names it), not 'launch'"
    assert none == (True, "drafts/launch has no conflict (one head): change it with str_replace or create on "
                          "/memories/content/drafts/launch.md")  # not `mem page write` (nc18b)
    assert "conflicts" not in json.loads(again) and json.loads(after) == []
    assert run_mem("-w", bob, "conflicts").returncode == 0
    assert "We launch on Friday." in (bob / "content/drafts/launch.md").read_text()


@pytest.mark.parametrize("stop, code", [("SIGTERM", 143), ("SIGINT", 0)])
def test_sigterm_or_ctrl_c_after_a_burst_of_calls_still_writes_the_files(workspace, stop, code):
    """Regression: the files a burst of calls left pending were written only when stdin closed; MCP's shutdown
    (close stdin, then SIGTERM) killed the server before it, and mind.md on disk stayed stale. Regression
    (nc15a): Ctrl-C with stdin still open (a terminal) printed "interrupted" and the server ran on for good."""
    import signal

    server = subprocess.Popen([*mem_command(), "mcp", "--workspace", str(workspace)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server_env())

    def send(message):
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
    server.stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    always = (workspace / "mind.md").read_text().split("\n").index("## Always") + 1
    for i in range(30):
        send({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": "insert", "arguments": {
            "path": "/memories/mind.md", "insert_line": always + i + (1 if i else 0), "insert_text": f"- line {i}"}}})
        assert b'"isError":false' in server.stdout.readline()
    server.send_signal(getattr(signal, stop))
    assert server.wait(timeout=60) == code
    on_disk = (workspace / "mind.md").read_text()
    assert all(f"line {i}" in on_disk for i in range(30)), on_disk
    assert server.stderr.read() == b""


def test_sigterm_during_a_call_waiting_on_a_silent_hub_stops_the_server_at_once(workspace, tmp_path):
    """Regression: SIGTERM (MCP's shutdown over stdio) waited for the call in progress, here a sync whose hub never
    answers (60 s), as the signal's handler ran on the event loop the call held; the client then killed the server."""
    import signal

    from hubserver import HubServer
    from sync.client import add_remote

    hub = HubServer(str(tmp_path / "hub.db")).start()
    try:
        (tmp_path / "alice.token").write_text(hub.storage.add_agent("alice") + "\n")
        with Memory.open(workspace) as mem:
            add_remote(mem, "origin", hub.url, str(tmp_path / "alice.token"))
    finally:
        hub.stop()
    silent = socket.socket()
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    silent.bind(("127.0.0.1", int(hub.url.rpartition(":")[2])))
    silent.listen(8)  # takes the connection, never reads the request nor answers it
    head, waiting = log_rows(workspace), None
    server = subprocess.Popen([*mem_command(), "mcp", "--workspace", str(workspace)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server_env())
    try:
        for message in ({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sync", "arguments": {}}}):
            server.stdin.write((json.dumps(message) + "\n").encode())
            server.stdin.flush()
            if message["method"] == "initialize":  # as a client does: sent together, the call (which holds the event
                assert b'"id":0' in server.stdout.readline()  # loop) could run before this answer was written
        silent.settimeout(60)
        token = (tmp_path / "alice.token").read_text().strip().encode()
        while waiting is None:  # the sync is waiting on the hub (a sleep was too short on a loaded machine), not
            taken, _ = silent.accept()  # another test's client on this port: its request carries alice's token
            taken.settimeout(30)
            if token in taken.recv(65536):
                waiting = taken
            else:
                taken.close()
        time.sleep(0.5)  # the server, loaded, is still inside the call after its request went out
        assert server.poll() is None
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 143
        assert time.monotonic() - stopped < 5
    finally:
        server.kill()
        server.wait()
        silent.close()
        if waiting is not None:
            waiting.close()
    assert server.stderr.read().decode() == ("warning: stopped during a call (sync), which may not have ended; the "
                                             "log holds every change made, and the next `mem` command writes the "
                                             "files\n")
    assert log_rows(workspace) == head
    assert run_mem("-w", workspace, "status", check=True).returncode == 0


def test_refusals_name_the_tools_way_forward_not_the_clis(workspace):
    """Regression (nc13c): a tool was told to pass --note or to use `mem page write|delete|rename`, which it cannot."""
    from mcp.client.client import Client

    from cli.mcp_server import build_server

    async def main():
        with Memory.open(workspace) as mem:
            mem.write_page("held", PAGE.replace(b"type: procedure", b"type: procedure\ngovernance: hold"))
            async with Client(build_server(mem)) as client:
                return [await client.session.call_tool(tool, arguments) for tool, arguments in (
                    ("page_release", {"slug": "held", "note": ""}),
                    ("memory", {"command": "create", "path": "/memories/mind.md/x", "file_text": "x"}))]

    release, create = anyio.run(main)
    assert release.is_error and release.content[0].text == (
        "a release needs a note: why the held page may change now (the note argument)"), release.content[0].text
    assert create.is_error and create.content[0].text == (
        "mind.md/x belongs to the mind wiki: a page is /memories/mind/<slug>.md, created, edited, deleted or renamed as "
        "a page, and only the `## Always` lines of /memories/mind.md are edited"), create.content[0].text
    said = run_mem("page", "release", "held", "--note", " ", "--workspace", workspace)
    assert said.stderr == b"error: a release needs a note: why the held page may change now (--note)\n"


def test_a_contract_another_process_took_places_the_files_the_tools_read(tmp_path):
    """Regression (nc34b): a running server kept the contract it had read; once the agent's own `mem pull` (another
    process, folding into the same views) took a contract that moved a layer's file, `view /memories` listed the old
    file, and both the old path and the new one "did not exist", until the server's own `sync`. The server now
    catches up with a contract taken elsewhere before each call."""
    from teamhub import Team, layer

    moved = layer("insights", "memory/moved.md")
    team = Team(tmp_path, agents=("writer",), contract=layer("insights", "memory/insights.md"))
    try:
        team.mem("writer", "entry", "add", "insights", "[FACT] 2026-12-01: staging first", check=True)
        team.mem("writer", "sync", check=True)

        async def body(session):
            before = await call(session, "view", path="/memories/memory/insights.md")
            team.apply(moved)
            team.mem("writer", "pull", check=True)
            return before, await call(session, "view", path="/memories"), \
                await call(session, "view", path="/memories/memory/moved.md")

        before, listed, now = run_stdio(team.root / "writer", body)
    finally:
        team.stop()
    assert not before[0] and "staging first" in before[1]
    assert "/memories/memory/moved.md" in listed[1] and "/memories/memory/insights.md" not in listed[1], listed
    assert now == (False, now[1]) and "staging first" in now[1], now


def test_a_shared_page_in_conflict_is_said_so_by_view_and_by_an_edit_that_leaves_the_conflict(tmp_path):
    """Regression (nc34b): `view` of a shared page in conflict showed the winner alone, and `str_replace` answered
    "edited" while the other head stayed: an agent using the memory tool alone believed it had settled the page."""
    from teamhub import Team

    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        team.conflict("plan", "Plan", "base", "{agent} says")

        async def body(session):
            return [await call(session, "search", query="writer says"),
                    await call(session, "view", path="/memories/content/drafts/plan.md"),
                    await call(session, "str_replace", path="/memories/content/drafts/plan.md", old_str="says",
                               new_str="says, merged"),
                    await call(session, "view", path="/memories/content/drafts/other.md")]

        searched, viewed, edited, other = run_stdio(team.root / "reviewer", body)
    finally:
        team.stop()
    [hit] = json.loads(searched[1])  # nc34b: the flag named `mem conflicts --show`
    assert "conflict: not the version the file shows (the conflicts tool)" in hit["flags"], hit
    note = ("Note: /memories/content/drafts/plan.md is in conflict: 2 versions of it are heads (1 by reviewer, 1 by "
            "writer), and the file shows one of them")
    assert not viewed[0] and viewed[1].endswith(f"{note}. The conflicts tool shows each; resolve writes one version "
                                                "over them all."), viewed
    assert not edited[0] and f"{note}, which this edit built on: the other stays a head." in edited[1], edited
    assert other[0] and "Note:" not in other[1]


def test_a_shared_pages_citation_search_hands_out_reads_as_a_resource(tmp_path):
    """Regression (nc34b): `search` cites a shared page as `adf-file://content/drafts/x.md`, which `cite` resolves,
    but reading it as a resource was `Unknown resource`, and the resource list named the wiki's pages alone."""
    from teamhub import Team

    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        team.mem("writer", "page", "write", "plan", "--layer", "drafts", "--file", team.page("p", "Plan", "ship it"),
                 check=True)
        team.mem("writer", "sync", check=True)
        team.mem("reviewer", "sync", check=True)

        async def body(session):
            [hit] = json.loads((await call(session, "search", query="ship"))[1])
            listed = [str(r.uri) for r in (await session.list_resources()).resources]
            read = await session.read_resource(hit["citation"])
            try:
                await session.read_resource("adf-file://content/drafts/nosuch.md")
                missing = None
            except Exception as exc:  # noqa: BLE001 - the SDK's error for an unknown resource
                missing = str(exc)
            return hit["citation"], listed, read.contents[0].text, missing

        citation, listed, text, missing = run_stdio(team.root / "reviewer", body)
    finally:
        team.stop()
    assert citation == "adf-file://content/drafts/plan.md" and citation in listed, listed
    assert "ship it" in text and missing is not None and "nosuch" in missing, missing


def test_a_shared_page_whose_conflict_a_delete_wins_is_said_so_by_view(tmp_path):
    """Regression (nc35a): when a delete won a conflict, `view` said only that the file does not exist, though the
    other version stayed a head."""
    from teamhub import Team

    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        team.mem("writer", "page", "write", "plan", "--layer", "drafts", "--file", team.page("p", "Plan", "base"),
                 check=True)
        for agent in ("writer", "reviewer"):
            team.mem(agent, "sync", check=True)
        team.mem("reviewer", "page", "write", "plan", "--layer", "drafts", "--file", team.page("r", "Plan", "mine"),
                 check=True)
        team.mem("writer", "page", "delete", "plan", "--layer", "drafts", check=True)  # made after: its id wins
        for agent in ("reviewer", "writer", "reviewer"):
            team.mem(agent, "sync", check=True)

        async def body(session):
            return await call(session, "view", path="/memories/content/drafts/plan.md")

        error, text = run_stdio(team.root / "reviewer", body)
    finally:
        team.stop()
    assert error and text.startswith("The path /memories/content/drafts/plan.md does not exist."), text
    assert "is in conflict: 2 versions of it are heads (1 by reviewer, 1 by writer), and the one that wins deletes " \
           "the file." in text, text


def test_a_file_under_a_pages_layers_folder_is_refused_naming_the_tools_way(tmp_path):
    """Regression (nc36b): `create` of /memories/content/drafts/notes.txt was told to use `mem page write`, which an
    agent cannot run; the CLI keeps its own words."""
    from teamhub import Team

    team = Team(tmp_path, agents=("writer",))
    try:
        team.mem("writer", "pull", check=True)

        async def body(session):
            return await call(session, "create", path="/memories/content/drafts/notes.txt", file_text="hello")

        error, text = run_stdio(team.root / "writer", body)
        said = team.mem("writer", "file", "write", "content/drafts/notes.txt", "--file", "-", input=b"hello")
    finally:
        team.stop()
    assert error and text == ("content/drafts/notes.txt belongs to layer 'drafts'; write it with create of "
                              "/memories/content/drafts/SLUG.md"), text
    assert said.stderr.decode() == ("error: content/drafts/notes.txt belongs to layer 'drafts'; write it with `mem page "
                                    "write SLUG --layer drafts`\n"), said.stderr


def test_the_sync_tool_names_the_way_to_take_back_writes_a_layer_no_longer_takes(tmp_path):
    """Regression (nc36b): a producer dropped from a layer heard at every sync that its writes cannot be pushed, and
    nothing of the redact tool, which takes them back."""
    from teamhub import CONTRACT, Team

    team = Team(tmp_path, agents=("writer", "reviewer"))
    try:
        team.mem("writer", "pull", check=True)
        team.mem("writer", "page", "write", "plan", "--layer", "drafts", "--file", team.page("p", "Plan", "mine"),
                 check=True)
        team.apply(CONTRACT.replace('producers = ["researcher", "writer", "reviewer"]', 'producers = ["reviewer"]'))

        async def body(session):
            return await call(session, "sync")

        error, text = run_stdio(team.root / "writer", body)
    finally:
        team.stop()
    warnings = json.loads(text)["warnings"]
    assert not error and warnings[0].startswith("error: 1 event in layer drafts cannot be pushed: the hub's "
                                                "contract does not list 'writer'"), warnings
    assert warnings[1] == ("note: the writes to layer drafts this agent no longer produces wait until it does; if it "
                           "will not, the redact tool with targets [1] takes them back"), warnings


def drafts_moved_to_posts(tmp_path):
    """A team of one (`writer`) whose page drafts/plan went to the hub before a contract moved the layer from
    content/drafts/ to content/posts/, a change the writer has pulled."""
    from teamhub import CONTRACT, Team

    team = Team(tmp_path, agents=("writer",))
    try:
        team.mem("writer", "page", "write", "plan", "--layer", "drafts", "--file", team.page("p", "Plan", "ours"),
                 check=True)
        team.mem("writer", "sync", check=True)
        team.apply(CONTRACT.replace('path = "content/drafts/"', 'path = "content/posts/"'))
        team.mem("writer", "pull", check=True)
    except BaseException:
        team.stop()
        raise
    return team


def test_a_file_created_where_a_layer_moved_from_is_said_to_be_the_agents_own(tmp_path):
    """Regression (nc36b): after a contract moved a layer, `create` at its old path answered as a shared write does,
    and made a file of the agent's own that no other agent ever got."""
    team = drafts_moved_to_posts(tmp_path)
    try:

        async def body(session):
            return await call(session, "create", path="/memories/content/drafts/plan.md",
                              file_text="---\ntype: draft\n---\n# Plan\n\nfor the team\n")

        error, text = run_stdio(team.root / "writer", body)
    finally:
        team.stop()
    assert not error and text.endswith(
        "Note: /memories/content/drafts/plan.md was where layer drafts kept it until a contract change (it is at "
        "/memories/content/posts/plan.md now): this file is this agent's own, which no other agent gets."), text


def test_a_citation_of_a_page_the_contract_moved_says_where_it_is_now(tmp_path):
    """Regression (nc36b): `cite` of a shared page's citation from before a contract moved its layer said "no such
    file", where `show` of the same path names the move (CLI and tool alike)."""
    team = drafts_moved_to_posts(tmp_path)
    try:
        cited = team.mem("writer", "cite", "adf-file://content/drafts/plan.md")

        async def body(session):
            return await call(session, "cite", citation="adf-file://content/drafts/plan.md")

        error, text = run_stdio(team.root / "writer", body)
    finally:
        team.stop()
    said = cited.stderr.decode()
    assert cited.returncode == 1 and said.startswith("error: content/drafts/plan.md: moved to "
                                                     "content/posts/plan.md") and "no such file" not in said, said
    why = json.loads(text)["error"]
    assert error and why.startswith("content/drafts/plan.md: moved to content/posts/plan.md"), why
    assert "the show tool" in why, why
