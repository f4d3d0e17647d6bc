"""Two agents syncing through a `mem serve` hub, driven by the real `mem` command."""

import json
import signal
import subprocess
import time

import pytest

from conftest import log_rows, mem_command, run_mem
from hubserver import mem_serve

CONTRACT = """
[layers.insights]
path = "memory/cross-domain-insights.md"
format = "entries"
producers = ["*"]
consumers = ["*"]

[layers.drafts]
path = "content/drafts/"
format = "pages"
producers = ["writer", "main"]
consumers = ["main", "writer"]
"""


@pytest.fixture
def team(tmp_path):
    hub_db = tmp_path / "hub.db"
    (tmp_path / "contracts.toml").write_text(CONTRACT)
    hub = ("--db", hub_db)
    run_mem("hub", "init", *hub, check=True)
    run_mem("hub", "contract", "apply", tmp_path / "contracts.toml", *hub, check=True)
    for agent in ("main", "writer"):
        token = run_mem("hub", "agent", "add", agent, *hub, check=True).stdout.decode().strip()
        (tmp_path / f"{agent}.token").write_text(token + "\n")
    with mem_serve(hub_db) as url:
        for agent in ("main", "writer"):
            run_mem("init", "-w", tmp_path / agent, "--agent", agent, check=True)
            run_mem("remote", "add", "origin", url, "--token-file", tmp_path / f"{agent}.token", "-w", tmp_path / agent,
                    check=True)
        yield tmp_path, hub


def mem(tmp, agent, *args, **kw):
    return run_mem("-w", tmp / agent, *args, **kw)


def test_entries_travel_and_reversals_are_marked(team):
    tmp, hub = team
    mem(tmp, "main", "pull", check=True)
    first = mem(tmp, "main", "entry", "add", "insights", "[DECISION] 2026-11-01: Hub on SQLite", check=True)
    old_id = first.stdout.decode().split()[0]
    mem(tmp, "main", "push", check=True)
    mem(tmp, "writer", "pull", check=True)
    mem(tmp, "writer", "entry", "add", "insights", "[DECISION] Hub on PostgreSQL", "--reverses", old_id,
        check=True)
    mem(tmp, "writer", "entry", "add", "insights", "[LESSON] Sync before you write", check=True)
    assert json.loads(mem(tmp, "writer", "push", "--json", check=True).stdout)["pushed"] == 2
    mem(tmp, "main", "pull", check=True)
    a = (tmp / "main/memory/cross-domain-insights.md").read_text()
    b = (tmp / "writer/memory/cross-domain-insights.md").read_text()
    assert a == b
    assert "[DECISION] 2026-11-01: Hub on SQLite [reversed by " in a and f"(reverses {old_id[:18]})" in a
    entries = json.loads(mem(tmp, "main", "entry", "list", "insights", "--json", check=True).stdout)
    assert [e["type"] for e in entries] == ["DECISION", "DECISION", "LESSON"]
    assert entries[0]["reversed_by"] == entries[1]["id"]
    believed = json.loads(run_mem("hub", "believed", "writer", *hub, "--json", check=True).stdout)
    assert believed["cursor"] >= 1
    own = json.loads(mem(tmp, "main", "believed", "--json", check=True).stdout)
    assert own["shared"]["memory/cross-domain-insights.md"] == a
    then = json.loads(mem(tmp, "main", "believed", "--seq", "1", "--json", check=True).stdout)
    assert list(then["shared"]) == ["memory/cross-domain-insights.md"]
    assert "Hub on PostgreSQL" not in then["shared"]["memory/cross-domain-insights.md"]
    # the entries as of seq 1: one, not yet reversed (entry list had no --at/--seq)
    earlier = json.loads(mem(tmp, "main", "entry", "list", "insights", "--seq", "1", "--json", check=True).stdout)
    assert [(e["id"], e["reversed_by"]) for e in earlier] == [(old_id, None)]


