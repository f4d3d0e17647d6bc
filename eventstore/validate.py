"""Checks made before anything is appended: slugs, page documents, text that becomes a heading."""

import datetime as dt
import os
import re
from pathlib import Path

from . import frontmatter
from .errors import InvalidInput, TooLarge, UnsafePath

MAX_PAGE_BYTES = 1024 * 1024
MAX_LINE_CHARS = 2000
RESERVED_SLUGS = {"log", "index", "mind", "con", "prn", "aux", "nul", "com1", "com2", "com3", "com4",
                  "lpt1", "lpt2", "lpt3"}
_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]*(\.[a-z0-9_-]+)*$")


def slug(value: str) -> str:
    """A page slug: one lowercase path segment, no traversal, no absolute path, no reserved name."""
    original = value
    if value.endswith(".md"):
        value = value[:-3]
    if value.startswith("mind/"):
        value = value[5:]
    if not value:
        raise UnsafePath("the slug is empty")
    if value.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", value):
        raise UnsafePath(f"slug {original!r} is an absolute path; give a bare name like 'deploy-procedure'")
    if ".." in value.split("/") or "/" in value or "\\" in value:
        raise UnsafePath(f"slug {original!r} contains a path separator or '..'; a slug is one name, "
                         "like 'deploy-procedure'")
    if "\x00" in value:
        raise UnsafePath(f"slug {original!r} contains a NUL byte")
    if value.lower() in RESERVED_SLUGS or value.split(".")[0].lower() in RESERVED_SLUGS:
        raise UnsafePath(f"slug {value!r} is reserved (mind/{value}.md is not a page)")
    if len(value) > 120:
        raise UnsafePath(f"slug {value[:20]!r}... is longer than 120 characters")
    if not _SLUG.match(value):
        raise UnsafePath(f"slug {original!r} is not safe: use lowercase letters, digits, '-', '_' and "
                         "inner dots, starting with a letter or digit")
    return value


def inside_workspace(root: Path, relative: str) -> Path:
    """The path `relative` under `root`, refused if it or any parent is a link that leaves `root`."""
    root_real = Path(os.path.realpath(root))
    target = root / relative
    if os.path.isabs(relative) or ".." in Path(relative).parts:
        raise UnsafePath(f"{relative!r} is not a path inside the workspace")
    if target.is_symlink():
        raise UnsafePath(f"{relative} is a symbolic link; mindlog never writes through links")
    real_parent = Path(os.path.realpath(target.parent))
    if real_parent != root_real and root_real not in real_parent.parents:
        raise UnsafePath(f"{relative} resolves outside the workspace (a linked directory leads out of it)")
    return target


def text(raw: bytes, what: str, limit: int = MAX_PAGE_BYTES) -> str:
    if len(raw) > limit:
        raise TooLarge(f"{what} is {len(raw)} bytes; the limit is {limit}")
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{what} is not valid UTF-8 (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})") from None
    if "\x00" in decoded:
        raise InvalidInput(f"{what} contains a NUL character")
    return decoded.replace("\r\n", "\n")


def page_document(raw: bytes) -> tuple[dict, str]:
    """Parses a page file (frontmatter + markdown) into its checked frontmatter and body text."""
    document = text(raw, "the page")
    yaml_text, body = frontmatter.split(document)
    if yaml_text is None:
        raise InvalidInput("the page has no frontmatter: start it with '---', a line `type: ...`, and '---'")
    return frontmatter.parse(yaml_text), body


def one_line(value: str, what: str = "text") -> str:
    """Collapses newlines and runs of whitespace: for anything that becomes a heading or a list line."""
    collapsed = " ".join(value.split())
    if len(collapsed) > MAX_LINE_CHARS:
        raise TooLarge(f"{what} is longer than {MAX_LINE_CHARS} characters")
    return collapsed


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def entry_date(value: str) -> str:
    """A typed entry's date: a real calendar date written YYYY-MM-DD."""
    if not isinstance(value, str) or not _DATE.match(value):
        raise InvalidInput(f"entry date {value!r} is not written YYYY-MM-DD (like 2026-11-29)")
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"entry date {value!r} is not a calendar date") from None
    return value
