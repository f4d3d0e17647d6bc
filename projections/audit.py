"""Reading the loop and its audit: ADF's audit-read recipe, citations, and what an agent believed.

`audit_read` resolves a seq as ADF's audit-read recipe does: the live loop first (`adf_loop`), then
every loop audit row whose `start_seq..end_seq` covers it (several can; the blob is searched for the
entry with that seq, newest range first), and otherwise an honest `missing`. One step is mindlog's
own: when no blob holds the entry but the log still does (loop audit was off when it was compacted
away), the answer is `source: log`, since the log is the ground truth. Blobs are decompressed
within a bound (`eventstore.blobs.MAX_BLOB_BYTES`), so a brotli bomb is refused, never expanded.
"""

import json
import re
from typing import Any

import msgspec

from eventstore.blobs import blob_json
from eventstore.errors import InvalidInput
from eventstore.ids import seq_number
from eventstore.kinds import LoopAppend, LoopCompact, Redacted
from eventstore.redaction import stand_in
from eventstore.writer import entry_id

from . import trust
from .adf import COMPACTED, COMPACTED_AUDITED, audit_switch
from .shared import Entry, entry_line
from .search import page_trust, text_of as search_text
from .views import KEPT_ASIDE, LOG_PATH, MIND_PATH, Views, slug_of

NEVER = 1 << 62


class AuditHit(msgspec.Struct, omit_defaults=True):
    source: str  # live | audit | log | missing
    seq: int
    loop: str | None = None
    audit_id: int | None = None
    entry: dict[str, Any] | None = None
    other: str | None = None  # when missing: the event at that seq, which is not a loop message
    in_loop: str | None = None  # when missing: the loop that holds the message, which is not the one cited
    read_at: int | None = None  # when missing: the seq read, which the cited seq comes after (not yet written then)


class AuditRow(msgspec.Struct):
    id: int
    source: str
    start_seq: int | None
    end_seq: int | None
    ref: str | None
    entry_count: int
    size_bytes: int
    created_at: int


class LoopMessage(msgspec.Struct):
    seq: int
    loop: str
    role: str
    content: list[Any]
    created_at: int
    ord: int | None = None

    def text(self) -> str:
        """The message in one line's worth: its text blocks, and each other block as its type and the start of its
        words (`[tool_use: kubectl rollout status bash]`), as `loop show` and `believed` print it."""
        return " ".join(part for part in map(_block_line, self.content) if part)


BLOCK_WORDS = 80
"""Characters of a tool call's, tool result's or thinking block's words that `LoopMessage.text` shows."""


def _block_line(block) -> str:
    if not isinstance(block, dict):
        return ""
    if block.get("type") == "text":
        return str(block.get("text", ""))
    words = " ".join(search_text([block]).split())
    if len(words) > BLOCK_WORDS:
        words = words[:BLOCK_WORDS - 1] + "…"
    return f"[{block.get('type')}: {words}]" if words else f"[{block.get('type')}]"


def loop_rows(views: Views, loop: str | None = "main", as_of: int | None = None) -> list[LoopMessage]:
    """The live loop as of a seq, in ADF's display order: COALESCE(ord, seq), seq."""
    as_of = views.checkpoint() if as_of is None else as_of
    return [LoopMessage(seq=s, loop=lp, role=r, content=json.loads(c), created_at=t, ord=o)
            for s, lp, r, c, _model, _tokens, t, o in views.loop_rows(loop, as_of)]


def audit_rows(views: Views, source: str | None = None, as_of: int | None = None) -> list[AuditRow]:
    return [AuditRow(*row) for row in views.audit_rows(as_of, source)]


def archived_by(views: Views, event_seq: int) -> AuditRow | None:
    """The audit row that the loop compaction or clear at this seq wrote (None: it archived nothing)."""
    row = views.archived_by(event_seq)
    return AuditRow(*row) if row else None


