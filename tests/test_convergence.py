"""Convergence, proven: three agents write, push and pull at random against a real hub while
connections are cut after the hub commits, requests are sent twice, the hub restarts, shared pages
are edited, created and deleted by hand (and adopted), and the contract takes producers away and
gives them back; after a final sync every agent renders byte-identical shared layers, no event is
lost or duplicated, every page version is still readable as of its seq, every hand edit names as
parent the version its file showed, and every page with several heads is a conflict everywhere."""

import hashlib
import tempfile
from pathlib import Path

import httpx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from eventstore.errors import MemError
from eventstore.kinds import Redacted
from projections import redact as redacting
from projections.adopt import adopt
from projections.memory import Memory
from sync.client import HubClient, Remote, pull, push
from sync.storage import open_storage
from sync.wire import Contract, ContractLayer

from hubserver import HubServer

AGENTS = ("ana", "ben", "cy")
CONTRACT = Contract(layers={
    "insights": ContractLayer(path="memory/cross-domain-insights.md", format="entries", producers=["*"],
                              consumers=["*"]),
    "drafts": ContractLayer(path="content/drafts/", format="pages", producers=["*"], consumers=["*"]),
})
SHARED = ("insights", "drafts")
DRAFTS = "content/drafts/"


def contract_without(agent: str | None) -> Contract:
    """The contract, with `agent` (if any) no longer a producer of drafts."""
    producers = ["*"] if agent is None else [a for a in AGENTS if a != agent]
    return Contract(layers={**CONTRACT.layers, "drafts": ContractLayer(
        path=DRAFTS, format="pages", producers=producers, consumers=["*"])})


class FaultyTransport(httpx.BaseTransport):
    """Real requests to the hub, with faults on demand: the answer lost after the hub committed,
    or the same request sent twice."""

    def __init__(self):
        self.inner = httpx.HTTPTransport()
        self.cut = 0
        self.duplicate = 0

    def handle_request(self, request):
        if self.duplicate:
            self.duplicate -= 1
            first = self.inner.handle_request(request)
            first.read()
            first.close()
        response = self.inner.handle_request(request)
        if self.cut:
            self.cut -= 1
            response.read()
            response.close()
            raise httpx.ReadError("connection cut after the hub answered", request=request)
        return response


op = st.one_of(
    st.tuples(st.just("entry"), st.integers(0, 2), st.sampled_from(["DECISION", "FACT", "LESSON"]),
              st.text("abc xyz", min_size=1, max_size=12)),
    st.tuples(st.just("reverse"), st.integers(0, 2), st.integers(0, 20)),
    st.tuples(st.just("redact"), st.integers(0, 2), st.integers(0, 20)),
    st.tuples(st.just("page"), st.integers(0, 2), st.sampled_from(["plan", "notes"]),
              st.text("abc xyz", max_size=12)),
    st.tuples(st.just("push"), st.integers(0, 2)),
    st.tuples(st.just("pull"), st.integers(0, 2)),
    st.tuples(st.just("cut"), st.integers(0, 2), st.integers(1, 2)),
    st.tuples(st.just("duplicate"), st.integers(0, 2), st.integers(1, 2)),
    st.tuples(st.just("restart")),
    st.tuples(st.just("hand"), st.integers(0, 2), st.sampled_from(["plan", "notes"]),
              st.sampled_from(["edit", "delete"]), st.text("abc xyz", min_size=1, max_size=8)),
    st.tuples(st.just("contract"), st.sampled_from([None, *AGENTS])),
)


def shared_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for folder in ("memory", "content")
            for p in sorted((root / folder).rglob("*")) if p.is_file()}


def shared_ids(memory: Memory) -> list[str]:
    return [e.id for e in memory.log.read(layers=list(SHARED))]


def redacted_ids(events) -> set[str]:
    return {e.id for e in events if isinstance(e.body, Redacted)}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(op, min_size=5, max_size=40))
@example(steps=[("contract", "ana"), ("push", 0), ("hand", 0, "notes", "edit", "x"), ("contract", None), ("push", 0),
                 ("hand", 0, "notes", "delete", "x")])  # created by hand while not a producer, deleted once one again
def test_three_agents_converge_despite_faults(steps):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        db = str(tmp / "hub.db")
        admin = open_storage(db)
        admin.apply_contract(CONTRACT)
        tokens = {name: admin.add_agent(name) for name in AGENTS}
        admin.close()
        server = HubServer(db).start()
        try:
            agents, clients = [], []
            for name in AGENTS:
                memory = Memory.init(tmp / name, name)
                memory.log.db.execute("PRAGMA synchronous = OFF")
                memory.set_contract(CONTRACT)
                transport = FaultyTransport()
                agents.append(memory)
                clients.append((HubClient(server.url, tokens[name], timeout=10, transport=transport), transport))
            remote = Remote(name="hub", url=server.url, token_file="-")
            bases: dict = {}  # (agent, slug) -> the version its file showed before an edit not yet adopted
            for step in steps:
                run(step, agents, clients, remote, server, bases)
            for _client, transport in clients:
                transport.cut = transport.duplicate = 0
            server.storage.apply_contract(CONTRACT)
            for i, memory in enumerate(agents):
                memory.set_contract(CONTRACT)  # as its next sync would
                adopt_checked(memory, i, bases)
                assert not [k for k in bases if k[0] == i], "a hand edit was not adopted under the full contract"
            for _round in range(2):
                for memory, (client, _t) in zip(agents, clients):
                    push(memory, remote, client)
                for memory, (client, _t) in zip(agents, clients):
                    pull(memory, remote, client)

            reference = shared_files(agents[0].root)
            for memory in agents[1:]:
                assert shared_files(memory.root) == reference
                assert memory.views.shared.conflicts(memory.views.checkpoint()) == \
                    agents[0].views.shared.conflicts(agents[0].views.checkpoint())
            hub_events = server.storage.pull(0, list(SHARED), 1 << 20)
            on_hub = [e.id for e in hub_events]
            assert len(on_hub) == len(set(on_hub)), "an event is on the hub twice"
            for memory in agents:
                ids = shared_ids(memory)
                assert len(ids) == len(set(ids)) and set(ids) == set(on_hub), "an event was lost or duplicated"
                assert memory.log.verify().ok
                assert redacted_ids(memory.log.read(layers=list(SHARED))) == redacted_ids(hub_events)
                check_pages(memory)
            for memory in agents:
                memory.close()
        finally:
            server.stop()


