"""What a consumer checks before it appends a pulled event: the same checks the hub runs on a push.

A consumer never trusts its hub: an event that fails is rejected and reported (its id, its hub position,
why), the cursor moves past it, and the rest of the layer keeps flowing. Stopping instead would leave
the consumer stuck on that event for good, since the hub would hand it out again on every pull.

The hold (eventstore.governance) is not checked here: an update or delete of a held shared page that
does not release it, which a hub that did not check may hand out, is appended and the fold makes it void
(projections.shared), with everything built on it. Rejecting it would not do: a version built on it may
come first, or later from another path, and only a log that holds the whole chain can tell it is void.
"""

from collections.abc import Mapping

import msgspec

from eventstore import validate
from eventstore.envelope import Event, check_event, check_tag
from eventstore.errors import MemError, UnknownKind
from eventstore.ids import is_uuid
from eventstore.kinds import Redacted, Redaction
from eventstore.redaction import check_not_withdrawal, page_version, redacts, reversal
from eventstore.layers import LAYER_KINDS, ONLY_REDACTIONS, Contract, consumes, is_reserved, produces
from eventstore.recorder import TAGS


class Rejected(msgspec.Struct):
    """A pulled event left out: `position` is the hub's, `reason` one line."""

    id: str
    position: int | None
    reason: str


class _Named(msgspec.Struct):
    """As much of an event as names it, when the rest does not decode."""

    id: object = None
    seq: object = None
    body: object = None


_decoders = {False: (msgspec.json.Decoder(Event).decode, msgspec.json.Decoder(_Named).decode),
             True: (msgspec.msgpack.Decoder(Event).decode, msgspec.msgpack.Decoder(_Named).decode)}
"""(event, _Named) decoders of a pulled event: in JSON, or in msgpack (`packed`)."""
_pages = {False: msgspec.json.Decoder(list[Event]).decode, True: msgspec.msgpack.Decoder(list[Event]).decode}


def printable(id) -> str:
    """An id as it can be shown on one line: itself when canonical, else its repr, cut short."""
    return id if is_uuid(id) else repr(id)[:80]


def _undecodable(raw: bytes, exc: Exception, named_decode) -> Rejected:
    reason = f"does not decode: {str(exc)[:200]}"
    try:
        named = named_decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return Rejected(id="?", position=None, reason=reason)
    try:
        check_tag(named.body.get("kind") if isinstance(named.body, dict) else None)
    except UnknownKind as unknown:
        reason = str(unknown)
    return Rejected(id=printable(named.id), position=named.seq if isinstance(named.seq, int) else None, reason=reason)


def problem(event: Event, contract: Contract, agent: str, rules: dict | None = None) -> str | None:
    """Why this consumer must not append `event`, or None. Sets the event's encoded body as it checks.
    `rules` keeps each layer's verdict (`layer_rule`) from one event to the next of a page."""
    try:
        check_event(event)
        layer = event.layer
        rule = rules.get(layer) if rules is not None else None
        if rule is None:
            rule = layer_rule(contract, agent, layer)
            if rules is not None:
                rules[layer] = rule
        return _refusal(event, rule)
    except MemError as exc:
        return _reason(exc)


def _refusal(event: Event, rule: tuple[str, frozenset] | str) -> str | None:
    """Why `event`, whose envelope passed, must not be appended under its layer's `rule`, or None."""
    if rule.__class__ is str:
        return rule
    refused, kinds = rule
    body = event.body
    kind = body.original if type(body) is Redacted else TAGS[type(body)]  # Event.original_kind, written out
    if kind not in kinds:
        return refused.format(kind)
    validate.body(body)
    check_not_withdrawal(body)
    return None


def _reason(exc: MemError) -> str:
    return f"{exc.field + ': ' if exc.field and exc.field not in str(exc) else ''}{exc}"


