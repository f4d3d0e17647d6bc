"""A hub's mirror: a workspace whose log holds the hub's events at their hub positions and hub times,
so the web pages (cli/web) show the shared layers as of any moment with the same code as a
workspace's, and "what agent X had received by T" is the mirror as of X's pull cursor then.

Each event keeps its hub position as its seq and the time the hub recorded it. Every layer that any
contract ever named is copied (a layer dropped since still shows as of a moment when it was shared),
and the contract changes too (layer `_contract`); an ImportGap stands for positions the mirror does not
copy. The mirror's own contract (`.mem/contract.json`) places every one of those layers, each where its
latest contract put it; as of a past moment, where the latest contract by then put it (the fold records
each change: projections.placements.record_hub, read by `Views.contract_at` as an agent's own are).

Caught up when a page asks, under a lock, a page of hub events per transaction: the events of many
hub commits go in at once, each at its own hub time, and the hub position reached commits with them,
so a mirror stopped half-way keeps what it copied and resumes after it. The lock is the workspace's
(`.mem/project.lock`), so two processes (`mem serve` and `mem hub redact`) never copy the same positions.

A redaction on the hub reaches the mirror at once (`scrub`), not when a page next asks: the mirror copies it
and rebuilds its views, so neither keeps the text, whether or not a page is ever opened.
"""

import threading
from pathlib import Path

import msgspec

from eventstore.envelope import new_event
from eventstore.kinds import ImportGap
from eventstore.layers import AGENT, CONTRACT_LAYER, Contract
from eventstore.workspace import Workspace
from projections.materialize import write_atomic
from projections.placements import with_newer

from .storage import HUB_AGENT, HubStorage, contract_of

PAGE = 10_000
COPIES = ("mirror", "every-layer")
"""The state row saying what this mirror copies: one made before it copied every layer ever shared
holds gaps where a dropped layer was, and is made again."""
LAST_COPIED = "mirror-last"
"""The state row holding the hub position and id of the last event copied: a hub restored from a backup lost it."""
PLACED = ("mirror-views", "placed-as-of")
"""The state row saying the mirror's views fold the hub's contract changes (projections.placements.record_hub): views
folded before they did place the past by the latest contract, and are built again from the log."""


class HubMirror:
    def __init__(self, storage: HubStorage, root: str | Path):
        self.storage = storage
        self.root = Path(root)
        if not self.root.exists():  # it holds every layer's files: not for the host's other accounts to read
            self.root.mkdir(mode=0o700, parents=True)
        self.ws = Workspace.init(self.root, HUB_AGENT)
        self.log = self.ws.open_log(self.ws.config())
        if self.ws.config().agent == HUB_AGENT and self.log.head() and (
                self.log.state(COPIES[0]) != COPIES[1] or self._lost_by_the_hub()):
            self.log.close()
            for path in self.ws.mem_dir.iterdir():
                if path.name.startswith(("log.db", "views.db")):
                    path.unlink()
            self.log = self.ws.open_log(self.ws.config())
        if self.log.state(PLACED[0]) != PLACED[1] and self.ws.config().agent == HUB_AGENT:
            self._forget_views()
        self._lock = threading.Lock()
        self._contract = None
        self._ever = Contract()
        self._contracts_seen = 0

    def close(self) -> None:
        self.log.close()

    def _lost_by_the_hub(self) -> bool:
        """Whether the hub no longer holds what the mirror copied: its database was restored from a backup (its head
        is behind the mirror's, or the last event copied is not at its position there). The pages showed the lost
        events, and the events the hub stored again at their positions were never copied (nc20a)."""
        if self.storage.head() < self.log.head():
            return True
        position, _, id = (self.log.state(LAST_COPIED) or self._last_copied()).partition(" ")
        return bool(id) and self.storage.positions_of([id]).get(id) != int(position)

    def _last_copied(self) -> str:
        """'POSITION ID' of the last hub event in a mirror made before LAST_COPIED was kept (nc21b): its newest event
        that is not a gap of its own."""
        gap = ImportGap.__struct_config__.tag
        last = next((event for event in self.log.read(newest_first=True) if event.kind != gap), None)
        return f"{last.seq} {last.id}" if last else ""

    def _forget_views(self) -> None:
        for path in self.ws.mem_dir.iterdir():
            if path.name.startswith("views.db"):
                path.unlink()
        self.log.set_state(PLACED[0], PLACED[1])

    def ever_shared(self) -> Contract:
        """Every layer that a contract named, up to the last catch-up, as its latest contract placed it."""
        return self._ever

    def catch_up(self, progress=None) -> int:
        """Copies what the hub committed since the last call; returns the mirror's head (= the hub's then).
        `progress(n)` hears of each page copied, n hub positions at a time."""
        with self._lock, self.ws.locked():  # the workspace's lock, as `Memory.lock` takes it
            last = self.storage.head()
            self._learn_contracts()
            layers = sorted(self._ever.layers) + [CONTRACT_LAYER]
            head = self.log.head()
            while head < last and (events := [e for e in self.storage.pull(head, layers, PAGE) if e.seq <= last]):
                batch, times, start = [], [], head
                for event in events:
                    if event.seq > head + 1:
                        batch.append(self._gap(head, event.seq - 1))
                        times.append(event.recorded_at)
                    batch.append(event)
                    times.append(event.recorded_at)
                    head = event.seq
                self.log.append(batch, recorded_at=times, state={"hub-position": str(head), COPIES[0]: COPIES[1],
                                                                 LAST_COPIED: f"{events[-1].seq} {events[-1].id}"})
                if progress:
                    progress(head - start)
            if last > head:
                self.log.append([self._gap(head, last)], recorded_at=self.log.recorded_at(head) or 0,
                                state={"hub-position": str(last), COPIES[0]: COPIES[1]})
            return self.log.head()

    def scrub(self) -> None:
        """After a redaction on the hub: copies it (the mirror's log removes the bodies and empties its WAL, as a
        local redaction does) and rebuilds the views without them (a redaction is never folded: `Memory.refresh`)."""
        from projections.memory import Memory

        self.catch_up()
        with Memory.open(self.root) as mem:
            mem.refresh(files=False)

    def _learn_contracts(self) -> None:
        """Reads the contract changes committed since the last call into `ever_shared`, and places their
        layers in the mirror's contract file."""
        while changes := self.storage.pull(self._contracts_seen, [CONTRACT_LAYER], PAGE):
            for change in changes:
                self._ever = with_newer(self._ever, contract_of(change))
            self._contracts_seen = changes[-1].seq
        if self._ever != self._contract:
            write_atomic(self.ws.mem_dir / "contract.json", [msgspec.json.encode(self._ever)])
            self._contract = self._ever

    @staticmethod
    def _gap(head: int, upto: int):
        """One ImportGap taking seq `upto`, after the unused seqs between `head` and it."""
        return new_event(ImportGap(source="hub", skipped=upto - head - 1), agent=HUB_AGENT, layer=AGENT)

