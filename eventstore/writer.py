"""The write side: turns what a user or agent asks for into checked events, or refuses.

Nothing here touches the log: every check happens before an event exists, so a refusal
leaves the log exactly as it was.
"""

import datetime as dt
import mimetypes
import re
from typing import Protocol

import msgspec

from . import governance, validate
from .envelope import Event, new_event
from .errors import Held, InvalidInput, NotFound, TooLarge, UnsafePath, for_each
from .ids import now_ms, uuid7
from .instants import LAST_MS
from .kinds import (CONFIG_KEY_PREFIXES, CONFIG_KEYS, AlwaysAdd, AlwaysRemove, ConfigSet, ContractChange, EntryAppend,
                    FileDelete, FileWrite, InboxMessage, Lint, LogRestore, LoopAppend, LoopClear, LoopCompact,
                    OutboxMessage, PageDelete, PageIngest, PageRelease, PageRename, PageUpdate, config_key_known)
from .layers import AGENT, LOOP, MIND


EMPTY_ALWAYS = "an Always line cannot be empty"


class WikiState(Protocol):
    """What the write side needs to know of the current wiki."""

    def heads(self, slug: str) -> list[str]: ...

    def always(self) -> list[str]: ...


class Writer:
    def __init__(self, agent: str, state: WikiState):
        self.agent = agent
        self.state = state

    def _event(self, body) -> Event:
        return new_event(validate.body(body), agent=self.agent, layer=MIND)

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

    def page_release(self, slug: str, note: str) -> Event:
        slug = validate.slug(slug)
        if not self.state.heads(slug):
            raise NotFound(f"there is no page {slug!r} to release")
        note = validate.one_line(note, "the note")
        if not note:
            raise InvalidInput(**for_each("a release needs a note: why the held page may change now (", "--note)",
                                          "the note argument)"))
        return self._event(PageRelease(slug=slug, note=note))

    def always_add(self, line: str, position: int | None = None) -> Event:
        line = validate.one_line(line, "the Always line")
        if not line:
            raise InvalidInput(EMPTY_ALWAYS)
        if position is not None:  # the end is no place of its own: recorded as without one
            count = len(self.state.always())
            if not 1 <= position <= count + 1:
                raise InvalidInput(f"there is no place {position} in `## Always`: give 1 to {count + 1} "
                                   f"(`mem always list` shows {count} lines)", field="position")
            position = None if position == count + 1 else position
        return self._event(AlwaysAdd(line=line, position=position))

    def always_remove(self, number: int) -> Event:
        lines = self.state.always()
        if not 1 <= number <= len(lines):
            raise NotFound(f"there is no Always line {number}; `mem always list` shows {len(lines)} lines")
        line = lines[number - 1]
        return self._event(AlwaysRemove(line=line, position=None if lines.index(line) == number - 1 else number))

    def log_restores(self, entries: list[str]) -> list[Event]:
        """The entries of a mind/log.md from before mindlog (an import's, an adopted wiki's), kept as they were, in
        as many events as their size needs (LogRestore.parts)."""
        return [self._event(part) for part in LogRestore.parts(entries)]

    def lint(self, summary: str, findings: list[str]) -> Event:
        return self._event(Lint(summary=validate.one_line(summary, "the lint summary"),
                                findings=[validate.one_line(f, "a finding") for f in findings]))


ROLES = ("user", "assistant")
PROTECTIONS = ("none", "read_only", "no_delete")
_LOOP_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MESSAGE_TIMES = {"inbox": ("received_at", "sent_at"), "outbox": ("created_at", "delivered_at")}
"""The times an ADF message carries (adf_inbox's, adf_outbox's), in milliseconds since 1970: its own time is the first
found."""


def check_message_times(box: str, message: dict, where: str = "the message") -> None:
    """Refuses a message time that is no whole number of milliseconds from 1970 to 9999 (`mem message`, an import)."""
    for key in MESSAGE_TIMES[box]:
        value = message.get(key)
        if value is not None and (type(value) is not int or not 0 <= value <= LAST_MS):
            shown = msgspec.json.encode(value).decode() if isinstance(value, (bool, int, float, str)) else repr(value)
            raise InvalidInput(f"{where}'s {key} must be milliseconds since 1970 (a whole number, up to the year 9999), "
                               f"not {shown[:60]}", field=key)


class FileState(Protocol):
    def file(self, path: str): ...

    def file_nesting(self, path: str) -> str | None:
        """A file there is whose path is a folder of `path`, or under `path` as a folder, or None."""

    def file_twin(self, path: str) -> str | None:
        """A file there is whose path is `path` but for letter case or Unicode normalization, or None."""


