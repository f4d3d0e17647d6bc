"""Every event body kind, as msgspec Structs in one tagged union (the tag field is `kind`).

These Structs are the single schema of an event's payload: storage, digests and the wire
all encode exactly these.
"""

from typing import Annotated, Any, ClassVar, Union

import msgspec

WIKI = "wiki"
ADF = "adf"
PAGES = "pages"
ENTRIES = "entries"


class Body(msgspec.Struct, tag_field="kind", forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """`groups` names the folds that take this kind: `wiki` (the mind layer), `adf` (loop and agent
    layers), and the shared-layer formats `pages` and `entries` (a contract layer of that format
    takes exactly those kinds). Every kind group below is computed from these, never listed.

    `allowed_secrets` names what the secret scanner found in a write made with --allow-secret."""

    groups: ClassVar[frozenset[str]] = frozenset()
    allowed_secrets: list[str] = []


# --- the mind wiki -------------------------------------------------------------------------

class PageIngest(Body, tag="page.ingest"):
    """A new page. `frontmatter` is the parsed YAML mapping; `text` is the markdown after it.

    `quiet` ingests (from an imported file whose own log.md is restored) add no log entry.
    """

    groups = frozenset({WIKI, PAGES})

    slug: str
    frontmatter: dict[str, Any]
    text: str
    note: str = ""
    parents: list[str] = []
    quiet: bool = False


class PageUpdate(Body, tag="page.update"):
    """A new version of a page; `parents` are the ids of the versions it supersedes."""

    groups = frozenset({WIKI, PAGES})

    slug: str
    frontmatter: dict[str, Any]
    text: str
    note: str = ""
    parents: list[str] = []


class PageDelete(Body, tag="page.delete"):
    groups = frozenset({WIKI, PAGES})

    slug: str
    note: str = ""
    parents: list[str] = []


class PageRename(Body, tag="page.rename"):
    groups = frozenset({WIKI})

    old: str
    new: str
    note: str = ""
    parents: list[str] = []


class PageRelease(Body, tag="page.release"):
    """Lifts a page's `governance: hold` so that it can change; a version that keeps the hold holds again."""

    groups = frozenset({WIKI})
    slug: str
    note: str = ""


class AlwaysAdd(Body, tag="always.add"):
    """Adds `line` to `## Always`: at `position` (1 its first line; past the last, at the end), or at the end."""

    groups = frozenset({WIKI})

    line: str
    position: int | None = None


class AlwaysRemove(Body, tag="always.remove"):
    """Removes the `## Always` line at `position` (1 the first) when it is `line`, else the first line equal to `line`
    (the text: what was removed whatever moved since). A position is given only where the text alone would take
    another copy of a line given twice (`mem always remove 3` of a, b, a took the first)."""

    groups = frozenset({WIKI})

    line: str
    position: int | None = None


class LogRestore(Body, tag="log.restore"):
    """Entries of an imported mind/log.md, verbatim and newest first, placed below later entries."""

    groups = frozenset({WIKI})

    entries: list[str]

    PART_BYTES: ClassVar[int] = 2 * 1024 * 1024
    """The most text one restore holds (a quarter of an event's limit, for the encoding's escapes)."""

    @classmethod
    def parts(cls, entries: list[str]) -> list["LogRestore"]:
        """The entries (newest first) as restores of at most PART_BYTES each, oldest first: appended in this order,
        they render as the one restore would (a later restore's entries above an earlier's), and a log too long for
        one event is kept whole (nc25a). An entry alone over the limit is a restore of its own, refused as too large."""
        parts: list[list[str]] = []
        part: list[str] = []
        size = 0
        for entry in reversed(entries):
            if part and size + len(entry.encode()) > cls.PART_BYTES:
                parts.append(part)
                part, size = [], 0
            part.append(entry)
            size += len(entry.encode()) + 1
        return [cls(entries=part[::-1]) for part in [*parts, part] if part]


class Lint(Body, tag="lint"):
    groups = frozenset({WIKI})

    summary: str
    findings: list[str] = []


# --- the loop, files, messages, config (ADF) ------------------------------------------------

class LoopAppend(Body, tag="loop.append"):
    """A loop message; its loop seq is the event's seq. `ord` comes only from imported files."""

    groups = frozenset({ADF})

    role: str
    content: list[Any]
    loop: str = "main"
    model: str | None = None
    tokens: dict[str, Any] | None = None
    created_at: int | None = None
    ord: int | None = None


class LoopCompact(Body, tag="loop.compact"):
    groups = frozenset({ADF})

    summary: str
    preserve: int = 0
    loop: str = "main"


class LoopClear(Body, tag="loop.clear"):
    groups = frozenset({ADF})

    start: int | None = None
    end: int | None = None
    loop: str = "main"


class InboxMessage(Body, tag="inbox.message"):
    """A received message (ADF's ALF shape). `imported` ones were audited in their own file already."""

    groups = frozenset({ADF})

    message: dict[str, Any]
    imported: bool = False


class OutboxMessage(Body, tag="outbox.message"):
    groups = frozenset({ADF})

    message: dict[str, Any]
    imported: bool = False


class FileWrite(Body, tag="file.write"):
    """A file in adf_files; `created_at`/`updated_at` (ISO) come only from imported files."""

    groups = frozenset({ADF})

    path: str
    content: bytes
    mime_type: str | None = None
    protection: str = "none"
    created_at: str | None = None
    updated_at: str | None = None


class FileDelete(Body, tag="file.delete"):
    groups = frozenset({ADF})

    path: str


_AUDIT_SWITCHES = ("loop", "inbox", "outbox", "files")
CONFIG_KEYS: tuple[str, ...] = (*(f"audit.{s}" for s in _AUDIT_SWITCHES), *(f"context.audit.{s}" for s in _AUDIT_SWITCHES),
                                "lint.mind_max_lines", "lint.mind_max_bytes")
"""The config keys mindlog reads (`context.audit.*` as ADF files have them); `layers.<name>` declares a local layer."""
CONFIG_KEY_PREFIXES = ("layers.",)


def config_key_known(key: str) -> bool:
    """A key `mem config set` may set: one mindlog reads, a group of them (`lint`), or a local layer's."""
    return (key in CONFIG_KEYS or any(k.startswith(key + ".") for k in CONFIG_KEYS)
            or any(key.startswith(prefix) for prefix in CONFIG_KEY_PREFIXES))


class ConfigSet(Body, tag="config.set"):
    """Sets one dotted key of the agent config (`audit.files`); the empty key replaces it whole.

    `updated_at` (ISO) comes only from imported files. `redacted` (the reason) is set only in a redacted
    event's stand-in (see eventstore.redaction): the config folds as it was without the event."""

    groups = frozenset({ADF})

    key: str
    value: Any
    updated_at: str | None = None
    redacted: str | None = None


class ImportGap(Body, tag="import.gap"):
    """Stands for seqs an imported file's own counter had used, so imported loop rows keep their seqs.

    The event takes the seq after `skipped` unused ones (the log numbers it so): one event for a
    gap of any size. With `skipped` 0 it holds just its own seq."""

    source: str
    skipped: Annotated[int, msgspec.Meta(ge=0, le=2 ** 53)] = 0


class AuditImport(Body, tag="audit.import"):
    """An audit row carried over verbatim from an imported ADF file."""

    groups = frozenset({ADF})

    source: str
    entry_count: int
    size_bytes: int
    data: bytes
    created_at: int
    start_seq: int | None = None
    end_seq: int | None = None
    ref: str | None = None


# --- shared layers ---------------------------------------------------------------------------

class EntryAppend(Body, tag="entry.append"):
    """A typed entry `[TYPE] YYYY-MM-DD: content` in an `entries` layer."""

    groups = frozenset({ENTRIES})

    type: str
    date: str
    content: str
    reverses: str | None = None


class ContractChange(Body, tag="contract.change"):
    """A contract change. On a hub (layer `_contract`): its contract from then on. In an agent's own log
    (layer `agent`): the hub's contract this agent took, recorded when it moved, dropped or added a layer's
    file, with the one it replaced (`previous`), so its files are placed as of any moment (projections.placements)."""

    layers: dict[str, Any]
    previous: dict[str, Any] | None = None


class Redaction(Body, tag="redaction"):
    """Removes the bodies of the named events of its own layer from the log, in the transaction that
    appends it; the events themselves (envelope, digest, place in the chain) stay."""

    target_ids: list[str]
    reason: str
    withdraws: bool = False
    """Its targets are this agent's own events of a shared layer it no longer produces, which never went out and now
    never will (taken back): the page versions among them count as never having come from this redaction on
    (projections.shared's void), so this copy shows what every other agent's does. It stays with its agent: a hub
    refuses it."""


class Redacted(Body, tag="redacted"):
    """What is left of a redacted event's body (see eventstore.redaction): never written, only stored
    and sent in place of a body that a redaction removed."""

    original: str
    body_hash: str
    reason: str
    by: str
    kept: dict[str, Any] = {}


BodyUnion = Union[
    PageIngest, PageUpdate, PageDelete, PageRename, PageRelease, AlwaysAdd, AlwaysRemove, LogRestore, Lint,
    LoopAppend, LoopCompact, LoopClear, InboxMessage, OutboxMessage, FileWrite, FileDelete,
    ConfigSet, ImportGap, AuditImport, EntryAppend, ContractChange, Redaction, Redacted,
]

KINDS: dict[str, type[Body]] = {cls.__struct_config__.tag: cls for cls in BodyUnion.__args__}


def kinds_of(group: str) -> frozenset[str]:
    """The tags of every kind in `group`, read off the union."""
    return frozenset(tag for tag, cls in KINDS.items() if group in cls.groups)


def kinds_naming(group: str, *fields: str) -> frozenset[str]:
    """The tags of the kinds in `group` whose body has one of `fields` (a page's `slug`, a file's `path`)."""
    return frozenset(tag for tag in kinds_of(group) if set(fields) & set(KINDS[tag].__struct_fields__))


WIKI_KINDS = kinds_of(WIKI)
ADF_KINDS = kinds_of(ADF)
SHARED_PAGE_KINDS = kinds_of(PAGES)
ENTRY_KINDS = kinds_of(ENTRIES)
SHARED_KINDS = SHARED_PAGE_KINDS | ENTRY_KINDS
