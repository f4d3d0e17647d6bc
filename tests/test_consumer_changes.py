"""A contract change reaches each agent whole: a running follower takes it as it happens (it never rejects the
events of a layer it was just given, nor moves its cursor past them), and an agent made a consumer of a layer (or
made one again) receives that layer's past, as a new workspace would, and is told so until it has."""

import json
import signal
import subprocess
import time

import pytest

from conftest import log_rows, mem_command, run_mem
from projections.memory import Memory
from sync.client import _Tally, get_remote, HubClient
from teamhub import Team, layer


INSIGHTS = layer("insights", "memory/insights.md")
NEWS = layer("news", "memory/news.md")


def decisions(*consumers: str) -> str:
    return INSIGHTS + layer("decisions", "memory/decisions.md", producers=["alice"], consumers=["alice", *consumers])


def drafts(*consumers: str) -> str:
    return INSIGHTS + layer("drafts", "content/drafts/", "pages", producers=["alice"], consumers=["alice", *consumers])


@pytest.fixture
def team(tmp_path):
    team = Team(tmp_path, agents=("alice", "bob"), contract=decisions())
    yield team
    team.stop()


def entry(team: Team, layer: str, text: str) -> None:
    team.mem("alice", "entry", "add", layer, text, check=True)


def eventually(condition, seconds: float = 15.0) -> bool:
    """Whether `condition()` holds within `seconds` (less than a follower's long-poll wait, FOLLOW_WAIT)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def has(path, text: str):
    return lambda: path.exists() and text in path.read_text()


class Follower:
    """`mem pull --follow` of an agent, in a process of its own, polling the hub once it has caught up."""

    def __init__(self, team: Team, agent: str):
        self.process = subprocess.Popen([*mem_command(), "-w", team.root / agent, "pull", "--follow"],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.marker = team.root / agent / "memory/insights.md"
        entry(team, "insights", f"[FACT] {agent}'s follower is up")
        team.mem("alice", "push", check=True)
        assert eventually(has(self.marker, "follower is up"), 60)

    def stop(self) -> tuple[str, str]:
        self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, err
        return out.decode(), err.decode()


def test_a_follower_takes_a_new_layer_as_it_comes(team):
    follower = Follower(team, "bob")
    try:
        team.apply(decisions() + NEWS)
        team.mem("alice", "pull", check=True)
        entry(team, "news", "[FACT] the first news")
        team.mem("alice", "push", check=True)
        # the new layer's event alone wakes the follower, which takes it
        assert eventually(has(team.root / "bob/memory/news.md", "the first news"))
        entry(team, "news", "[FACT] more news")
        entry(team, "insights", "[FACT] an insight")
        team.mem("alice", "push", check=True)
        assert eventually(has(team.root / "bob/memory/insights.md", "an insight"))
    finally:
        out, err = follower.stop()
    assert "rejected" not in err, err
    assert "more news" in (team.root / "bob/memory/news.md").read_text()
    assert "pulled 0 events" in team.mem("bob", "pull", check=True).stdout.decode()


def test_a_page_rejected_under_an_old_contract_is_checked_again_under_the_hubs(team):
    """A pull whose page was read under a contract newer than the workspace's copy (the change came after the
    pull took the contract) takes the hub's contract before it rejects anything."""
    team.mem("bob", "pull", check=True)
    team.apply(decisions() + NEWS)
    team.mem("alice", "pull", check=True)
    entry(team, "news", "[FACT] the first news")
    team.mem("alice", "push", check=True)
    with Memory.open(team.root / "bob") as memory:
        assert "news" not in memory.views.contract.layers  # bob's copy is the old one
        remote = get_remote(memory, None)
        with HubClient.for_remote(remote) as client:
            tally = _Tally(remote, None, None, client=client)
            tally.store(memory, client.pull_page(memory.log.state("pull:origin")))
        assert not tally.rejected and tally.pulled == 1
        assert "news" in memory.views.contract.layers
    assert "the first news" in (team.root / "bob/memory/news.md").read_text()