def audit_read(views: Views, log, seq: int, loop: str | None = None, as_of: int | None = None) -> AuditHit:
    as_of = views.checkpoint() if as_of is None else as_of
    live = views.loop_rows(loop, as_of, seq=seq)
    if live:
        s, lp, role, content, _model, _tokens, created, _ord = live[0]
        return AuditHit(source="live", seq=seq, loop=lp, entry={"seq": s, "loop": lp, "role": role,
                                                               "content_json": json.loads(content),
                                                               "created_at": created})
    for audit_id, source, data in views.loop_audits_covering(seq, loop, as_of):
        entries = blob_json(data, f"audit blob {audit_id}")
        hit = next((e for e in entries if isinstance(e, dict) and e.get("seq") == seq), None) \
            if isinstance(entries, list) else None
        if hit is not None:
            return AuditHit(source="audit", seq=seq, audit_id=audit_id,
                            loop=re.sub(r"^loop:?", "", source) or "main", entry=hit)
    event = log.get_by_seq(seq) if seq <= as_of else None
    body = event.body if event is not None else None
    if isinstance(body, Redacted):
        body = stand_in(body)
    if isinstance(body, (LoopAppend, LoopCompact)) and (loop is None or body.loop == loop):
        if isinstance(body, LoopAppend):
            role, content, created = body.role, body.content, body.created_at or event.ts
        else:
            prefix = COMPACTED_AUDITED if audit_switch(views.config(seq - 1), "loop") else COMPACTED
            role, content, created = "user", [{"type": "text", "text": prefix + body.summary}], event.ts
        entry = {"seq": seq, "role": role, "content_json": content, "created_at": created}
        return AuditHit(source="log", seq=seq, loop=body.loop, entry=entry)
    if isinstance(body, (LoopAppend, LoopCompact)):
        return AuditHit(source="missing", seq=seq, in_loop=body.loop)
    if event is None and seq > as_of:
        return AuditHit(source="missing", seq=seq, read_at=as_of)
    other = f"{event.kind} in layer {event.layer} by {event.agent}" if event is not None else None
    return AuditHit(source="missing", seq=seq, other=other)


class Citation(msgspec.Struct, omit_defaults=True):
    citation: str
    kind: str  # seq | file | entry
    resolved: bool
    hit: AuditHit | None = None
    path: str | None = None
    text: str | None = None
    layer: str | None = None
    entry: Entry | None = None
    seq: int | None = None


_SEQ_CITE = re.compile(r"^\[?S([0-9]+)\]?$")  # ASCII digits: `\d` took "١" (nc33a)
_AUDIT_CITE = re.compile(r"^adf-audit://seq/([0-9]+)(?:\?loop=([a-z0-9_-]+))?$")
_ENTRY_ID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}(?:-[0-9a-f]{4}-[0-9a-f]{12})?"
"""An entry's id as `mem search` cites it, or as its layer's file shows it (18 characters)."""
_ENTRY_CITE = re.compile(r"^[0-9a-f]{8}-[0-9a-f-]{1,27}$")
"""An entry's id or a prefix of it long enough to be told from a seq: 8 hex digits and a dash at least."""


def file_text(views: Views, path: str, as_of: int | None = None) -> str | None:
    """A file as of a seq: a rendered one (the wiki, a layer's file), else one of adf_files."""
    if path in (MIND_PATH, LOG_PATH) or slug_of(path):
        return views.file_text(path, as_of)
    rendered = views.file_text(path, as_of)
    if rendered is not None:
        return rendered
    row = views.file(path, as_of)
    if row is None:
        return None
    try:
        return bytes(row[1]).decode("utf-8")
    except UnicodeDecodeError:
        return f"<{row[3]} bytes of {row[2]}>"