def loop_name(name: str) -> str:
    if not _LOOP_NAME.match(name or ""):
        raise InvalidInput(f"loop name {name!r} must be lowercase letters, digits, '-' or '_' (like 'main')")
    return name


def file_path(path: str) -> str:
    """A path for adf_files: relative, no traversal, and not one of the wiki's own files."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path or re.match(r"^[A-Za-z]:", path):
        drive = " (it begins as a Windows drive does)" if re.match(r"^[A-Za-z]:", path) else ""
        raise UnsafePath(f"file path {path!r} must be a relative path like 'notes/today.md'{drive}")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafePath(f"file path {path!r} contains an empty, '.' or '..' segment")
    root = parts[0].casefold()  # in any letter case: on macOS and Windows `Mind.md` is mind.md, `.MEM/` is .mem/
    if root in ("mind.md", "mind"):
        raise UnsafePath(**for_each(f"{path} belongs to the mind wiki: ",
                                    "a page is written, deleted or renamed with `mem page write|delete|rename`, "
                                    "mind.md's Always lines with `mem always add|remove`",
                                    "a page is /memories/mind/<slug>.md, created, edited, deleted or renamed as a "
                                    "page, and only the `## Always` lines of /memories/mind.md are edited"))
    if root == ".mem":
        raise UnsafePath(f"{path} belongs to mindlog itself (.mem/ holds the log and the views)")
    if ".git" in (part.casefold() for part in parts):
        raise UnsafePath(f"{path} is inside a .git directory, git's own (its hooks run as programs): an agent's "
                         "files stay out of it")
    if len(path) > 512:
        raise UnsafePath("file path is longer than 512 characters")
    validate.path_segments(path, "file path")
    return path


class AdfWriter:
    """The write side of the loop, files, messages and config."""

    def __init__(self, agent: str, files: FileState):
        self.agent = agent
        self.files = files

    def _event(self, body, layer: str) -> Event:
        return new_event(body, agent=self.agent, layer=layer)

    def loop_append(self, role: str, content: list, loop: str = "main", model: str | None = None,
                    tokens: dict | None = None) -> Event:
        if role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        if not isinstance(content, list) or not content or not all(
                isinstance(block, dict) and isinstance(block.get("type"), str) for block in content):
            raise InvalidInput("content must be a non-empty JSON array of blocks, each an object with a `type`")
        if tokens is not None and not isinstance(tokens, dict):
            raise InvalidInput("tokens must be a JSON object, like {\"input\": 120, \"output\": 40}")
        return self._event(LoopAppend(role=role, content=content, loop=loop_name(loop), model=model or None,
                                      tokens=tokens), LOOP)

    def loop_compact(self, summary: str, preserve: int = 0, loop: str = "main") -> Event:
        if not summary.strip():
            raise InvalidInput("a compaction needs a non-empty summary")
        if preserve < 0:
            raise InvalidInput("--preserve must be zero or more")
        return self._event(LoopCompact(summary=summary, preserve=preserve, loop=loop_name(loop)), LOOP)

    def loop_clear(self, start: int | None = None, end: int | None = None, loop: str = "main") -> Event:
        return self._event(LoopClear(start=start, end=end, loop=loop_name(loop)), LOOP)

    def file_write(self, path: str, content: bytes, mime_type: str | None = None, protection: str = "none") -> Event:
        path = file_path(path)
        if protection not in PROTECTIONS:
            raise InvalidInput(f"protection must be one of {', '.join(PROTECTIONS)}")
        if len(content) > validate.MAX_FILE_BYTES:
            raise TooLarge(f"the file is {len(content)} bytes; the limit is {validate.MAX_FILE_BYTES}")
        current = self.files.file(path)
        if current is not None and current[4] == "read_only":
            raise InvalidInput(f"{path} is read_only")
        nesting = self.files.file_nesting(path) if current is None else None
        if nesting is not None:  # no filesystem holds both: a checkout or an export could not write them
            raise UnsafePath(f"{path} cannot be written: {nesting} is a file, and {path} would make it a folder too"
                             if path.startswith(f"{nesting}/") else
                             f"{path} cannot be written: it is a folder, holding {nesting}")
        twin = self.files.file_twin(path) if current is None else None
        if twin is not None:  # one file on macOS and Windows, and two a reader cannot tell apart anywhere
            if twin.casefold() != path.casefold():  # apart from by normalization, they print alike: say how
                path, twin = ascii(path), ascii(twin)
            raise UnsafePath(f"{path} cannot be written: {twin} is there, the same name but for letter case or "
                             "Unicode normalization (write to it, or delete it first)")
        return self._event(FileWrite(path=path, content=content, mime_type=mime_type or _guess_mime(path),
                                     protection=protection), AGENT)

    def file_delete(self, path: str) -> Event:
        path = file_path(path)
        current = self.files.file(path)
        if current is None:
            raise NotFound(f"there is no file {path}")
        if current[4] != "none":
            raise InvalidInput(f"{path} is protected ({current[4]}) and cannot be deleted or renamed")
        return self._event(FileDelete(path=path), AGENT)

    def message(self, box: str, message: dict) -> Event:
        """An inbox or outbox message: a JSON object with `from` and `content` (and `to`, sent), its times (MESSAGE_TIMES)
        in milliseconds since 1970 where it gives them."""
        if not isinstance(message, dict):
            raise InvalidInput("a message must be a JSON object")
        if box == "outbox" and "from" not in message:  # this agent's own message: it is from this agent
            message = {**message, "from": self.agent}
        required = ("from", "content") + (("to",) if box == "outbox" else ())
        missing = [key for key in required if not isinstance(message.get(key), str) or not message[key]]
        if missing:
            raise InvalidInput(f"the message needs {', '.join(repr(k) for k in missing)}: "
                               + ("a non-empty string" if len(missing) == 1 else "each a non-empty string"))
        check_message_times(box, message)
        ts = now_ms()
        id = uuid7(ts)
        message = dict(message)
        message.setdefault("id", id)
        message.setdefault("received_at" if box == "inbox" else "created_at", ts)
        message.setdefault("status", "unread" if box == "inbox" else "pending")
        body = InboxMessage(message=message) if box == "inbox" else OutboxMessage(message=message)
        return new_event(body, agent=self.agent, layer=AGENT, ts=ts, id=id)

    def contract_taken(self, contract, previous) -> Event:
        """This agent took the hub's `contract` in place of `previous` (both eventstore.layers.Contract)."""
        return self._event(ContractChange(layers=msgspec.to_builtins(contract.layers),
                                          previous=msgspec.to_builtins(previous.layers)), AGENT)

    def config_set(self, key: str, value) -> Event:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", key):
            raise InvalidInput(f"config key {key!r} must be a dotted name like audit.files")
        if not config_key_known(key):
            raise InvalidInput(f"there is no config key {key!r} (keys: {', '.join(CONFIG_KEYS)}, layers.<name>)")
        for name, leaf in _config_leaves(key, value).items():
            if name.startswith("layers.") and "." in name[len("layers."):]:
                raise InvalidInput(f"there is no config key {name!r}: a local layer is set whole, as layers.<name>")
            if name.split(".")[-2:-1] == ["audit"] and not isinstance(leaf, bool):
                raise InvalidInput(f"{name} is a switch: give true or false, not {leaf!r:.80}")
            if name.startswith("lint.") and (isinstance(leaf, bool) or not isinstance(leaf, int) or leaf < 1):
                raise InvalidInput(f"{name} is a budget: give a whole number above 0, not {leaf!r}")
        return self._event(ConfigSet(key=key, value=value), AGENT)