def test_an_agent_made_a_consumer_receives_the_layers_past(team):
    entry(team, "decisions", "[DECISION] 2026-11-01: Deploys need an owner ack")
    entry(team, "insights", "[FACT] 2026-11-02: The hub runs on SQLite")
    team.mem("alice", "push", check=True)
    team.mem("bob", "pull", check=True)
    team.apply(decisions("bob"))

    status = team.mem("bob", "status", "--fetch", check=True).stdout.decode()
    assert "behind the hub: 1 event;" in status, status  # it said "1 events"
    believed = run_mem("hub", "believed", "bob", *team.hub, check=True).stdout.decode()
    assert "not received: 1 event of decisions" in believed and "owner ack" not in believed, believed

    pulled = team.mem("bob", "pull", check=True).stdout.decode()
    assert pulled.startswith("pulled 1 event from origin"), pulled
    assert (team.root / "bob/memory/decisions.md").read_text() == (team.root / "alice/memory/decisions.md").read_text()
    assert "behind the hub: 0 events" in team.mem("bob", "status", "--fetch", check=True).stdout.decode()
    believed = run_mem("hub", "believed", "bob", *team.hub, check=True).stdout.decode()
    assert "not received" not in believed and "owner ack" in believed, believed
    rows = log_rows(team.root / "bob")
    assert "pulled 0 events" in team.mem("bob", "pull", check=True).stdout.decode()
    assert log_rows(team.root / "bob") == rows


def test_a_follower_receives_the_past_of_a_layer_it_is_given(team):
    entry(team, "decisions", "[DECISION] 2026-11-01: Deploys need an owner ack")
    team.mem("alice", "push", check=True)
    follower = Follower(team, "bob")
    try:
        team.apply(decisions("bob"))
        assert eventually(has(team.root / "bob/memory/decisions.md", "owner ack"))
    finally:
        follower.stop()


def test_a_consumer_made_one_again_catches_up_with_what_it_missed(tmp_path):
    team = Team(tmp_path, agents=("alice", "bob"), contract=drafts("bob"))
    try:
        def write(slug: str, text: str) -> None:
            team.mem("alice", "page", "write", slug, "--layer", "drafts", "--file", team.page(slug, slug, text),
                     check=True)

        write("launch", "first")
        write("pricing", "first")
        team.mem("alice", "push", check=True)
        team.mem("bob", "pull", check=True)
        team.apply(drafts())  # bob leaves drafts
        write("launch", "second")
        write("faq", "new")
        team.mem("alice", "push", check=True)
        team.mem("bob", "pull", check=True)  # its cursor passes alice's drafts
        team.apply(drafts("bob"))  # and bob comes back
        team.mem("bob", "pull", check=True)
        mine, theirs = team.root / "bob/content/drafts", team.root / "alice/content/drafts"
        assert sorted(p.name for p in mine.iterdir()) == sorted(p.name for p in theirs.iterdir()) == \
            ["faq.md", "launch.md", "pricing.md"]
        for page in theirs.iterdir():
            assert (mine / page.name).read_text() == page.read_text()
    finally:
        team.stop()


def test_an_agent_taken_off_a_layer_is_told_its_copy_no_longer_moves(team):
    """Regression: bob, no longer a consumer of decisions, kept his old memory/decisions.md and `mem status` said
    "clean" and 0 behind, as if it were current."""
    entry(team, "decisions", "[DECISION] 2026-11-01: Deploys need an owner ack")
    team.mem("alice", "push", check=True)
    team.apply(decisions("bob"))
    team.mem("bob", "pull", check=True)
    assert "owner ack" in (team.root / "bob/memory/decisions.md").read_text()
    assert b"not received" not in team.mem("bob", "status", check=True).stdout
    team.apply(decisions())
    team.mem("bob", "pull", check=True)
    status = team.mem("bob", "status", check=True).stdout.decode()
    assert "not received:    decisions (the hub's contract no longer makes this agent a consumer: memory/decisions.md " \
        "shows what it had, and no longer changes)" in status, status
    report = json.loads(team.mem("bob", "status", "--json", check=True).stdout)
    assert report["not_received"] == {"decisions": "memory/decisions.md"}


