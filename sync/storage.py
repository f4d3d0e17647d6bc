"""The hub's storage: one interface, one module per backend (SQLite, PostgreSQL).

Positions are gapless and commit-ordered on both: a push holds the hub's single writer lock (SQLite)
or the counter row (PostgreSQL) from before it reads the head until it commits, so a reader can
never see position N+1 before N.

Writes go through `commit`: several pushes (and pull records) in one transaction, so one fsync
carries a whole group (the hub's group commit, sync/committer.py), each push still all or nothing.
"""

import hashlib
import hmac
import json
import re
import secrets
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import NamedTuple

import msgspec

from eventstore import validate
from eventstore.backends import is_postgres, shown
from eventstore.envelope import Event, new_event
from eventstore.errors import IdConflict, InvalidInput, NotFound, StorageUnavailable
from eventstore.ids import now_ms
from eventstore.governance import hold_refusal, is_held
from eventstore.kinds import SHARED_PAGE_KINDS, ContractChange, PageDelete, PageIngest, PageUpdate, Redacted, Redaction
from eventstore.redaction import redacted_form, redaction_events, stand_in
from eventstore.layers import CONTRACT_LAYER, check_agent_name, consumed_layers, format_of, produced_layers

from .contracts import lenient_contract
from .wire import Contract, PushResult

HUB_AGENT = "_hub"
_stored = msgspec.msgpack.Encoder()
_loaded = msgspec.msgpack.Decoder(Event)


PAGE_VERSIONS_TABLE = """
CREATE TABLE IF NOT EXISTS hub_page_versions (
    id TEXT PRIMARY KEY, layer TEXT NOT NULL, slug TEXT NOT NULL, held INTEGER NOT NULL, superseded INTEGER NOT NULL,
    parents TEXT, named_by TEXT NOT NULL DEFAULT '', void INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS hub_page_versions_page ON hub_page_versions(layer, slug) WHERE superseded = 0;
"""
"""The shared pages' versions, for the hold checks (hub.check_holds): one row per version, `held` when it
says `governance: hold` (a redacted version holds nothing), `parents` its own (a JSON list; NULL until it
arrives), `named_by` the versions that name it as a parent (each id followed by a space), `void` when it
supersedes a held version without releasing it, or names a void version (eventstore.governance: as if it had
never come), and `superseded` how many versions not void name it. A parent named before it arrives gets its
row then, completed when it comes, and a held version that arrives after its children voids those that do not
release it: the heads of a page are its rows arrived, not void and not superseded, whatever the arrival order."""
PAGE_VERSIONS_COLUMN = "void"
"""The newest column of hub_page_versions: a hub whose table lacks it fills the table again (`page_versions`)."""
SUPERSEDE_SQL = ("INSERT INTO hub_page_versions (id, layer, slug, held, superseded, named_by) VALUES ({p}, {p}, {p}, 0, 1, "
                 "{p}) ON CONFLICT (id) DO UPDATE SET superseded = hub_page_versions.superseded + 1, "
                 "named_by = hub_page_versions.named_by || excluded.named_by")
VERSION_SQL = ("INSERT INTO hub_page_versions VALUES ({p}, {p}, {p}, {p}, 0, {p}, '', 0) ON CONFLICT (id) DO UPDATE SET "
               "layer = excluded.layer, slug = excluded.slug, held = excluded.held, parents = excluded.parents")
HEADS_SQL = ("SELECT id, held FROM hub_page_versions WHERE layer = {p} AND slug = {p} AND superseded = 0 AND void = 0 "
             "AND parents IS NOT NULL ORDER BY id")
NAMED_SQL = "SELECT id FROM hub_page_versions WHERE superseded > 0 AND id IN ({ids})"
HOLDING_SQL = ("SELECT id, held, void, parents, named_by FROM hub_page_versions WHERE (held = 1 OR void = 1) "
               "AND id IN ({ids})")
VERSIONS_SQL = "SELECT id, held, void, parents, named_by FROM hub_page_versions WHERE id IN ({ids})"
VOID_SQL = "UPDATE hub_page_versions SET void = 1 WHERE id = {p}"
UNNAMED_SQL = "UPDATE hub_page_versions SET superseded = superseded - 1 WHERE id = {p}"
REDACTED_PAGES_SQL = "SELECT DISTINCT layer, slug FROM hub_page_versions WHERE parents IS NOT NULL AND id IN ({ids})"
PAGE_IDS_SQL = "SELECT id FROM hub_page_versions WHERE layer = {p} AND slug = {p}"
PAGE_EVENTS_SQL = "SELECT data FROM hub_events WHERE id IN ({ids}) ORDER BY position"
DROP_PAGE_SQL = "DELETE FROM hub_page_versions WHERE layer = {p} AND slug = {p}"
REDACTION_SQL = "INSERT INTO hub_redactions VALUES ({p}, {p})"
REDACTION_AUTHORS_SQL = ("INSERT INTO hub_redaction_authors SELECT DISTINCT agent, {p} FROM hub_events "
                         "WHERE id IN ({ids})")
"""Who wrote the events a redaction (at position `{p}`) names: read once its targets are stored."""
AUTHORED_ROWS_SQL = ("SELECT e.position, e.recorded_at, e.data FROM hub_events e WHERE e.position IN ("
                     "SELECT position FROM hub_redaction_authors WHERE agent = {p} AND position > {p} "
                     "AND position <= {p} UNION SELECT position FROM hub_redactions WHERE layer IN ({ids}) "
                     "AND position > {p} AND position <= {p}) AND e.layer NOT IN ({ids}) ORDER BY e.position LIMIT {p}")
REDACTION_ROWS_SQL = ("SELECT e.position, e.recorded_at, e.data FROM hub_redactions r JOIN hub_events e ON e.position = "
                      "r.position WHERE r.position > {p} AND r.position <= {p} AND r.layer IN ({ids}) ORDER BY r.position")
