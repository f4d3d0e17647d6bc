"""Redaction: what is left of an event whose body was removed, and what the folds see in its place.

A redacted event keeps its envelope, its digest and its place in the chain: the digest covers the
body's hash, not the body (see envelope.compute_digest), so the body can go while both still
verify. What stays in the body's place is a `Redacted` body: the original kind, the body's hash,
the reason, the redaction's id, and the few structural fields the views need to keep their shape
(a page version's slug and parents, a loop message's role and loop, a file's path). The folds
never see a `Redacted` body: `stand_in` turns it into a body of the original kind whose content
reads `[redacted: reason]`, so an incremental fold and a replay give the same views.
"""

import hashlib

import msgspec

from .blobs import blob_json, compress, is_loop_source
from .envelope import decode_body, encode_body
from .errors import InvalidInput, MemError
from .kinds import KINDS, Body, EntryAppend, PageDelete, PageIngest, PageUpdate, Redacted, Redaction

KEPT = {
    "page.ingest": ("slug", "parents", "quiet"),
    "page.update": ("slug", "parents"),
    "page.delete": ("slug", "parents"),
    "page.rename": ("old", "new", "parents"),
    "loop.append": ("role", "loop", "model", "created_at", "ord"),
    "loop.compact": ("preserve", "loop"),
    "loop.clear": ("start", "end", "loop"),
    "file.write": ("path", "mime_type", "protection", "created_at", "updated_at"),
    "file.delete": ("path",),
    "config.set": ("key", "updated_at"),
    "entry.append": ("type", "date", "reverses"),
    "audit.import": ("source", "entry_count", "created_at", "start_seq", "end_seq", "ref"),
    "inbox.message": ("imported",),
    "outbox.message": ("imported",),
    "import.gap": ("source",),
}
ENTRY_KEPT = ("seq", "role", "model", "created_at", "ord")
MESSAGE_KEPT = ("id", "from", "to", "status", "received_at", "created_at", "thread_id")


def redaction_events(by_layer: dict[str, list[str]], reason: str, agent: str,
                     withdrawn: frozenset[str] = frozenset()) -> list:
    """The redactions of `by_layer`'s targets (layer -> ids): one per layer and per MAX_REDACTION_TARGETS of its
    targets, each checked as the hub and every consumer check a pushed one (validate.body: ids, a one-line reason)
    and its reason scanned for secrets (a stand-in copies it into every target's place, never to be redacted). Those
    of the layers in `withdrawn` withdraw their targets (Redaction.withdraws)."""
    from . import secrets, validate
    from .envelope import new_event

    limit = validate.MAX_REDACTION_TARGETS
    try:
        return [secrets.checked(new_event(validate.body(Redaction(target_ids=ids[at:at + limit], reason=reason,
                                                                  withdraws=layer in withdrawn)),
                                          agent=agent, layer=layer))
                for layer, ids in by_layer.items() for at in range(0, len(ids), limit)]
    except secrets.SecretFound as found:  # no --allow-secret here: a reason is never redacted
        raise InvalidInput(f"{found.refused}: a redaction's reason is copied into every target's place and can "
                           "never be redacted, so it may hold no secret; say why without it") from None


def check_not_withdrawal(body) -> None:
    """Refuses a withdrawal (Redaction.withdraws) that came from elsewhere (a hub's push, a consumer's pull): it stays
    with the agent that made it, as its targets, which never went out, do."""
    if type(body) is Redaction and body.withdraws:
        raise InvalidInput("a redaction that withdraws its targets stays with the agent that made it (they never went "
                           "out)", field="body.withdraws")


def reversal(body) -> str | None:
    """The entry an entry reverses: an entry's `reverses`, or a redacted entry's, which its stand-in keeps (a reversal
    pushed already redacted is checked as a plain one)."""
    if type(body) is EntryAppend:
        return body.reverses
    if type(body) is Redacted and body.original == "entry.append":
        return body.kept.get("reverses")
    return None


def redacts(layer: str, body, event) -> bool:
    """Whether an event of `layer` with `body` is a redaction of `event`'s layer naming it: what a stand-in's `by` must
    be, where it is held (the hub's check_redacted_by, a consumer's intake)."""
    return layer == event.layer and type(body) is Redaction and event.id in body.target_ids


_VERSIONS = (PageIngest, PageUpdate, PageDelete)
_VERSION_TAGS = ("page.ingest", "page.update", "page.delete")


def page_version(body) -> tuple[str, list[str]] | None:
    """(slug, parents) of a page version (an ingest, update or delete), or of a redacted one, which its stand-in keeps;
    None for any other body."""
    if body.__class__ in _VERSIONS:
        return body.slug, body.parents
    if body.__class__ is Redacted and body.original in _VERSION_TAGS:
        return body.kept.get("slug"), body.kept.get("parents") or []
    return None


