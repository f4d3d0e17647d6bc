"""Redaction through a workspace: which events, who may, and the one append that removes their bodies.

The log removes the targets' bodies in the transaction that appends the `redaction` event (see
eventstore.recorder.redaction_updates); the next refresh sees the redaction and rebuilds the views
from the log instead of folding it, so the views, the files and any later export hold nothing of
what was removed, and an incremental refresh and `mem replay` agree byte for byte.
"""

import hashlib

import msgspec

from eventstore import recorder, validate
from eventstore.envelope import CODEC_REDACTED, Event, decode_body, unpack_body
from eventstore.errors import InvalidInput, NotFound, for_each
from eventstore.governance import is_held
from eventstore.ids import is_uuid, seq_number
from eventstore.layers import MIND, left, produces
from eventstore.writer import entry_id
from eventstore.redaction import matches, page_version, redaction_events

from . import audit
from .views import slug_of

UNREDACTABLE = recorder.UNREDACTABLE | {"redacted"}


class Target(msgspec.Struct):
    seq: int
    id: str
    kind: str
    layer: str
    agent: str


class RedactReport(msgspec.Struct):
    targets: list[Target]
    redactions: list[int]  # the seqs of the redaction events appended (one per layer)
    done: bool
    left_on_disk: bool = False  # a reader held the log: the old text stays on disk until a later append erases it
    hand_edited: list[str] = []  # files edited by hand, so not rewritten: they may still hold what was redacted
    views_behind: bool = False  # the views could not follow (a full disk): they and the files still hold the text
    stubs: list[str] = []  # notes on pages whose current version was redacted: they show the stub now (`shown_stubs`)


def _target(event: Event) -> Target:
    return Target(seq=event.seq, id=event.id, kind=event.kind, layer=event.layer, agent=event.agent)


class Resolved(msgspec.Struct):
    """What a redaction by seqs or ids takes: the events named, and with them (`also`) those holding the same text."""

    events: list[Event]
    also: list[Event] = []

    def notes(self) -> list[str]:
        return [f"seq {event.seq} ({event.kind}) holds the same `## Always` line: it is redacted with it"
                for event in self.also]


ALWAYS_KINDS = ("always.add", "always.remove")


def same_line(memory, events: list[Event]) -> list[Event]:
    """The `## Always` events (adds and removals) holding the line of an Always event among `events`, not among them:
    a line's add and its removal hold the same text. One redacted alone left the other holding it, and a removal (which
    names its line by its text) no longer removed a redacted add's `[redacted: …]` line: the line came back."""
    lines = {event.body.line for event in events if event.kind in ALWAYS_KINDS}
    if not lines:
        return []
    named = {event.seq for event in events}
    return [event for event in memory.log.read(kinds=list(ALWAYS_KINDS))
            if event.seq not in named and getattr(event.body, "line", None) in lines]


def resolve(memory, refs: list[str]) -> Resolved:
    """The events named by seqs or ids, in seq order, and the Always events holding the same line (same_line); refuses
    any that is unknown or cannot be redacted."""
    found = {}
    for ref in refs:
        if not ref.strip():  # the start of every entry's id: it named a layer's only entry
            raise InvalidInput("an empty text names no event: give a seq, an event id or the start of an entry's id")
        seq = seq_number(ref) if ref.isascii() and ref.isdigit() else None
        event = (memory.log.get_by_seq(seq) if seq is not None else
                 memory.log.get(ref) if is_uuid(ref) else _entry(memory, ref))
        if (event is None or event.kind == "import.gap") and seq is not None:
            _refuse_archived(memory, seq)
        if event is None:
            raise NotFound(f"there is no event {ref!r} in the log (give a seq, an event id or the start of an "
                           "entry's id)")
        if event.kind in UNREDACTABLE:
            what = "is redacted already" if event.kind == "redacted" else f"is {'an' if event.kind[0] in 'aeiou' else 'a'} {event.kind} event"
            raise InvalidInput(f"event {ref} {what}; it cannot be redacted")
        found[event.seq] = event
    events = [found[seq] for seq in sorted(found)]
    also = same_line(memory, events)
    return Resolved(events=sorted([*events, *also], key=lambda event: event.seq), also=also)


def _entry(memory, ref: str) -> Event | None:
    """The entry whose id starts with `ref` (an entries file shows 18 characters of it), if any."""
    found = memory.views.shared.entry_ids_starting(ref)
    return memory.log.get(entry_id(ref, found, "in the log", "")) if found else None


