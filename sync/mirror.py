"""A hub's mirror: a workspace whose log holds the hub's events at their hub positions and hub times,
so the web pages (cli/web) show the shared layers as of any moment with the same code as a
workspace's, and "what agent X had received by T" is the mirror as of X's pull cursor then.

Each event keeps its hub position as its seq and the time the hub recorded it; an ImportGap stands
for positions the mirror does not copy (layers the current contract no longer names). The contract
changes are copied too (layer `_contract`; the fold leaves them alone). Caught up when a page asks,
under a lock, appending one hub commit (one recorded_at) at a time.
"""

import threading
from pathlib import Path

import msgspec

from eventstore.envelope import new_event
from eventstore.kinds import ImportGap
from eventstore.layers import AGENT, CONTRACT_LAYER
from eventstore.workspace import Workspace
from projections.materialize import write_atomic

from .storage import HUB_AGENT, HubStorage

PAGE = 5000


class HubMirror:
    def __init__(self, storage: HubStorage, root: str | Path):
        self.storage = storage
        self.root = Path(root)
        self.ws = Workspace.init(self.root, HUB_AGENT)
        self.log = self.ws.open_log(self.ws.config())
        self._lock = threading.Lock()
        self._contract = None

    def close(self) -> None:
        self.log.close()

    def catch_up(self) -> int:
        """Copies what the hub committed since the last call; returns the mirror's head (= the hub's)."""
        with self._lock:
            contract, _ = self.storage.contract()
            if contract != self._contract:
                write_atomic(self.ws.mem_dir / "contract.json", [msgspec.json.encode(contract)])
                self._contract = contract
            layers = sorted(contract.layers) + [CONTRACT_LAYER]
            head = self.log.head()
            while events := self.storage.pull(head, layers, PAGE):
                commit: list = []
                for event in events:
                    if event.seq > head + 1 or (commit and event.recorded_at != commit[0].recorded_at):
                        self._append(commit)
                        commit = []
                    if event.seq > head + 1:
                        self._gap(head, event.seq - 1, event.recorded_at)
                    commit.append(event)
                    head = event.seq
                self._append(commit)
            last = self.storage.head()
            if last > head:
                self._gap(head, last, self.log.recorded_at(head) or 0)
            return self.log.head()

    def _append(self, commit: list) -> None:
        if commit:
            self.log.append(commit, recorded_at=commit[0].recorded_at, state={"hub-position": str(commit[-1].seq)})

    def _gap(self, head: int, upto: int, at: int) -> None:
        """One ImportGap taking seq `upto`, after the unused seqs between `head` and it."""
        gap = new_event(ImportGap(source="hub", skipped=upto - head - 1), agent=HUB_AGENT, layer=AGENT)
        self.log.append([gap], recorded_at=at, state={"hub-position": str(upto)})