def test_a_shared_page_conflict_and_its_resolution(team):
    tmp, hub = team
    for agent in ("main", "writer"):
        mem(tmp, agent, "pull", check=True)
    page = tmp / "p.md"
    page.write_text("---\ntype: draft\n---\n# Launch post\n\nfirst\n")
    mem(tmp, "writer", "page", "write", "launch", "--layer", "drafts", "--file", page, check=True)
    mem(tmp, "writer", "sync", check=True)
    mem(tmp, "main", "sync", check=True)
    for agent, text in (("main", "main's edit"), ("writer", "writer's edit")):
        page.write_text(f"---\ntype: draft\n---\n# Launch post\n\n{text}\n")
        mem(tmp, agent, "page", "write", "launch", "--layer", "drafts", "--file", page, check=True)
    told = [mem(tmp, agent, "sync", check=True).stderr.decode() for agent in ("main", "writer", "main")]
    said = ("warning: drafts/launch is now in conflict: its file shows the version every replica shows, the others "
            "are kept (`mem conflicts --show`; `mem resolve drafts/launch --file F`)\n")
    assert told == ["", said, said]  # each agent once, at the sync that brought the other's edit (a sync said nothing)
    assert mem(tmp, "main", "sync", check=True).stderr == b""
    (tmp / "reader.toml").write_text(CONTRACT.replace('consumers = ["main", "writer"]',
                                                      'consumers = ["main", "writer", "reader"]'))
    run_mem("hub", "contract", "apply", tmp / "reader.toml", *hub, check=True)
    (tmp / "reader.token").write_text(run_mem("hub", "agent", "add", "reader", *hub, check=True).stdout.decode())
    url = json.loads(mem(tmp, "main", "remote", "list", "--json", check=True).stdout)[0]["url"]
    run_mem("init", "-w", tmp / "reader", "--agent", "reader", check=True)
    mem(tmp, "reader", "remote", "add", "origin", url, "--token-file", tmp / "reader.token", check=True)
    assert mem(tmp, "reader", "pull", check=True).stderr.decode() == (  # it cannot resolve it: not told to
        "warning: drafts/launch is now in conflict: its file shows the version every replica shows, the others are "
        "kept (`mem conflicts --show`; a producer of the layer resolves it)\n")
    answers = [mem(tmp, a, "conflicts", "--json") for a in ("main", "writer")]
    assert [a.returncode for a in answers] == [1, 1]  # conflicts are loud
    views = [json.loads(a.stdout) for a in answers]
    assert views[0] == views[1] and len(views[0]) == 1 and len(views[0][0]["heads"]) == 2
    launch = "content/drafts/launch.md"
    assert (tmp / "main" / launch).read_bytes() == (tmp / "writer" / launch).read_bytes()
    page.write_text("---\ntype: draft\n---\n# Launch post\n\nboth edits\n")
    mem(tmp, "main", "resolve", "drafts/launch", "--file", page, check=True)
    mem(tmp, "main", "sync", check=True)
    mem(tmp, "writer", "sync", check=True)
    for agent in ("main", "writer"):
        assert b"no conflicts" in mem(tmp, agent, "conflicts", check=True).stdout
        assert "both edits" in (tmp / agent / "content/drafts/launch.md").read_text()
        assert mem(tmp, agent, "replay", "--check").returncode == 0
        before = (tmp / agent / "content/drafts/launch.md").read_bytes()
        assert b"0 files written, 0 removed" in mem(tmp, agent, "replay", check=True).stdout
        assert (tmp / agent / "content/drafts/launch.md").read_bytes() == before


def test_contract_history_and_refusals(team):
    tmp, hub = team
    before = int(time.time() * 1000)
    time.sleep(0.05)
    (tmp / "c2.toml").write_text(CONTRACT.replace('producers = ["writer", "main"]', 'producers = ["writer"]'))
    run_mem("hub", "contract", "apply", tmp / "c2.toml", *hub, check=True)
    from eventstore.instants import format_instant, format_local

    then = run_mem("hub", "contract", "show", *hub, "--at", format_instant(before), check=True)
    assert 'producers = ["writer", "main"]' in then.stdout.decode()
    position = then.stdout.decode().splitlines()[0].split()[-1]
    assert then.stderr.decode() == f"as of {format_local(before)} (hub position {position})\n"
    believed = run_mem("hub", "believed", "writer", *hub, "--at", "now", check=True)
    assert believed.stderr.decode().startswith("as of ") and "(hub position " in believed.stderr.decode()
    assert 'producers = ["writer"]' in run_mem("hub", "contract", "show", *hub, check=True).stdout.decode()

    mem(tmp, "main", "pull", check=True)
    page = tmp / "p.md"
    page.write_text("---\ntype: draft\n---\n# X\n")
    before_rows = log_rows(tmp / "main")
    for args, expect in [
        (["page", "write", "x", "--layer", "drafts", "--file", page], "does not produce layer"),
        (["entry", "add", "insights", "[OPINION] nope"], "not one of"),
        (["entry", "add", "insights", "no type at all"], "[TYPE]"),
        (["entry", "add", "nowhere", "[FACT] x"], "not in the contract"),
        (["entry", "add", "drafts", "[FACT] x"], "holds pages"),
        (["entry", "add", "insights", "[FACT] x", "--reverses", "01a20000-0000-7000-8000-000000000000"],
         "no entry"),
        (["resolve", "drafts/ghost", "--file", page], "does not produce"),
        (["remote", "add", "x", "ftp://nowhere", "--token-file", page], "not an http"),
    ]:
        result = mem(tmp, "main", *args)
        assert result.returncode != 0 and expect in result.stderr.decode(), (args, result.stderr)
    assert log_rows(tmp / "main") == before_rows

    run_mem("hub", "agent", "revoke", "writer", *hub, check=True)
    refused = mem(tmp, "writer", "pull")
    assert refused.returncode == 1 and b"Invalid token" in refused.stderr
    duplicate = run_mem("hub", "agent", "add", "main", *hub)
    assert duplicate.returncode == 1 and b"exists already" in duplicate.stderr
    bad = tmp / "bad.toml"
    bad.write_text('[layers.x]\npath = "../escape.md"\nformat = "entries"\nproducers = ["*"]\nconsumers = ["*"]\n')
    assert b"inside the workspace" in run_mem("hub", "contract", "apply", bad, *hub).stderr
    bad.write_text("[layers.x\n")
    assert b"not valid TOML" in run_mem("hub", "contract", "apply", bad, *hub).stderr
    # a traceback before; an empty file replaced the contract with one that shares nothing
    position = json.loads(run_mem("hub", "contract", "show", "--json", *hub, check=True).stdout)["position"]
    for text, why in ((b"\xff\xfe[layers]", "is not a contract: it is not UTF-8 text"), (b"", "names no layers"),
                      (b"# nothing yet\n", "names no layers")):
        bad.write_bytes(text)
        refused = run_mem("hub", "contract", "apply", bad, *hub)
        err = refused.stderr.decode()
        assert refused.returncode == 1 and err.startswith("error: ") and why in err and len(err.splitlines()) == 1
    assert json.loads(run_mem("hub", "contract", "show", "--json", *hub, check=True).stdout)["position"] == position


