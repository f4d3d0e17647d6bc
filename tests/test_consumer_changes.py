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
from teamhub import Team

def layer(name: str, path: str, format: str = "entries", producers=("*",), consumers=("*",)) -> str:
    return (f"\n[layers.{name}]\npath = {json.dumps(path)}\nformat = {json.dumps(format)}\n"
            f"producers = {json.dumps(list(producers))}\nconsumers = {json.dumps(list(consumers))}\n")


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
    assert "behind the hub: 1 events" in status, status
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
