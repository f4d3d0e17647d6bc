"""Pure renderers: the bytes of mind.md, a page, and mind/log.md from view rows."""

import datetime as dt
import re
from collections.abc import Iterable, Iterator

from eventstore import frontmatter

MIND_TITLE = "# Mind"
LOG_TITLE = "# Log"
_H1 = re.compile(r"^# +(.+?)\s*#*\s*$", re.M)


def page(fm: dict, text: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return frontmatter.emit(fm) + text


def title_of(slug: str, fm: dict, text: str) -> str:
    match = _H1.search(text)
    title = match.group(1) if match else fm.get("title") or slug
    return " ".join(str(title).split())


def hook_of(fm: dict) -> str:
    description = fm.get("description")
    return " ".join(str(description).split()) if description is not None else ""


def catalog_line(slug: str, title: str, hook: str) -> str:
    title = title.replace("[", "\\[").replace("]", "\\]")
    line = f"- [{title}](adf-file://mind/{slug}.md)"
    return f"{line} — {hook}\n" if hook else line + "\n"


def mind(always: Iterable[str], catalog: Iterable[tuple[str, str, str]]) -> str:
    """mind.md: title, `## Always` (one line each), `## Pages` (a catalog line per page, by slug)."""
    lines = [f"- {line}\n" for line in always]
    parts = [MIND_TITLE, "\n\n## Always\n\n", *lines, "\n" if lines else "", "## Pages\n\n"]
    parts.extend(catalog_line(slug, title, hook) for slug, title, hook in catalog)
    return "".join(parts)


def day(ts_ms: int) -> str:
    return dt.datetime.fromtimestamp(ts_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d")


def log_entry(ts_ms: int, kind: str, title: str, note: str) -> str:
    heading = f"## [{day(ts_ms)}] {kind} | {' '.join(title.split())}"
    return f"{heading}\n\n{note}\n" if note else heading + "\n"


def log(entries_newest_first: Iterable[str]) -> Iterator[str]:
    """mind/log.md, streamed: the title, then every entry, newest first, a blank line apart."""
    yield LOG_TITLE + "\n"
    for entry in entries_newest_first:
        yield "\n"
        yield entry
