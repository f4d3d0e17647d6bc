"""The write side: turns what a user or agent asks for into checked events, or refuses.

Nothing here touches the log: every check happens before an event exists, so a refusal
leaves the log exactly as it was.
"""

from typing import Protocol

from . import validate
from .envelope import Event, new_event
from .errors import InvalidInput, NotFound
from .kinds import AlwaysAdd, AlwaysRemove, Lint, PageDelete, PageIngest, PageRename, PageUpdate

MIND = "mind"


class WikiState(Protocol):
    """What the write side needs to know of the current wiki."""

    def heads(self, slug: str) -> list[str]: ...

    def always(self) -> list[str]: ...


class Writer:
    def __init__(self, agent: str, state: WikiState):
        self.agent = agent
        self.state = state

    def _event(self, body) -> Event:
        return new_event(body, agent=self.agent, layer=MIND)

    def page_write(self, slug: str, document: bytes, note: str = "") -> Event:
        slug = validate.slug(slug)
        frontmatter, text = validate.page_document(document)
        note = validate.one_line(note, "the note")
        heads = self.state.heads(slug)
        if heads:
            return self._event(PageUpdate(slug=slug, frontmatter=frontmatter, text=text, note=note, parents=heads))
        return self._event(PageIngest(slug=slug, frontmatter=frontmatter, text=text, note=note))

    def page_delete(self, slug: str, note: str = "") -> Event:
        slug = validate.slug(slug)
        heads = self.state.heads(slug)
        if not heads:
            raise NotFound(f"there is no page {slug!r} to delete")
        return self._event(PageDelete(slug=slug, note=validate.one_line(note, "the note"), parents=heads))

    def page_rename(self, old: str, new: str, note: str = "") -> Event:
        old, new = validate.slug(old), validate.slug(new)
        heads = self.state.heads(old)
        if not heads:
            raise NotFound(f"there is no page {old!r} to rename")
        if old == new:
            raise InvalidInput("the old and new slugs are the same")
        if self.state.heads(new):
            raise InvalidInput(f"a page {new!r} already exists; delete it first or pick another name")
        return self._event(PageRename(old=old, new=new, note=validate.one_line(note, "the note"), parents=heads))

    def always_add(self, line: str) -> Event:
        line = validate.one_line(line, "the Always line")
        if not line:
            raise InvalidInput("an Always line cannot be empty")
        return self._event(AlwaysAdd(line=line))

    def always_remove(self, number: int) -> Event:
        lines = self.state.always()
        if not 1 <= number <= len(lines):
            raise NotFound(f"there is no Always line {number}; `mem always list` shows {len(lines)} lines")
        return self._event(AlwaysRemove(line=lines[number - 1]))

    def lint(self, summary: str, findings: list[str]) -> Event:
        return self._event(Lint(summary=validate.one_line(summary, "the lint summary"),
                                findings=[validate.one_line(f, "a finding") for f in findings]))
