"""Checks made before anything is appended: slugs, page documents, text that becomes a heading, and
the bodies of page and entry events wherever they were made (`body`)."""

import datetime as dt
import os
import re
import unicodedata
from pathlib import Path

from . import frontmatter
from .errors import InvalidInput, MemError, TooLarge, UnsafePath
from .ids import is_uuid
from .kinds import Body, EntryAppend, PageDelete, PageIngest, PageRename, PageUpdate, Redacted, Redaction

MAX_PAGE_BYTES = 1024 * 1024
MAX_FILE_BYTES = 8 * MAX_PAGE_BYTES
MAX_LINE_CHARS = 2000
ENTRY_TYPES = ("DECISION", "PREFERENCE", "FACT", "ENTITY", "EPISODE", "LESSON", "AGENT_IDENTITY")
DEVICE_NAMES = {"con", "prn", "aux", "nul", "conin$", "conout$", *(f"{port}{i}" for port in ("com", "lpt")
                                                                   for i in (*range(1, 10), "¹", "²", "³"))}
"""Names Windows keeps for devices, with any extension (`nul.txt` too), in any letter case: no file there has one."""
WINDOWS_REFUSES = '<>:"|?*'
"""The printable characters no Windows file name holds (`a:b.md` there names a stream of the file `a`): refused in the
paths of layers, whose files every consumer writes (an agent's own files stay in adf_files, off the disk)."""
RESERVED_SLUGS = {"log", "index", "mind", *DEVICE_NAMES}
MAX_SEGMENT_BYTES = 255
"""NAME_MAX on Linux, macOS and Windows alike: a longer file name cannot be written anywhere the files go."""
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
        name = value.split(".")[0].lower()
        why = (f"{name!r} is a name Windows keeps for a device" if name in DEVICE_NAMES else
               "mind/log.md is the wiki's change log and mind.md its index, so no page, in the wiki or a pages layer, "
               "takes the names log, index or mind")
        raise UnsafePath(f"slug {value!r} is reserved: {why}")
    if len(value) > 120:
        raise UnsafePath(f"slug {value[:20]!r}... is longer than 120 characters")
    if not _SLUG.match(value):
        raise UnsafePath(f"slug {original!r} is not safe: use lowercase letters, digits, '-', '_' and "
                         "inner dots, starting with a letter or digit")
    return value


def folded(path: str) -> str:
    """A path as macOS and Windows compare names: `Readme.md` is `readme.md`, and `café.md` written in NFD is the
    one written in NFC."""
    return unicodedata.normalize("NFC", path).casefold()


INVISIBLE = " \t\u00a0\u00ad\u180e\u200b\u200c\u200d\u2060\ufeff"
"""Characters that show nothing: content made of them alone is empty."""
_DIRECTION_CONTROL = re.compile("[\u202a-\u202e\u2066-\u2069]")
"""Embeddings, overrides and isolates (not the marks U+200E/U+200F): `rtl \u202egnp.exe` shows `rtl exe.png`."""


def segment_problem(segment: str) -> str | None:
    """Why some filesystem or reader cannot take `segment` as a file or folder name, or None: a character that is
    not printable (a newline, U+202E that shows `exe.txt` for `txt.exe`), a trailing space or dot (Windows drops
    them: two names become one), a device name, more than MAX_SEGMENT_BYTES. The rule for slugs, adf_files paths
    and the paths of shared layers."""
    if not segment.isprintable():
        return "holds a character that is not printable (a line break, a control or direction mark)"
    if segment.endswith((" ", ".")):
        return "has a name ending in a space or a dot, which Windows drops"
    if segment.split(".")[0].casefold() in DEVICE_NAMES:
        return f"uses {segment.split('.')[0]!r}, a name Windows keeps for a device"
    if len(segment.encode()) > MAX_SEGMENT_BYTES:
        return f"has a name longer than {MAX_SEGMENT_BYTES} bytes"
    return None


def path_segments(path: str, what: str) -> None:
    """Refuses a path one of whose names `segment_problem` refuses."""
    for segment in path.split("/"):
        if problem := segment_problem(segment):
            raise UnsafePath(f"{what} {path!r:.120} {problem}")