"""Written once, `{p}` the backend's parameter mark, `{ids}` its way to read one parameter as a list of ids."""


REDACTIONS_TABLE = """
CREATE TABLE IF NOT EXISTS hub_redactions (position {position} PRIMARY KEY, layer TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS hub_redactions_layer ON hub_redactions(layer, position);
CREATE TABLE IF NOT EXISTS hub_redaction_authors (agent TEXT NOT NULL, position {position} NOT NULL,
    PRIMARY KEY (agent, position));
"""
"""The position and layer of every redaction the hub holds (`{position}` the backend's type of a position): a pull
hands an agent the redactions of the layers it produces without consuming them (`redaction_rows`), so the author of
an event someone else redacted loses its own copy's text too. And who wrote each redaction's targets
(hub_redaction_authors): an author that no longer produces the layer, or whose pull cursor passed the redaction
before the hub could hand it over, asks for them on their own (`redactions_apart_rows`, GET /v1/redactions).
Both filled from the stored events once, by a hub made before them (`stored_redactions`)."""
AUTHORS_TABLE = "hub_redaction_authors"


class PageVersionSQL(NamedTuple):
    """The statements above in one backend's dialect, and how it runs them in its open transaction."""

    many: Callable  # (sql, rows) -> None
    rows: Callable  # (sql, params) -> list of tuples
    ids: Callable  # list of ids -> the one parameter `{ids}` reads
    body: Callable  # id -> the body of a stored event (None: not stored)
    supersede: str
    version: str
    holding: str
    versions: str
    void: str
    unnamed: str
    redacted_pages: str
    page_ids: str
    page_events: str
    drop_page: str
    redaction: str
    redaction_authors: str


def page_version_sql(mark: str, ids: str, to_ids: Callable, many: Callable, rows: Callable,
                     stored: Callable) -> PageVersionSQL:
    """The statements for a backend whose parameter mark is `mark` and whose SQL `ids` reads a parameter
    `to_ids(list)` as a list of ids; `stored(id)` is (layer, data) of a stored event or None."""

    def body(id):
        found = stored(id)
        return _readable(_loaded.decode(bytes(found[1])).body) if found else None

    return PageVersionSQL(many, rows, to_ids, body, *(sql.format(p=mark, ids=ids) for sql in (
        SUPERSEDE_SQL, VERSION_SQL, HOLDING_SQL, VERSIONS_SQL, VOID_SQL, UNNAMED_SQL, REDACTED_PAGES_SQL, PAGE_IDS_SQL,
        PAGE_EVENTS_SQL, DROP_PAGE_SQL, REDACTION_SQL, REDACTION_AUTHORS_SQL)))


def _readable(body):
    """A body as the hold checks read it: a redacted page version as its stand-in (it holds nothing), as the
    consumers' folds see it."""
    return stand_in(body) if isinstance(body, Redacted) and body.original in SHARED_PAGE_KINDS else body


def page_version_rows(events) -> tuple[list[tuple], list[tuple]]:
    """(SUPERSEDE_SQL rows, VERSION_SQL rows) of the shared page versions among `events`, in order:
    each version's parents named, then its own row."""
    superseded, versions = [], []
    for event in events:
        body = _readable(event.body)
        if isinstance(body, (PageIngest, PageUpdate, PageDelete)):
            parents = list(getattr(body, "parents", ()))
            superseded.extend((parent, event.layer, body.slug, event.id + " ") for parent in parents)
            versions.append((event.id, event.layer, body.slug,
                             int(not isinstance(body, PageDelete) and is_held(body.frontmatter)),
                             json.dumps(parents)))
    return superseded, versions


def record_page_versions(sql: PageVersionSQL, events) -> None:
    """Keeps hub_page_versions for `events` (new ones, in position order), in the caller's transaction: their
    rows, then the versions that the rule of eventstore.governance makes void, whatever came first: a version
    of the batch naming a held version it does not release or a void one, a stored version naming a held
    version of the batch, and every version built on one made void. Rare, so read row by row."""
    superseded, versions = page_version_rows(events)
    if not versions:
        return
    sql.many(sql.supersede, superseded)
    sql.many(sql.version, [row[:4] + (row[4],) for row in versions])
    bodies = {event.id: _readable(event.body) for event in events}
    held_new = [row[0] for row in versions if row[3]]
    parents = sorted({row[0] for row in superseded} | set(held_new))
    flagged = {row[0]: row for row in sql.rows(sql.holding, (sql.ids(parents),))}
    if not flagged:
        return

    def body(id):
        return bodies[id] if id in bodies else sql.body(id)

    doomed = []
    for parent, _layer, _slug, child in superseded:
        row = flagged.get(parent)
        if row is not None and (row[2] or hold_refusal(body(child[:-1]), {parent: body(parent)}.get)):
            doomed.append(child[:-1])
    for id in held_new:
        for child in flagged[id][4].split():
            if hold_refusal(body(child), {id: body(id)}.get):
                doomed.append(child)
    _make_void(sql, doomed)


