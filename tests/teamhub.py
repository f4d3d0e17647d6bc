"""A team of agents on one `mem serve` hub (a real subprocess on 127.0.0.1), driven through `mem`."""

import json
from pathlib import Path

from conftest import run_mem
from hubserver import HubServer
from projections.memory import Memory
from sync.client import add_remote
from sync.contracts import parse_contract
from sync.storage import open_storage

CONTRACT = """
[layers.insights]
path = "memory/insights.md"
format = "entries"
producers = ["*"]
consumers = ["*"]

[layers.drafts]
path = "content/drafts/"
format = "pages"
producers = ["researcher", "writer", "reviewer"]
consumers = ["*"]
"""

PAGE = "---\ntype: draft\n---\n# {title}\n\n{text}\n"


def layer(name: str, path: str, format: str = "entries", producers=("*",), consumers=("*",)) -> str:
    """One layer of a contract, in TOML."""
    return (f"\n[layers.{name}]\npath = {json.dumps(path)}\nformat = {json.dumps(format)}\n"
            f"producers = {json.dumps(list(producers))}\nconsumers = {json.dumps(list(consumers))}\n")


class Team:
    """Set up through the library (fast); every behaviour under test then goes through `mem`."""

    def __init__(self, root: Path, agents=("researcher", "writer", "reviewer"), contract: str = CONTRACT):
        self.root = root
        self.agents = agents
        self.db = root / "hub.db"
        self.hub = ("--db", self.db)
        admin = open_storage(str(self.db))
        admin.apply_contract(parse_contract(contract))
        for agent in agents:
            (root / f"{agent}.token").write_text(admin.add_agent(agent) + "\n")
            (root / f"{agent}.token").chmod(0o600)  # as `mem hub agent add --token-file` makes it
        admin.close()
        self.server = HubServer(str(self.db)).start()
        self.url = self.server.url
        for agent in agents:
            with Memory.init(root / agent, agent) as memory:
                add_remote(memory, "origin", self.url, str(root / f"{agent}.token"))

    def apply(self, contract: str) -> None:
        path = self.root / "contract.toml"
        path.write_text(contract)
        run_mem("hub", "contract", "apply", path, *self.hub, check=True)

    def mem(self, agent: str, *args, **kw):
        return run_mem("-w", self.root / agent, *args, **kw)

    def page(self, name: str, title: str, text: str) -> Path:
        path = self.root / f"{name}.md"
        path.write_text(PAGE.format(title=title, text=text))
        return path

    def conflict(self, slug: str, title: str, base: str, text: str, a: str = "writer", b: str = "reviewer") -> None:
        """Two heads of drafts/SLUG: `a` writes `base`, both sync, each writes `text` (its `{agent}` filled in), and
        the three syncs that bring each the other's version."""
        self.mem(a, "page", "write", slug, "--layer", "drafts", "--file", self.page(f"{slug}-0", title, base),
                 check=True)
        self.mem(a, "sync", check=True)
        self.mem(b, "sync", check=True)
        for agent in (a, b):
            self.mem(agent, "page", "write", slug, "--layer", "drafts", "--file",
                     self.page(f"{slug}-{agent}", title, text.format(agent=agent)), check=True)
        for agent in (a, b, a):
            self.mem(agent, "sync", check=True)

    def stop(self) -> None:
        self.server.stop()