def inside_workspace(root: Path, relative: str, folders: dict | None = None) -> Path:
    """The path `relative` under `root`, refused if it or any parent is a link that leaves `root`. `folders`
    keeps, for the paths of one pass (thousands of pages in one folder), each folder's answer: the folders
    are resolved once, the file itself checked each time."""
    target = root / relative
    if os.path.isabs(relative) or ".." in Path(relative).parts:
        raise UnsafePath(f"{relative!r} is not a path inside the workspace")
    if target.is_symlink():
        raise UnsafePath(f"{relative} is a symbolic link; mindlog never writes through links")
    inside = folders.get(target.parent) if folders is not None else None
    if inside is None:
        root_real = Path(os.path.realpath(root))
        real_parent = Path(os.path.realpath(target.parent))
        inside = real_parent == root_real or root_real in real_parent.parents
        if folders is not None:
            folders[target.parent] = inside
    if not inside:
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
    if yaml_text is None and document.startswith("\ufeff"):
        raise InvalidInput("the page starts with a byte order mark (U+FEFF, as some editors save UTF-8) before its "
                           "'---': save it as UTF-8 without one")
    if yaml_text is None:
        raise InvalidInput("the page has no frontmatter: start it with '---', a line `type: ...`, and '---'")
    return frontmatter.parse(yaml_text), body


def port(value: int) -> int:
    """A TCP port, 1 to 65535: one past it is not refused by every URL parser (httpx keeps it, and the socket layer
    wraps it round to another port)."""
    if not 1 <= value <= 65535:
        raise InvalidInput(f"port {value} is out of range: give a port from 1 to 65535", field="port")
    return value


def one_line(value: str, what: str = "text") -> str:
    """Collapses newlines and runs of whitespace: for anything that becomes a heading or a list line."""
    collapsed = " ".join(value.split())
    if len(collapsed) > MAX_LINE_CHARS:
        raise TooLarge(f"{what} is longer than {MAX_LINE_CHARS} characters")
    return collapsed


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATES: set[str] = set()
"""Dates found good already: a hub checks thousands of entries a push, most of them of a few days."""


def entry_date(value: str) -> str:
    """A typed entry's date: a real calendar date written YYYY-MM-DD."""
    if type(value) is str and value in _DATES:
        return value
    if not isinstance(value, str) or not _DATE.match(value):
        raise InvalidInput(f"entry date {value!r} is not written YYYY-MM-DD (like 2026-11-29)")
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"entry date {value!r} is not a calendar date") from None
    if len(_DATES) >= 4096:
        _DATES.clear()
    _DATES.add(value)
    return value


# --- event bodies, wherever they come from ------------------------------------------------------

def body(value: Body) -> Body:
    """The checks every page and entry body passes, run by the local write side on what it makes, by
    the hub on what it is pushed, and by a consumer on what it pulls: one validator for the three.

    Raises a MemError whose `field` names the part at fault (`body.slug`, `body.frontmatter`, ...)."""
    match value:  # entries first: the kind a hub checks by the thousand
        case EntryAppend():
            if value.type not in ENTRY_TYPES:
                raise InvalidInput(f"entry type {value.type!r} is not one of {', '.join(ENTRY_TYPES)}",
                                   field="body.type")
            try:
                entry_date(value.date)
            except InvalidInput as exc:
                raise InvalidInput(str(exc), field="body.date") from None
            _line_field(value.content, "body.content")
            if not value.content.strip() or not value.content.strip(INVISIBLE):
                raise InvalidInput("an entry's content cannot be empty (or only invisible characters)",
                                   field="body.content")
            if (control := _DIRECTION_CONTROL.search(value.content)) is not None:
                raise InvalidInput(f"an entry's content holds the direction control U+{ord(control[0]):04X}, which "
                                   "makes a line of the entries file read other than it is written", field="body.content")
            if value.reverses is not None and not is_uuid(value.reverses):
                raise InvalidInput(f"reverses {value.reverses!r} is not an entry id", field="body.reverses")
        case PageIngest() | PageUpdate():
            _slug_field(value.slug, "body.slug")
            size = _frontmatter_bytes(value.frontmatter) + len(value.text.encode())
            if size > MAX_PAGE_BYTES:
                raise TooLarge(f"the page is {size} bytes; the limit is {MAX_PAGE_BYTES}", field="body.text")
            if "\x00" in value.text:
                raise InvalidInput("the page contains a NUL character", field="body.text")
            _line_field(value.note, "body.note")
            _ids_field(value.parents, "body.parents")
        case PageDelete():
            _slug_field(value.slug, "body.slug")
            _line_field(value.note, "body.note")
            _ids_field(value.parents, "body.parents")
        case PageRename():
            _slug_field(value.old, "body.old")
            _slug_field(value.new, "body.new")
            _line_field(value.note, "body.note")
            _ids_field(value.parents, "body.parents")
        case Redaction():
            if not value.target_ids:
                raise InvalidInput("a redaction names at least one event", field="body.target_ids")
            if len(value.target_ids) > MAX_REDACTION_TARGETS:
                raise TooLarge(f"a redaction names at most {MAX_REDACTION_TARGETS:,} events; send more in several",
                               field="body.target_ids")
            _ids_field(value.target_ids, "body.target_ids")
            if len(set(value.target_ids)) != len(value.target_ids):
                raise InvalidInput("a redaction names an event twice", field="body.target_ids")
            _reason_field(value.reason)
        case Redacted():
            _reason_field(value.reason)
            if not is_uuid(value.by):
                raise InvalidInput(f"by {value.by!r:.80} is not an event id (the redaction's)", field="body.by")
            _kept_fields(value.original, value.kept)
    return value