def cite(views: Views, log, citation: str, as_of: int | None = None) -> Citation:
    text = citation.strip()
    match = _SEQ_CITE.match(text) or _AUDIT_CITE.match(text)
    if match:
        loop = match.group(2) if match.re is _AUDIT_CITE else None
        hit = audit_read(views, log, seq_number(match.group(1)), loop, as_of)
        return Citation(citation=text, kind="seq", resolved=hit.source != "missing", hit=hit)
    if text.startswith("adf-file://"):
        path = text[len("adf-file://"):]
        body = file_text(views, path, as_of)
        return Citation(citation=text, kind="file", resolved=body is not None, path=path, text=body)
    if _ENTRY_CITE.match(text.lower()):
        return cite_entry(views, text.lower(), as_of)
    raise InvalidInput(f"{citation!r} is not a citation: use [S412], adf-audit://seq/412[?loop=NAME], "
                       "adf-file://PATH or an entry's id")


def cite_entry(views: Views, ref: str, as_of: int | None = None) -> Citation:
    """The entry whose id is or starts with `ref`, made by `as_of` in a layer the workspace had then (a layer
    whose declaration was redacted, or dropped from the contract, has no file to show it in: as `mem entry list`
    says, there is no such layer); its layer's file and its line there."""
    as_of = views.checkpoint() if as_of is None else as_of
    contract = views.contract_at(as_of)
    layers = contract.layers if contract is not None else {}
    found = [row for row in views.shared.entries_starting(ref, as_of) if row[0] in layers]
    if not found:
        return Citation(citation=ref, kind="entry", resolved=False)
    entry_id(ref, [entry.id for _layer, entry, _seq in found], "in this workspace", "")  # refuses a prefix of two entries' ids
    [(layer, entry, seq)] = found
    line = entry_line(entry.type, entry.date, entry.content, entry.reverses, entry.reversed_by)
    return Citation(citation=ref, kind="entry", resolved=True, path=layers[layer].path, text=line, layer=layer,
                    entry=entry, seq=seq)


CITATION_IN_TEXT = re.compile(r"\[S(\d+)\]|adf-audit://seq/\d+(?:\?loop=[a-z0-9_-]+)?"
                              r"|adf-file://[^\s)\]>\"']*[^\s)\]>\"'.,;:!?]"  # not the full stop after it (nc30b)
                              rf"|\b{_ENTRY_ID}\b")


def citation_kind(citation: str) -> str:
    """The kind of a citation found in a text (`citations_in`): file, entry or seq."""
    if citation.startswith("adf-file://"):
        return "file"
    return "entry" if _ENTRY_CITE.match(citation) else "seq"


def citations_in(text: str) -> list[str]:
    return [m.group(0) for m in CITATION_IN_TEXT.finditer(text)]


class Believed(msgspec.Struct):
    seq: int
    mind: str
    pages: list[dict[str, str]]
    loop: list[LoopMessage]
    shared: dict[str, str] = {}
    kept_aside: list[str] = []  # files an import kept aside (an imported agent's own mind.md): there, not loaded


def believed(views: Views, as_of: int, last: int = 10, *, include_all: bool = False, day: str = "",
             shared: bool = True) -> Believed:
    """What the agent had in front of it: mind.md, its page catalog, the loop's last messages, and
    (unless not `shared`) the shared layers' files as they stood (its own writes plus what it had
    pulled by then).

    Superseded, deprecated and archived pages are left out of `pages` unless `include_all`; the
    others carry their status and their trust flags as of `day` (YYYY-MM-DD)."""
    fields = page_trust(views, as_of)
    pages = []
    for slug, title, hook in views.catalog(as_of):
        status, stale_after = fields.get(slug, (None, None))
        if trust.withheld(status) and not include_all:
            continue
        pages.append({"slug": slug, "title": title, "hook": hook, "status": status or "",
                      "flags": ", ".join(trust.flags(status, stale_after, day))})
    files = {path: views.file_text(path, as_of) for path in views.shared_paths(as_of)} if shared else {}
    return Believed(seq=as_of, mind=views.mind(as_of), pages=pages, loop=loop_rows(views, None, as_of)[-last:] if last > 0 else [],
                    shared=files, kept_aside=[p for p in views.file_paths(as_of) if p.startswith(KEPT_ASIDE)])
