"""Shared pages in conflict, shown in full: each head's text, author and time."""

import msgspec

from eventstore.envelope import decode_body
from eventstore.instants import format_instant

from . import render


class HeadText(msgspec.Struct):
    id: str
    agent: str
    at: str
    deleted: bool
    text: str | None


class ConflictText(msgspec.Struct):
    layer: str
    slug: str
    winner: str
    heads: list[HeadText]


def conflicts_shown(memory, as_of: int | None = None) -> list[ConflictText]:
    """The conflicts open as of a seq (None: now), each head's text as that head wrote it."""
    shared = memory.views.shared
    shown = []
    for conflict in memory.conflicts() if as_of is None else shared.conflicts(as_of):
        heads = []
        for head in conflict.heads:  # each head's body alone: a page may have hundreds of versions
            doc = shared.doc(conflict.layer, conflict.slug, head.id)
            page = decode_body(doc) if doc is not None else None
            event = memory.log.get(head.id)
            heads.append(HeadText(id=head.id, agent=head.agent, at=format_instant(event.ts), deleted=head.deleted,
                                  text=render.page(page.frontmatter, page.text) if page else None))
        shown.append(ConflictText(layer=conflict.layer, slug=conflict.slug, winner=conflict.winner, heads=heads))
    return shown