MAX_REDACTION_TARGETS = 10_000
"""The events one redaction may name: each target's stand-in copies its reason, so one push cannot ask a hub, and each
of its consumers, to write more than this many."""


def _reason_field(reason: str) -> None:
    """A redaction's reason: one line of text, not empty (it reads `[redacted: reason]` in every view, each file)."""
    _line_field(reason, "body.reason")
    if not reason.strip():
        raise InvalidInput("a redaction needs a reason", field="body.reason")


def _kept_fields(original: str, kept: dict) -> None:
    """A redacted stand-in's kept fields (eventstore.redaction.KEPT), checked as the original kind's own: a page's
    slug and parents, an entry's type, date and reversal. A producer may push an event already redacted (its own,
    redacted before it was pushed), so no other check reads them."""
    from .redaction import KEPT

    unknown = sorted(set(kept) - set(KEPT.get(original, ())) - {"message", "entries"})
    if unknown:
        raise InvalidInput(f"a redacted {original} keeps no {unknown[0]!r}", field="body.kept")
    for name in ("slug", "old", "new"):
        if name in kept:
            _slug_field(_text(kept[name], f"body.kept.{name}"), f"body.kept.{name}")
    if "parents" in kept:
        parents = kept["parents"]
        if not isinstance(parents, list) or not all(isinstance(id, str) for id in parents):
            raise InvalidInput("parents must be a list of event ids", field="body.kept.parents")
        _ids_field(parents, "body.kept.parents")
    if original == "entry.append":
        if kept.get("type") not in ENTRY_TYPES:
            raise InvalidInput(f"entry type {kept.get('type')!r:.40} is not one of {', '.join(ENTRY_TYPES)}",
                               field="body.kept.type")
        try:
            entry_date(kept.get("date"))
        except InvalidInput as exc:
            raise InvalidInput(str(exc), field="body.kept.date") from None
        reverses = kept.get("reverses")
        if reverses is not None and not is_uuid(reverses):
            raise InvalidInput(f"reverses {reverses!r:.80} is not an entry id", field="body.kept.reverses")


def _text(value, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text", field=field)
    return value


_FRONTMATTERS: dict[tuple, int] = {}
"""Frontmatters found good, by their items, and the bytes each takes in a page file: a team's page versions share
a few (`type: note`), and checking and emitting one again costs ~8 us a version (a catch-up checks 200,000)."""


def _frontmatter_bytes(value) -> int:
    """The bytes a page body's frontmatter takes in its file, once `frontmatter.check` found it good. Only a
    mapping of strings to strings is remembered: its items are then an exact key (no value of another type
    standing for it)."""
    items = tuple(value.items()) if type(value) is dict else ()
    plain = bool(items) and all(type(k) is str and type(v) is str for k, v in items)
    known = _FRONTMATTERS.get(items) if plain else None
    if known:
        return known
    try:
        frontmatter.check(value)
    except InvalidInput as exc:
        raise InvalidInput(str(exc), field="body.frontmatter") from None
    size = len(frontmatter.emit(value).encode())
    if plain:
        if len(_FRONTMATTERS) >= 4096:
            _FRONTMATTERS.clear()
        _FRONTMATTERS[items] = size
    return size


_SLUGS: set[str] = set()
"""Slugs found canonical (a page's versions name it again and again), as `_DATES` for entry dates."""


def _slug_field(value: str, field: str) -> None:
    if type(value) is str and value in _SLUGS:
        return
    try:
        canonical = slug(value)
    except MemError as exc:
        raise InvalidInput(str(exc), field=field) from None
    if canonical != value:
        raise InvalidInput(f"slug {value!r} is not in canonical form ({canonical!r})", field=field)
    if len(_SLUGS) >= 4096:
        _SLUGS.clear()
    _SLUGS.add(value)


BREAKS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Unicode's control characters (category Cc) and its line and paragraph separators (Zl, Zp)."""


def _line_field(value: str, field: str) -> None:
    """One line: no line breaks of any kind (U+2028 too), no control characters, not too long."""
    if BREAKS.search(value):
        raise InvalidInput(f"{field} must be one line of text (no line breaks or control characters)", field=field)
    if len(value) > MAX_LINE_CHARS:
        raise TooLarge(f"{field} is longer than {MAX_LINE_CHARS} characters", field=field)


def _ids_field(values: list[str], field: str) -> None:
    for value in values:
        if not is_uuid(value):
            raise InvalidInput(f"{value!r} in {field} is not an event id", field=field)