def test_pull_follow_long_polls_until_interrupted(team):
    tmp, _hub = team
    mem(tmp, "writer", "pull", check=True)
    follower = subprocess.Popen([*mem_command(), "-w", tmp / "main", "pull", "--follow", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)
        mem(tmp, "writer", "entry", "add", "insights", "[FACT] Followers see this without asking", check=True)
        mem(tmp, "writer", "push", check=True)
        target = tmp / "main/memory/cross-domain-insights.md"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (target.exists() and "without asking" in target.read_text()):
            time.sleep(0.2)
        assert "Followers see this without asking" in target.read_text()
        assert follower.poll() is None  # still following
    finally:
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    # --json: a JSON object per batch as it lands (a follower never reaches a final report)
    assert {"pulled": 1, "returned": 0} in [{k: b[k] for k in ("pulled", "returned")}
                                           for b in map(json.loads, out.decode().splitlines())], out


def test_removing_a_remote_that_never_got_some_events_says_so(tmp_path):
    """Regression: `mem remote remove` dropped a remote with unpushed events without a word."""
    from teamhub import Team

    team = Team(tmp_path, agents=("alice",))
    try:
        team.mem("alice", "pull", check=True)
        team.mem("alice", "entry", "add", "insights", "[FACT] not pushed yet", check=True)
        removed = team.mem("alice", "remote", "remove", "origin", check=True)
        assert removed.stderr == (  # "never reached origin": a cursor that started over knows nothing of it (nc21a)
            b"warning: origin never acknowledged 1 event of this agent, as far as this workspace knows (its push "
            b"cursor); the next remote added sends them, and a hub that holds them says so\n")
    finally:
        team.stop()


def test_a_sync_says_how_many_events_the_hub_held_already_as_a_push_does(tmp_path):
    """Regression (nc26a): a sync sending again what a killed one had got onto the hub (or a remote added again)
    said only how many were new; `mem push` says how many were there already, and so does `mem sync`."""
    from teamhub import Team

    team = Team(tmp_path, agents=("alice",))
    try:
        from projections.memory import Memory
        from sync.client import HubClient

        for n in range(4):
            team.mem("alice", "entry", "add", "insights", f"[FACT] fact {n}", check=True)
        with Memory.open(tmp_path / "alice") as mem:  # as a sync killed once the hub had committed: no cursor moved
            events = list(mem.log.read(layers=["insights"]))[:3]
        client = HubClient(team.url, (tmp_path / "alice.token").read_text().strip())
        client.push(events)
        client.http.close()
        said = team.mem("alice", "sync", check=True).stdout.decode()
        assert said.startswith("pushed 1 (3 already there), pulled 0 (origin)"), said
    finally:
        team.stop()


def test_status_bounds_how_far_behind_a_fresh_workspace_is_by_the_hubs_head():
    """Regression: a fresh workspace 22,860 hub positions behind read `behind the hub: 5000+ events` (one page of the
    pull counted): the hub's head, which its contract answer gives, says how far it may be."""
    from sync.status import RemoteStatus

    def status(**fields):
        return RemoteStatus(name="origin", url="http://127.0.0.1:1", unpushed=0, held=[], last_pull=None, **fields)

    assert status(pulled_to=None, behind=5000, more_behind=True, hub_head=22_860).behind_text() == (
        "5000+ events (the hub's head is 22,860 positions past this workspace's last pull, in every layer)")
    assert status(pulled_to=860, behind=5000, more_behind=True, hub_head=22_860).behind_text().startswith(
        "5000+ events (the hub's head is 22,000 positions past")
    assert status(pulled_to=3, behind=2, hub_head=5).behind_text() == "2 events"
    assert status(pulled_to=3, behind=None, hub_error="refused").behind_text() == "unknown (refused)"
    assert status(pulled_to=3, behind=None).behind_text() == "not asked"