def refuse_loops(sql: PageVersionSQL, events) -> None:
    """Refuses, in the commit's transaction and after record_page_versions, a group whose shared page versions
    would supersede one another in a loop. A version may reach the hub after its child (another path, a resend),
    so a parent not held is taken; but a producer, who chooses its ids, could then push the version named, naming
    the child: two versions superseding each other, a page with no head, gone from every consumer with no delete
    and no conflict (nc26a); a version naming itself made every view of its page fail. Checked here, not with
    the batch's other checks, so that two pushes checked at once cannot make the loop between them. Raised, the
    group is retried batch by batch (HubStorage.commit): only the batch that makes the loop is refused.

    Of the versions of a loop, the one that came last closes it, and the others all came before it: one of them
    names it. So only a version that a version come before it names (stored already, or earlier in the group) is
    looked at, and only through versions come before it: from it down its children and up from its parents, until
    the two searches meet, or either ends. Each step widens the smaller of the two (one read of its frontier): a
    version pushed after its parent costs nothing, one pushed after its children (a resend) with its parents not
    there yet one read (nc27a: walking every child took 20 s under the write lock for a root pushed after 16,000
    of its descendants, and a chain pushed in one batch would have walked itself once per version)."""
    versions = [event for event in events if isinstance(_readable(event.body), (PageIngest, PageUpdate, PageDelete))]
    if not versions:
        return
    place = {event.id: index for index, event in enumerate(events)}
    rows = {row[0]: row for row in sql.rows(sql.versions, (sql.ids(sorted({event.id for event in versions})),))}
    for event in versions:
        row = rows.get(event.id)
        at = place[event.id]

        def before(node: str) -> bool:
            return place.get(node, -1) < at

        if row is None:
            continue
        parents = json.loads(row[3]) if row[3] else []
        children = [child for child in row[4].split() if before(child)]
        if event.id not in parents and not children:
            continue  # named by nothing come before it: it closes no loop
        parent = _loop_through(sql, event.id, children, parents, before)
        if parent is not None:
            what = "is this version itself" if parent == event.id else "is built on this version"
            raise InvalidInput(f"event {event.id}: parent {parent} {what}: the page's versions would supersede one "
                               "another in a loop, and it would have no version left; nothing of the batch was applied")


def _loop_through(sql: PageVersionSQL, id: str, children: list[str], parents: list[str], before) -> str | None:
    """The parent of version `id` that is `id` or built on it (a loop through versions `before` it), or None:
    `refuse_loops`'s two searches."""
    if id in parents:
        return id
    down, down_front = {id}, set(children) - {id}
    up = {parent: parent for parent in parents if before(parent)}  # each ancestor -> the parent of `id` above it
    up_front, downward = set(up), False
    while True:
        met = next((node for node in sorted(down_front) if node in up), None) or \
            next((node for node in sorted(up_front) if node in down), None)
        if met is not None:
            return up[met]
        if not (down_front and up_front):
            return None
        downward = len(down_front) < len(up_front) or (len(down_front) == len(up_front) and not downward)
        if downward:
            down |= down_front
            found = sql.rows(sql.versions, (sql.ids(sorted(down_front)),))
            down_front = {child for row in found for child in row[4].split() if before(child)} - down
        else:
            found = sql.rows(sql.versions, (sql.ids(sorted(up_front)),))
            up_front = set()
            for row in found:
                for grand in json.loads(row[3]) if row[3] else ():
                    if grand not in up and before(grand):
                        up[grand] = up[row[0]]
                        up_front.add(grand)


def _make_void(sql: PageVersionSQL, doomed: list[str]) -> None:
    """Makes void each of `doomed` and every version built on one: it names nothing any more (its parents
    are one version less superseded)."""
    seen = set()
    while doomed := [id for id in doomed if id not in seen]:
        seen.update(doomed)
        rows = sql.rows(sql.versions, (sql.ids(sorted(set(doomed))),))
        fresh = [row for row in rows if not row[2] and row[3] is not None]
        sql.many(sql.void, [(row[0],) for row in fresh])
        sql.many(sql.unnamed, [(parent,) for row in fresh for parent in json.loads(row[3])])
        doomed = [child for row in fresh for child in row[4].split()]


def refold_pages(sql: PageVersionSQL, redacted: list[str]) -> None:
    """Keeps hub_page_versions again for the pages of the redacted versions among `redacted` (their stand-ins
    hold nothing: what was void for them may count again), from their stored events, in position order."""
    for layer, slug in sql.rows(sql.redacted_pages, (sql.ids(redacted),)):
        ids = [id for (id,) in sql.rows(sql.page_ids, (layer, slug))]
        events = [_loaded.decode(bytes(data)) for (data,) in sql.rows(sql.page_events, (sql.ids(ids),))]
        sql.many(sql.drop_page, [(layer, slug)])
        record_page_versions(sql, events)


def record_redactions(sql: PageVersionSQL, events, first: int) -> None:
    """Keeps hub_redactions and hub_redaction_authors for `events` (new ones, the first at position `first`, stored
    already), in the caller's transaction."""
    _record(sql, [(first + i, event.layer, event.body.target_ids) for i, event in enumerate(events)
                  if event.body.__class__ is Redaction])


def _record(sql: PageVersionSQL, redactions: list[tuple[int, str, list[str]]]) -> None:
    sql.many(sql.redaction, [(position, layer) for position, layer, _targets in redactions])
    sql.many(sql.redaction_authors, [(position, sql.ids(targets)) for position, _layer, targets in redactions])


def stored_redactions(sql: PageVersionSQL, page: str) -> None:
    """Fills hub_redactions and hub_redaction_authors (emptied first) from the stored events: how a hub made before
    them fills them, once (each event's kind, and a redaction's targets, alone decoded). `page` reads (position,
    data) after a position (its one parameter)."""
    sql.many("DELETE FROM hub_redactions", [()])
    after = 0
    while rows := sql.rows(page, (after,)):
        _record(sql, [(position, stored.layer, stored.body.target_ids) for position, data in rows
                      if (stored := _stored_kind.decode(bytes(data))).body.kind == "redaction"])
        after = rows[-1][0]


class _KindOnly(msgspec.Struct):
    kind: str
    target_ids: list[str] = []


class _StoredKind(msgspec.Struct):
    layer: str
    body: _KindOnly


_stored_kind = msgspec.msgpack.Decoder(_StoredKind)


