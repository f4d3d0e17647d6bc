"""The hub: an ASGI app (starlette) over a HubStorage. It enforces the contract on every request.

Identity comes from the bearer token, never from an event. Bodies are JSON, optionally zstd
(`Content-Encoding` / `Accept-Encoding`, the response side a middleware); every error is
`application/problem+json` with a stable `type`, mapped by exception class at the edge.

A pushed event passes the same checks as one made locally (`eventstore.validate.body`): the hub
trusts no producer with what is inside an event.
"""

import asyncio
import base64
import binascii
import heapq
import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from urllib.parse import parse_qsl

import msgspec
import zstandard
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from eventstore import secrets, validate
from eventstore.envelope import MAX_TS, Tag, check_event, check_tag
from eventstore.errors import Held, InvalidInput, MemError, StorageFailure, storage_exceptions, storage_failure
from eventstore.governance import INGEST_VERB, held_message, hold_refusal, ingest_refusal, is_held
from eventstore.ids import MINTED_AHEAD_MS, now_ms, uuid7_ms
from eventstore.instants import format_instant
from eventstore.kinds import SHARED_PAGE_KINDS, PageDelete, PageIngest, Redacted, Redaction
from eventstore.recorder import TAGS, UNREDACTABLE
from eventstore.redaction import check_not_withdrawal, page_version, redacts, reversal
from eventstore.layers import (LAYER_KINDS, ONLY_REDACTIONS, consumed_layers, is_reserved, produced_only, produces,
                               redacts_own_alone, why_reserved)

from .committer import GroupCommitter
from .compression import ZstdResponses
from .contracts import backfill_agent
from .fanout import Fanout
from .openapi import openapi_document
from .storage import HubStorage, Stale, decode_stored, placed_stored
from .wire import (MAX_PULL, MAX_REQUEST_BYTES, MSGPACK, PROBLEM_BASE, ContractResponse, Problem, PullPage, PullResponse, PushRequest,
                   PushResponse)

MAX_WAIT_SECONDS = 30.0
MAX_POSITION = 2 ** 63 - 1
INLINE_CHECKS = 16
"""A push of at most this many events is checked on the event loop (when the storage's reads never
wait): less work than a trip to a worker thread."""
INLINE_PULL = 5000
"""A pull page larger than this is read in a worker thread even from a storage whose reads never wait:
reading and decoding 20,000 events would take the event loop from everyone else for a tenth of a second."""
ENCODED_BYTES = 16 << 20
"""The bytes of stored events and their encoded forms the hub keeps for pull answers (`EncodedEvents`)."""
ENCODED_LARGEST = 64 << 10
"""An event whose stored bytes are larger is encoded each time it is answered, not kept."""
log = logging.getLogger("mindlog.hub")


class _TaggedEvent(msgspec.Struct):
    body: Tag


class _PushTags(msgspec.Struct):
    events: list[_TaggedEvent] = []


_push_decoder = msgspec.json.Decoder(PushRequest)
_tags_decoder = msgspec.json.Decoder(_PushTags)


class HubError(MemError):
    """A refusal only the hub makes (tokens, contract, cursors), with its HTTP status and title."""

    def __init__(self, status: int, code: str, title: str, detail: str = "", field: str = ""):
        super().__init__(detail or title, code=code, field=field)
        self.status = status
        self.title = title


def problem_of(exc: MemError) -> Problem:
    """The problem document of a refusal: an invalid input is 422, everything else keeps its status."""
    status = 422 if isinstance(exc, InvalidInput) and exc.status == 400 else exc.status
    title = exc.title if isinstance(exc, HubError) else exc.code.replace("-", " ").capitalize()
    return Problem(type=PROBLEM_BASE + exc.code, title=title, status=status, detail=str(exc), field=exc.field)


def problem_response(problem: Problem, headers: dict | None = None) -> Response:
    return Response(msgspec.json.encode(problem), status_code=problem.status,
                    media_type="application/problem+json", headers=headers)


async def on_refusal(request: Request, exc: MemError) -> Response:
    return problem_response(problem_of(exc))


async def on_http_error(request: Request, exc: HTTPException) -> Response:
    return problem_response(Problem(type=PROBLEM_BASE + f"http-{exc.status_code}", title=str(exc.detail),
                                    status=exc.status_code), headers=getattr(exc, "headers", None))


async def on_client_left(request: Request, exc: ClientDisconnect) -> Response:
    """The client closed its connection before its answer (mid-body, or while its long-poll waited): there
    is nobody to answer, and nothing went wrong (the server sends nothing on a closed connection)."""
    return Response(status_code=400)


def failed_storage(exc: BaseException) -> StorageFailure:
    """A failure of the storage underneath (SQLite, the disk; PostgreSQL's outages are the storage's own
    StorageUnavailable): a 503 problem naming its cause, and one line in the hub's log, not a traceback."""
    failure = storage_failure(exc)
    log.warning("the hub's storage failed: %s", failure)
    return failure


async def on_storage_failure(request: Request, exc: Exception) -> Response:
    return problem_response(problem_of(failed_storage(exc)))


async def on_internal_error(request: Request, exc: Exception) -> Response:
    return problem_response(Problem(type=PROBLEM_BASE + "internal", title="Internal error", status=500))


def _tags_of(raw: bytes) -> list[str]:
    """The `kind` of every event of a batch that did not decode, when that much of it is well formed."""
    try:
        return [tagged.body.kind for tagged in _tags_decoder.decode(raw).events]
    except (msgspec.ValidationError, msgspec.DecodeError):
        return []


_MISSING, _AT = re.compile(r"Object missing required field `([^`]+)`"), re.compile(r" - at `\$\.?([^`]*)`$")


def decode_field(message: str) -> str:
    """The part at fault that msgspec's ValidationError names (`- at `$.events[0].ts``, and a missing field's name),
    as a problem's `field` (`events[0].ts`): the README's promise, which a decode error kept only in its detail
    (nc35b). "" when it names none."""
    at, missing = _AT.search(message), _MISSING.match(message)
    return ".".join(found.group(1) for found in (at, missing) if found is not None and found.group(1))


