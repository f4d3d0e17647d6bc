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
                 "the token is printed once", "a remote is a hub", "both versions stay (two heads)"):
        assert out.count(term) == 1, term
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
    run_mem(*w, "loop", "append", "--role", "user", "--json", '[{"type": "text", "text": "hi"}]', "--model", "m1",
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


def test_workspace_option_before_or_after_the_command(tmp_path):
    target = tmp_path / "elsewhere"
    assert run_mem("init", "--workspace", target, "--agent", "bob", cwd=tmp_path, check=True).returncode == 0
    assert (target / ".mem" / "log.db").exists() and (target / "mind.md").exists()
    after = json.loads(run_mem("status", "-w", target, "--json", cwd=tmp_path, check=True).stdout)
    before = json.loads(run_mem("-w", target, "status", "--json", cwd=tmp_path, check=True).stdout)
    assert after == before and after["agent"] == "bob"
    inside = json.loads(run_mem("status", "--json", cwd=target / "mind", check=True).stdout)
    assert inside["workspace"] == str(target)