def stored_page_versions(sql: PageVersionSQL, page: str) -> None:
    """Fills hub_page_versions from the stored events, in position order: how a hub made before it (or before
    its newest column) fills it, once. `page` reads (position, data) after a position (its one parameter)."""
    after = 0
    while rows := sql.rows(page, (after,)):
        record_page_versions(sql, [_loaded.decode(bytes(data)) for _position, data in rows])
        after = rows[-1][0]


STORED_PAGE = "SELECT position, data FROM hub_events WHERE position > {p} ORDER BY position LIMIT 1000"


class Stale(Exception):
    """A push checked with a cached token state that may have changed since (another connection committed,
    an agent or the contract changed): not applied; the hub checks it again from a fresh read."""


class PullRecord(msgspec.Struct, array_like=True):
    agent: str
    cursor: int
    at: int


class Committed(msgspec.Struct):
    """What one group commit did: per push its results or the error that refused it alone."""

    outcomes: list
    head: int
    layers: set[str]


Watcher = Callable[[int, "set[str] | None"], None]
"""Called with the head after commits made elsewhere and the layers they touched (None: unknown)."""


class AgentInfo(msgspec.Struct):
    name: str
    created_at: int
    revoked_at: int | None = None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


_token_hashes: dict[str, str] = {}
TOKEN_HASHES = 4096
"""How many recent tokens' hashes a hub keeps (each request names its token; the hash is what is looked up)."""


def request_token_hash(token: str) -> str:
    digest = _token_hashes.get(token)
    if digest is None:
        if len(_token_hashes) >= TOKEN_HASHES:
            _token_hashes.clear()
        digest = _token_hashes[token] = hash_token(token)
    return digest


def new_token() -> str:
    return "mlg_" + secrets.token_urlsafe(32)


class _Travelling(msgspec.Struct, omit_defaults=True):
    """An Event's travelling fields, encoded as Event encodes them, its body already encoded."""

    id: str
    ts: int
    agent: str
    layer: str
    body: msgspec.Raw
    digest: str = ""


def encode_stored(event: Event) -> bytes:
    """The travelling part of an event (no seq, recorded_at or chain: those are each store's own). A
    pushed event carries its body's bytes from the digest check: they are not encoded again."""
    raw = event.__dict__.get("_raw")
    if raw is None:
        return _stored.encode(Event(id=event.id, ts=event.ts, agent=event.agent, layer=event.layer, body=event.body,
                                    digest=event.digest))
    return _stored.encode(_Travelling(event.id, event.ts, event.agent, event.layer, msgspec.Raw(raw), event.digest))


_PLACE = b"\xa3seq\xcf"
_RECORDED_AT = b"\xabrecorded_at\xcf"


def placed_stored(data: bytes, position: int, recorded_at: int) -> bytes:
    """The msgpack of the Event `decode_stored` would give (its `seq` and `recorded_at` set), made from the stored
    bytes without decoding them: a msgpack pull answer (sync.wire.MSGPACK) is these, side by side.

    `encode_stored` writes a map of at most the six travelling fields (never `seq`, `recorded_at` or `chain`), so
    two entries more still fit a fixmap: its first byte counts two more, and the two follow its last entry
    (each as a uint64: msgpack lets an integer take more bytes than it needs)."""
    first = data[0]
    if first & 0xF0 != 0x80 or first > 0x86:  # not what encode_stored writes: the long way
        event = decode_stored(data, position, recorded_at)
        return _stored.encode(event)
    return b"".join((bytes((first + 2,)), data[1:], _PLACE, position.to_bytes(8, "big"), _RECORDED_AT,
                     recorded_at.to_bytes(8, "big")))


def decode_stored(data: bytes, position: int, recorded_at: int) -> Event:
    event = _loaded.decode(data)
    event.seq, event.recorded_at = position, recorded_at
    return event


def contract_event(contract: Contract) -> Event:
    return new_event(ContractChange(layers=msgspec.to_builtins(contract.layers)), agent=HUB_AGENT,
                     layer=CONTRACT_LAYER)


def contract_of(event: Event | None) -> Contract:
    return Contract() if event is None else lenient_contract(event.body.layers)


APART_CHUNK = 256
"""The rows `HubStorage.redactions_apart` reads at a time, however few it hands over."""


