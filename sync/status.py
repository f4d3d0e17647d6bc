"""`mem status` with the shared layers: conflicts, and per remote what is waiting to go out, what
cannot, and how far behind the hub this workspace is."""

import msgspec

from eventstore.errors import MemError
from eventstore.layers import consumes, produces
from projections.shared import Conflict
from projections.status import WorkspaceStatus, workspace_status

from .client import (PULLING_AGAIN, PUSHING_AGAIN, HeldBack, HubClient, PULL_BATCH, ask_contract, hub_behind,
                     hub_lost_pushes, load_remotes, outgoing, shown_taken_back, uncovered)


class RemoteStatus(msgspec.Struct):
    name: str
    url: str
    unpushed: int
    held: list[HeldBack]
    pulled_to: int | None  # the hub position of the last event pulled
    last_pull: str | None  # when
    behind: int | None  # events waiting on the hub (None: not asked, or no answer)
    more_behind: bool = False  # at least `behind`
    hub_head: int | None = None  # the hub's last position, any layer (from a hub that says it)
    hub_error: str | None = None
    taken_back: list[str] = []  # files showing a version this agent took back before it went out (shown_taken_back)

    def behind_text(self) -> str:
        """How far behind, in words: a bound from the hub's positions when more than a page of events waits."""
        if self.behind is None:
            return f"unknown ({self.hub_error})" if self.hub_error else "not asked"
        if not self.more_behind:
            return f"{self.behind} event" if self.behind == 1 else f"{self.behind} events"
        if not self.hub_head:
            return f"{self.behind}+ events"
        return (f"{self.behind}+ events (the hub's head is {self.hub_head - (self.pulled_to or 0):,} positions past "
                "this workspace's last pull, in every layer)")


class SyncStatus(WorkspaceStatus):
    conflicts: list[Conflict] = []
    skipped: list[str] = []  # files a newer version could not be written to: edited by hand
    not_adoptable: dict[str, str] = {}  # skipped files `mem adopt` cannot take -> what of the edit (Memory.not_adoptable)
    remotes: list[RemoteStatus] = []
    not_received: dict[str, str] = {}  # layer -> its path: in the hub's contract, not consumed, yet on disk (frozen)
    produced_only: dict[str, str] = {}  # layer -> its path: produced, not consumed: the file shows this agent's own
    not_taken: dict[str, str] = {}  # layer -> why: the hub's layers a local layer shadows (Memory.not_taken)


def sync_status(memory, fetch: bool = False, timeout: float = 0.5) -> SyncStatus:
    """Asks each hub how far behind this workspace is: always with `fetch`, else only if it answers
    within `timeout` seconds."""
    base = workspace_status(memory)
    conflicts = memory.conflicts()
    dirty = {p for p, _hash in memory.views.written.dirty()}
    skipped = [p for p in base.hand_edited if p in dirty]
    remotes = [_remote_status(memory, remote, timeout=10.0 if fetch else timeout)
               for remote in load_remotes(memory).values()]
    return SyncStatus(**msgspec.structs.asdict(base), conflicts=conflicts, skipped=skipped,
                      not_adoptable=memory.not_adoptable(skipped), remotes=remotes,
                      not_taken=memory.not_taken(), **unreceived(memory))


def unreceived(memory) -> dict[str, dict[str, str]]:
    """The hub's layers (as last pulled) this agent does not consume, each with its path:
    `not_received`, a consumer taken off a layer keeps what it had, which no longer moves; `produced_only`, a layer it
    produces (its file there or not yet) shows its own events (and what it received before, if it consumed it
    once)."""
    hub, agent, not_taken = memory.hub_contract(), memory.config.agent, memory.not_taken()
    found = {"not_received": {}, "produced_only": {}}
    for name, spec in sorted((hub.layers if hub else {}).items()):
        if consumes(hub, agent, name) or name in not_taken:
            continue
        if produces(hub, agent, name):  # told before its first write too
            found["produced_only"][name] = spec.path
        elif (memory.root / spec.path).exists():
            found["not_received"][name] = spec.path
    return found


def _remote_status(memory, remote, timeout: float) -> RemoteStatus:
    from eventstore.instants import format_instant

    pulled_to = memory.log.state(f"pulled-to:{remote.name}")
    pulled_at = memory.log.state(f"pulled-at:{remote.name}")
    waiting, held = outgoing(memory, remote)
    status = RemoteStatus(name=remote.name, url=remote.url, unpushed=waiting,
                          held=held, pulled_to=int(pulled_to) if pulled_to else None,
                          last_pull=format_instant(int(pulled_at)) if pulled_at else None, behind=None,
                          taken_back=shown_taken_back(memory, remote))
    import httpx  # only when a remote is asked: a workspace without remotes never loads it

    try:
        client = HubClient.for_remote(remote, timeout=timeout)
        cursor = memory.log.state(f"pull:{remote.name}") or ""
        try:
            answer, asked = ask_contract(memory, client, remote.name)
            status.hub_head = answer.head or None
            lost = _lost(remote, answer, asked)
            if lost:
                status.hub_error = lost
                return status
            page = client.pull(cursor, PULL_BATCH)
            # the past of layers this agent was made a consumer of, which its next pull fetches (client.take_contract)
            newly = uncovered(memory, remote.name, answer.contract, memory.views.contract)
            past = client.pull("", PULL_BATCH, layers=newly, until=cursor) if newly else None
        finally:
            client.close()
        status.behind = sum(1 for e in page.events + (past.events if past else []) if memory.log.get(e.id) is None)
        status.more_behind = page.more or bool(past and past.more)
    except (httpx.HTTPError, MemError, OSError) as exc:
        status.hub_error = str(exc) or type(exc).__name__
    return status


def _lost(remote, answer, asked) -> str | None:
    """What the hub lost of what this workspace pushed and pulled (restored from a backup), with what the next push
    and pull do about it; None when it lost nothing, as far as it tells."""
    said = [f"{lost}; {then}" for lost, then in ((hub_lost_pushes(remote, answer, asked), PUSHING_AGAIN),
                                                (hub_behind(remote, answer, asked), PULLING_AGAIN)) if lost]
    return "; ".join(said) or None
