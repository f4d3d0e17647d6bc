"""A new agent's first pull of a team's history: the same views and files as an agent that pulled
along as the events arrived, a progress bar on a terminal, nothing broken without one."""

import os
import pty
import subprocess
from pathlib import Path

import pytest

from conftest import mem_command, run_mem
from eventstore.envelope import new_event
from eventstore.kinds import EntryAppend, PageIngest, PageUpdate
from projections.memory import Memory
from sync.client import HubClient, Remote, pull
from sync.storage import open_storage
from sync.wire import Contract, ContractLayer

from hubserver import HubServer

CONTRACT = Contract(layers={
    "insights": ContractLayer(path="memory/insights.md", format="entries", producers=["*"], consumers=["*"]),
    "docs": ContractLayer(path="docs/", format="pages", producers=["*"], consumers=["*"])})
EVENTS = 2000
ROUNDS = 4


def team_events(start: int, count: int, heads: dict[str, str]) -> list:
    """Entries, and versions of 40 pages (one event in five), from three writers."""
    events = []
    for i in range(start, start + count):
        if i % 5 == 4:
            slug = f"page-{(i // 5) % 40}"
            text = f"# {slug}\n\nversion written at step {i}.\n"
            body = (PageUpdate(slug=slug, frontmatter={"type": "note"}, text=text, parents=[heads[slug]])
                    if slug in heads else PageIngest(slug=slug, frontmatter={"type": "note"}, text=text))
            event = new_event(body, agent=f"writer{i % 3}", layer="docs")
            heads[slug] = event.id
        else:
            event = new_event(EntryAppend(type="FACT", date="2026-11-29", content=f"fact {i}"),
                              agent=f"writer{i % 3}", layer="insights")
        events.append(event)
    return events


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".mem" not in p.parts}


@pytest.fixture
def team(tmp_path):
    """A hub that received EVENTS events in ROUNDS rounds, a follower that pulled after each round, and
    a newcomer workspace with the hub as its remote (not pulled yet)."""
    db = str(tmp_path / "hub.db")
    storage = open_storage(db)
    storage.apply_contract(CONTRACT)
    tokens = {name: storage.add_agent(name) for name in ("follower", "newcomer")}
    (tmp_path / "newcomer.token").write_text(tokens["newcomer"])
    with HubServer(db) as server, Memory.init(tmp_path / "follower", "follower") as follower:
        client = HubClient(server.url, tokens["follower"])
        remote = Remote(name="origin", url=server.url, token_file="-", agent="follower")
        heads = {}
        for round in range(ROUNDS):
            storage.push(team_events(round * EVENTS // ROUNDS, EVENTS // ROUNDS, heads))
            pull(follower, remote, client)
        client.close()
        storage.close()
        newcomer = tmp_path / "newcomer"
        Memory.init(newcomer, "newcomer").close()
        run_mem("remote", "add", "origin", server.url, "--token-file", tmp_path / "newcomer.token", "-w", newcomer,
                check=True)
        yield follower, newcomer


def test_a_first_pull_gives_the_views_and_files_of_an_agent_that_followed_along(team):
    follower, newcomer = team
    result = run_mem("pull", "-w", newcomer)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == f"pulled {EVENTS} events from origin"
    assert result.stderr == b""  # no terminal: no progress bar, nothing else either
    with Memory.open(newcomer) as fresh:
        assert fresh.log.head() == EVENTS
        assert fresh.views.dump() == follower.views.dump()
        assert snapshot(fresh.root) == snapshot(follower.root)
        assert len(list((fresh.root / "docs").glob("*.md"))) == 40
        assert run_mem("replay", "--check", "-w", newcomer).returncode == 0


def test_a_first_pull_on_a_terminal_draws_a_progress_bar_to_the_hub_head(team):
    _follower, newcomer = team
    controller, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}
    env.pop("MEM_WORKSPACE", None)
    process = subprocess.Popen([*mem_command(), "pull", "-w", str(newcomer)], stdout=subprocess.PIPE,
                               stderr=terminal, env=env)
    os.close(terminal)
    drawn = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the process closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    out, _ = process.communicate(timeout=120)
    os.close(controller)
    assert process.returncode == 0
    assert out.decode().strip() == f"pulled {EVENTS} events from origin"
    screen = drawn.decode(errors="replace")
    assert "pull" in screen and "━" in screen, screen[:500]
    total = EVENTS + 1  # hub positions: the contract, then the team's events
    assert f"/{total}" in screen, screen[-500:]
