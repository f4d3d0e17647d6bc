"""Pure renderers: the bytes of mind.md, a page, and mind/log.md from view rows.

Whatever becomes one line here (a title, a catalog hook, an Always line, a log heading) has every
run of whitespace collapsed to one space, Unicode line separators (U+2028, U+0085, ...) included,
so no value can start a line of its own in a file that something splits on them.
"""

import datetime as dt
import functools
import re
from collections.abc import Iterable, Iterator, Sequence

from eventstore import frontmatter

MIND_TITLE = "# Mind"
LOG_TITLE = "# Log"
_H1 = re.compile(r"^# +(.+?)\s*#*\s*$", re.M)
_BREAK_OR_RUN = re.compile(f"[{frontmatter.LINE_BREAKS}]|  ")


def one_line(value: str) -> str:
    if value.isprintable() and "  " not in value and value == value.strip():  # no line break is printable
        return value
    if _BREAK_OR_RUN.search(value) or value != value.strip():
        return " ".join(value.split())
    return value


def page(fm: dict, text: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return frontmatter.emit(fm) + text


def title_of(slug: str, fm: dict, text: str) -> str:
    if text.startswith("# "):
        end = text.find("\n")
        first = text[2:end] if end != -1 else text[2:]
        if "#" not in first:
            if first.isprintable() and "  " not in first and first == first.strip():  # one line already
                return first
            if "\r" not in first:
                return " ".join(first.split())
    match = _H1.search(text)
    title = match.group(1) if match else fm.get("title") or slug
    return " ".join(str(title).split())


def hook_of(fm: dict) -> str:
    description = fm.get("description")
    if description is None:
        return ""
    if description.__class__ is str and description.isprintable() and "  " not in description \
            and description == description.strip():  # one line already (one_line's first test, a rebuild's hot path)
        return description
    return one_line(str(description))


def catalog_line(slug: str, title: str, hook: str, flag: str = "") -> str:
    """`- [Title](adf-file://mind/slug.md) — hook`; a trust flag goes first in the hook: `— (deprecated) hook`."""
    title, hook = one_line(title).replace("[", "\\[").replace("]", "\\]"), one_line(hook)
    line = f"- [{title}](adf-file://mind/{slug}.md)"
    if flag:
        hook = f"({flag}) {hook}" if hook else f"({flag})"
    return f"{line} — {hook}\n" if hook else line + "\n"


def mind(always: Iterable[str], catalog: Iterable[tuple[str, str, str]]) -> str:
    """mind.md: title, `## Always` (one line each), `## Pages` (a catalog line per page, by slug)."""
    lines = [f"- {one_line(line)}\n" for line in always]
    parts = [MIND_TITLE, "\n\n## Always\n\n", *lines, "\n" if lines else "", "## Pages\n\n"]
    parts.extend(catalog_line(*row) for row in catalog)
    return "".join(parts)


def always_lines(text: str) -> list[str] | None:
    """The `## Always` lines of a mind.md (the inverse of `mind`), or None when it has no such section.

    The section runs from a `## Always` heading to the next `## ` heading; each `- ` line in it is one
    line, its text stripped; anything else in it is ignored."""
    lines, inside, found = [], False, False
    for line in text.splitlines():
        if line.startswith("## "):
            if inside:
                break
            inside = found = line.rstrip() == "## Always"
        elif inside and line.startswith("- "):
            lines.append(line[2:].strip())
    return lines if found else None


CATALOG_EDIT = "the rest of mind.md is made from the pages (a page's title and `description`): edit mind/<slug>.md"
"""Why an edit of mind.md outside its `## Always` section is not kept (`mem adopt`, a write's refusal)."""


def outside_always(text: str) -> list[str]:
    """A mind.md's lines but its `## Always` section's (the part the pages make: heading and catalog), each
    stripped of trailing spaces: a hand edit there is not one `always_lines` sees."""
    kept, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line.rstrip() == "## Always"
        if not inside and line.strip():
            kept.append(line.rstrip())
    return kept


@functools.lru_cache(maxsize=4096)
def _day(day_number: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=day_number)).isoformat()


def day(ts_ms: int) -> str:
    return _day(ts_ms // 86_400_000)


def log_entry(ts_ms: int, kind: str, title: str, note: str, title_is_one_line: bool = False) -> str:
    """A mind/log.md entry; `title_is_one_line` when the title is one already (title_of's are)."""
    heading = f"## [{_day(ts_ms // 86_400_000)}] {kind} | {title if title_is_one_line else one_line(title)}"
    return f"{heading}\n\n{note}\n" if note else heading + "\n"


def log(blocks_newest_first: Iterable[Sequence[tuple]]) -> Iterator[str]:
    """mind/log.md, streamed: the title (`log_head`), then every entry, newest first, a blank line apart.

    Entries come in blocks of log_entries rows, each row's entry its last column (the views read `(entry,)`), and
    leave as one string per block (`log_block`).
    """
    yield log_head()
    for block in blocks_newest_first:
        yield log_block([row[-1] for row in block])


def log_entries(text: str) -> list[str] | None:
    """The entries of a mind/log.md as written there (newest first, each from its `## [` line), or None when the
    text is no such file (`# Log`, a blank line, then entries)."""
    if not text.startswith(LOG_TITLE + "\n"):
        return None
    body = text[len(LOG_TITLE) + 1:]
    if not body:
        return []
    if not body.startswith("\n## ["):
        return None
    return [chunk + "\n" if not chunk.endswith("\n") else chunk
            for chunk in re.split(r"\n(?=## \[)", body[1:]) if chunk]


def log_head() -> str:
    """What mind/log.md holds before its entries (`log`)."""
    return LOG_TITLE + "\n"


def log_block(entries_newest_first: list[str]) -> str:
    """A block of mind/log.md's entries (`log`), each after a blank line. A rebuild renders each batch's block as
    its fold hands the entries over, to hash the file before the views are written (bulk.LogBlocks)."""
    return "\n" + "\n".join(entries_newest_first) if entries_newest_first else ""
