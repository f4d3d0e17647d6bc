"""A file's history: the seqs at which its text changed, read from the log and the version views."""

import difflib

import msgspec

from eventstore.envelope import decode_body
from eventstore.errors import NotFound
from eventstore.instants import format_instant
from eventstore.kinds import ADF, WIKI_KINDS, PageRename, kinds_naming
from eventstore.layers import MIND

from . import render
from .views import LOG_PATH, MIND_PATH, page_path, slug_of

FILE_KINDS = sorted(kinds_naming(ADF, "path"))


class Version(msgspec.Struct):
    path: str
    seq: int
    recorded_at: str
    agent: str
    kind: str
    deleted: bool


def _candidates(memory, path: str, upto: int):
    """The events that may have changed `path` up to seq `upto`, oldest first: a superset, narrowed by
    comparing texts after. A page's are its rows in the version table, an entries file's its entries,
    so neither reads more of the log than the file's own events."""
    views = memory.views
    shared = views.shared_target(path) if views.contract else None
    if shared is not None:
        return (memory.log.get_by_seq(seq) for seq in views.shared.entry_seqs(shared[0], upto))
    if path in (MIND_PATH, LOG_PATH):
        return memory.log.read(kinds=sorted(WIKI_KINDS), layers=[MIND], upto=upto)
    slug = slug_of(path)
    if slug is not None:
        return (memory.log.get_by_seq(seq) for seq in views.page_version_seqs(slug, upto))
    return (e for e in memory.log.read(kinds=FILE_KINDS, upto=upto) if e.body.path == path)


def history(memory, path: str, upto: int | None = None) -> list[Version]:
    """Every version of `path`, oldest first: the events after which its text differed from before.

    A page renamed into `path` brings the versions it had under its older name (like `git log --follow`)."""
    head = memory.seq_at() if upto is None else upto
    versions, last = [], None
    target = memory.views.shared_target(path) if memory.views.contract else None
    if target is not None and target[1] is not None:
        return _shared_page_history(memory, path, *target, head)
    entries = target is not None
    for event in _candidates(memory, path, head):
        if entries:  # every entry adds its line: a version each, without rendering the file each time
            versions.append(Version(path=path, seq=event.seq, recorded_at=format_instant(event.recorded_at),
                                    agent=event.agent, kind=event.kind, deleted=False))
            continue
        text = memory.show(path, event.seq)
        if text != last:
            versions.append(Version(path=path, seq=event.seq, recorded_at=format_instant(event.recorded_at),
                                    agent=event.agent, kind=event.kind, deleted=text is None))
            last = text
    first = memory.log.get_by_seq(versions[0].seq) if versions and slug_of(path) else None
    if first is not None and isinstance(first.body, PageRename) and first.body.new == slug_of(path):
        versions = history(memory, page_path(first.body.old), first.seq - 1) + versions
    return versions


def _shared_page_history(memory, path: str, layer: str, slug: str, upto: int) -> list[Version]:
    """A shared page's versions from the changes of its winner (one pass over its version rows)."""
    versions, last = [], None
    for seq, winner in memory.views.shared.winners(layer, slug, upto):
        text = None if winner[3] else render.page(*_page_of(winner[4]))
        if text != last:
            event = memory.log.get_by_seq(seq)
            versions.append(Version(path=path, seq=seq, recorded_at=format_instant(event.recorded_at),
                                    agent=event.agent, kind=event.kind, deleted=text is None))
            last = text
    return versions


def _page_of(doc: bytes) -> tuple[dict, str]:
    page = decode_body(doc)
    return page.frontmatter, page.text


def diff(memory, path: str, a: int, b: int) -> str:
    """A unified diff of `path` between seqs a and b (missing at one of them, it reads as empty; missing at
    both, it is refused: most likely a mistyped path, which would otherwise diff as nothing changed)."""
    old, new = memory.show(path, a), memory.show(path, b)
    if old is None and new is None:
        raise NotFound(f"{path} exists at neither moment (seq {a}, seq {b})")
    old, new = old or "", new or ""
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"{path}@{a}", f"{path}@{b}"))