def _refuse_archived(memory, seq: int) -> None:
    """A seq that names no event of the log but a message archived in an imported audit blob: the event
    that holds it is named (redacting it removes the whole blob)."""
    hit = audit.audit_read(memory.views, memory.log, seq)
    if hit.source == "audit":
        holder = memory.views.audit_event_seq(hit.audit_id)
        raise NotFound(**for_each(
            f"seq {seq} is no event of the log but a message archived in audit blob {hit.audit_id} (loop {hit.loop}), "
            f"which event {holder} holds: ",
            f"`mem redact {holder}` removes the whole blob; `mem redact --match` finds the events whose text matches",
            f"redacting target {holder} removes the whole blob; a match finds the events whose text matches"))


class Matched(msgspec.Struct):
    """What `--match` found: the events whose removable text matches, and the events that keep a match in what a
    redaction leaves (eventstore.redaction.KEPT: a page's name, a file's path), each with those fields."""
    events: list[Event]
    kept: dict[int, list[str]]

    def kept_notes(self) -> list[str]:
        return [f"seq {seq} keeps a match in its {', '.join(fields)}, which a redaction leaves in the log (a page's "
                "name, a file's path): rename or delete the page or file so that the views no longer show it"
                for seq, fields in sorted(self.kept.items())]


def search(memory, pattern: str, layer: str | None = None, progress=None) -> Matched:
    """Every event whose text matches a regular expression (optionally in one layer). `progress(n)` hears of each
    thousand events read: a pattern that backtracks can take long on a long log (Ctrl-C stops it, nothing written)."""
    import regex  # here: it takes 15 ms to import, which every command paid

    try:
        compiled = BoundedPattern(pattern)
    except regex.error as exc:
        raise InvalidInput(f"--match {pattern!r} is not a regular expression: {exc}",
                           for_tools=f"match {pattern!r} is not a regular expression: {exc}") from None
    if layer:
        memory.logged_layer(layer)
    hits, kept = [], {}
    for read, row in enumerate(memory.log.read_rows(layers=[layer] if layer else None), 1):
        if progress is not None and read % 1000 == 0:
            progress(1000)
        seq, kind, codec, body = row[0], row[6], row[7], row[8]
        if kind in UNREDACTABLE:
            continue
        raw = unpack_body(codec, bytes(body))
        try:
            removable, fields = (matches(raw, compiled) if codec != CODEC_REDACTED else
                                 (False, _kept_matches(raw, compiled)))
        except TimeoutError:
            why = (f"{pattern!r} ran over {MATCH_SECONDS:g} s (and a second a million characters) on the text of seq "
                   f"{seq}: it may backtrack (a repeat inside a repeat, like (a|aa)+ or (x+)+); write it so that each "
                   "part can match only one way")
            raise InvalidInput(f"--match {why}", for_tools=f"match {why}", field="match") from None
        if fields:
            kept[seq] = fields
        if removable:
            hits.append(memory.log.get_by_seq(seq))
    return Matched(events=hits, kept=kept)


MATCH_SECONDS = 2.0
"""The longest one text may take to search, and a second more per MATCH_CHARS_PER_SECOND characters: a pattern that
backtracks (`(a|aa)+$`) can take hours on a page, and a linear one takes about a second on an 8 MB file."""
MATCH_CHARS_PER_SECOND = 1_000_000


class BoundedPattern:
    """A regular expression (the `regex` module's, which reads what `re` reads) whose every search of one text gives
    up after MATCH_SECONDS, raising TimeoutError: `re` cannot be stopped but by Ctrl-C, and an MCP client cannot
    press it."""

    def __init__(self, pattern: str):
        import regex

        self.compiled = regex.compile(pattern)

    def search(self, text: str):
        return self.compiled.search(text, timeout=match_seconds(text))


def match_seconds(text: str) -> float:
    return MATCH_SECONDS + len(text) / MATCH_CHARS_PER_SECOND


def _kept_matches(raw: bytes, compiled) -> list[str]:
    """The kept fields of a redacted body (its `kept`) that match: the text a redaction left."""
    kept = decode_body(raw).kept
    return [key for key, value in kept.items() if isinstance(value, str) and compiled.search(value)]


def check_allowed(memory, events: list[Event]) -> None:
    """An agent redacts its own events, any event of a shared layer it produces, and its copy of a layer it no
    longer takes (dropped as its consumer, or the layer gone): no redaction of it reaches this agent any more."""
    agent = memory.config.agent
    contract = memory.views.contract
    for event in events:
        if event.agent == agent:
            continue
        if left(contract, agent, event.layer) or produces(contract, agent, event.layer):
            continue
        raise InvalidInput(f"event {event.seq} is {event.agent}'s in layer {event.layer!r}, which {agent} does not "
                           "produce: its own agent, a producer of the layer or the hub's administrator "
                           "(`mem hub redact`) may redact it")