class HubStorage(ABC):
    """What the hub keeps: agents and their hashed tokens, the event log, pull progress."""

    reads_wait = True
    """Whether a read may wait (on the network, on a lock): the hub then reads in a worker thread, not on
    its event loop."""

    # --- agents -------------------------------------------------------------------------------

    @abstractmethod
    def _insert_agent(self, name: str, token_hash: str, at: int) -> None: ...

    @abstractmethod
    def _agent_row(self, token_hash: str) -> tuple[str, str, int | None] | None: ...

    @abstractmethod
    def revoke_agent(self, name: str) -> None: ...

    @abstractmethod
    def agents(self) -> list[AgentInfo]: ...

    def add_agent(self, name: str) -> str:
        """Registers an agent and returns its token, which is stored only as a hash."""
        check_agent_name(name)
        same = next((known.name for known in self.agents() if known.name.lower() == name.lower() and known.name != name), None)
        if same is not None:  # Main, main and MAIN would be three agents that people (and logs read by eye) confuse
            raise InvalidInput(f"agent name {name!r} differs only in case from the agent {same!r}: choose another name")
        token = new_token()
        self._insert_agent(name, hash_token(token), now_ms())
        return token

    def agent_for_token(self, token: str) -> str | None:
        """The agent a bearer token names, or None (unknown or revoked). Compared in constant time."""
        digest = request_token_hash(token)
        row = self._agent_row(digest)
        if row is None or not hmac.compare_digest(row[1], digest) or row[2] is not None:
            return None
        return row[0]

    @abstractmethod
    def _request_row(self, token_hash: str) -> tuple | None:
        """(name, token_hash, revoked_at, the contract's position, the head) in one read; None for a hash no
        agent has."""

    def _request_rows(self, token_hashes: list[str]) -> list[tuple]:
        """The `_request_row` of each of several hashes that an agent has; one by one unless the storage reads
        them together."""
        return [row for row in map(self._request_row, token_hashes) if row is not None]

    def request_state(self, token: str) -> tuple[str | None, Contract, int, int]:
        """What every request reads first, in one read (a read costs about as much as the rest of a
        small request's checks): the token's agent (None: unknown or revoked; compared in constant
        time), the contract in force, its position, and the head (read before any page that follows)."""
        digest = request_token_hash(token)
        return self._state_of(self._request_row(digest), digest)

    def request_states(self, tokens) -> dict[str, tuple[str | None, Contract, int, int]]:
        """`request_state` of each of several tokens, in one read where the storage can (`_request_rows`)."""
        digests = {token: request_token_hash(token) for token in tokens}
        rows = {row[1]: row for row in self._request_rows(sorted(set(digests.values())))}
        return {token: self._state_of(rows.get(digest), digest) for token, digest in digests.items()}

    def _state_of(self, row: tuple | None, digest: str) -> tuple[str | None, Contract, int, int]:
        """`request_state` from the `_request_row` read for the token whose hash is `digest`."""
        if row is None or not hmac.compare_digest(row[1], digest) or row[2] is not None:
            return None, Contract(), 0, 0
        contract, position = self._contract_at(row[3])
        return row[0], contract, position, row[4]

    def push_state(self, token: str) -> tuple[str | None, Contract, int, int | None]:
        """`request_state` without the head, for a push: (agent, contract, its position, checked), `checked`
        None when read now, else the token-state epoch of a cached read, which the push's commit checks again
        (`commit`'s `checked`). A storage without a cache reads every time."""
        agent, contract, position, _head = self.request_state(token)
        return agent, contract, position, None

    # --- events -------------------------------------------------------------------------------

    @abstractmethod
    def _commit_group(self, batches: list[list[Event]], pulls: list[PullRecord],
                      checked: list[int | None] | None = None) -> Committed:
        """One transaction: every batch planned by `plan_group` (under the writer lock), the pull records."""

    def commit(self, batches: list[list[Event]], pulls: list[PullRecord] = (),
               checked: list[int | None] | None = None) -> Committed:
        """Commits several pushes and pull records in one transaction (one fsync).

        Each batch is all or nothing and is checked against what is stored and what the batches before it
        in the group add, so a refused batch refuses only itself (its outcome is the error). Should the
        transaction fail as a whole anyway, each batch is retried alone so one cannot sink the others.
        `checked`, per batch: the epoch of the cached token state it was checked with (`push_state`), or None;
        a batch whose token state may have changed since is not applied, its outcome `Stale`."""
        try:
            return self._commit_group(batches, list(pulls), checked)
        except StorageUnavailable:  # the database does not answer: each batch alone would not be answered either
            raise
        except Exception:
            if len(batches) + len(pulls) <= 1:
                raise
        outcomes, head, layers = [], 0, set()
        for index, batch in enumerate(batches):
            try:
                alone = self._commit_group([batch], [], None if checked is None else [checked[index]])
            except Exception as exc:  # noqa: BLE001 - the error is this batch's answer
                outcomes.append(exc)
                continue
            outcomes.extend(alone.outcomes)
            head, layers = max(head, alone.head), layers | alone.layers
        if pulls:
            self._commit_group([], list(pulls))
        return Committed(outcomes=outcomes, head=head, layers=layers)

    def push(self, events: list[Event]) -> list[PushResult]:
        """Appends a batch all or nothing; a known id with the same digest is a duplicate, another digest a refusal."""
        outcome = self.commit([events]).outcomes[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def pull(self, after: int, layers: list[str], limit: int) -> list[Event]:
        """The events of `layers` after position `after`, at most `limit`, in position order."""
        return [decode_stored(data, position, at) for position, at, data in self.pull_rows(after, layers, limit)]

    @abstractmethod
    def pull_rows(self, after: int, layers: list[str], limit: int) -> list[tuple[int, int, bytes]]:
        """`pull`'s events as stored: (position, recorded_at, encode_stored's bytes) each."""

    @abstractmethod
    def redaction_rows(self, after: int, upto: int, layers: list[str]) -> list[tuple[int, int, bytes]]:
        """The redactions of `layers` at positions after `after` up to `upto`, as `pull_rows` gives events."""

    @abstractmethod
    def redactions_apart_rows(self, agent: str, after: int, upto: int, limit: int, besides: list[str],
                                layers: list[str] = ()) -> list[tuple[int, int, bytes]]:
        """The redactions naming an event `agent` wrote, and those of `layers` (it consumed them once: it may hold
        their events), in layers other than `besides` (those it consumes, which its pulls bring), at positions after
        `after` up to `upto`, at most `limit`, as `pull_rows` gives events."""

    def redactions_apart(self, agent: str, after: int, upto: int, limit: int, besides: list[str],
                         formerly: dict[str, int | None]) -> list[tuple[int, int, bytes]]:
        """`redactions_apart_rows` (at most `limit`, as `pull_rows`: one more when more follow), but a redaction of a
        layer `formerly` names (it consumed it once) only when it names an event that could have reached `agent`:
        one stored before the position of the contract that stopped it consuming the layer (its value; None: it was
        never stopped), or one it wrote. Without that, a consumer dropped long ago was handed, reason and all, the
        redactions of events it never saw."""
        kept = []
        while True:  # a few hundred rows a read: a small `limit` read them one at a time (nc21b: 1.2 s for 3,000)
            chunk = max(limit - len(kept), APART_CHUNK)
            rows = self.redactions_apart_rows(agent, after, upto, chunk, besides, list(formerly))
            for row in rows:
                if self._could_have_reached(agent, row[2], formerly):
                    kept.append(row)
                    if len(kept) == limit:
                        return kept
            if len(rows) < chunk:
                return kept
            after = rows[-1][0]

    def _could_have_reached(self, agent: str, data: bytes, formerly: dict[str, int | None]) -> bool:
        redaction = decode_stored(data, 0, 0)
        if redaction.layer not in formerly or formerly[redaction.layer] is None:
            return True
        targets = redaction.body.target_ids
        return (any(position < formerly[redaction.layer] for position in self.positions_of(targets).values())
                or agent in self.authors_of(targets).values())

    _contracts: tuple[int, list[tuple[int, int, Contract]]] = (-1, [])

    def consumed_ever(self, agent: str) -> dict[str, int | None]:
        """The layers `agent` consumed under any contract the hub has had (GET /v1/redactions), each with the position
        of the contract that stopped it consuming the layer (None: the latest contract has it consume the layer): a
        consumer dropped since holds events stored before that, which later redactions name. A contract in force only
        before the agent was added counts for nothing: its `consumers = ["*"]` named no agent of that name yet (nc21b:
        one added after the layer was dropped was handed its redactions)."""
        until: dict[str, int | None] = {}
        for at, contract, counts in self._contracts_for(agent):
            now = set(consumed_layers(contract, agent))
            until.update({layer: at for layer, then in until.items() if then is None and layer not in now})
            if counts:
                until.update({layer: None for layer in now})
        return dict(sorted(until.items()))

    def produced_ever(self, agent: str) -> set[str]:
        """The layers `agent` produced under any contract the hub has had since it was added (`consumed_ever`)."""
        return {layer for _at, contract, counts in self._contracts_for(agent) if counts
                for layer in produced_layers(contract, agent)}

    def _contracts_for(self, agent: str) -> list[tuple[int, object, bool]]:
        """Every contract the hub has had, oldest first: (its position, the contract, whether it was in force after
        `agent` was added). The contracts are read again when a new one came."""
        position = self.latest_position(CONTRACT_LAYER)
        known, contracts = self._contracts
        if known != position:
            contracts = [(event.seq, event.recorded_at, contract_of(event))
                         for event in self.pull(0, [CONTRACT_LAYER], position or 1)]
            self._contracts = (position, contracts)
        added = min((info.created_at for info in self.agents() if info.name == agent), default=None)
        return [(at, contract, added is not None and (i + 1 == len(contracts) or added < contracts[i + 1][1]))
                for i, (at, _recorded_at, contract) in enumerate(contracts)]

    @abstractmethod
    def head(self) -> int: ...

    @abstractmethod
    def layers_of(self, ids: list[str]) -> dict[str, str]:
        """The layer of each of these event ids that the hub holds (ids it does not hold are left out)."""

    @abstractmethod
    def positions_of(self, ids: list[str]) -> dict[str, int]:
        """The position of each of these event ids that the hub holds (ids it does not hold are left out)."""

    def authors_of(self, ids: list[str]) -> dict[str, str]:
        """The agent of each of these event ids that the hub holds (ids it does not hold are left out)."""
        return self._column_of(ids, "agent")

    def positions_seen_by(self, agent: str, ids: list[str]) -> dict[str, int]:
        """`positions_of`, narrowed to the events `agent` may have had: its own, the contract's, those of a layer it
        consumed when they were stored (`consumed_ever`), and the redactions a pull or GET /v1/redactions hands it
        (`_handed`). Another event is left out as one the hub does not hold: GET /v1/contract?holds= told any agent
        that an event of a layer it may not read was there, and where (nc22b)."""
        positions = self.positions_of(ids)
        if not positions:
            return {}
        layers, authors, consumed = self.layers_of(list(positions)), self.authors_of(list(positions)), None
        seen = {}
        for id, position in positions.items():
            layer = layers.get(id)
            if authors.get(id) != agent and layer != CONTRACT_LAYER:
                consumed = self.consumed_ever(agent) if consumed is None else consumed
                if layer not in consumed or (consumed[layer] is not None and position > consumed[layer]):
                    if not self._handed(agent, id, layer, consumed):
                        continue
            seen[id] = position
        return seen

    def _handed(self, agent: str, id: str, layer: str, consumed: dict[str, int | None]) -> bool:
        """Whether the event is a redaction the hub may have handed `agent` apart from its consumed layers' events:
        one of a layer it produces or produced (a pull brings those), or one GET /v1/redactions hands it (of a layer
        it consumed once, as `redactions_apart` filters them, or naming an event it wrote). Left out, the last event a
        pull brought looked lost from the hub at every pull (nc23a)."""
        found = self.stored(id)
        body = decode_stored(found[1], 0, 0).body if found else None
        if type(body) is not Redaction:
            return False
        if layer in self.produced_ever(agent):
            return True
        if layer in consumed:
            return self._could_have_reached(agent, found[1], consumed)
        return agent in self.authors_of(list(body.target_ids)).values()

    def watch(self, callback: Watcher) -> None:
        """Calls `callback` from a background thread when commits made outside this object (another hub
        process, another connection) move the head. One loop per storage, however many long-polls wait;
        the hub learns of its own commits from `commit`. Stopped by `close`."""
        self._stop_watch = threading.Event()
        self._watcher = threading.Thread(target=self._watch_loop, args=(callback, self._stop_watch), daemon=True,
                                         name="hub-watch")
        self._watcher.start()

    @abstractmethod
    def _watch_loop(self, callback: Watcher, stop: threading.Event) -> None: ...

    def watch_redactions(self, callback: Callable[[], None]) -> None:
        """Calls `callback` from a background thread after each commit carrying a redaction that removed a body,
        made by any process (`mem hub redact`, another hub process), so that the pages' mirror of a hub that only
        a running `mem serve` knows of (a PostgreSQL hub's, by default in a temporary directory) drops the text at
        once, and the mirror of another `mem serve` on the same hub after a redaction pushed to this one. Stopped by
        `close`."""

    def _stop_watching(self) -> None:
        for stop, thread in ((getattr(self, "_stop_watch", None), getattr(self, "_watcher", None)),
                             (getattr(self, "_stop_redactions", None), getattr(self, "_redactions", None))):
            if stop is not None:
                stop.set()
                thread.join(timeout=5)

    @abstractmethod
    def latest_of_layer(self, layer: str, at_ms: int | None) -> Event | None: ...

    @abstractmethod
    def latest_position(self, layer: str) -> int:
        """The position of the layer's last event (0: none), read off the (layer, position) index alone."""

    @abstractmethod
    def stored(self, id: str) -> tuple[str, bytes] | None:
        """(layer, stored data) of an event on the hub, or None."""

    @abstractmethod
    def page_heads(self, layer: str, slug: str) -> list[tuple[str, bool]]:
        """(id, held) of each head of a shared page on the hub: its versions no other version names as a
        parent (hub_page_versions, by id)."""

    @abstractmethod
    def named_versions(self, ids: list[str]) -> set[str]:
        """Those of `ids` that a shared page version on the hub names as a parent (hub_page_versions): a
        version arriving after its child adds no head."""

    def admin_redact(self, ids: list[str], reason: str) -> list[PushResult]:
        """The hub administrator's redaction: one `redaction` event per layer, by the hub itself."""
        reason = validate.one_line(reason, "a redaction's reason")
        if not reason:
            raise InvalidInput("a redaction needs a --reason")
        by_layer: dict[str, list[str]] = {}
        for id in ids:
            found = self.stored(id)
            if found is None or found[0] == CONTRACT_LAYER:
                raise NotFound(f"there is no event {id} in a shared layer of this hub")
            kind = _loaded.decode(bytes(found[1])).kind
            if kind in ("redacted", "redaction"):
                raise InvalidInput(f"event {id} {'is redacted already' if kind == 'redacted' else 'is a redaction'}; "
                                   "it cannot be redacted")
            by_layer.setdefault(found[0], []).append(id)
        return self.push(redaction_events(by_layer, reason, HUB_AGENT))

    # --- contracts and progress ---------------------------------------------------------------

    def apply_contract(self, contract: Contract) -> int:
        """Makes `contract` the one in force, refusing to change the format of a layer the hub holds events of."""
        self.refuse_format_changes(contract)
        return self.push([contract_event(contract)])[0].position

    def refuse_format_changes(self, contract: Contract) -> None:
        """A layer's events keep the format they were written in: consumers that pulled them before a change of
        format would keep them, those pulling after it would reject them, and each producer's unpushed events
        would be refused for good. So a layer holding events on the hub keeps its format, even dropped and named
        again."""
        current, _position = self.contract()
        for name, spec in sorted(contract.layers.items()):
            held = self.held_format(name, current)
            if held is not None and held != spec.format:
                raise InvalidInput(f"layer {name} holds {held} on the hub, which its consumers keep: its format cannot "
                                   f"change to {spec.format}; add a {spec.format} layer under another name, and drop "
                                   f"{name} from the contract once it is not needed")

    def held_format(self, layer: str, current: Contract) -> str | None:
        """The format of `layer`'s events on the hub (None: it holds none): the contract's in force, or for a layer
        it does not list (dropped), that of the layer's first event."""
        if not self.latest_position(layer):
            return None
        if layer in current.layers:
            return current.layers[layer].format
        first = self.pull(0, [layer], 1)
        return format_of(first[0].original_kind) if first else None

    _parsed_contract: tuple[int, Contract] = (0, Contract())

    def contract(self, at_ms: int | None = None) -> tuple[Contract, int]:
        """The contract in force (at `at_ms`) and its position. The hub asks on every request: the last
        one parsed is kept by position (the event at a position never changes; a contract is never redacted)."""
        if at_ms is None:
            return self._contract_at(self.latest_position(CONTRACT_LAYER))
        event = self.latest_of_layer(CONTRACT_LAYER, at_ms)
        return contract_of(event), event.seq if event else 0

    def _contract_at(self, position: int) -> tuple[Contract, int]:
        """The contract in force, known to be at `position`: parsed again only when that moved."""
        parsed = self._parsed_contract
        if parsed[0] != position:
            event = self.latest_of_layer(CONTRACT_LAYER, None)
            parsed = self._parsed_contract = (event.seq if event else 0, contract_of(event))
        return parsed[1], parsed[0]

    def record_pull(self, agent: str, cursor: int) -> None:
        """Notes that `agent` has stored every event up to `cursor` (it asks for what comes after)."""
        self.commit([], [PullRecord(agent, cursor, now_ms())])

    @abstractmethod
    def received_by(self, agent: str, at_ms: int | None) -> int:
        """The highest cursor `agent` had acknowledged by then."""

    @abstractmethod
    def close(self) -> None: ...


def check_duplicates(events: list[Event], known: dict[str, tuple[str, int]]) -> tuple[list[Event], list]:
    """Splits a batch into its new events and a plan for every result; refuses a known id with
    another digest. An id repeated inside the batch is stored once and acknowledged twice. The plan is
    None when every event is new (the common case: no bookkeeping per event)."""
    if known.keys().isdisjoint(ids := {event.id for event in events}) and len(ids) == len(events):
        return list(events), None
    fresh, plan, seen = [], [], {}
    for event in events:
        found = known.get(event.id)
        if found is not None:
            if found[0] != event.digest:
                raise IdConflict(f"event {event.id} is already on the hub with a different digest")
            plan.append(PushResult(id=event.id, position=found[1], duplicate=True))
        elif event.id in seen:
            if seen[event.id] != event.digest:
                raise IdConflict(f"event {event.id} appears twice in the batch with different digests")
            plan.append(event.id)
        else:
            seen[event.id] = event.digest
            fresh.append(event)
            plan.append(len(fresh) - 1)
    return fresh, plan


def plan_group(batches: list[list[Event]], known: dict[str, tuple[str, int]], first: int):
    """Plans a group commit: the rows to insert from `first` on and, per batch, its results or the
    IdConflict that refuses it alone. Later batches see earlier ones' events as known."""
    rows, outcomes, layers = [], [], set()
    for index, events in enumerate(batches):
        try:
            fresh, plan = check_duplicates(events, known)
        except IdConflict as exc:
            outcomes.append(exc)
            continue
        start = first + len(rows)
        if index < len(batches) - 1:
            known.update((event.id, (event.digest, start + i)) for i, event in enumerate(fresh))
        layers.update({event.layer for event in fresh})
        rows.extend(fresh)
        outcomes.append(fill_positions(plan, fresh, start))
    return rows, outcomes, layers


PLAIN_BODIES_NOT = (PageIngest, PageUpdate, PageDelete, Redaction, Redacted)
"""Bodies that make a group more than rows to insert: a shared page version (hub_page_versions), a redaction
(the rows it rewrites), a redacted event (perhaps a page version's stand-in)."""


def plain_group(batches: list[list[Event]], first: int):
    """`plan_group`'s plan, in one pass, of the common group: no id repeated in it, no page version and no
    redaction (PLAIN_BODIES_NOT); with nothing known, every event is a new row. None for any other group.
    It runs on the commit thread, holding the GIL the event loop wants, once per push."""
    rows = [event for events in batches for event in events]
    if len({event.id for event in rows}) != len(rows):
        return None
    layers = set()
    for event in rows:
        if isinstance(event.body, PLAIN_BODIES_NOT):
            return None
        layers.add(event.layer)
    outcomes, position = [], first
    for events in batches:
        outcomes.append([PushResult(id=event.id, position=position + i, duplicate=False)
                         for i, event in enumerate(events)])
        position += len(events)
    return rows, outcomes, layers


def redacted_rows(fresh: list[Event], stored) -> list[tuple[bytes, str]]:
    """(new stored data, id) for each target of the group's redactions that the hub holds in the
    redaction's own layer and has not redacted yet; `stored(id)` is (layer, data) or None, read
    inside the commit's transaction, after its rows are inserted."""
    updates, done = [], set()
    for event in fresh:
        if event.kind != "redaction":
            continue
        for target in event.body.target_ids:
            found = None if target in done else stored(target)
            if found is None or found[0] != event.layer:
                continue
            original = _loaded.decode(found[1])
            if isinstance(original.body, Redacted) or original.kind in ("redaction", "contract.change"):
                continue
            form = redacted_form(original.kind, original.raw_body(), event.body.reason, event.id)
            updates.append((encode_stored(Event(id=original.id, ts=original.ts, agent=original.agent,
                                                layer=original.layer, body=form, digest=original.digest)), target))
            done.add(target)  # the group's first redaction of it wins, as across groups
    return updates


def fill_positions(plan: list | None, fresh: list[Event], first: int) -> list[PushResult]:
    if plan is None:
        return [PushResult(id=event.id, position=first + i, duplicate=False) for i, event in enumerate(fresh)]
    positions = None  # of the fresh events by id, made only for an id repeated in the batch
    results = []
    for step in plan:
        if type(step) is int:
            results.append(PushResult(id=fresh[step].id, position=first + step, duplicate=False))
        elif isinstance(step, PushResult):
            results.append(step)
        else:
            if positions is None:
                positions = {event.id: first + i for i, event in enumerate(fresh)}
            results.append(PushResult(id=step, position=positions[step], duplicate=True))
    return results


def postgres_hub(db: str) -> bool:
    """Whether a `--db` value names a PostgreSQL hub (a postgresql:// URL) rather than a SQLite file; a URL of
    any other scheme is refused (a mistyped `postgresq://` reached libpq, which answered with a missing "=")."""
    if is_postgres(db):
        return True
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", db)
    if scheme:
        raise InvalidInput(f"--db {shown(db)}: {scheme[1]}:// is no scheme a hub knows; give a postgresql:// URL "
                           "or a SQLite file path")
    return False


def open_storage(db: str) -> HubStorage:
    """A hub storage from a `--db` value: a postgresql:// URL, or a SQLite file path.

    Imported here, not at the top, so that a SQLite hub never loads the PostgreSQL driver."""
    if postgres_hub(db):
        from .storage_postgres import PostgresHubStorage

        return PostgresHubStorage(db)
    from .storage_sqlite import SQLiteHubStorage

    return SQLiteHubStorage(db)


def hub_exists(db: str) -> bool:
    """Whether `db` already holds a hub (admin commands must never create one by accident)."""
    if postgres_hub(db):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            return conn.execute("SELECT to_regclass('hub_events') IS NOT NULL").fetchone()[0]
    from pathlib import Path

    if not Path(db).is_file() or Path(db).stat().st_size == 0:  # opening an empty file would make it a hub
        return False
    tables = sqlite_tables(db)
    return tables is None or "hub_events" in tables  # a file SQLite cannot read is left for the open to name


def pg_log_tables(db: str) -> set[str]:
    """The tables of a workspace's event log in a PostgreSQL database (none: it holds no log)."""
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        return {name for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename IN ('events', 'log_counter')")}


def sqlite_tables(db: str) -> set[str] | None:
    """The tables of a SQLite file, read without writing to it (None: not a database SQLite can read)."""
    import sqlite3
    from pathlib import Path

    try:
        conn = sqlite3.connect(f"{Path(db).absolute().as_uri()}?mode=ro", uri=True)
        try:
            return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error:
        return None