def layer_rule(contract: Contract, agent: str, layer: str) -> tuple[str, frozenset] | str:
    """What this agent takes in `layer`: (why it refuses a kind, `{}` the kind; the kinds it takes), or why nothing.
    Of a layer it produces without consuming it, the redactions alone (the hub's `page_rows`)."""
    if is_reserved(layer):
        return f"layer {layer!r} is private to each agent"
    if not consumes(contract, agent, layer):
        if produces(contract, agent, layer):
            return (f"layer {layer!r} is one this agent produces but does not consume: it takes only redactions "
                    "of it, not {}"), ONLY_REDACTIONS
        return f"layer {layer!r} is not one this agent consumes"
    format = contract.layers[layer].format
    return f"a {format} layer does not take {{}}", LAYER_KINDS[format]


def apart_rule(layer: str) -> tuple[str, frozenset] | str:
    """What this agent takes in `layer` from GET /v1/redactions: redactions alone (see `apart_refusal`)."""
    if is_reserved(layer):
        return f"layer {layer!r} is private to each agent"
    return "redactions are all the hub sends an agent apart from its pulls, not {}", ONLY_REDACTIONS


NOTHING_HERE = "it names no event whose body this log holds"
"""`apart_refusal`'s verdict on a redaction that has nothing to remove from this log: left out, said to nobody."""


def apart_refusal(event: Event, log) -> str | None:
    """Why a redaction the hub sent apart from the pulls (GET /v1/redactions) is not taken, or None: it must name an
    event of its own layer whose body this log still holds (one this agent wrote, or pulled while it consumed the
    layer: the hub answers those alone); one that names none (another workspace of the agent's wrote them, a
    redaction removed them already, or the hub sent what it should not) is NOTHING_HERE: left out without a word, and
    a hub cannot grow the log with redactions that remove nothing."""
    if type(event.body) is not Redaction:
        return "a redacted redaction is no redaction"
    for target in event.body.target_ids:
        known = log.get(target)
        if known is not None and known.layer == event.layer and type(known.body) is not Redacted:
            return None
    return NOTHING_HERE


def _decoded(raws: list[msgspec.Raw], packed: bool) -> list[Event | None]:
    """Every event of a page decoded in one call (an array of them, as one document); when one does not
    decode, none is (None each), and `accept` decodes them one by one, to reject that one alone."""
    if packed:
        n = len(raws)
        header = bytes([0x90 | n]) if n < 16 else (b"\xdc" + n.to_bytes(2, "big") if n < 65536
                                                     else b"\xdd" + n.to_bytes(4, "big"))
        whole = b"".join([header, *raws])
    else:
        whole = b"".join([b"[", b",".join(raws), b"]"])
    try:
        return _pages[packed](whole)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, MemError):
        return [None] * len(raws)


def page_of(id: str, log, pages: dict, taken: dict) -> tuple[str, str | None] | None:
    """(layer, slug) of the page version `id` (redacted or not), from `pages` (what this pull took, kept as it goes)
    or the log; (layer, None) for an event that is no page version (in `taken`, this page's, or the log); None when
    neither holds `id`."""
    if id in pages:
        return pages[id]
    if id in taken:  # taken and not among the versions: no version
        return taken[id].layer, None
    known = log.get(id)
    if known is None:
        return None
    version = page_version(known.body)
    page = pages[id] = (known.layer, version[0] if version is not None else None)
    return page


def foreign_parent(event: Event, version: tuple[str, list[str]], log, pages: dict, taken: dict) -> str | None:
    """Why a shared page version's parents (`version`: its slug and parents) are not all versions of its own page,
    as the hub's check_parents refuses them, or None. One naming another page's version made the consumer's folded
    heads differ from its rebuild's; one naming an event that is no page version, a version with a parent that is
    none."""
    page = (event.layer, version[0])
    for parent in version[1]:
        if parent == event.id:  # superseded by itself: a page with no version left (nc26a)
            field = "kept.parents" if event.body.__class__ is Redacted else "parents"
            return f"body.{field}: parent {parent} is this version itself"
        named = page_of(parent, log, pages, taken)
        if named is not None and named != page:
            field = "kept.parents" if event.body.__class__ is Redacted else "parents"
            if named[1] is None:
                return f"body.{field}: parent {parent} is no page version but an event of layer {named[0]!r}"
            return (f"body.{field}: parent {parent} is a version of page {named[1]!r} of layer {named[0]!r}, not of "
                    f"{page[1]!r}")
    return None