def _config_leaves(key: str, value) -> dict:
    """The keys mindlog reads that setting `key` to `value` sets, with their values: a group of keys
    (`audit`, `lint`) takes an object of its own keys, never a plain value that would replace them all."""
    if key in CONFIG_KEYS or key.startswith(CONFIG_KEY_PREFIXES):
        return {key: value}
    children = sorted({k[len(key) + 1:].split(".")[0] for k in CONFIG_KEYS if k.startswith(key + ".")})
    if not isinstance(value, dict):
        raise InvalidInput(f"{key} is a group of keys ({', '.join(children)}): give a JSON object of them, "
                           f"like {{\"{children[0]}\": ...}}, or set {key}.{children[0]}")
    leaves = {}
    for name, leaf in value.items():
        if name not in children:
            raise InvalidInput(f"there is no config key {key}.{name} (the keys of {key}: {', '.join(children)})")
        leaves.update(_config_leaves(f"{key}.{name}", leaf))
    return leaves


def _guess_mime(path: str) -> str:
    if path.endswith(".md"):
        return "text/markdown"
    return mimetypes.guess_type(path)[0] or "application/octet-stream"


_ENTRY = re.compile(r"^\[([A-Z_]+)\]\s*(?:(\d+-\d+(?:-\d+)?)\s*:\s*)?(.*)$", re.S)