def decode_push(raw: bytes) -> PushRequest:
    try:
        return _push_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        for kind in _tags_of(raw):
            check_tag(kind)
        raise HubError(422, "invalid-event", "Invalid event", str(exc), field=decode_field(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise HubError(400, "invalid-body", "Invalid body", f"not JSON: {exc}") from None
    except RecursionError:
        raise HubError(422, "invalid-event", "Invalid event", "the request nests too deeply") from None


def encode_cursor(position: int) -> str:
    return base64.urlsafe_b64encode(f"p{position}".encode()).decode().rstrip("=")


_cursors: dict[str | None, int] = {}
CURSORS = 4096
"""How many recent cursors' positions a hub keeps: the consumers a commit woke come back with the same cursor."""
CURSOR_CHARS = 27
"""The longest cursor `encode_cursor` writes (of MAX_POSITION): a longer one (base64 decoding skips
characters outside its alphabet) is decoded each time, never kept."""


def decode_cursor(cursor: str | None) -> int:
    """The position a cursor this hub gave out names (`encode_cursor`); any other is refused."""
    position = _cursors.get(cursor)
    if position is None:
        position = _decoded_cursor(cursor)
        if cursor is None or len(cursor) <= CURSOR_CHARS:
            if len(_cursors) >= CURSORS:
                _cursors.clear()
            _cursors[cursor] = position
    return position


def _decoded_cursor(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if text[0] != "p" or not text[1:].isascii() or not text[1:].isdigit() or int(text[1:]) > MAX_POSITION:
            raise ValueError
        return int(text[1:])
    except (ValueError, IndexError, binascii.Error, UnicodeDecodeError):
        raise HubError(400, "invalid-cursor", "Invalid cursor", "the cursor is not one this hub gave out") from None


def check_batch(events, agent: str, contract, storage: HubStorage | None = None) -> None:
    """Every check a pushed event must pass before any of its batch is applied. With `storage`, an
    entry's `reverses` must name an entry of its layer, on the hub or earlier in the batch."""
    rules: dict[str, tuple[frozenset, bool]] = {}  # layer -> (kinds it takes, scan secrets): its checks passed
    own_alone: list[int] = []  # the redactions of a layer the agent consumes without producing it
    now = now_ms()
    for index, event in enumerate(events):
        try:
            check_event(event)
            check_minted(event.id, now)
        except MemError as exc:
            raise _in_event(exc, index, event) from None
        rule = rules.get(event.layer)
        if rule is None and is_reserved(event.layer):
            raise HubError(403, "reserved-layer", "Reserved layer",
                           f"event {event.id} is in layer {event.layer!r}, which is reserved: "
                           f"{why_reserved(event.layer)}; nothing of the batch was applied")
        if event.agent != agent:
            raise HubError(403, "agent-mismatch", "Agent mismatch",
                           f"event {event.id} names agent {event.agent!r}; the token belongs to {agent!r}")
        if rule is None:
            if redacts_own_alone(contract, agent, event.layer, event.original_kind):
                own_alone.append(index)  # its targets are checked below, against the events the hub holds
                # for this event alone: the agent's other events there are refused
                rule = (ONLY_REDACTIONS, contract.layers[event.layer].scan_secrets)
            elif not produces(contract, agent, event.layer):
                raise HubError(403, "out-of-contract", "Out of contract",
                               f"{agent!r} does not produce layer {event.layer!r}; nothing of the batch was applied")
            else:
                spec = contract.layers[event.layer]
                rule = rules[event.layer] = (LAYER_KINDS[spec.format], spec.scan_secrets)
        allowed, scan = rule
        if event.original_kind not in allowed:
            raise HubError(422, "wrong-kind", "Wrong kind for layer",
                           f"layer {event.layer!r} takes {', '.join(sorted(allowed))}, not {event.original_kind!r}")
        try:
            validate.body(event.body)
            check_not_withdrawal(event.body)
        except MemError as exc:
            raise _in_event(exc, index, event) from None
        if scan:
            found = secrets.scan_body(event.body)
            if found:
                raise HubError(422, "secret-detected", "Secret detected",
                               f"event {event.id} in layer {event.layer!r}: {secrets.describe(found)}; "
                               "nothing of the batch was applied")
    if own_alone and storage is None:
        raise HubError(403, "out-of-contract", "Out of contract", f"{agent!r} does not produce layer "
                       f"{events[own_alone[0]].layer!r}; nothing of the batch was applied")
    if storage is not None:
        check_reversals(events, storage)
        stored = stored_bodies(storage)
        check_redaction_targets(events, stored)
        check_own_alone(events, own_alone, agent, storage)
        check_redacted_by(events, stored)
        check_parents(events, stored)
        check_holds(events, storage, stored)


def check_reversals(events, storage: HubStorage) -> None:
    """An entry's `reverses` (a redacted entry's too: `reversal`) must name an entry of its layer."""
    wanted = {reversed for event in events if (reversed := reversal(event.body)) is not None}
    if not wanted:
        return
    batch = {event.id: event.layer for event in events}
    known = {**storage.layers_of(sorted(wanted - batch.keys())), **batch}
    for index, event in enumerate(events):
        reversed = reversal(event.body)
        if reversed is not None and known.get(reversed) != event.layer:
            field = "kept.reverses" if type(event.body) is Redacted else "reverses"
            raise InvalidInput(f"event {event.id}: there is no entry {reversed} in layer {event.layer!r} to reverse",
                               field=f"events[{index}].body.{field}")


def check_redaction_targets(events, stored: Callable[[str], tuple[str, object] | None]) -> None:
    """A redaction removes only events of its own layer: each target must be one, on the hub or in the batch, and
    one that can be redacted (not a redaction, itself included). One naming an unknown id, another layer's event or
    a redaction would be taken and do nothing."""
    batch = {event.id: (event.layer, event.body) for event in events}
    for index, event in enumerate(events):
        if type(event.body) is not Redaction:
            continue
        for at, target in enumerate(event.body.target_ids):
            found = batch.get(target) or stored(target)
            if found is None or found[0] != event.layer:
                why = (f"redaction target {target} is an event of layer {found[0]!r}; a redaction in layer "
                       f"{event.layer!r} removes only that layer's events" if found is not None else
                       f"there is no event {target} in layer {event.layer!r} to redact")
            elif TAGS.get(type(found[1])) in UNREDACTABLE:
                why = f"redaction target {target} is a {TAGS[type(found[1])]} event, which cannot be redacted"
            else:
                continue
            raise InvalidInput(f"event {event.id}: {why}; nothing of the batch was applied",
                               field=f"events[{index}].body.target_ids[{at}]")


def check_own_alone(events, indexes: list[int], agent: str, storage: HubStorage) -> None:
    """A redaction by an agent that no longer produces its layer (`redacts_own_alone`) names only that agent's own
    events the hub holds (check_redaction_targets has found each of them in its layer)."""
    for index in indexes:
        event = events[index]
        for target in event.body.target_ids:
            found = storage.stored(target)
            author = decode_stored(found[1], 0, 0).agent if found is not None else None
            if author != agent:
                whose = f"{author!r}'s" if author else "not on the hub"
                raise HubError(403, "out-of-contract", "Out of contract",
                               f"{agent!r} does not produce layer {event.layer!r}: of its events there, it pushes "
                               f"only redactions of its own, and event {target} is {whose}; nothing of the batch "
                               "was applied")


def check_redacted_by(events, stored: Callable[[str], tuple[str, object] | None]) -> None:
    """An event pushed already redacted names in `by` the redaction that removed its body: where the hub holds that
    event (in the batch or stored), it must be a redaction of the same layer naming this event. One the hub does not
    hold yet is taken (the redaction may come in a later batch of the same push)."""
    batch = {event.id: (event.layer, event.body) for event in events}
    for index, event in enumerate(events):
        if type(event.body) is not Redacted:
            continue
        found = batch.get(event.body.by) or stored(event.body.by)
        if found is not None and not redacts(*found, event):
            raise InvalidInput(f"event {event.id}: body.by names {event.body.by}, which is no redaction of layer "
                               f"{event.layer!r} naming this event; nothing of the batch was applied",
                               field=f"events[{index}].body.by")


def stored_bodies(storage: HubStorage) -> Callable[[str], tuple[str, object] | None]:
    """(layer, body) of an event the hub holds, or None: each looked up once for a batch's checks of parents
    (check_parents, check_holds). A dict, not functools.cache: every push makes one, and most look nothing up (making
    a cache's wrapper took 2 µs, where making this takes 0.2: about 1% of a one-event push's CPU on the hub)."""
    seen: dict[str, tuple[str, object] | None] = {}

    def stored(id: str) -> tuple[str, object] | None:
        if id not in seen:
            found = storage.stored(id)
            seen[id] = (found[0], decode_stored(found[1], 0, 0).body) if found else None
        return seen[id]

    return stored


def check_parents(events, stored: Callable[[str], tuple[str, object] | None]) -> None:
    """A shared page version's parents (a redacted one's too: its stand-in keeps them) must be versions of its own
    page (its layer and slug) where the hub holds them (in the batch or stored): one naming another page's version
    made the views a consumer folded differ from its rebuild (`mem replay --check`), one naming an event that is no
    page version (an entry) left a version with a parent that is none. A parent the hub does not hold is left as
    before."""
    pages = {}  # id -> (layer, slug) of a version, (layer, None) of an event that is none, None for one not held
    for event in events:
        version = page_version(event.body)
        pages[event.id] = (event.layer, version[0] if version is not None else None)
    for index, event in enumerate(events):
        version = page_version(event.body)
        if not version or not version[1]:
            continue
        page = (event.layer, version[0])
        for parent in version[1]:
            if parent not in pages:
                found = stored(parent)
                named_version = page_version(found[1]) if found else None
                pages[parent] = (found[0], named_version[0] if named_version is not None else None) if found else None
            named = pages[parent]
            if named is not None and named != page:
                field = "kept.parents" if type(event.body) is Redacted else "parents"
                what = (f"is no page version but an event of layer {named[0]!r}" if named[1] is None else
                        f"is a version of page {named[1]!r} of layer {named[0]!r}, not of {page[1]!r} of {page[0]!r}")
                raise InvalidInput(f"event {event.id}: parent {parent} {what}; nothing of the batch was applied",
                                   field=f"events[{index}].body.{field}")


def check_holds(events, storage: HubStorage, stored: Callable[[str], tuple[str, object] | None]) -> None:
    """Refuses an update or delete of a held shared page that does not release it, and an ingest that
    would stand beside a held head (eventstore.governance). A parent is read from the batch, else from
    the hub: one lookup by id, for page events only; a page's heads, only for a batch with an ingest."""
    for event in events:  # a loop, not any() over a generator: this runs for every push
        if event.kind in SHARED_PAGE_KINDS:
            break
    else:
        return
    batch = {event.id: event.body for event in events}
    redacted: dict[tuple[str, str], int] = {}  # (layer, id) -> where in the batch a redaction of its layer names it
    for index, event in enumerate(events):
        if type(event.body) is Redaction:
            for target in event.body.target_ids:
                redacted.setdefault((event.layer, target), index)

    def parent(id: str, layer: str, at: int):
        if redacted.get((layer, id), at) < at:  # redacted by then: a version that cannot be read holds nothing
            return None
        if id in batch:
            return batch[id]
        found = stored(id)
        return found[1] if found else None

    for index, event in enumerate(events):
        held = hold_refusal(event.body, lambda id: parent(id, event.layer, index))
        if held is not None:
            raise Held(f"event {event.id}: {held_message(event.layer, event.body.slug, *held)}; nothing of the "
                       "batch was applied", field=f"events[{index}].body.parents")
    ingests = [(index, event) for index, event in enumerate(events) if isinstance(event.body, PageIngest)]
    if not ingests:
        return
    versions = [event for event in events if event.kind in SHARED_PAGE_KINDS]
    ids = sorted({event.id for event in versions})
    new = set(ids) - storage.layers_of(ids).keys()
    named = storage.named_versions(ids)
    for index, event in ingests:
        if event.id not in new:  # resent: what the hub holds already adds nothing
            continue
        page = (event.layer, event.body.slug)
        heads = heads_after(dict(storage.page_heads(*page)), [v for v in versions if (v.layer, v.body.slug) == page],
                            named)
        held = ingest_refusal(event.id, heads, new)
        if held is not None:
            raise Held(f"event {event.id}: {held_message(event.layer, event.body.slug, held, INGEST_VERB)}; "
                       "nothing of the batch was applied", field=f"events[{index}].body.slug")


def heads_after(heads: dict[str, bool], versions, named: set[str] = frozenset()) -> dict[str, bool]:
    """A page's heads (id -> held) once the batch's `versions` of it (events, new or resent) are applied,
    whatever their order: a version is a head unless a version of the batch, or one stored (`named`, see
    HubStorage.named_versions), names it as a parent."""
    named = named | {parent for version in versions for parent in getattr(version.body, "parents", ())}
    heads = {id: held for id, held in heads.items() if id not in named}
    for version in versions:
        if version.id not in named and version.id not in heads:
            body = version.body
            heads[version.id] = not isinstance(body, PageDelete) and is_held(body.frontmatter)
    return heads


ONCE_ONLY = (b"authorization", b"content-type", b"content-encoding")
"""Headers a request gives at most once: of two, a proxy in front may have read the other than the hub's first."""


def _header_fields(headers: list[tuple[bytes, bytes]]) -> tuple[dict[bytes, bytes], bool, bytes | None]:
    """A direct request's headers as the ASGI way reads them (the first of a repeated name), whether any
    Accept-Encoding names zstd, and the first of ONCE_ONLY given twice (None: none)."""
    fields, zstd, twice = {}, False, None
    for name, value in headers:
        if name not in fields:
            fields[name] = value
        elif twice is None and name in ONCE_ONLY:
            twice = name
        if name == b"accept-encoding" and b"zstd" in value:
            zstd = True
    return fields, zstd, twice


def check_once(twice: bytes | str | None) -> None:
    """Refuses a request that gives a ONCE_ONLY header twice (`_header_fields`, `repeated`)."""
    if twice is not None:
        name = twice.decode("latin-1") if isinstance(twice, bytes) else twice
        raise HubError(400, "repeated-header", "Repeated header",
                       f"the request gives {name.title()} more than once; send it once")


def repeated(request: Request) -> str | None:
    """The first of ONCE_ONLY a request through the router gives twice, or None."""
    return next((name.decode() for name in ONCE_ONLY if len(request.headers.getlist(name.decode())) > 1), None)


def check_minted(id: str, now: int) -> None:
    """An event's id must be a UUIDv7 made by now (give or take MINTED_AHEAD_MS): the greatest id is a shared page's
    winner and an entry's place at the end of its layer, so an id chosen at will (a version 4 UUID starting with ff,
    a UUIDv7 of year 9999) would win every conflict of the page it is written on for good (nc29b). An id of any past
    is taken: an event written long ago and pushed now, an import's."""
    if id[14] != "7" or id[19] not in "89ab":
        raise InvalidInput(f"event id {id} is not a UUIDv7 (version 7, RFC 9562's variant): the hub takes an event's "
                           "id only as the time it was made", field="id")
    made = uuid7_ms(id)
    if made > now + MINTED_AHEAD_MS:
        raise InvalidInput(f"event id {id} was made at {format_instant(made) if made <= MAX_TS else 'past 9999'}, "
                           f"more than a day after the hub's clock ({format_instant(now)})", field="id")


def _in_event(exc: MemError, index: int, event) -> MemError:
    """Names the event (and its place in the batch) in a refusal raised while checking it."""
    if str(event.id) not in str(exc):
        exc.args = (f"event {event.id!r}: {exc}",)
    if exc.field:
        exc.field = f"events[{index}].{exc.field}"
    return exc


class Hub:
    """What the hub's handlers share, kept on `app.state.hub`: the storage, the fan-out that wakes
    long-polls, and the group committer (started on the first request, inside the event loop that
    serves them).

    A request reads what it needs (token, contract, head, page) in one `read`: on the event loop when
    the storage's reads are local and never wait (SQLite in WAL mode), else in one trip to a worker
    thread. Under load a trip costs more than SQLite's reads: the thread waits for the event loop to
    let go of the GIL, and handing the work over is a lock and a queue each way."""

    def __init__(self, storage: HubStorage, max_wait: float = MAX_WAIT_SECONDS, group_commit: bool = True):
        self.storage, self.max_wait, self.group_commit = storage, max_wait, group_commit
        self.fanout = Fanout()
        self._committer: GroupCommitter | None = None
        self._woken: tuple[int, dict] = (-1, {})  # (the head they were read at, answers to woken long-polls)
        self.forms = EncodedEvents()
        self._consumed: tuple[object, dict[str, tuple[list[str], list[str]]]] = (None, {})
        """(contract, agent -> (the layers it consumes, those it produces only))"""
        self._woken_polls: list[tuple] = []  # long-polls woken, to be answered together (`answer_woken`)
        self.redaction_listeners: list[Callable[[], None]] = []
        """Called on the event loop after a commit that carried a redaction (the pages' mirror: cli/web/hub.py)."""

    @property
    def committer(self) -> GroupCommitter:
        if self._committer is None:
            loop = asyncio.get_running_loop()
            self._committer = GroupCommitter(self.storage, self.fanout, group=self.group_commit,
                                             on_redaction=self._redacted)
            self.storage.watch(lambda head, layers: self.fanout.advance_threadsafe(loop, head, layers))
        return self._committer

    def _redacted(self) -> None:
        self.forms.forget()
        for listener in self.redaction_listeners:
            listener()

    async def read(self, fn, *args):
        """`fn(*args)`, where this storage's reads belong: in a worker thread if they may wait."""
        if self.storage.reads_wait:
            return await run_in_threadpool(fn, *args)
        return fn(*args)

    def state(self, token: str) -> tuple[str, object, int, int]:
        """(agent, contract, its position, head) of a request, in one read; an unknown token is refused."""
        return _known(self.storage.request_state(token))

    def push_state(self, token: str) -> tuple[str, object, int | None]:
        """(agent, contract, checked) of a push: `HubStorage.push_state`, an unknown token refused."""
        agent, contract, _position, checked = _known(self.storage.push_state(token))
        return agent, contract, checked

    def agent_for(self, token: str) -> str:
        return self.state(token)[0]

    def agent_and_contract(self, token: str):
        """The token's agent, the contract in force and its position."""
        return self.state(token)[:3]

    def answer(self, after: int, head: int, rows: list, limit: int, packed: bool) -> bytes:
        """`pull_answer`, each event's encoding shared with other answers (`EncodedEvents`) for a page no larger
        than a long-poll's (INLINE_PULL): a catch-up's pages would push every other event out."""
        return pull_answer(after, head, rows, limit, packed, self.forms if limit <= INLINE_PULL else None)

    def woken_answer(self, token: str, after: int, limit: int, packed: bool) -> bytes:
        """The answer to a long-poll a commit woke: its token and contract read again, then the answer
        shared by every poll woken at the same head with the same cursor, layers and format. A commit wakes
        all the consumers of its layers at once, most of them at the same cursor: the page is read and
        encoded once for them, while each of them was waiting (a read they could all have made)."""
        return self._shared_answer(self.state(token), after, limit, packed)

    def answer_woken(self, token: str, after: int, limit: int, packed: bool,
                     then: Callable[[bytes | Exception], None]) -> None:
        """`woken_answer` for a long-poll answered directly, its answer (or refusal) handed to `then`: the polls one
        wake-up woke (their futures' callbacks run one after the other) are answered together once all of them
        have come, their tokens and the contract read again in one read (`HubStorage.request_states`) where
        each read its own (bench/bench_hub_load.py: a woken poll's read was a tenth of its CPU)."""
        if not self._woken_polls:
            asyncio.get_running_loop().call_soon(self._answer_woken)
        self._woken_polls.append((token, after, limit, packed, then))

    def _answer_woken(self) -> None:
        polls, self._woken_polls = self._woken_polls, []
        try:
            states = self.storage.request_states({poll[0] for poll in polls})
        except Exception as exc:  # noqa: BLE001 - every poll of the batch is refused with it
            states = exc
        for token, after, limit, packed, then in polls:
            answer = states
            if not isinstance(states, Exception):
                try:
                    answer = self._shared_answer(_known(states[token]), after, limit, packed)
                except Exception as exc:  # noqa: BLE001 - this poll's refusal
                    answer = exc
            try:
                then(answer)
            except Exception as exc:  # noqa: BLE001 - the other polls are answered all the same
                asyncio.get_running_loop().call_exception_handler({"message": "answering a long-poll failed",
                                                                   "exception": exc})

    def _shared_answer(self, state: tuple, after: int, limit: int, packed: bool) -> bytes:
        """The answer of `woken_answer` for a poll whose token's state (`state`) was just read."""
        agent, contract, _position, head = state
        layers, only_produced = self._reading(contract, agent)
        known, answers = self._woken
        if known != self.fanout.head:
            known, answers = self._woken = (self.fanout.head, {})
        key = (after, tuple(layers), tuple(only_produced), limit, packed)
        answer = answers.get(key)
        if answer is None:
            rows = self.page_rows(after, layers, only_produced, limit + 1, head)
            answer = answers[key] = self.answer(after, head, rows, limit, packed)
        return answer

    def page_rows(self, after: int, layers: list[str], only_produced: list[str], limit: int, head: int) -> list:
        """The rows of a pull page (storage.pull_rows) with, among them, the redactions of the layers the agent
        produces without consuming them (`only_produced`): those it pulls nothing else of. They are read up to
        where the page ends, or up to the head read before it (`head`) when the page is not full, so that the
        cursor the answer gives never passes an event of `layers` committed between the two reads."""
        rows = self.storage.pull_rows(after, layers, limit)
        if only_produced:
            upto = rows[-1][0] if len(rows) >= limit else max(head, rows[-1][0] if rows else 0)
            redactions = self.storage.redaction_rows(after, upto, only_produced) if upto > after else []
            if redactions:
                rows = list(heapq.merge(rows, redactions))
        return rows

    def consumer(self, token: str) -> tuple[str, list[str], int]:
        """The token's agent, the layers it consumes now, and the head, read before any page that follows:
        positions are commit-ordered, so every event at or below it is already visible, and a cursor moved up
        to it can never skip one."""
        agent, contract, _position, head = self.state(token)
        return agent, self._reading(contract, agent)[0], head

    def _reading(self, contract, agent: str) -> tuple[list[str], list[str]]:
        """(`consumed_layers`, `produced_only`), kept per agent for the contract in force (the storage keeps one
        Contract object per contract position, so a new contract is a new object)."""
        known, readings = self._consumed
        if known is not contract:
            readings = {}
            self._consumed = (contract, readings)
        found = readings.get(agent)
        if found is None:
            found = readings[agent] = (consumed_layers(contract, agent), produced_only(contract, agent))
        return found

    def consumer_page(self, token: str, after: int, limit: int, wait: float = 0) -> tuple[str, list[str], int, list | None]:
        """`consumer`, then the rows after `after` (storage.pull_rows); None instead for a long-poll (`wait`) that
        will wait for a wake-up due (Fanout.deferred): the page it would read now is not the one it answers.
        On the event loop only (the fan-out is its own); elsewhere, `wait` 0."""
        agent, contract, _position, head = self.state(token)
        layers, only_produced = self._reading(contract, agent)
        if after > head:
            raise cursor_ahead(after, head)
        if wait > 0:
            if self.fanout.deferred(after, layers):
                return agent, layers, head, None
            if after >= head:  # caught up: the page read now would hold only commits after `head`, which wake it
                return agent, layers, head, []
        return agent, layers, head, self.page_rows(after, layers, only_produced, limit, head)


def cursor_ahead(after: int, head: int) -> HubError:
    """A cursor past the head was given out by this hub before it lost events (its database restored from a
    backup): refused, not recorded as received (`mem hub believed`), nor answered with positions handed out
    again since."""
    return HubError(409, "cursor-ahead", "Cursor ahead of the hub",
                    f"the cursor names hub position {after}, past this hub's last position {head}: the hub lost events "
                    "it had handed out (restored from a backup?); pull from its start again (no cursor)")


def _known(state: tuple) -> tuple:
    """A request's state (`HubStorage.request_state`), its token refused when unknown or revoked."""
    if state[0] is None:
        raise HubError(401, "invalid-token", "Invalid token", "the token is unknown or was revoked")
    return state


def hub_of(request: Request) -> Hub:
    return request.app.state.hub


def bearer_token(request: Request) -> str:
    """The request's token, refused with the request when it gives a ONCE_ONLY header twice."""
    check_once(repeated(request))
    return bearer(request.headers.get("authorization", ""))


def bearer(authorization: str) -> str:
    """The token of an `Authorization` header's value."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HubError(401, "missing-token", "Missing bearer token", "send Authorization: Bearer <token>")
    return token.strip()


def check_push_type(content_type: str) -> None:
    """A push is JSON, which is UTF-8 (RFC 8259): a body declared in another charset is refused, not read as UTF-8."""
    media_type, _, parameters = content_type.partition(";")
    media_type = media_type.strip().lower()
    if media_type != "application/json":
        raise HubError(415, "unsupported-media-type", "Unsupported media type",
                       f"push takes application/json, not {media_type or 'a body without a type'}")
    if parameters:
        for parameter in parameters.split(";"):
            name, _, value = parameter.partition("=")
            charset = value.strip().strip('"').lower()
            if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
                raise HubError(415, "unsupported-media-type", "Unsupported media type",
                               f"push takes application/json in UTF-8, not in {charset or 'no charset'}")


async def body_of(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_REQUEST_BYTES:
        raise HubError(413, "too-large", "Request too large", f"the limit is {MAX_REQUEST_BYTES} bytes")
    chunks, size, receive = [], 0, request.receive  # the ASGI messages read here: no async generator per request
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            raise HubError(413, "too-large", "Request too large", f"the limit is {MAX_REQUEST_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return decoded_body(raw, request.headers.get("content-encoding", "identity"))


def decoded_body(raw: bytes, content_encoding: str) -> bytes:
    """A request's body as sent with this `Content-Encoding` (identity or zstd), decompressed."""
    encoding = content_encoding.lower()
    if encoding == "zstd":
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(raw)
            raw = reader.read(MAX_REQUEST_BYTES + 1)
        except zstandard.ZstdError as exc:
            raise HubError(400, "invalid-body", "Invalid body", f"zstd: {exc}") from None
        if len(raw) > MAX_REQUEST_BYTES:
            raise HubError(413, "too-large", "Request too large", "the decompressed body is over the limit")
    elif encoding not in ("identity", ""):
        raise HubError(415, "unsupported-encoding", "Unsupported content encoding", encoding)
    return raw


def reply(value) -> Response:
    return Response(msgspec.json.encode(value), media_type="application/json")


reply_bytes = msgspec.json.encode
JSON_TYPE, PROBLEM_TYPE, MSGPACK_TYPE = b"application/json", b"application/problem+json", MSGPACK.encode()
_no_results = PushResponse(results=[])


async def _checked_push(hub: "Hub", events, agent: str, current, checked: int | None) -> list:
    """The rest of a push of more than INLINE_CHECKS events: its checks in a worker thread, then its commit."""
    await run_in_threadpool(check_batch, events, agent, current, hub.storage)
    return await hub.committer.push(events, checked)


def pull_parameters(params, max_wait: float) -> tuple[int, int, float]:
    """(after, limit, wait) of a pull request, from its query's parameters."""
    after = decode_cursor(params.get("cursor"))
    try:
        limit = pull_limit(params)
    except ValueError:
        raise HubError(400, "invalid-parameter", "Invalid parameter", "limit is a whole number") from None
    try:
        wait = float(params.get("wait", "0"))
    except ValueError:
        wait = math.nan
    if limit < 1:
        raise HubError(400, "invalid-parameter", "Invalid parameter", "limit is at least 1")
    if not 0 <= wait < math.inf:  # nan and inf too: `wait=nan` was told "limit >= 1 and wait >= 0" (nc22b)
        raise HubError(400, "invalid-parameter", "Invalid parameter",
                       "wait is a number of seconds, at least 0 (the hub cuts a long one short)")
    wait = min(wait, max_wait)
    if "until" in params and "layers" not in params:
        raise HubError(400, "invalid-parameter", "Invalid parameter",
                       "until bounds a pull of some layers only: give it with layers")
    return after, limit, wait


def pull_limit(params) -> int:
    return min(int(params.get("limit", "1000")), MAX_PULL)


def query_params(query: bytes) -> dict[str, str]:
    """A query string's parameters as starlette reads them (`QueryParams`: parse_qsl keeping blank values,
    the last of a repeated name), without parse_qsl when nothing in it is escaped."""
    text = query.decode("latin-1")
    if "%" in text or "+" in text:
        return dict(parse_qsl(text, keep_blank_values=True))
    params = {}
    for part in text.split("&"):
        if part:
            name, _, value = part.partition("=")
            params[name] = value
    return params


MAX_HOLDS = 16
"""The most event ids one contract request may ask about (`holds`)."""


async def contract(request: Request) -> Response:
    """The contract, its position, the token's agent and the head; with `holds` (comma-separated event ids), the
    position of each of them the hub holds: what lets an agent check that the hub still holds what it pushed
    and pulled (a hub restored from a backup hands positions out again; sync.client.lost_events)."""
    hub = hub_of(request)
    agent, current, position, head = await hub.read(hub.state, bearer_token(request))
    answer = ContractResponse(contract=current, position=position, agent=agent, head=head, now=now_ms())
    if "holds" in request.query_params:
        ids = [id for id in request.query_params["holds"].split(",") if id]
        if len(ids) > MAX_HOLDS:
            raise HubError(400, "invalid-parameter", "Invalid parameter", f"holds names at most {MAX_HOLDS} event ids")
        answer.holds = await hub.read(hub.storage.positions_seen_by, agent, ids) if ids else {}
    return reply(answer)


async def push(request: Request) -> Response:
    hub = hub_of(request)
    token = bearer_token(request)
    if hub.storage.reads_wait:
        agent, current, _ = await run_in_threadpool(hub.agent_and_contract, token)
    else:
        agent, current, _ = hub.agent_and_contract(token)
    check_push_type(request.headers.get("content-type", ""))
    batch = decode_push(await body_of(request))
    if len(batch.events) <= INLINE_CHECKS and not hub.storage.reads_wait:
        check_batch(batch.events, agent, current, hub.storage)
    else:  # digests of a large batch are real CPU work, and some storages' reads wait: off the event loop
        await run_in_threadpool(check_batch, batch.events, agent, current, hub.storage)
    results = await hub.committer.push(batch.events) if batch.events else []
    return reply(PushResponse(results=results))


async def pull(request: Request) -> Response:
    hub = hub_of(request)
    token = bearer_token(request)
    try:
        after, limit, wait = pull_parameters(request.query_params, hub.max_wait)
    except HubError:
        await hub.read(hub.agent_for, token)  # an unknown token hears that first
        raise
    packed = MSGPACK in request.headers.get("accept", "")
    if "layers" in request.query_params:
        return await _backfill(request, hub, token, after, limit, packed)
    # a catch-up's large page is read off the event loop that other agents' pushes share
    read = run_in_threadpool if limit > INLINE_PULL else hub.read
    on_loop = limit <= INLINE_PULL and not hub.storage.reads_wait
    agent, layers, head, rows = await read(hub.consumer_page, token, after, limit + 1, wait if on_loop else 0)
    held = request.query_params.get("held")  # a pipelined pull: the cursor the agent has stored, behind `cursor`
    recorded = hub.committer.record_pull(agent, after if held is None else min(decode_cursor(held), after),
                                         durable=request.query_params.get("ack") == "durable")
    if recorded is not None:  # the last request of a pull: its acknowledgement committed before the answer
        await recorded
    media_type = MSGPACK if packed else "application/json"
    deferred = rows is None or (wait > 0 and rows and hub.fanout.deferred(after, layers))
    if deferred or (wait > 0 and not rows):  # a long-poll: for the wake-up due, or for anything new
        if await _unless_left(hub.fanout.wait(after if deferred else max(after, head), layers, wait), request):
            # token and contract again: revoked while it waited, it gets nothing more
            return Response(await hub.read(hub.woken_answer, token, after, limit, packed), media_type=media_type)
        if rows is None:  # the wake-up it waited for never came: the page as it is now
            agent, layers, head, rows = await read(hub.consumer_page, token, after, limit + 1)
    return Response(hub.answer(after, head, rows, limit, packed), media_type=media_type)


async def _backfill(request: Request, hub: Hub, token: str, after: int, limit: int, packed: bool) -> Response:
    """A pull restricted to `layers` (comma-separated; only those the token's agent consumes count) and to positions up
    to the one `until` names (default: the head): what an agent made a consumer of a layer asks for, that layer's
    events from before its pull cursor (which it never got: it did not consume the layer when its cursor passed them).
    It never waits. What it acknowledges (`after`) is recorded per layer, as received by `agent/layer`
    (`backfill_agent`), never as the agent's own cursor: `mem hub believed` reads both."""
    params = request.query_params
    wanted = set(params["layers"].split(","))
    try:
        until = decode_cursor(params.get("until")) if params.get("until") else None
    except HubError:
        raise HubError(400, "invalid-cursor", "Invalid cursor", "until is not a cursor this hub gave out") from None
    agent, consumed, head = await hub.read(hub.consumer, token)
    layers = [layer for layer in consumed if layer in wanted]
    head = head if until is None else min(until, head)
    rows = await run_in_threadpool(hub.storage.pull_rows, after, layers, limit + 1) if layers else []
    rows = [row for row in rows if row[0] <= head]
    durable = params.get("ack") == "durable"
    for layer in layers:
        recorded = hub.committer.record_pull(backfill_agent(agent, layer), after, durable=durable)
        if recorded is not None:
            await recorded
    return Response(hub.answer(after, head, rows, limit, packed), media_type=MSGPACK if packed else "application/json")


async def redactions(request: Request) -> Response:
    """GET /v1/redactions: the redactions naming events the token's agent wrote (hub_redaction_authors), and those of
    the layers it consumed under an earlier contract (of events stored before it stopped), in the layers it does not
    consume now (its pulls bring those), after `cursor`. Its pulls bring it the redactions of the layers it consumes or
    produces now; these reach an author the contract no longer lists as a producer, a consumer it dropped before it
    pulled a redaction of what it holds, and an author whose pull cursor passed a redaction before the hub handed such
    redactions over. The cursor is the client's own; it never waits, and nothing is recorded as received."""
    hub = hub_of(request)
    token = bearer_token(request)
    try:
        after, limit, _wait = pull_parameters(request.query_params, 0)
    except HubError:
        await hub.read(hub.agent_for, token)  # an unknown token hears that first
        raise
    agent, consumed, head = await hub.read(hub.consumer, token)
    if after > head:
        raise cursor_ahead(after, head)
    formerly = {layer: until for layer, until in (await hub.read(hub.storage.consumed_ever, agent)).items()
                if layer not in consumed}
    rows = await run_in_threadpool(hub.storage.redactions_apart, agent, after, head, limit + 1, consumed, formerly)
    packed = MSGPACK in request.headers.get("accept", "")
    return Response(hub.answer(after, head, rows, limit, packed), media_type=MSGPACK if packed else "application/json")


async def _unless_left(waiting: Coroutine, request: Request):
    """What `waiting` returns, or ClientDisconnect once the client has closed its connection first: a long-poll
    the ASGI way whose client left waited on for nothing, a task and a waiter held up to its whole wait (one
    answered from the parser's callbacks stops as its connection closes: sync/server.py's DirectCycle)."""
    waited, left = asyncio.ensure_future(waiting), asyncio.ensure_future(_left(request.receive))
    try:
        await asyncio.wait((waited, left), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # cancelled (the server stops): both with it
        waited.cancel()
        left.cancel()
        raise
    left.cancel()
    if waited.done():
        return waited.result()
    waited.cancel()
    left.result()  # a receive that failed is an error, not a client that left
    raise ClientDisconnect()


LEFT_BODY_BYTES = 64 * 1024
"""The body `_left` reads and throws away, of a request that needs none, before it stops reading (and watching)."""


async def _left(receive) -> None:
    """Returns once the client of a request whose body needs no reading has closed its connection. Past
    LEFT_BODY_BYTES of such a body it stops reading, as the server did before anything watched: a client
    streaming a body into a long-poll had the event loop read and discard gigabytes for its whole wait."""
    thrown = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        thrown += len(message.get("body", b""))
        if thrown > LEFT_BODY_BYTES:
            await asyncio.get_running_loop().create_future()  # never done: cancelled when the wait ends


class EncodedEvents:
    """Recent events as pull answers hold them (in JSON, or in msgpack), each encoded once for all the consumers
    it goes to. A commit wakes every long-poll of its layers at once, and consumers that stood at different
    cursors read pages that overlap, each the events after its own: encoded page by page, the same events were
    encoded again for each of them (bench/bench_hub_load.py, 32 consumers: a fifth of the event loop's CPU per
    push of a hub committing each push apart, which wakes them most often). Keyed by the stored bytes themselves:
    a redaction rewrites them, so an event is never answered in a form older than its stored one. At most
    `budget` bytes (stored and encoded, both formats), the oldest going first; an event over ENCODED_LARGEST is
    not kept. `forget` empties it: the hub calls it after committing a pushed redaction, so the text it removed
    leaves the process's memory too (one made by `mem hub redact`, in another process, leaves with the oldest)."""

    def __init__(self, budget: int = ENCODED_BYTES):
        self.budget, self.held = budget, 0
        self.forms: OrderedDict[tuple[bool, bytes], msgspec.Raw] = OrderedDict()  # (packed, stored bytes) -> form
        self.lock = threading.Lock()  # a storage whose reads wait answers in worker threads

    def of(self, rows: list, packed: bool) -> list[msgspec.Raw]:
        """The encoded form of each row (storage.pull_rows) in the format asked."""
        forms, made = self.forms, []
        with self.lock:
            for position, at, data in rows:
                key = (packed, data)
                form = forms.get(key)
                if form is None:
                    form = msgspec.Raw(placed_stored(data, position, at) if packed else
                                       reply_bytes(decode_stored(data, position, at)))
                    if len(data) <= ENCODED_LARGEST:
                        forms[key] = form
                        self.held += len(data) + len(form)
                        while self.held > self.budget:
                            (_packed, old), old_form = forms.popitem(last=False)
                            self.held -= len(old) + len(old_form)
                made.append(form)
        return made

    def forget(self) -> None:
        with self.lock:
            self.forms.clear()
            self.held = 0


def pull_answer(after: int, head: int, rows: list, limit: int, packed: bool = False,
                forms: EncodedEvents | None = None) -> bytes:
    """The encoded answer to a pull after `after`, given the head read before `rows` (storage.pull_rows, at
    most limit + 1): a PullResponse in JSON, or in msgpack (`packed`) each event made from its stored bytes.
    With `forms`, each event's encoding is shared with other answers (the same bytes)."""
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = encode_cursor(rows[-1][0] if more else max(after, head, rows[-1][0] if rows else 0))
    if forms is not None:
        page = PullPage(events=forms.of(rows, packed), cursor=cursor, more=more, head=head)
        return _packed.encode(page) if packed else reply_bytes(page)
    if packed:
        return _packed.encode(PullPage(events=[msgspec.Raw(placed_stored(data, position, at))
                                               for position, at, data in rows], cursor=cursor, more=more, head=head))
    events = [decode_stored(data, position, at) for position, at, data in rows]
    return msgspec.json.encode(PullResponse(events=events, cursor=cursor, more=more, head=head))


_packed = msgspec.msgpack.Encoder()


async def openapi(request: Request) -> Response:
    return Response(msgspec.json.encode(openapi_document()), media_type="application/json")


async def health(request: Request) -> Response:
    return Response(b'{"ok":true}', media_type="application/json")


ROUTES = [Route("/v1/contract", contract, methods=["GET"]), Route("/v1/push", push, methods=["POST"]),
          Route("/v1/pull", pull, methods=["GET"]), Route("/v1/redactions", redactions, methods=["GET"]),
          Route("/openapi.json", openapi, methods=["GET"]),
          Route("/health", health, methods=["GET"])]

EXCEPTION_HANDLERS = {MemError: on_refusal, HTTPException: on_http_error, ClientDisconnect: on_client_left,
                      **dict.fromkeys(storage_exceptions(), on_storage_failure), Exception: on_internal_error}
"""By class: every refusal (HubError included) is a MemError, a failed storage a 503; anything else is a 500
without details."""


Answer = tuple[int, list[tuple[bytes, bytes]], bytes, BaseException | None]
"""What a request is answered straight from the server (`HubApp.direct`): the status, the headers, the
body, and the unexpected error behind a 500 (for the server's log; it then closes the connection)."""
Respond = Callable[[int, list[tuple[bytes, bytes]], bytes, BaseException | None], None]


class HubApp(Starlette):
    """Starlette, with push and pull (nearly every request a busy hub serves) taken from the server
    straight to their handlers, past the router and the middleware stack: the same handlers, the same
    exception handlers (`EXCEPTION_HANDLERS`) and the same response compression, about a tenth less of
    the hub's CPU per request under bench/bench_hub_load.py. Every other request (and HEAD) goes the
    whole way.

    A server that parses HTTP itself (sync/server.py's protocol) goes further for a push: `direct` hands
    it a handler that takes the request's headers and whole body from the parser's callbacks and
    answers through a callback, with no ASGI scope, no task and no coroutine (`push_directly`): the same
    checks in the same order, the same answers byte for byte, and the same compression."""

    DIRECT = {("POST", "/v1/push"): push, ("GET", "/v1/pull"): pull}

    def __init__(self, **options):
        super().__init__(**options)
        self._direct = ZstdResponses(self._answer)
        self._hub: Hub | None = None

    @property
    def hub(self) -> "Hub":
        """`state.hub` (set once by `create_app`), kept: starlette's State answers each attribute through
        __getattr__, a cost on every request answered directly."""
        if self._hub is None:
            self._hub = self.state.hub
        return self._hub

    def direct(self, method: bytes, target: bytes) -> Callable[[list, bytes, Respond], Callable | None] | None:
        """The handler that answers this request from the parser's callbacks, or None (the ASGI way), for a
        hub whose storage's reads never wait (its checks and reads run on the event loop): a push, or a pull
        whose page is read on the event loop (at most INLINE_PULL events) and that waits for no commit of its
        acknowledgement (`ack=durable`)."""
        if self.hub.storage.reads_wait:
            return None
        if method == b"POST" and target == b"/v1/push":
            return self.push_directly
        if method == b"GET" and target.startswith(b"/v1/pull") and b"#" not in target:
            path, mark, query = target.partition(b"?")
            if path != b"/v1/pull":
                return None
            params = query_params(query) if mark else {}
            try:
                if pull_limit(params) > INLINE_PULL:
                    return None
            except ValueError:
                pass  # refused as the ASGI way refuses it
            if params.get("ack") == "durable" or "layers" in params:
                return None
            return lambda headers, raw, respond: self.pull_directly(params, headers, respond)
        return None

    def pull_directly(self, params: dict[str, str], headers: list[tuple[bytes, bytes]], respond: Respond):
        """`pull` from the request's query parameters and headers, for `direct`: its answer goes to `respond`,
        at once, or (a long-poll) once a commit it waits for is told or its wait is over; then it returns what
        stops the wait (`sync/server.py`: the client left, or the server shuts down)."""
        fields, zstd, twice = _header_fields(headers)
        hub = self.hub
        try:
            check_once(twice)
            token = bearer(fields.get(b"authorization", b"").decode("latin-1"))
            try:
                after, limit, wait = pull_parameters(params, hub.max_wait)
            except HubError:
                hub.agent_for(token)  # an unknown token hears that first
                raise
            packed = MSGPACK in fields.get(b"accept", b"").decode("latin-1")
            agent, layers, head, rows = hub.consumer_page(token, after, limit + 1, wait)
            held = params.get("held")
            hub.committer.record_pull(agent, after if held is None else min(decode_cursor(held), after))
            media_type = MSGPACK_TYPE if packed else JSON_TYPE
            deferred = rows is None or (wait > 0 and rows and hub.fanout.deferred(after, layers))
            if deferred or (wait > 0 and not rows):  # a long-poll: for the wake-up due, or for anything new
                future = hub.fanout.listen(after if deferred else max(after, head), layers, wait)
                if future is not None:
                    return self._waiting(future, token, after, limit, packed, rows, head, zstd, respond)
                body = hub.woken_answer(token, after, limit, packed)
            else:
                body = hub.answer(after, head, rows, limit, packed)
        except Exception as exc:  # noqa: BLE001 - answered as the exception handlers answer it
            return respond(*self._refused(exc, zstd))
        return respond(*self._answered(body, zstd, media_type))

    def _waiting(self, future: asyncio.Future, token: str, after: int, limit: int, packed: bool,
                 rows: list | None, head: int, zstd: bool, respond: Respond) -> Callable[[], None]:
        """The rest of a long-poll answered directly, as `pull` waits on `Fanout.wait`: the answer shared by the
        long-polls a commit woke, else, its wait over (the fan-out cancels `future`: `Fanout.listen`), the page it
        read (or, waiting for a wake-up that never came, the page as it is now). Returns what stops it."""
        hub = self.hub

        def woken(done: asyncio.Future) -> None:
            if stopped:
                return
            if not done.cancelled():  # token and contract again: revoked while it waited, it gets nothing more
                return hub.answer_woken(token, after, limit, packed, answer)
            try:
                if rows is None:
                    _agent, _layers, now, page = hub.consumer_page(token, after, limit + 1)
                    body = hub.answer(after, now, page, limit, packed)
                else:
                    body = hub.answer(after, head, rows, limit, packed)
            except Exception as exc:  # noqa: BLE001 - answered as the exception handlers answer it
                body = exc
            answer(body)

        def answer(body: bytes | Exception) -> None:
            if stopped:
                return
            if isinstance(body, Exception):
                return respond(*self._refused(body, zstd))
            respond(*self._answered(body, zstd, MSGPACK_TYPE if packed else JSON_TYPE))

        stopped = False

        def stop() -> None:
            nonlocal stopped
            stopped = True
            future.cancel()

        future.add_done_callback(woken)
        return stop

    def push_directly(self, headers: list[tuple[bytes, bytes]], raw: bytes, respond: Respond) -> None:
        """`push` from the request's headers (lower-case names, as uvicorn gives them) and its whole body:
        its answer goes to `respond`, at once for a refusal, once durable for the events."""
        fields, zstd, twice = _header_fields(headers)
        try:
            check_once(twice)
            hub = self.hub
            agent, current, checked = hub.push_state(bearer(fields.get(b"authorization", b"").decode("latin-1")))
            content_type, encoding = fields.get(b"content-type", b""), fields.get(b"content-encoding")
            if content_type != b"application/json":  # what nearly every push sends needs no parsing
                check_push_type(content_type.decode("latin-1"))
            batch = decode_push(raw if encoding is None else decoded_body(raw, encoding.decode("latin-1")))
            if not batch.events:
                return respond(*self._answered(reply_bytes(_no_results), zstd))
            if len(batch.events) <= INLINE_CHECKS:
                check_batch(batch.events, agent, current, hub.storage)
                hub.committer.submit(batch.events, checked,
                                     lambda outcome: self._settled(outcome, headers, raw, respond, zstd))
                return None
            # as `push`: a large batch's checks off the event loop
            pending = asyncio.ensure_future(_checked_push(hub, batch.events, agent, current, checked))
        except Exception as exc:  # noqa: BLE001 - answered as the exception handlers answer it
            return respond(*self._refused(exc, zstd))
        pending.add_done_callback(lambda done: self._committed(done, headers, raw, respond, zstd))

    def _committed(self, done: asyncio.Future, headers: list, raw: bytes, respond: Respond, zstd: bool) -> None:
        try:
            outcome = done.result()
        except BaseException as exc:  # noqa: BLE001 - refused, cancelled or failed: answered as `push` would be
            outcome = exc
        self._settled(outcome, headers, raw, respond, zstd)

    def _settled(self, outcome: list | BaseException, headers: list, raw: bytes, respond: Respond, zstd: bool) -> None:
        """A push's commit is done (its results, or its refusal): answered, or (checked with a cached token
        state that may have changed since: `Stale`) checked again from a fresh read, as a new request."""
        if isinstance(outcome, Stale):
            return self.push_directly(headers, raw, respond)
        if isinstance(outcome, BaseException):
            return respond(*self._refused(outcome, zstd))
        try:
            answer = self._answered(reply_bytes(PushResponse(results=outcome)), zstd)
        except Exception as exc:  # noqa: BLE001 - answered as `push` would be
            answer = self._refused(exc, zstd)
        respond(*answer)

    def _refused(self, exc: BaseException, zstd: bool) -> Answer:
        """The exception handlers' answer to an exception (`EXCEPTION_HANDLERS`), as a direct answer."""
        if not isinstance(exc, MemError) and isinstance(exc, storage_exceptions()):
            exc = failed_storage(exc)
        if isinstance(exc, MemError):
            problem = problem_of(exc)
            return self._answered(msgspec.json.encode(problem), zstd, PROBLEM_TYPE, problem.status)
        internal = Problem(type=PROBLEM_BASE + "internal", title="Internal error", status=500)
        return self._answered(msgspec.json.encode(internal), zstd, PROBLEM_TYPE, 500, exc)

    def _answered(self, body: bytes, zstd: bool, media_type: bytes = JSON_TYPE, status: int = 200,
                  error: BaseException | None = None) -> Answer:
        """The status, headers and body starlette's Response and ZstdResponses would send."""
        headers = [(b"content-length", b"%d" % len(body)), (b"content-type", media_type)]
        if zstd and len(body) > self._direct.minimum:
            body = self._direct.compressor.compress(body)
            headers = [(b"content-length", b"%d" % len(body)), (b"content-type", media_type),
                       (b"content-encoding", b"zstd"), (b"vary", b"Accept-Encoding")]
        return status, headers, body, error

    async def __call__(self, scope, receive, send) -> None:
        endpoint = self.DIRECT.get((scope.get("method"), scope["path"])) if scope["type"] == "http" else None
        if endpoint is None:
            return await super().__call__(scope, receive, send)
        scope["app"], scope["endpoint"] = self, endpoint
        await self._direct(scope, receive, send)

    @staticmethod
    async def _answer(scope, receive, send) -> None:
        request = Request(scope, receive, send)
        try:
            response = await scope["endpoint"](request)
        except MemError as exc:
            response = await on_refusal(request, exc)
        except HTTPException as exc:
            response = await on_http_error(request, exc)
        except ClientDisconnect:  # gone before its body was whole (or refused by the server): nobody to answer
            return
        except storage_exceptions() as exc:
            response = await on_storage_failure(request, exc)
        except Exception as exc:
            await (await on_internal_error(request, exc))(scope, receive, send)
            raise  # for the server's log, as starlette's ServerErrorMiddleware does
        await response(scope, receive, send)


def create_app(storage: HubStorage, max_wait: float = MAX_WAIT_SECONDS, group_commit: bool = True) -> Starlette:
    """The hub's ASGI app; a long-poll waits at most `max_wait` seconds, whatever it asks.

    Pushes go through a group committer (`group_commit=False`: one transaction per push); long-polls
    wait on a Fanout, woken by commits, holding no thread."""
    app = HubApp(routes=ROUTES, middleware=[Middleware(ZstdResponses)], exception_handlers=EXCEPTION_HANDLERS)
    app.state.hub = Hub(storage, max_wait, group_commit)
    return app