def redact(memory, events: list[Event], reason: str, *, apply: bool = True,
           apart: set[str] = frozenset()) -> RedactReport:
    """Appends one redaction per layer of `events` (all in one transaction) and rebuilds the views; the ids in
    `apart` (own events no hub has had: sync.client.unsent) get redactions of their own, so that the others' goes
    to the hub while theirs is taken back with them (sync.client.taken_back)."""
    reason = validate.one_line(reason, "a redaction's reason")
    if not reason:
        raise InvalidInput("a redaction needs a --reason", for_tools="a redaction needs a reason")
    if not events:
        return RedactReport(targets=[], redactions=[], done=False)
    check_allowed(memory, events)
    targets = [_target(e) for e in events]
    if not apply:
        return RedactReport(targets=targets, redactions=[], done=False)
    by_layer: dict[str, list[str]] = {}
    unsent: dict[str, list[str]] = {}
    for event in events:
        (unsent if event.id in apart else by_layer).setdefault(event.layer, []).append(event.id)
    redactions = [*redaction_events(by_layer, reason, memory.config.agent),
                  *redaction_events(unsent, reason, memory.config.agent, withdrawn_layers(memory, unsent))]
    from .memory import REDACTION_FILES

    with memory.lock():  # refused up front when the views cannot follow (a read-only file, a full disk)
        seqs = memory.log.append(redactions, state=lambda seqs: {REDACTION_FILES: pending_since(memory, seqs)})
        files = memory.follow()  # marks the files edited by hand it leaves (Memory._rewritten)
    return RedactReport(targets=targets, redactions=seqs, done=True, left_on_disk=memory.log.unscrubbed,
                        hand_edited=list(files.refused), views_behind=memory.behind is not None,
                        stubs=shown_stubs(memory, events, reason, apart))


def withdrawn_layers(memory, layers) -> frozenset[str]:
    """Of `layers` (of own events no hub has had), the shared ones this agent no longer produces: what it wrote there
    never goes out, so its redaction withdraws it (Redaction.withdraws)."""
    local = memory.local_layers()
    return frozenset(layer for layer in layers if layer != MIND and layer not in local and not memory.produces(layer))


def shown_stubs(memory, events: list[Event], reason: str, apart: set[str] = frozenset(), *,
                tools: bool = False) -> list[str]:
    """A note for each page whose current version is among the redacted `events`: the page now shows the redaction's
    stub in its place, as every agent's copy will once it is pushed (a shared page), which a user redacting a write
    made by mistake did not expect (nc26b); the note names the version before, and the write that brings its text
    back. A version in `apart` (none went out) of a layer the agent no longer produces is taken back: no other agent's
    copy is told of it: its redaction withdraws it (withdrawn_layers), and the page shows what every other copy shows."""
    notes = []
    withdrawn = withdrawn_layers(memory, {event.layer for event in events if event.id in apart})
    for event in events:
        version = page_version(event.body) if event.kind in ("page.ingest", "page.update") else None
        if version is None:
            continue
        slug, parents = version
        if event.id in apart and event.layer in withdrawn:
            shown = memory.log.get(memory.views.shared_winner(event.layer, slug) or "")
            shown = None if shown is not None and shown.kind == "page.delete" else shown  # nc36a: "shows" a delete
            now = (f"the page shows its version at seq {shown.seq}" if shown is not None else
                   "the page has no version here now")  # nc35a: "every other copy's", of an own one not sent
            notes.append(f"{memory.page_file(event.layer, slug)}: its version at seq {event.seq} never went out, and "
                         f"is withdrawn: {now}")
            continue
        if event.layer == MIND:
            old, slug = memory.page_file(MIND, slug), _shown_under(memory, slug, event)
        elif memory.views.shared_winner(event.layer, slug) != event.id:
            slug = None
        if slug is None:
            continue
        path = memory.page_file(event.layer, slug)
        old = path if event.layer != MIND else old  # where the version before was: the page's name then
        before = memory.log.get(parents[0]) if parents else None
        layer = "" if event.layer == MIND else f" --layer {event.layer}"
        if tools:  # nc34b: the MCP redact tool said nothing of the stub
            back = (f"the show tool with path {old} and seq {before.seq} gives the version before, and str_replace of "
                    f"/memories/{path}'s whole text (the show tool with path {path} gives it) with that text brings it "
                    "back" if before is not None and before.kind != "redacted" else
                    f"str_replace of /memories/{path}'s whole text writes it anew")  # create: it exists (nc35a)
        else:
            back = (f"`mem show {old} --seq {before.seq} > page.md`, then `mem page write {slug}{layer} --file page.md`,"
                    " brings the version before back" if before is not None and before.kind != "redacted" else
                    f"`mem page write {slug}{layer} --file FILE` writes it anew")
        shared = event.layer != MIND and event.layer not in memory.local_layers()
        if shared and not memory.produces(event.layer):  # nc32b: not a write it cannot make
            back = f"this agent does not produce {event.layer} now, so a producer of it writes the page anew"
            shared = event.id not in apart  # taken back: it never goes out (one not pushed yet goes: nc33a)
        elif is_held(getattr(event.body, "frontmatter", None)):  # nc36b: the hold went with it, unsaid
            back = ("the version held the page (governance: hold); redacted, it holds nothing: the page is no longer "
                    f"held; {back}")
        notes.append(f"{path} shows `[redacted: {reason}]` now, its current version redacted"
                     + (", and so will every agent's copy once it is pushed" if shared else "") + f": {back}")
    return notes