class SharedState(Protocol):
    def shared_heads(self, layer: str, slug: str) -> list[str]: ...

    def shared_winner(self, layer: str, slug: str) -> str | None: ...

    def shared_deleted(self, layer: str, slug: str) -> bool: ...

    def shared_deleted_by_every_head(self, layer: str, slug: str) -> bool: ...

    def shared_document(self, layer: str, slug: str) -> tuple[dict, str] | None: ...

    def entry_ids_starting(self, layer: str, prefix: str) -> list[str]:
        """The ids of the layer's entries that start with `prefix`, at most two (one says it is unique)."""
        ...


def renamed_from(old: str) -> str:
    """The note of a shared page's new name in a rename (SharedWriter.page_rename), by which `mem history` follows it."""
    return f"renamed from {old}"


def entry_id(ref: str, found: list[str], where: str, purpose: str) -> str:
    """The one entry id of `found` (the ids starting with `ref`, at most two read): an entries file shows
    ids cut to 18 characters, and that much names an entry as well as its whole id. An empty `ref` names none
    (every id starts with it: it named a layer's only entry)."""
    if not ref.strip():
        raise InvalidInput(f"give the id of the entry {purpose or 'meant'} (or its start, as the layer's file shows it), "
                           "not an empty text")
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotFound(f"there is no entry {ref} {where} {purpose}")
    raise InvalidInput(f"more than one entry {where} has an id starting {ref}: give more of it "
                       "(`mem entry list LAYER` shows them whole)")


