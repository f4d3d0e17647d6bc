"""A hub for the web UI tests, made by real syncs: `drafts` (pages, every agent consumes) and
`reviews` (entries only the reviewer produces and consumes), and `briefs` (entries every agent
consumed until the last contract change dropped the layer); then `mem serve` with an admin token
serves it, on the port the agents' remotes name."""

import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from conftest import mem_command
from sync.storage import open_storage
from teamhub import Team

CONTRACT = """
[layers.drafts]
path = "content/drafts/"
format = "pages"
producers = ["writer", "reviewer"]
consumers = ["*"]

[layers.reviews]
path = "memory/reviews.md"
format = "entries"
producers = ["reviewer"]
consumers = ["reviewer"]
"""
BRIEFS = """
[layers.briefs]
path = "memory/briefs.md"
format = "entries"
producers = ["reviewer"]
consumers = ["*"]
"""


class UiHub:
    def __init__(self, root: Path):
        self.root = root
        self.team = team = Team(root, agents=("writer", "reviewer"), contract=CONTRACT + BRIEFS)
        for agent in ("writer", "reviewer"):
            team.mem(agent, "pull", check=True)
        team.mem("writer", "page", "write", "launch", "--layer", "drafts", "--file",
                 team.page("d0", "Launch", "draft zero"), check=True)
        team.mem("writer", "sync", check=True)
        team.mem("reviewer", "sync", check=True)
        team.mem("reviewer", "entry", "add", "reviews", "[DECISION] the launch moves to monday", check=True)
        team.mem("reviewer", "sync", check=True)
        team.mem("writer", "page", "write", "launch", "--layer", "drafts", "--file",
                 team.page("d1", "Launch", "draft one"), check=True)
        team.mem("writer", "sync", check=True)
        team.mem("reviewer", "entry", "add", "briefs", "[FACT] the venue holds 200", check=True)
        team.mem("reviewer", "sync", check=True)
        team.mem("writer", "sync", check=True)
        team.apply(CONTRACT)  # briefs is dropped: shared no more, but it was
        team.stop()
        hub = open_storage(str(team.db))
        self.positions = {(e.layer, getattr(e.body, "content", None) or e.body.text): e.seq
                          for e in hub.pull(0, ["drafts", "reviews", "briefs"], 100)}
        hub.close()
        self.tokens = {agent: (root / f"{agent}.token").read_text().strip() for agent in ("writer", "reviewer")}
        self.url = team.url
        self.server = subprocess.Popen([*mem_command(), "serve", "--db", str(team.db), "--port", str(team.server.port),
                                        "--admin-token-file", str(root / "admin.token")],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                httpx.get(self.url + "/health", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        self.tokens["admin"] = (root / "admin.token").read_text().strip()

    def position(self, layer: str, text: str) -> int:
        return next(seq for (lay, body), seq in self.positions.items() if lay == layer and text in body)

    def get(self, path: str, who: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return httpx.get(f"{self.url}/ui/{path}", headers=headers, timeout=30)

    def stop(self) -> None:
        self.server.terminate()
        self.server.wait(timeout=10)


@contextmanager
def hub_pages(root: Path, contract: str, agents=("writer",)):
    """In process, no server: a hub storage under `contract` with `agents`, and a client of its /ui app (over the
    hub's mirror, admin token "admin-token"). Yields the client, the storage (to push to) and each agent's token."""
    from starlette.testclient import TestClient

    from cli.web.hub import hub_ui
    from sync.contracts import parse_contract
    from sync.mirror import HubMirror

    storage = open_storage(str(root / "hub.db"))
    try:
        storage.apply_contract(parse_contract(contract))
        tokens = {agent: storage.add_agent(agent) for agent in agents}
        with TestClient(hub_ui(storage, HubMirror(storage, root / "ui"), "admin-token")) as client:
            yield client, storage, tokens
    finally:
        storage.close()