def body_hash(raw: bytes) -> bytes:
    return hashlib.sha256(raw).digest()


def redacted_form(kind: str, raw: bytes, reason: str, by: str) -> Redacted:
    """The `Redacted` body that replaces a stored body (`raw`, of kind `kind`)."""
    body = decode_body(raw)
    kept = {name: getattr(body, name) for name in KEPT.get(kind, ()) if getattr(body, name) is not None}
    if kind in ("inbox.message", "outbox.message"):
        kept["message"] = {k: v for k, v in body.message.items() if k in MESSAGE_KEPT}
    if kind == "audit.import" and is_loop_source(body.source):
        kept["entries"] = _archived_entries(body.data)
    return Redacted(original=kind, body_hash=body_hash(raw).hex(), reason=reason, by=by, kept=kept)


def _archived_entries(data: bytes) -> list[dict]:
    """What a loop blob's entries keep when it is redacted, as a redacted loop message does: all but the content."""
    try:
        entries = blob_json(data)
    except MemError:
        return []
    return [{k: e[k] for k in ENTRY_KEPT if k in e} for e in entries if isinstance(e, dict)] \
        if isinstance(entries, list) else []


def _stand_in_blob(source: str, entries: list[dict] | None, mark: str) -> tuple[bytes, int]:
    """A redacted audit blob as the folds see it: a loop blob's entries (those kept) reading the mark, as the
    blob a native compaction archives after a redaction; another blob (a deleted file, a message) the mark."""
    if is_loop_source(source):
        return compress([{"seq": e.get("seq"), "role": e.get("role"), "content_json": [{"type": "text", "text": mark}],
                          **{k: e[k] for k in ENTRY_KEPT[2:] if k in e}} for e in entries or ()])
    return compress({"content": mark})


def stand_in(redacted: Redacted) -> Body:
    """A body of the original kind, its content replaced by `[redacted: reason]`, for the folds."""
    mark = f"[redacted: {redacted.reason}]"
    fields = dict(redacted.kept)
    message = fields.pop("message", None)
    if redacted.original == "audit.import":
        fields["data"], fields["size_bytes"] = _stand_in_blob(fields["source"], fields.pop("entries", None), mark)
    for field in msgspec.structs.fields(KINDS[redacted.original]):
        if field.name in fields or field.name == "allowed_secrets":
            continue
        if field.name == "redacted":
            fields["redacted"] = redacted.reason
            continue
        value = _placeholder(redacted.original, field, mark, fields.get("slug"), message)
        if value is not _DEFAULT:
            fields[field.name] = value
    return KINDS[redacted.original](**fields)


_DEFAULT = object()
REDACTED_TYPE = "redacted"
"""The `type` a redacted page's frontmatter reads as: the redaction's, no author's choice."""


def _placeholder(kind: str, field, mark: str, slug: str | None, message: dict | None):
    """What a removed field reads as: the mark for text, empty for lists, the default for the rest."""
    name = field.name
    if name == "frontmatter":
        return {"type": REDACTED_TYPE}
    if name == "text":
        return f"# {slug}\n\n{mark}\n"
    if (kind, name) == ("loop.append", "content"):
        return [{"type": "text", "text": mark}]
    if (kind, name) == ("file.write", "content"):
        return mark.encode()
    if name == "message":
        return {**(message or {}), "content": mark}
    if name in ("note", "summary", "line", "content"):
        return "" if name == "note" else mark
    if name in ("entries", "findings"):
        return []
    if name == "value":
        return None
    return _DEFAULT if not field.required else mark


def matches(raw_body: bytes, pattern) -> tuple[bool, list[str]]:
    """Whether any string a redaction removes from a body (its text, frontmatter values, content blocks, an audit
    blob's entries) matches; and the fields it keeps (KEPT: a page's name, a file's path) that match, which a
    redaction of the event would leave in the log. The kind's own name is no text anyone wrote."""
    body = _readable(msgspec.msgpack.decode(raw_body))
    kept = KEPT.get(body.get("kind"), ())
    removed = any(pattern.search(text) for key, value in body.items() if key != "kind" and key not in kept
                  for text in _strings(value))
    return removed, [key for key in kept if any(pattern.search(text) for text in _strings(body.get(key)))]


def _readable(body: dict) -> dict:
    """A body with an audit blob's JSON in place of its brotli (expanded within the bound audit reads keep;
    a blob that cannot be read is matched as its bytes)."""
    if body.get("kind") != "audit.import" or not isinstance(body.get("data"), bytes):
        return body
    try:
        return {**body, "data": blob_json(body["data"])}
    except MemError:
        return body


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "kind":
                yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


__all__ = ["KEPT", "Redacted", "body_hash", "encode_body", "matches", "page_version", "redacted_form", "redacts", "stand_in"]