class SharedWriter:
    """The write side of shared layers: typed entries and pages whose versions form a DAG."""

    def __init__(self, agent: str, state: SharedState):
        self.agent = agent
        self.state = state

    def entry(self, layer: str, text: str, reverses: str | None = None) -> Event:
        """`[TYPE] content` or `[TYPE] YYYY-MM-DD: content`; the date defaults to today (UTC)."""
        match = _ENTRY.match(text.strip())
        if not match:
            raise InvalidInput("an entry reads `[TYPE] content` or `[TYPE] YYYY-MM-DD: content`, "
                               f"TYPE one of {', '.join(validate.ENTRY_TYPES)}")
        kind, date, content = match.groups()
        if not content:
            raise InvalidInput(f"the entry has no content after its {'date' if date else 'type'}: write "
                               f"`[{kind}] {date or 'YYYY-MM-DD'}: content`")
        if validate.BREAKS.search(content):
            raise InvalidInput("the entry holds a line break or a control character (a tab, say), and an entry is one "
                               "line of text: join its lines, or add one entry for each")
        if len(content) > validate.MAX_LINE_CHARS:  # kept as written: a tab or two spaces in it too
            raise TooLarge(f"the entry is longer than {validate.MAX_LINE_CHARS} characters")
        if reverses is not None:
            reverses = entry_id(reverses, self.state.entry_ids_starting(layer, reverses), f"in layer {layer}",
                                "to reverse")
        ts = now_ms()
        date = validate.entry_date(date) if date else dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).strftime(
            "%Y-%m-%d")
        body = validate.body(EntryAppend(type=kind, date=date, content=content, reverses=reverses))
        return new_event(body, agent=self.agent, layer=layer, ts=ts)

    def page_write(self, layer: str, slug: str, document: bytes, note: str = "",
                   parents: list[str] | None = None) -> Event:
        """A new version of a shared page. Its parent is the winner, unless `parents` says which
        version the author really started from (a file edited by hand: the version it showed)."""
        slug = validate.slug(slug)
        frontmatter, text = validate.page_document(document)
        if parents is None:  # a page deleted by several agents at once is written anew over every deletion (nc29b)
            every = self.state.shared_deleted_by_every_head(layer, slug)
            winner = self.state.shared_winner(layer, slug)
            parents = self.state.shared_heads(layer, slug) if every else [winner] if winner else []
        note = validate.one_line(note, "the note")
        if not parents:
            body = PageIngest(slug=slug, frontmatter=frontmatter, text=text, note=note)
        else:
            body = PageUpdate(slug=slug, frontmatter=frontmatter, text=text, note=note, parents=parents)
        return new_event(validate.body(body), agent=self.agent, layer=layer)

    def resolve(self, layer: str, slug: str, document: bytes, path: str | None = None) -> Event:
        """An update of every head of a shared page; `path` its file, which an MCP client is told to edit when the
        page has one head."""
        slug = validate.slug(slug)
        frontmatter, text = validate.page_document(document)
        heads = self.state.shared_heads(layer, slug)
        if not heads:
            raise NotFound(f"there is no page {slug} in layer {layer}")
        if len(heads) == 1:  # a second resolve, or none needed: it would only write another version
            raise InvalidInput(f"{layer}/{slug} has no conflict (one head): write it with `mem page write {slug} "
                               f"--layer {layer}`", for_tools=f"{layer}/{slug} has no conflict (one head): change it "
                               f"with str_replace or create on /memories/{path or slug}")
        shown = self.state.shared_document(layer, slug)  # a held head is the winner (eventstore.governance)
        if shown is not None and governance.is_held(shown[0]):  # a resolve that released it would say no why (nc18a)
            raise Held(f"{layer}/{slug} has a held head (`governance: hold`), which a resolve does not release.",
                       slug, layer)
        body = PageUpdate(slug=slug, frontmatter=frontmatter, text=text, note="resolve", parents=heads)
        return new_event(validate.body(body), agent=self.agent, layer=layer)

    def page_delete(self, layer: str, slug: str, note: str = "", parents: list[str] | None = None) -> Event:
        slug = validate.slug(slug)
        heads = self.state.shared_heads(layer, slug)
        if not heads or self.state.shared_deleted(layer, slug):
            raise NotFound(f"there is no page {slug} in layer {layer}")
        body = PageDelete(slug=slug, note=validate.one_line(note, "the note"), parents=parents or heads)
        return new_event(validate.body(body), agent=self.agent, layer=layer)

    def page_rename(self, layer: str, old: str, new: str, note: str = "") -> list[Event]:
        """A shared page moves as two events appended together: the old name deleted (superseding
        every head) and the new name ingested with the winner's text."""
        old, new = validate.slug(old), validate.slug(new)
        if old == new:
            raise InvalidInput("the old and new slugs are the same")
        document = self.state.shared_document(layer, old)
        if document is None:
            raise NotFound(f"there is no page {old} in layer {layer}")
        if governance.is_held(document[0]):  # said here: the append would refuse the rename's delete half as a delete
            raise governance.held(layer, old, self.state.shared_winner(layer, old), "rename")
        if self.state.shared_document(layer, new) is not None:
            raise InvalidInput(f"a page {new!r} already exists in layer {layer}; delete it first or pick another name")
        heads = self.state.shared_heads(layer, old)
        if len(heads) > 1:  # nc35a: the rename's delete superseded every head, the others' text dropped unsaid
            raise InvalidInput(**for_each(
                f"{layer}/{old} is in conflict ({len(heads)} heads): renamed, it would keep the winner's text alone; "
                "resolve it first (", f"`mem resolve {layer}/{old} --file F`)", "the resolve tool)"))
        note = validate.one_line(note or f"renamed to {new}", "the note")
        gone = new_event(validate.body(PageDelete(slug=old, note=note, parents=self.state.shared_heads(layer, old))),
                         agent=self.agent, layer=layer)
        heads = self.state.shared_heads(layer, new)  # a deleted page of that name: the new text supersedes it
        body = (PageUpdate(slug=new, frontmatter=document[0], text=document[1], note=renamed_from(old),
                           parents=heads) if heads else
                PageIngest(slug=new, frontmatter=document[0], text=document[1], note=renamed_from(old)))
        return [gone, new_event(validate.body(body), agent=self.agent, layer=layer)]

    def page_release(self, layer: str, slug: str, note: str) -> Event:
        """Lifts a shared page's hold: a new version of the winner with the same text and its frontmatter
        without `governance` (the release eventstore.governance lets through)."""
        slug = validate.slug(slug)
        document = self.state.shared_document(layer, slug)
        if document is None:
            raise NotFound(f"there is no page {slug} in layer {layer}")
        if not governance.is_held(document[0]):
            raise InvalidInput(f"page {slug!r} of layer {layer!r} is not held (no `governance: hold`); "
                               "there is nothing to release")
        note = validate.one_line(note, "the note")
        if not note:
            raise InvalidInput(**for_each("a release needs a note: why the held page may change now (", "--note)",
                                          "the note argument)"))
        body = PageUpdate(slug=slug, frontmatter=governance.released(document[0]), text=document[1], note=note,
                          parents=[self.state.shared_winner(layer, slug)])
        return new_event(validate.body(body), agent=self.agent, layer=layer)