def foreign_redaction(event: Event, log, taken: dict) -> str | None:
    """Why a pulled redacted event's `by` does not name the redaction that removed its body (a redaction of its layer
    naming it), where this log or the page holds that event, as the hub's check_redacted_by; None otherwise."""
    by = event.body.by
    named = taken.get(by) or log.get(by)
    if named is None or redacts(named.layer, named.body, event):
        return None
    return f"body.by: {by} is no redaction of layer {event.layer!r} naming this event"


def accept(raws: list[msgspec.Raw], contract: Contract, agent: str, log,
           packed: bool = False, not_taken: Mapping[str, str] = {},
           pages: dict | None = None, apart: bool = False) -> tuple[list[Event], list[Rejected]]:
    """Decodes (from JSON, or msgpack when `packed`) and checks a pulled page event by event: what may be
    appended, and what was rejected. The page's hot loop: `problem`, written out. A hub layer one of the agent's
    local layers shadows (`not_taken`, each with why: Memory.not_taken) is not taken: its events would mix into
    the agent's own. `pages` (id -> (layer, slug) of the page versions taken, see page_of) is kept from one page
    of a pull to the next, so that a catch-up reads a parent from the log only when an earlier pull took it.
    `apart`: a page of GET /v1/redactions, whatever the contract says: redactions alone, each naming an event of
    its layer whose body this log holds (`apart_refusal`)."""
    events, rejected, taken = [], [], {}  # taken: id -> the event of this page taken with that id
    pages = {} if pages is None else pages
    (decode, named_decode) = _decoders[packed]
    rules: dict = dict(not_taken)
    for raw, event in zip(raws, _decoded(raws, packed)):
        if event is None:
            try:
                event = decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, MemError) as exc:
                rejected.append(_undecodable(raw, exc, named_decode))
                continue
        try:
            check_event(event)
            rule = rules.get(event.layer)
            if rule is None:
                rule = rules[event.layer] = (apart_rule(event.layer) if apart else
                                             layer_rule(contract, agent, event.layer))
            reason = _refusal(event, rule)
            if apart and reason is None:
                reason = apart_refusal(event, log)
                if reason is NOTHING_HERE:
                    continue
        except MemError as exc:
            reason = _reason(exc)
        if reason is None:
            id, body = event.id, event.body
            if id in taken and taken[id].digest != event.digest:
                reason = "its id came twice with different contents"
            elif (reversed := reversal(body)) is not None:  # an entry's, or a redacted entry's
                target = taken[reversed].layer if reversed in taken else None
                if target is None:
                    known_event = log.get(reversed)
                    target = known_event.layer if known_event is not None else None
                if target != event.layer:
                    reason = f"body.reverses: there is no entry {reversed} in layer {event.layer!r}"
            if reason is None and body.__class__ is Redacted:
                reason = foreign_redaction(event, log, taken)
            if reason is None and (version := page_version(body)) is not None:
                reason = foreign_parent(event, version, log, pages, taken) if version[1] else None
                if reason is None:
                    pages[id] = (event.layer, version[0])
        if reason is not None:
            rejected.append(Rejected(id=printable(event.id), position=event.seq, reason=reason))
            continue
        taken[id] = event
        events.append(event)
    return events, rejected


def conflicting(events: list[Event], log) -> tuple[list[Event], list[Rejected]]:
    """Splits off the events whose id this log holds with other contents (after an IdConflict)."""
    kept, rejected = [], []
    for event in events:
        known = log.get(event.id)
        if known is not None and known.digest != event.digest:
            rejected.append(Rejected(id=event.id, position=event.seq,
                                   reason="an event with its id and other contents is already in this log"))
        else:
            kept.append(event)
    return kept, rejected
