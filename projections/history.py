"""A file's history: the seqs at which its text changed, read from the log and the version views."""

import difflib

import msgspec

from eventstore.instants import format_instant
from eventstore.kinds import ADF, WIKI, WIKI_KINDS, PageRename, kinds_naming
from eventstore.layers import MIND

from .views import LOG_PATH, MIND_PATH, page_path, slug_of

PAGE_KINDS = sorted(kinds_naming(WIKI, "slug", "old"))
FILE_KINDS = sorted(kinds_naming(ADF, "path"))


class Version(msgspec.Struct):
    path: str
    seq: int
    recorded_at: str
    agent: str
    kind: str
    deleted: bool


def _candidates(memory, path: str):
    """The events that may have changed `path`: a superset, narrowed by comparing texts after."""
    views = memory.views
    shared = views.shared_target(path) if views.contract else None
    if shared is not None:
        return memory.log.read(layers=[shared[0]])
    if path in (MIND_PATH, LOG_PATH):
        return memory.log.read(kinds=sorted(WIKI_KINDS), layers=[MIND])
    slug = slug_of(path)
    if slug is not None:
        return (e for e in memory.log.read(kinds=PAGE_KINDS, layers=[MIND])
                if slug in (getattr(e.body, "slug", None), getattr(e.body, "old", None), getattr(e.body, "new", None)))
    return (e for e in memory.log.read(kinds=FILE_KINDS) if e.body.path == path)


def history(memory, path: str, upto: int | None = None) -> list[Version]:
    """Every version of `path`, oldest first: the events after which its text differed from before.

    A page renamed into `path` brings the versions it had under its older name (like `git log --follow`)."""
    head = memory.seq_at() if upto is None else upto
    versions, last = [], None
    for event in _candidates(memory, path):
        if event.seq > head:
            break
        text = memory.show(path, event.seq)
        if text != last:
            versions.append(Version(path=path, seq=event.seq, recorded_at=format_instant(event.recorded_at),
                                    agent=event.agent, kind=event.kind, deleted=text is None))
            last = text
    first = memory.log.get_by_seq(versions[0].seq) if versions and slug_of(path) else None
    if first is not None and isinstance(first.body, PageRename) and first.body.new == slug_of(path):
        versions = history(memory, page_path(first.body.old), first.seq - 1) + versions
    return versions


def diff(memory, path: str, a: int, b: int) -> str:
    """A unified diff of `path` between seqs a and b (a missing file reads as empty)."""
    old, new = memory.show(path, a) or "", memory.show(path, b) or ""
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"{path}@{a}", f"{path}@{b}"))