def hub_rows(db) -> list[tuple]:
    import sqlite3

    hub = sqlite3.connect(db)
    try:
        return hub.execute("SELECT * FROM hub_events ORDER BY position").fetchall()
    finally:
        hub.close()


def hub_contract_over_http(team: Team, agent: str) -> dict:
    import httpx

    token = (team.root / f"{agent}.token").read_text().strip()
    answer = httpx.get(f"{team.url}/v1/contract", headers={"authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return answer.json()["contract"]["layers"]


INSIGHTS_AS_PAGES = layer("insights", "memory/insights/", "pages")
FORMAT_REFUSED = ("error: layer insights holds entries on the hub, which its consumers keep: its format cannot change "
                  "to pages; add a pages layer under another name, and drop insights from the contract once it is not "
                  "needed\n")


def test_a_layers_format_cannot_change_once_the_hub_holds_its_events(team):
    """Regression (M8): changing insights from entries to pages was applied; the entry the hub had taken just before
    was then rejected by every consumer pulling after the change while one that pulled before kept it (their logs
    differed for good), and every producer's unpushed entry was refused by the hub on every push."""
    import httpx

    entry(team, "insights", "[FACT] 2026-11-30: Shared before the change")
    team.mem("alice", "push", check=True)
    contract_path = team.root / "pages.toml"
    shown, stored = run_mem("hub", "contract", "show", *team.hub, check=True).stdout, hub_rows(team.db)
    for contract in (INSIGHTS_AS_PAGES + layer("decisions", "memory/decisions.md", producers=["alice"]),
                     INSIGHTS_AS_PAGES):
        contract_path.write_text(contract)
        refused = run_mem("hub", "contract", "apply", contract_path, *team.hub)
        assert (refused.returncode, refused.stdout, refused.stderr.decode()) == (1, b"", FORMAT_REFUSED), refused
        assert run_mem("hub", "contract", "show", *team.hub, check=True).stdout == shown
        assert hub_rows(team.db) == stored
    # no request sets the contract over HTTP: only the hub's administrator does, with `mem hub contract apply`
    token = (team.root / "bob.token").read_text().strip()
    for method in ("POST", "PUT"):
        answer = httpx.request(method, f"{team.url}/v1/contract", headers={"authorization": f"Bearer {token}"},
                               json={"layers": {"insights": {"path": "memory/insights/", "format": "pages",
                                                             "producers": ["*"], "consumers": ["*"]}}})
        assert answer.status_code == 405, answer
    assert hub_contract_over_http(team, "bob")["insights"]["format"] == "entries"
    assert hub_rows(team.db) == stored

    team.apply(layer("decisions", "memory/decisions.md", producers=["alice"]))  # insights dropped: allowed
    contract_path.write_text(INSIGHTS_AS_PAGES)  # and named again as pages: its events are still on the hub
    refused = run_mem("hub", "contract", "apply", contract_path, *team.hub)
    assert (refused.returncode, refused.stderr.decode()) == (1, FORMAT_REFUSED), refused
    team.apply(decisions())  # named again as entries: allowed
    entry(team, "insights", "[FACT] 2026-11-30: Shared after it came back")
    team.mem("alice", "push", check=True)
    pulled = team.mem("bob", "pull", check=True)
    assert pulled.stdout.startswith(b"pulled 2 events") and not pulled.stderr, pulled
    assert (team.root / "bob/memory/insights.md").read_text() == (team.root / "alice/memory/insights.md").read_text()


def test_events_a_layers_new_format_does_not_take_are_held_back_and_sync_still_pulls(team):
    """Regression (M8): once a layer's format changed (allowed while the hub holds none of its events), a producer's
    unpushed entry there made every `mem push` and `mem sync` fail with 'hub refused: Wrong kind for layer' (the sync
    never pulled, so never took the new contract either), and `mem status` said '1 to push ... clean'."""
    entry(team, "decisions", "[DECISION] 2026-11-30: Written before the change")
    team.apply(INSIGHTS + layer("decisions", "memory/decisions/", "pages", producers=["alice"]))
    team.mem("bob", "entry", "add", "insights", "[FACT] 2026-11-30: Shared after the change", check=True)
    team.mem("bob", "push", check=True)
    held = ("1 event in layer decisions cannot be pushed: the hub's contract makes 'decisions' a pages layer now, "
            "which takes no entry.append")
    for pulled in (b"pulled 1 (origin)", b"pulled 0 (origin)"):
        synced = team.mem("alice", "sync")
        assert (synced.returncode, synced.stderr.decode()) == (1, f"error: {held}\n"), synced
        assert synced.stdout.startswith(b"pushed 0, " + pulled), synced
    assert "Shared after the change" in (team.root / "alice/memory/insights.md").read_text()
    status = team.mem("alice", "status", check=True).stdout.decode()
    assert "0 to push" in status and f"  held back: 1 in decisions: {held.split(': ', 1)[1]}\n" in status, status
    assert "decisions" not in [row[4] for row in hub_rows(team.db)]


def test_an_entry_let_in_with_allow_secret_is_held_back_once_its_layer_is_scanned(team):
    """Regression: turning `scan_secrets` on for a layer while a producer had an entry there written with
    --allow-secret (allowed while the scan was off) made every later `mem push` and `mem sync` of that producer fail
    'hub refused: Secret detected' (the hub refuses the whole batch, so nothing else of it went either, and the sync
    never pulled), and `mem status` said '2 to push ... clean'. The hub still refuses the event."""
    team.apply(layer("insights", "memory/insights.md") + "scan_secrets = false\n")
    team.mem("alice", "pull", check=True)
    secret = team.mem("alice", "entry", "add", "insights", "[FACT] 2026-11-30: key AKIAIOSFODNN7EXAMPLQ for the bucket",
                      "--allow-secret", check=True).stdout.decode().split()[0]
    team.apply(INSIGHTS)
    entry(team, "insights", "[FACT] 2026-11-30: A clean fact")
    team.mem("bob", "entry", "add", "insights", "[FACT] 2026-11-30: bob's fact", check=True)
    team.mem("bob", "push", check=True)
    held = (f"1 event in layer insights cannot be pushed: the hub's contract scans 'insights' for secrets now, and the "
            f"hub refuses what this agent wrote there with --allow-secret; `mem redact {secret} --reason \"...\"` "
            f"sends it without its text, or the contract may set `scan_secrets = false` for 'insights'")
    pushed = team.mem("alice", "push")
    assert (pushed.returncode, pushed.stdout, pushed.stderr.decode()) == (
        1, b"pushed 1 event to origin\n", f"error: {held}\n"), pushed
    synced = team.mem("alice", "sync")
    assert (synced.returncode, synced.stderr.decode()) == (1, f"error: {held}\n"), synced
    assert synced.stdout.startswith(b"pushed 0, pulled 1 (origin)"), synced  # bob's fact
    assert "bob's fact" in (team.root / "alice/memory/insights.md").read_text()
    status = team.mem("alice", "status", check=True).stdout.decode()
    assert "0 to push" in status and f"  held back: 1 in insights: {held.split(': ', 1)[1]}\n" in status, status
    assert [row[4] for row in hub_rows(team.db) if row[3] == "alice"] == ["insights"]  # the clean fact alone

    team.mem("alice", "redact", secret, "--reason", "an AWS key", check=True)
    pushed = team.mem("alice", "push")
    assert (pushed.returncode, pushed.stdout, pushed.stderr) == (0, b"pushed 2 events to origin\n", b""), pushed
    assert "held back" not in team.mem("alice", "status", check=True).stdout.decode()


def test_a_hub_layer_overlapping_a_local_one_is_not_taken_and_the_agent_is_told(tmp_path):
    """Regression (M11): a team layer added at the path of bob's local layer was listed beside it, bob's pull wrote
    the team's entries into his private file (or left them out of it while search cited it), `mem status` said
    clean, and nothing said why. Regression (nc31b): said only at the first pull that brought the layer's events.
    """
    from teamhub import CONTRACT

    team = Team(tmp_path, agents=("alice", "bob"))
    try:
        team.mem("bob", "layer", "add", "private", "memory/private.md", check=True)
        team.mem("bob", "layer", "add", "mine", "shelf/mine.md", check=True)
        team.mem("bob", "entry", "add", "private", "[FACT] 2026-11-30: bob's private note", check=True)
        mine = (tmp_path / "bob/memory/private.md").read_text()
        team.apply(CONTRACT + '\n[layers.team]\npath = "memory/private.md"\nformat = "entries"\nproducers = ["*"]\n'
                   'consumers = ["*"]\n\n[layers.shelf]\npath = "shelf/"\nformat = "pages"\nproducers = ["*"]\n'
                   'consumers = ["*"]\n')
        team_says = ("the hub's layer 'team' (memory/private.md) is not taken here: it overlaps this agent's local "
                     "layer 'private' (memory/private.md), which wins")
        shelf_says = ("the hub's layer 'shelf' (shelf/) is not taken here: it overlaps this agent's local layer 'mine' "
                      "(shelf/mine.md), which wins")
        told = [f"warning: {why} (its events are left out; `mem status` says so)" for why in (shelf_says, team_says)]
        first = team.mem("bob", "pull", check=True)  # nc31b: said as the contract changes, before any event of them
        assert first.stderr.decode().splitlines() == told, first
        team.mem("alice", "pull", check=True)
        for n in (1, 2):
            team.mem("alice", "entry", "add", "team", f"[FACT] 2026-11-30: team note {n}", check=True)
        team.mem("alice", "page", "write", "mine", "--layer", "shelf", "--file", team.page("p", "Shelf", "team page"),
                 check=True)
        team.mem("alice", "push", check=True)
        pulled = team.mem("bob", "pull", check=True)
        assert pulled.stderr.decode().splitlines() == [
            f"warning: {why} (its events are left out; `mem status` says so)" for why in (team_says, shelf_says)], pulled
        assert (tmp_path / "bob/memory/private.md").read_text() == mine
        assert not (tmp_path / "bob/shelf").exists() and b"no matches" in team.mem("bob", "search", "team").stdout
        listed = team.mem("bob", "layer", "list", check=True).stdout.decode()
        assert "team                 memory/private.md                    entries  hub, not taken here" in listed
        status = team.mem("bob", "status", check=True).stdout.decode()
        assert f"not taken:       {shelf_says}\nnot taken:       {team_says}\n" in status, status
        assert json.loads(team.mem("bob", "status", "--json", check=True).stdout)["not_taken"] == {
            "shelf": shelf_says, "team": team_says}
        rows = log_rows(tmp_path / "bob")
        refused = team.mem("bob", "entry", "add", "team", "[FACT] 2026-11-30: from bob")
        assert (refused.returncode, refused.stderr.decode()) == (1, f"error: {team_says}\n"), refused
        assert log_rows(tmp_path / "bob") == rows
        pushed = team.mem("bob", "push")
        assert (pushed.returncode, pushed.stdout, pushed.stderr) == (0, b"pushed 0 events to origin\n", b""), pushed
    finally:
        team.stop()


def test_a_layer_produced_not_consumed_and_one_added_since_the_last_pull_are_told_as_they_are(team):
    """Regression (nc15b): `mem status` said of a layer the agent produces and never consumed that the contract "no
    longer" made it a consumer and that its file "no longer changes" (its own writes change it). Regression (nc15a):
    a write to a layer the hub's contract added since the last pull was refused as not in the contract, with no word
    that this was the workspace's copy of it."""
    team.apply(decisions() + layer("reports", "memory/reports.md", producers=["alice"], consumers=["bob"]))
    refused = team.mem("alice", "entry", "add", "reports", "[FACT] 2026-12-03: a report")
    assert refused.returncode == 1 and refused.stderr.decode() == (
        "error: layer 'reports' is not in the contract as last pulled (layers: decisions, insights); `mem pull` "
        "fetches the hub's, if it has changed since\n"), refused.stderr
    team.mem("alice", "pull", check=True)
    said = ("produced only:   reports (this agent produces it, the hub's contract does not make it a consumer: "
            "memory/reports.md changes with its own writes and the layer's redactions only)")
    assert said in team.mem("alice", "status", check=True).stdout.decode()  # regression (nc16b): not before a write
    entry(team, "reports", "[FACT] 2026-12-03: a report")
    status = team.mem("alice", "status", check=True).stdout.decode()
    assert "produced only:   reports (this agent produces it, the hub's contract does not make it a consumer: " \
        "memory/reports.md changes with its own writes and the layer's redactions only)" in status, status
    assert "not received" not in status
    report = json.loads(team.mem("alice", "status", "--json", check=True).stdout)
    assert report["produced_only"] == {"reports": "memory/reports.md"} and report["not_received"] == {}


def test_a_layer_the_agent_does_not_consume_is_listed_as_such_and_its_listings_say_why_they_are_empty(team):
    """Regression (nc22a): `mem layer list` showed a hub's layer the agent neither produces nor consumes like any other,
    and `mem entry list` of it said "no entries" while the hub held some: this agent's pulls bring none of it."""
    entry(team, "decisions", "[DECISION] 2026-12-03: deploys need two acks")
    team.mem("alice", "push", check=True)
    team.mem("bob", "pull", check=True)
    listed = team.mem("bob", "layer", "list", check=True).stdout.decode().splitlines()
    assert [line.split(None, 3)[3] for line in listed] == [
        "hub, not this agent's (it neither produces nor consumes it)", "hub, this agent consumes and produces"]
    rows = json.loads(team.mem("bob", "layer", "list", "--json", check=True).stdout)
    assert [(r["layer"], r["consumes"], r["produces"]) for r in rows] == [("decisions", False, False),
                                                                         ("insights", True, True)]
    empty = team.mem("bob", "entry", "list", "decisions", check=True)
    assert empty.stdout == b"" and empty.stderr.decode() == (
        "no entries in layer decisions: agent 'bob' does not consume layer 'decisions' under the contract as last "
        "pulled: its pulls bring none of the layer's new events, so what is here is what this agent wrote and what it "
        "pulled before, not what the hub holds\n")
    own = team.mem("alice", "entry", "list", "decisions", check=True)
    assert b"deploys need two acks" in own.stdout and own.stderr == b""
    assert team.mem("alice", "layer", "list", check=True).stdout.decode().splitlines()[0].endswith(
        "hub, this agent consumes and produces")


def test_a_redaction_of_a_layer_only_produced_is_no_event_the_hub_lost(tmp_path):
    """Regression (nc23a): GET /v1/contract?holds= left out the hub's redaction of a layer the agent produces without
    consuming it, which its pull had brought as its last event: every later pull and `mem status --fetch` said the hub
    had lost events this workspace pulled (restored from a backup?) and pulled again."""
    team = Team(tmp_path, agents=("alice", "bob"), contract=INSIGHTS + layer(
        "inbox", "memory/inbox.md", producers=["alice", "bob"], consumers=["alice"]))
    try:
        team.mem("bob", "pull", check=True)
        written = team.mem("alice", "entry", "add", "inbox", "[FACT] 2026-12-03: for alice's eyes", check=True)
        team.mem("alice", "push", check=True)
        run_mem("hub", "redact", written.stdout.decode().split()[0], "--reason", "test", *team.hub, check=True)
        assert team.mem("bob", "pull", check=True).stdout == b"pulled 1 event from origin\n"  # the redaction
        for args in (("pull",), ("status", "--fetch")):
            told = team.mem("bob", *args, check=True)
            assert b"lost events" not in told.stdout + told.stderr, told
    finally:
        team.stop()


def test_a_follower_says_when_a_pull_leaves_a_page_in_conflict_as_a_pull_does(tmp_path):
    """Regression (nc23b): `mem pull --follow` printed its "pulled N events" lines and never the warning `mem pull`
    and `mem sync` give when a pull leaves a shared page in conflict: the long-running watcher of a team was the one
    place a conflict went unsaid."""
    team = Team(tmp_path, agents=("alice", "bob", "carol"), contract=INSIGHTS + layer(
        "drafts", "content/drafts/", "pages", producers=["alice", "bob"]))
    try:
        follower = Follower(team, "carol")
        try:
            team.mem("alice", "page", "write", "plan", "--layer", "drafts", "--file", team.page("p0", "Plan", "v0"),
                     check=True)
            team.mem("alice", "push", check=True)
            team.mem("bob", "pull", check=True)
            for agent in ("alice", "bob"):
                team.mem(agent, "page", "write", "plan", "--layer", "drafts", "--file",
                         team.page(f"p-{agent}", "Plan", f"{agent}'s plan"), check=True)
                team.mem(agent, "push", check=True)
            entry(team, "insights", "[FACT] after the conflict")  # the follower folded the conflict before this
            team.mem("alice", "push", check=True)
            assert eventually(has(team.root / "carol/memory/insights.md", "after the conflict"))
        finally:
            _out, err = follower.stop()
        assert err.count("warning: drafts/plan is now in conflict: its file shows the version every replica shows, "
                         "the others are kept (`mem conflicts --show`; a producer of the layer resolves it)") == 1, err
    finally:
        team.stop()


def test_a_consumer_editing_an_entries_layers_file_is_told_what_it_can_do(tmp_path):
    """Regression (nc26b): a consumer that edited its file of an entries layer was told to `mem entry add` (which it
    may not) and that deleting the file wrote it again (only the layer's next entry does); `mem status` said adopt
    records a deletion, which adopt does not for such a file. The advice is what works: `mem show PATH > PATH`."""
    team = Team(tmp_path, agents=("alice", "bob"), contract=decisions("bob"))
    try:
        entry(team, "decisions", "[DECISION] 2026-11-01: Deploys go out on Fridays")
        team.mem("alice", "sync", check=True)
        team.mem("bob", "sync", check=True)
        path = "memory/decisions.md"
        file = team.root / "bob" / path
        kept = file.read_bytes()
        file.write_bytes(kept + b"[DECISION] 2026-11-02: mine\n")
        said = team.mem("bob", "adopt").stdout.decode()
        assert (f"left {path}: the entries of layer decisions are rendered from its events, which an edit does not "
                f"make: `mem show {path} > {path}` puts the file back") in said and "mem entry add" not in said
        shown = team.mem("alice", "adopt", check=True)  # the producer's own file, untouched: nothing to say
        assert "nothing edited by hand" in shown.stdout.decode()
        file.write_bytes(team.mem("bob", "show", path, check=True).stdout)
        assert file.read_bytes() == kept
        file.unlink()
        status = team.mem("bob", "status", check=True).stdout.decode()
        assert f"missing:         {path}" in status and "`mem show PATH > PATH` puts a file back" in status
        (team.root / "alice" / path).write_text("edited\n")
        assert "`mem entry add` adds one; " in team.mem("alice", "adopt").stdout.decode()
    finally:
        team.stop()