def _shown_under(memory, slug: str, event: Event) -> str | None:
    """The wiki slug whose page shows `event`'s version now: its own, or the name renames made since gave it with no
    other write between (a rename keeps the version's text: nc35b, the renamed page showed the stub unsaid); None
    when no page shows it."""
    seq, id = event.seq, event.id
    while True:
        head = memory.views.page_head(slug)
        if head is not None and head[1] == id:
            return slug
        rename = next((e for e in memory.log.read(after=seq, kinds=["page.rename"], layers=[MIND])
                       if getattr(e.body, "old", None) == slug), None)
        if rename is None or memory.views.page_version_seqs(slug, rename.seq - 1)[-1:] != [seq]:
            return None
        slug, seq, id = rename.body.new, rename.seq, rename.id


def pending_since(memory, seqs: list[int]) -> str:
    """REDACTION_FILES's value in the transaction appending redactions at `seqs`: the seq before the first redaction
    whose files are not rewritten yet (one cut off before keeps its own, earlier)."""
    from .memory import REDACTION_FILES

    held = memory.log.state(REDACTION_FILES) or ""
    return held if held.isdigit() else str(seqs[0] - 1)


def mark_redacted_under(memory, paths, since: int) -> None:
    """Marks each hand-edited file that a redaction appended after seq `since` (made here or pulled) may have changed,
    with what was last written there and the redaction's reason: the edit was made on text that may be redacted now,
    and `mem adopt` would record it again (Memory.redacted_under refuses it until mindlog writes the file again). A
    file is marked when what the views render there now is not what mindlog last wrote and a redaction took a version
    of its page (for a page) or events of its layer (for another file; a layer no hub shares, for the agent's own)."""
    from .memory import REDACTED_UNDER

    reasons, pages = {}, {}  # layer -> reason; (layer, slug) of a version taken -> reason
    for redaction in memory.log.read(since, kinds=["redaction"]):
        reasons[redaction.layer] = redaction.body.reason
        for target in filter(None, map(memory.log.get, redaction.body.target_ids)):
            if (version := page_version(target.body)) is not None:
                pages[(target.layer, version[0])] = redaction.body.reason
    shared = set(memory.views.contract.layers) if memory.views.contract else set()
    written = memory.views.written.hashes(paths)
    head = memory.log.head()
    for path in paths:
        target = memory.views.shared_target(path) if shared else None
        if slug_of(path) is not None or (target is not None and target[1] is not None):
            reason = pages.get((MIND, slug_of(path)) if target is None else target)
        elif layer := memory.layer_of(path):
            reason = reasons.get(layer)
        else:
            reason = next((r for on, r in reasons.items() if on not in shared), None)
        if reason is None or not written.get(path):
            continue
        now = memory.show(path, head)
        if now is None or hashlib.sha256(now.encode("utf-8")).hexdigest() != written[path]:
            memory.log.set_state(REDACTED_UNDER + path, f"{written[path]} {reason}")


def config_redactions(memory, as_of: int) -> list[tuple[int, str, str]]:
    """(seq, key, reason) of each redacted `config.set` up to a seq: the values the config folds without."""
    found = []
    for row in memory.log.read_rows(upto=as_of, kinds=["config.set"]):
        if row[7] == CODEC_REDACTED:
            form = decode_body(unpack_body(row[7], bytes(row[8])))
            found.append((row[0], form.kept.get("key", ""), form.reason))
    return found