def check_pages(memory: Memory) -> None:
    """Every version this agent wrote reads back as of its seq; every page's file is its winner, and
    a page with several heads is listed as a conflict."""
    as_of = memory.views.checkpoint()
    for event in memory.log.read(layers=["drafts"], agent=memory.config.agent):
        if event.kind != "page.delete":
            text = memory.show(f"{DRAFTS}{event.body.slug}.md", event.seq)
            assert text is not None and text.endswith(event.body.text), "a page version cannot be read back"
    conflicted = {c.slug for c in memory.views.shared.conflicts(as_of)}
    for slug in memory.views.shared.slugs("drafts", as_of):
        heads = memory.views.shared.heads("drafts", slug, as_of)
        assert (len(heads) > 1) == (slug in conflicted)
        path = memory.root / DRAFTS / f"{slug}.md"
        expected = memory.views.shared.page_text("drafts", slug, as_of)
        assert (path.read_text() if path.exists() else None) == expected


def adopt_checked(memory: Memory, i: int, bases: dict) -> None:
    """Adopts hand edits; each new version's parents must be the version its file showed."""
    head = memory.log.head()
    report = adopt(memory)
    for event in memory.log.read(after=head, layers=["drafts"]):
        key = (i, event.body.slug)
        assert key in bases, "a version was adopted that nobody edited"
        assert sorted(event.body.parents) == bases.pop(key), "a hand edit did not name the version its file showed"
    for path in report.refused:
        assert (i, Path(path).stem) in bases


def hand_edit(memory: Memory, i: int, slug: str, how: str, text: str, bases: dict) -> None:
    path = memory.root / DRAFTS / f"{slug}.md"
    key = (i, slug)
    as_of = memory.views.checkpoint()
    if key not in bases:
        if path.exists():
            # the file is as mindlog last wrote it: the winner it showed
            shown = hashlib.sha256(path.read_bytes()).hexdigest()
            bases[key] = [memory.views.shared.version_rendered_as("drafts", slug, shown)]
            assert bases[key] == [memory.views.shared_winner("drafts", slug)]
        elif how == "edit" and not memory.views.shared.versions("drafts", slug, as_of):
            bases[key] = []
        else:
            return
    if how == "delete" and path.exists():
        path.unlink()
        if not bases[key]:  # a page created by hand, never adopted: deleting it leaves nothing to adopt
            bases.pop(key)
    elif how == "edit" and path.exists():
        path.write_text(path.read_text() + text + "\n")
    elif how == "edit":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\ntype: draft\n---\n# {slug}\n\n{text}\n")
    else:
        bases.pop(key)  # nothing to delete: no edit made
        return
    adopt_checked(memory, i, bases)


def run(step, agents, clients, remote, server, bases):
    kind = step[0]
    if kind == "restart":
        server.restart()
        return
    if kind == "contract":
        server.storage.apply_contract(contract_without(step[1]))
        return
    memory = agents[step[1]]
    client, transport = clients[step[1]]
    try:
        if kind == "entry":
            memory.entry_add("insights", f"[{step[2]}] {step[3]}")
        elif kind == "reverse":
            entries = memory.views.shared.entries("insights", memory.views.checkpoint())
            if entries:
                memory.entry_add("insights", "[DECISION] changed my mind", entries[step[2] % len(entries)].id)
        elif kind == "redact":
            entries = memory.views.shared.entries("insights", memory.views.checkpoint())
            if entries:
                target = memory.log.get(entries[step[2] % len(entries)].id)
                if not isinstance(target.body, Redacted):
                    redacting.redact(memory, [target], "private")
        elif kind == "page":
            memory.shared_page_write("drafts", step[2], f"---\ntype: draft\n---\n# {step[2]}\n\n{step[3]}\n".encode())
        elif kind == "push":
            push(memory, remote, client)
        elif kind == "pull":
            pull(memory, remote, client)
        elif kind == "hand":
            hand_edit(memory, step[1], step[2], step[3], step[4], bases)
        elif kind == "cut":
            transport.cut = step[2]
        else:
            transport.duplicate = step[2]
    except (httpx.TransportError, MemError):
        pass  # a fault or a refusal: the next sync retries
