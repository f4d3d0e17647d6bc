"""`mem export adf` and `mem import adf`: a real ADF file (format 0.2, schema 28) and back.

An exported file holds the views as of a seq; ADF's own audit-read recipe resolves its blobs.
Importing turns a file into events: config, files (wiki files become pages, `## Always` lines and
a restored log), live loop rows at their own seqs, messages, and every audit blob verbatim — older
schemas too (21: `start_at`/`end_at`, no `ord`, no `loop`). Every seq the file names (a live row's, an
archived message's, its loop counter's) stays that message's: no other event takes it (`_line_up`).
"""

import base64
import binascii
import collections
import hashlib
import json
import re
import sqlite3
from pathlib import Path

import msgspec

from eventstore import secrets, validate
from eventstore.envelope import MAX_TS, encode_body, new_event
from eventstore.errors import InvalidInput, MemError, storage_failure
from eventstore.ids import uuid7_layout, uuid7_ms, uuid_text
from eventstore.instants import LAST_MS, format_instant, parse_instant
from eventstore.kinds import (AlwaysAdd, AuditImport, ConfigSet, EntryAppend, FileWrite, ImportGap, InboxMessage, LogRestore,
                              LoopAppend, OutboxMessage, PageIngest)
from eventstore.layers import AGENT, LOOP, MIND
from eventstore.writer import MESSAGE_TIMES, AdfWriter, SharedWriter, Writer, check_message_times

from . import local_layers, render, trust
from eventstore.blobs import blob_json

from .adf import MESSAGE_COLUMNS, OBJECT_KEYS, config_object
from .views import KEPT_ASIDE, LOG_PATH, MIND_PATH

SCHEMA_28 = """
CREATE TABLE adf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL,
  protection TEXT NOT NULL DEFAULT 'none' CHECK(protection IN ('none','readonly','increment')));
CREATE TABLE adf_config (id INTEGER PRIMARY KEY CHECK (id = 1), config_json TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE adf_loop (seq INTEGER PRIMARY KEY AUTOINCREMENT, loop TEXT, role TEXT NOT NULL,
  content_json TEXT NOT NULL, model TEXT, tokens TEXT, created_at INTEGER NOT NULL, ord INTEGER);
CREATE TABLE adf_files (path TEXT PRIMARY KEY, content BLOB NOT NULL, mime_type TEXT, size INTEGER NOT NULL,
  protection TEXT NOT NULL DEFAULT 'none' CHECK(protection IN ('read_only','no_delete','none')),
  authorized INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE adf_audit (id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, start_seq INTEGER,
  end_seq INTEGER, ref TEXT, entry_count INTEGER NOT NULL, size_bytes INTEGER NOT NULL, data BLOB NOT NULL,
  created_at INTEGER NOT NULL);
CREATE INDEX idx_adf_audit_source ON adf_audit(source, start_seq);
"""

TABLES = ("adf_meta", "adf_config", "adf_loop", "adf_files", "adf_audit", "adf_inbox", "adf_outbox")


class ExportReport(msgspec.Struct):
    path: str
    seq: int
    rows: dict[str, int]


SHARED_LAYERS_KEY = "mindlog_shared_layers"
"""The adf_meta row of an export naming the hub's layers whose files it holds ({name: {path, format}}): an import
leaves those files out (they are the team's, pulled again from the hub, where a redaction reaches them), rather
than make them the importing agent's own."""


OWN_FILES_KEY = "mindlog_own_files_at_layer_paths"
"""The adf_meta row of an export naming the agent's own files at a path where a layer named in SHARED_LAYERS_KEY is
placed (Views.blocked): the import keeps those, as the agent's own, unless its own workspace places a layer there."""


class SharedLayerPath(msgspec.Struct):
    path: str
    format: str


class ImportReport(msgspec.Struct):
    """`shared`: files of a hub's layers left out (the export's, or this workspace's contract's): the team's, not
    the agent's own; a pull brings them back."""

    path: str
    schema_version: str
    events: int
    rows: dict[str, int]
    kept_aside: list[str]
    shared: list[str] = []
    already: int = 0
    """Events of this file the workspace held already (an import of the same file again appends nothing)."""
    not_read: dict[str, int] = {}
    """The file's tables no reader takes (`adf_identity`, `adf_tasks`, `adf_timers`, `adf_logs`: not memory), each
    with its rows, when it has any: said, not dropped without a word."""


def _message_schema(box: str) -> str:
    columns = MESSAGE_COLUMNS[box]
    typed = ", ".join(f'"{c}" {"INTEGER" if c.endswith("_at") or c == "status_code" else "TEXT"}' +
                      (" PRIMARY KEY" if c == "id" else "") for c in columns)
    return f"CREATE TABLE adf_{box} ({typed});"


def export_adf(memory, out: Path, as_of: int) -> ExportReport:
    if str(out) == "-":  # `--file -` reads stdin elsewhere: this wrote a file named `-` (nc22a)
        raise InvalidInput("an ADF file is an SQLite database, which cannot be written to stdout: give a file name")
    out = Path(out)
    if out.exists():
        raise InvalidInput(f"{out} exists already; export writes a new file")
    if not out.parent.is_dir():
        raise InvalidInput(f"cannot write {out}: there is no directory {out.parent}")
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    def remove(suffixes=("", "-wal", "-shm")) -> None:
        for suffix in suffixes:
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)

    db = None
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        db.execute("PRAGMA journal_mode = WAL")
    except sqlite3.Error as exc:
        if db is not None:
            db.close()
        remove()  # the empty file it made (a full disk: nc17a)
        raise storage_failure(exc, f"cannot write {out}") from None
    try:
        _write_tables(db, memory, as_of)
        rows = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except BaseException:  # an error or Ctrl-C: no half-written file is left beside the one asked for
        db.close()
        remove()
        raise
    db.close()
    remove(("-wal", "-shm"))
    tmp.rename(out)
    return ExportReport(path=str(out), seq=as_of, rows=rows)


def _write_tables(db: sqlite3.Connection, memory, as_of: int) -> None:
    views, log = memory.views, memory.log
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("BEGIN")
    for statement in (SCHEMA_28 + _message_schema("inbox") + _message_schema("outbox")).split(";"):
        if statement.strip():
            db.execute(statement)
    meta = views.adf_meta()
    name = memory.config.agent
    last = next(log.read(upto=as_of, limit=1, newest_first=True), None) if as_of else None
    ts_at = last.ts if last else None
    db.executemany("INSERT INTO adf_meta VALUES (?,?,?)", [
        ("adf_version", "0.2", "readonly"), ("adf_schema_version", "28", "readonly"), ("adf_name", name, "readonly"),
        ("adf_handle", name, "readonly"), ("adf_parent_did", "", "readonly"),
        ("adf_created_at", meta.get("adf_created_at", format_instant(ts_at or 0)), "readonly"),
        ("adf_updated_at", format_instant(ts_at) if ts_at else meta.get("adf_created_at", ""), "readonly"),
        ("status", "", "none"), (SHARED_LAYERS_KEY, msgspec.json.encode(_hub_layers(memory, as_of)).decode(), "readonly")])
    if blocked := views.blocked(as_of):
        db.execute("INSERT INTO adf_meta VALUES (?,?,?)", (OWN_FILES_KEY, json.dumps(sorted(blocked)), "readonly"))
    config = views.config_row(as_of)
    db.execute("INSERT INTO adf_config VALUES (1, ?, ?)",
               config or (json.dumps(views.config(as_of), indent=2), "1970-01-01T00:00:00.000Z"))
    db.executemany("INSERT INTO adf_loop VALUES (?,?,?,?,?,?,?,?)", sorted(views.loop_rows(None, as_of)))
    _set_loop_counter(db, as_of)
    db.executemany("INSERT INTO adf_audit VALUES (?,?,?,?,?,?,?,?,?)", views.audit_rows(as_of, data=True))
    db.executemany("INSERT INTO adf_files VALUES (?,?,?,?,?,?,?,?)", views.adf_files(as_of))
    for box in ("inbox", "outbox"):
        db.executemany(f"INSERT INTO adf_{box} VALUES ({','.join('?' * len(MESSAGE_COLUMNS[box]))})",
                       views.messages(box, as_of))
    db.execute("COMMIT")


def _hub_layers(memory, as_of: int) -> dict[str, SharedLayerPath]:
    """The hub's layers whose files the workspace held as of the seq (its own local layers aside)."""
    views = memory.views
    contract = views.contract_at(as_of)
    local = local_layers.declared(views.config(as_of), memory.config.agent)
    return {name: SharedLayerPath(spec.path, spec.format) for name, spec in (contract.layers if contract else {}).items()
            if name not in local}


def _as_written(document):
    """An audit blob's document as its words were written: a deleted file's snapshot with its content decoded
    (its base64 reads as one long high-entropy string, a secret to the scan)."""
    if isinstance(document, dict) and isinstance(document.get("content_base64"), str):
        try:
            return {**document, "content_base64": base64.b64decode(document["content_base64"], validate=True)}
        except (ValueError, binascii.Error):
            return document
    return document


def _set_loop_counter(db, as_of: int) -> None:
    """adf_loop's AUTOINCREMENT counter at the export's seq, where mindlog's next message would be: an ADF
    runtime then appends after every seq the file names (an archived message's too), and an import keeps
    them all (`_Importer.counter`)."""
    db.execute("DELETE FROM sqlite_sequence WHERE name = 'adf_loop'")
    db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('adf_loop', ?)", (as_of,))


MAX_SEQ = 2 ** 53 - 1  # beyond this a seq no longer survives a JSON reader (a double)
MAX_JSON_DEPTH = 64


def _time(iso: str | None, fallback: int | None) -> int | None:
    try:
        return parse_instant(iso) if isinstance(iso, str) and iso else fallback
    except InvalidInput:
        return fallback


def _str_or_none(value) -> str | None:
    return value if isinstance(value, str) else None




def _entry_orders(count: int, kept: dict[int, str], file_ms: int) -> list[tuple[int, int]]:
    """(ms, the 12 bits after it) for each of `count` entry lines, where `kept` gives some lines the 18
    characters of their id a file shows: the others count on from those of the nearest kept line above them, one a
    line (above the first, back from the first's; none kept: on from the file's time), so that with their rank after
    them the ids sort as the lines and no two lines share the 18 characters a file may show of them (nc30b: a
    reversal after the entry it reverses took its prefix, and a citation of it named two entries), but where two kept
    ones leave no room between them. Kept prefixes that do not rise with the lines (a file edited by hand), or read
    past the year 9999 (nc31a: an import made events no command could fold), are not kept."""
    known = {index: (uuid7_ms(prefix) << 12) + int(prefix[15:18], 16) for index, prefix in kept.items()
             if re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}", prefix) and uuid7_ms(prefix) <= MAX_TS}
    rising = [known[index] for index in sorted(known)]
    if len(known) != len(kept) or rising != sorted(set(rising)):
        known = {}
    if not known:
        known = {-1: file_ms << 12}
    kept_at, keys = sorted(known), []
    for index in range(count):
        above = [at for at in kept_at if at <= index]
        below = [at for at in kept_at if at > index]
        if not above:  # before the first kept line: back from its prefix
            keys.append(max(known[below[0]] - (below[0] - index), 0))
            continue
        key = known[above[-1]] + index - above[-1]
        ceiling = known[below[0]] - 1 if below else (MAX_TS << 12) | 0xFFF
        keys.append(max(min(key, ceiling), known[above[-1]]))
    return [(key >> 12, key & 0xFFF) for key in keys]


def _depth(value, limit: int = MAX_JSON_DEPTH) -> int:
    stack, deepest = [(value, 1)], 0
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _json(text, what: str):
    """A JSON column of the file: valid, and nested at most MAX_JSON_DEPTH deep."""
    if isinstance(text, (bytes, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{what} is not valid UTF-8 (byte {exc.start})") from None
    if not isinstance(text, str):
        raise InvalidInput(f"{what} is not JSON text")
    try:
        value = json.loads(text)
    except RecursionError:
        raise InvalidInput(f"{what} is nested more than {MAX_JSON_DEPTH} deep") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {str(exc).splitlines()[0][:120]}") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise InvalidInput(f"{what} is nested more than {MAX_JSON_DEPTH} deep")
    return value


def _check_objects(config: dict) -> None:
    """Refuses a config where a key mindlog reads as an object (`context`, `layers`...) is anything else
    (null reads as absent)."""
    for key in OBJECT_KEYS:
        *parents, last = key.split(".")
        holder = config_object(config, ".".join(parents)) if parents else config
        if holder.get(last) is not None and not isinstance(holder[last], dict):
            raise InvalidInput(f"adf_config.config_json's {key} must be a JSON object, "
                               f"not {json.dumps(holder[last], ensure_ascii=False)[:40]}")


def _int(value, what: str, optional: bool = False, low: int = -(2 ** 63), high: int = 2 ** 63 - 1) -> int | None:
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(f"{what} must be an integer between {low} and {high}, not {value!r:.40}")
    return value


def _str(value, what: str, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be text, not {type(value).__name__}")
    return value


ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?")


def _iso(value, what: str) -> str | None:
    """An ADF text time (adf_files, adf_config): ISO 8601 that parses to an instant mindlog can hold, kept as
    written; it goes back out in the next export, so junk is refused here, not carried."""
    text = _str(value, what)
    if text is not None:
        try:
            if not ISO_TIME.fullmatch(text):
                raise InvalidInput("not ISO 8601")
            parse_instant(text)
        except InvalidInput:
            raise InvalidInput(f"{what} must be an ISO 8601 time (like 2026-05-15T18:13:01.581Z), not {text!r:.40}") \
                from None
    return text


def _ms(value, what: str) -> int:
    """An ADF integer time (adf_loop, adf_audit): milliseconds since 1970, up to the year 9999."""
    return _int(value, f"{what} (milliseconds since 1970)", low=0, high=LAST_MS)


def _reads(table: str, required: bool = False):
    """Marks an importer method as the one reader of `table`; a missing optional table reads as empty."""
    def mark(method):
        method.table, method.required = table, required
        return method
    return mark


class _NoFiles:
    """The write side's view of an empty workspace: no page, no file, no Always line yet."""

    def heads(self, slug: str) -> list[str]:
        return []

    def always(self) -> list[str]:
        return []

    def file(self, path: str):
        return None

    def file_nesting(self, path: str) -> str | None:
        return None

    def file_twin(self, path: str) -> str | None:
        return None


class _ImportedFiles(_NoFiles):
    """The write side's view of the files an import has brought so far: none is a folder of another or the same
    name but for letter case or Unicode normalization (`Views.file_nesting`, `Views.file_twin`), as on any way in."""

    def __init__(self):
        self.paths: set[str] = set()
        self.folders: set[str] = set()  # every folder a path brought so far lies in
        self.folded: dict[str, str] = {}

    def add(self, path: str) -> None:
        self.paths.add(path)
        parts = path.split("/")
        self.folders.update("/".join(parts[:end]) for end in range(1, len(parts)))
        self.folded.setdefault(validate.folded(path), path)

    def file_nesting(self, path: str) -> str | None:
        parts = path.split("/")
        above = next((folder for folder in ("/".join(parts[:end]) for end in range(1, len(parts)))
                      if folder in self.paths), None)
        if above is not None:
            return above
        return next((p for p in self.paths if p.startswith(f"{path}/")), None) if path in self.folders else None

    def file_twin(self, path: str) -> str | None:
        twin = self.folded.get(validate.folded(path))
        return twin if twin != path else None


class _ImportedLayers:
    """The shared write side's view of the local layers an import brings back: the entries made so far
    (a reversal names one of them), and no page yet."""

    def __init__(self):
        self.entries: set[tuple[str, str]] = set()

    def entry_ids_starting(self, layer: str, prefix: str) -> list[str]:
        return sorted(id for in_layer, id in self.entries if in_layer == layer and id.startswith(prefix))[:2]

    def shared_heads(self, layer: str, slug: str) -> list[str]:
        return []

    def shared_winner(self, layer: str, slug: str) -> str | None:
        return None

    def shared_deleted(self, layer: str, slug: str) -> bool:
        return False

    def shared_deleted_by_every_head(self, layer: str, slug: str) -> bool:
        return False

    def shared_document(self, layer: str, slug: str) -> tuple[dict, str] | None:
        return None


_ENTRY_LINE = re.compile(r"^\[([A-Z_]+)\] (\S+): (.+?)(?: \(reverses ([0-9a-f-]{1,18})\))?"
                         r"(?: \[reversed by ([0-9a-f-]{1,18})\])?$")
"""A line of an entries layer's file, as `shared.entry_line` renders it (ids cut to 18 characters)."""


class _Importer:
    """Reads one ADF file into events, one reader per table, all stamped with the importing agent.

    Every value goes through the write side's own checks (slugs, paths, pages, roles, loop names,
    sizes) before it becomes an event, so an import can append nothing a user could not; anything
    that fails them refuses the whole file with one line naming the table and row."""

    def __init__(self, db, agent: str, allow_secret: bool = False, shared_layers: dict | None = None):
        """`shared_layers`: the layers of the importing workspace's hub contract (name -> spec), whose files
        are left out, as are those of the layers the file's export names (SHARED_LAYERS_KEY)."""
        self.db, self.agent, self.name = db, agent, "adf"
        self.shared_layers = dict(shared_layers or {})
        self.contract_layers = dict(shared_layers or {})
        self.own_at_layer_paths: set[str] = set()  # OWN_FILES_KEY
        self.shared_left: list[str] = []
        self.allow_secret = allow_secret
        self.identity = b""  # the agent the file is of (adf_meta), which every id is derived under
        self.file_ms = 0  # the file's own time (adf_updated_at): that of the rows that carry none
        self.created_ms = 0  # when the file was made (adf_created_at): that of the seqs its loop used before
        self.made: collections.Counter = collections.Counter()
        self.brought = _ImportedFiles()
        self.writer, self.adf_writer = Writer(agent, _NoFiles()), AdfWriter(agent, self.brought)
        self.layered = _ImportedLayers()
        self.shared_writer = SharedWriter(agent, self.layered)
        self.schema_version = "?"
        self.wiki: list = []
        self.others: list = []
        self.live: list = []
        self.kept_aside: list[str] = []
        self.archived: dict[int, str] = {}  # seq -> the audit row that archives the message of that seq
        self.named = 0  # the highest seq the file names: its loop counter, an archived or a live message's
        self.layers = {}  # the local layers its config declares: their files are rendered from their events

    def readers(self):
        return (self.meta, self.config, self.audit, self.files, self.inbox, self.outbox, self.loop, self.counter)

    def read(self) -> list:
        """The file's events in the order they are appended: its loop's seqs first (`_line_up`), then the
        config, the audit blobs, files and messages, and last the wiki, so that what a page cites is there
        before it."""
        for reader in self.readers():
            reader(self.rows(reader.table, reader.required))
        return [*_line_up(self.live, self.named, self.gap, self.event), *self.others, *self.wiki]

    def gap(self, skipped: int):
        """An ImportGap for seqs the file's loop used: of the file's first time, as the log's first event it
        keeps the file's adf_created_at."""
        return self.event(ImportGap(source=self.name, skipped=skipped), ts=self.created_ms)

    def not_read(self) -> dict[str, int]:
        """The file's tables that hold rows and that no reader takes, each with how many (`ImportReport.not_read`)."""
        read = {reader.table for reader in self.readers()}
        found = {}
        for (table,) in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            if table in read or table.startswith("sqlite_"):
                continue
            try:
                count = self.db.execute(f'SELECT count(*) FROM "{table.replace(chr(34), chr(34) * 2)}"').fetchone()[0]
            except sqlite3.DatabaseError:  # a virtual table of a module this SQLite lacks, say: named all the same
                count = -1
            if count:
                found[table] = count
        return found

    def rows(self, table: str, required: bool) -> list[dict]:
        made = self.db.execute("SELECT type, sql FROM sqlite_master WHERE name = ? COLLATE NOCASE", (table,)).fetchone()
        if made is not None and (made[0] != "table" or (made[1] or "").lstrip()[:14].upper() == "CREATE VIRTUAL"):
            # a view's rows are a query's, which may never end (a recursive one made 2.4 GB of events: nc24a)
            raise InvalidInput(f"its {table} is a {'view' if made[0] == 'view' else 'virtual table'}, not a table: "
                               "an ADF file holds its rows in tables")
        columns = [row[1] for row in self.db.execute(f"PRAGMA table_info({table})")]
        if not columns:
            if required:
                raise InvalidInput(f"it has no {table} table, which every ADF file has")
            return []
        try:
            return [dict(zip(columns, row)) for row in self.db.execute(f"SELECT * FROM {table}")]
        except sqlite3.OperationalError as exc:
            if not str(exc).startswith("Could not decode to UTF-8 column"):
                raise
            column = str(exc).split("'")[1]
            raise InvalidInput(f"{table}: a row's {column} is not valid UTF-8 text") from None

    def event(self, body, layer: str = AGENT, ts: int | None = None, order: tuple[int, int] | None = None):
        """An imported event, the same at every import of the file: its time is the row's own (`ts`, the file's
        when the row has none), and its id a UUIDv7 of that time whose other bits come from the file's agent
        and the event itself (`order`: the 12 bits after the time, and a rank in the rest, for ids that must
        sort as the file's lines do)."""
        ts = self.ms(ts)
        raw = encode_body(body)
        key = hashlib.sha256(self.identity + layer.encode() + b"\0" + raw).digest()
        nth = self.made[key]  # the same event twice in one file (one `## Always` line twice) gets two ids
        self.made[key] += 1
        bits = int.from_bytes(hashlib.sha256(key + nth.to_bytes(8, "big")).digest()[:10], "big")
        rand_a, rand_b = ((bits >> 62) & 0xFFF, bits & ((1 << 62) - 1)) if order is None else (
            order[0], min(order[1], (1 << 24) - 1) << 38 | bits & ((1 << 38) - 1))
        return new_event(body, agent=self.agent, layer=layer, ts=ts, id=uuid_text(uuid7_layout(ts, rand_a, rand_b)))

    def scanned(self, body, where: str, findings: list | None = None):
        """A row's body scanned for secrets as every write is (`findings`: those of what the body stands for,
        an audit blob's entries): refused naming the row, or with --allow-secret recording what was found."""
        findings = secrets.scan_body(body) if findings is None else findings
        if not findings:
            return body
        if not self.allow_secret:
            secrets.refuse(findings, where)
        return msgspec.structs.replace(body, allowed_secrets=[str(f) for f in findings])

    def ms(self, value) -> int:
        """A row's time in ms when it is one a UUIDv7 can hold, else the file's."""
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 48
        return value if ok else self.file_ms

    @_reads("adf_meta", required=True)
    def meta(self, rows: list[dict]) -> None:
        meta = {str(r.get("key")): r.get("value") for r in rows}
        if "adf_version" not in meta:
            raise InvalidInput("its adf_meta has no adf_version, which every ADF file has")
        self.schema_version = str(meta.get("adf_schema_version") or "?")[:20]
        handle = meta.get("adf_handle") or meta.get("adf_name") or "adf"
        self.identity = hashlib.sha256("\0".join(str(meta.get(key) or "") for key in (
            "adf_name", "adf_handle", "adf_parent_did", "adf_created_at")).encode()).digest()
        self.file_ms = _time(_str_or_none(meta.get("adf_updated_at")) or _str_or_none(meta.get("adf_created_at")), 0)
        self.created_ms = _time(_str_or_none(meta.get("adf_created_at")), self.file_ms)
        self.name = re.sub(r"[^a-z0-9_-]", "-", str(handle).lower())[:64].strip("-_") or "adf"
        if meta.get(SHARED_LAYERS_KEY):
            try:
                named = msgspec.json.decode(str(meta[SHARED_LAYERS_KEY]), type=dict[str, SharedLayerPath])
            except msgspec.MsgspecError as exc:
                raise InvalidInput(f"adf_meta {SHARED_LAYERS_KEY} is not a map of layers to paths: {exc}") from None
            self.shared_layers.update(named)
        if meta.get(OWN_FILES_KEY):
            own = _json(meta[OWN_FILES_KEY], f"adf_meta {OWN_FILES_KEY}")
            if not (isinstance(own, list) and all(isinstance(path, str) for path in own)):
                raise InvalidInput(f"adf_meta {OWN_FILES_KEY} is not a list of paths")
            self.own_at_layer_paths = set(own)

    def _team_file(self, path: str) -> bool:
        """A file of a hub's layer (the team's, left out); not an agent's own file the export held where a layer is
        placed (OWN_FILES_KEY), unless this workspace's contract places one there (`mem file write` refuses it)."""
        if local_layers.layer_owning(path, self.shared_layers) is None:
            return False
        return path not in self.own_at_layer_paths or local_layers.layer_owning(path, self.contract_layers) is not None

    @_reads("adf_config")
    def config(self, rows: list[dict]) -> None:
        for row in rows[:1]:
            value = _json(row.get("config_json"), "adf_config.config_json")
            if not isinstance(value, dict):
                raise InvalidInput("adf_config.config_json must be a JSON object")
            _check_objects(value)
            updated = _iso(row.get("updated_at"), "adf_config.updated_at")
            body = self.scanned(ConfigSet(key="", value=value, updated_at=updated), "adf_config")
            self.others.append(self.event(body, ts=_time(updated, None)))
            self.layers = local_layers.declared(value, self.agent)

    @_reads("adf_audit")
    def audit(self, rows: list[dict]) -> None:
        """Audit rows verbatim; every blob is checked to expand within the bound (no brotli bombs),
        and schema 21's loop rows (start_at/end_at times) get their seq range from their entries."""
        for record in sorted(rows, key=lambda r: r.get("id") if isinstance(r.get("id"), int) else 0):
            where = f"adf_audit row {record.get('id')!r:.24}"
            source = _str(record.get("source"), f"{where} source", optional=False)
            if len(source) > 200 or "\n" in source:
                raise InvalidInput(f"{where} has a source that is not a short one-line name")
            data = record.get("data")
            if not isinstance(data, (bytes, memoryview)):
                raise InvalidInput(f"{where} has no blob in data")
            data = bytes(data)
            is_loop = re.match(r"^loop(:|$)", source) is not None
            entries = blob_json(data, where)
            if is_loop and not isinstance(entries, list):
                raise InvalidInput(f"{where} is a loop blob but not a JSON array of entries")
            start = _int(record.get("start_seq"), f"{where} start_seq", True, 0, MAX_SEQ)
            end = _int(record.get("end_seq"), f"{where} end_seq", True, 0, MAX_SEQ)
            if is_loop:
                seqs = self._archive(where, entries)
                if "start_seq" not in record:
                    start, end = (min(seqs), max(seqs)) if seqs else (None, None)
                self.named = max(self.named, *seqs, start or 0, end or 0)
            created = _ms(record.get("created_at"), f"{where} created_at")
            body = AuditImport(
                source=source, start_seq=start, end_seq=end, ref=_str(record.get("ref"), f"{where} ref"),
                entry_count=_int(record.get("entry_count"), f"{where} entry_count", low=0),
                size_bytes=_int(record.get("size_bytes"), f"{where} size_bytes", low=0), data=data,
                created_at=created)
            body = self.scanned(body, where, list(secrets.scan_value(_as_written(entries), "data")))
            self.others.append(self.event(body, ts=created))

    def _archive(self, where: str, entries: list) -> list[int]:
        """The seqs of a loop blob's messages (an entry with no whole-number seq names none: no `audit read`
        reaches it), each a seq no other message of the file has."""
        seqs = []
        for entry in entries:
            seq = entry.get("seq") if isinstance(entry, dict) else None
            if not isinstance(seq, int):
                continue
            seq = _int(seq, f"{where} archives a message whose seq", low=1, high=MAX_SEQ)
            if seq in self.archived:
                other = "twice" if self.archived[seq] == where else f"as {self.archived[seq]} does"
                raise InvalidInput(f"{where} archives seq {seq} {other}: a message has one seq")
            self.archived[seq] = where
            seqs.append(seq)
        return seqs

    @_reads("adf_files")
    def files(self, rows: list[dict]) -> None:
        """Wiki pages become quiet ingests, `## Always` lines and the log are restored; other files are
        written as they are. A mind.md or log.md that is not mindlog's own, and anything else under
        mind/ that is not a valid page, is kept aside under imported/<name>/."""
        files = {}
        for row in rows:
            path = _str(row.get("path"), "adf_files path", optional=False)
            if path in files:  # its PRIMARY KEY dropped: which row is the file's cannot be told
                raise InvalidInput(f"adf_files path {path!r:.80} appears twice")
            content = row.get("content")
            if content is None:  # NOT NULL in ADF: a file with no content at all is not an empty one
                raise InvalidInput(f"adf_files {path!r:.80} has no content (NULL)")
            content = bytes(content) if isinstance(content, (bytes, memoryview)) else str(content).encode()
            files[path] = (content, _str(row.get("mime_type"), f"adf_files {path!r:.60} mime_type"),
                           row.get("protection") or "none",
                           _iso(row.get("created_at"), f"adf_files {path!r:.60} created_at"),
                           _iso(row.get("updated_at"), f"adf_files {path!r:.60} updated_at"))
        always: list[str] = []
        for path, (content, mime, protection, created, updated) in sorted(files.items()):
            if path == MIND_PATH:
                always = render.always_lines(content.decode("utf-8", "replace")) or []
            elif path == LOG_PATH or self._page(path, content, updated) or self._layer_file(path, content, updated):
                continue
            elif self._team_file(path):
                self.shared_left.append(path)
            elif path.startswith("mind/") or self._layer_owns(path):
                self._keep_aside(path, content, files[path])
            else:
                self._file(path, content, mime, protection, created, updated)
        mind_ms = _time(files[MIND_PATH][4], None) if MIND_PATH in files else None
        for line in always:
            if line.strip():
                body = self.scanned(self.writer.always_add(line).body, f"adf_files {MIND_PATH!r} (## Always)")
                self.wiki.append(self._in_mind(body, mind_ms))
        mind_text = files.get(MIND_PATH, (b"",))[0].decode("utf-8", "replace")
        log_text = files.get(LOG_PATH, (b"",))[0].decode("utf-8", "replace")
        entries = render.log_entries(log_text) if LOG_PATH in files else []
        for part in LogRestore.parts(entries or []):
            body = self.scanned(part, f"adf_files {LOG_PATH!r}")
            self.wiki.append(self.event(body, MIND, _time(files[LOG_PATH][4], None)))
        restored = [e.body.line for e in self.wiki if isinstance(e.body, AlwaysAdd)]
        if MIND_PATH in files and _rendered_mind_differs(mind_text, restored, self.wiki):
            self._keep_aside(MIND_PATH, mind_text.encode(), files[MIND_PATH])
        if LOG_PATH in files and entries is None:
            self._keep_aside(LOG_PATH, log_text.encode(), files[LOG_PATH])

    def _layer_owns(self, path: str) -> bool:
        """A file of a local layer the config declares (a mindlog export renders them into adf_files) that
        could not be read back as that layer's entries or page: the layer's events own that path, so the
        text is kept aside rather than left at a path `mem file write` refuses, hidden behind the layer's
        own file."""
        return local_layers.layer_owning(path, self.layers) is not None

    def _layer_file(self, path: str, content: bytes, updated: str | None) -> bool:
        """A local layer's file turned back into that layer's events (True), as `mem entry add` and
        `mem page write --layer` would make them: an entries file line by line (new ids, each reversal
        pointed at the entry its id prefix names), a pages layer's file as a page of that layer."""
        name = local_layers.layer_owning(path, self.layers)
        if name is None:
            return False
        spec = self.layers[name]
        try:
            if spec.format == "pages":
                slug = path[len(spec.path):].removesuffix(".md")
                if not path.endswith(".md") or "/" in slug:
                    return False
                body = self.shared_writer.page_write(name, slug, content, parents=[]).body
                self.others.append(self.event(self.scanned(body, f"adf_files {path!r:.80}"), name,
                                              _time(updated, None)))
                return True
            events = self._entries(name, content.decode("utf-8"), self.ms(_time(updated, None)), path)
        except secrets.SecretFound:
            raise
        except (MemError, UnicodeDecodeError):
            return False
        if events is None:
            return False
        self.others.extend(events)
        return True

    def _entries(self, layer: str, text: str, file_ms: int, path: str) -> list | None:
        """The entry events of an entries layer's file, or None when it cannot be read back whole.

        A line names no id of its own, only the first 18 characters of the one it reverses (and of the
        newest that reverses it): as the lines are in id order, the reversed ids, sorted, are the lines
        marked reversed, in order. Those 18 characters (an id's time and its next 12 bits) are kept: the
        entry gets them back (the newest reversal too, named on the line it reverses), and so a file
        exported again says the same. Every other line takes the
        time and bits of the nearest kept line above it (the first ones, of the first kept line; none
        kept: the file's time), and the rank of its line after them, so the ids sort as the lines do."""
        head = f"# {layer}\n\n"
        if not text.startswith(head) or not text.endswith("\n"):
            return None
        lines = [_ENTRY_LINE.match(line) for line in text[len(head):].splitlines()]
        if not all(lines):
            return None
        targets = sorted({line[4] for line in lines if line[4] is not None})
        marked = [index for index, line in enumerate(lines) if line[5] is not None]
        if len(targets) != len(marked):
            return None
        line_of = dict(zip(targets, marked))
        kept = {line_of[prefix]: prefix for prefix in targets}
        for prefix in targets:  # the newest line reversing an entry is named on that entry's line
            kept.setdefault(max(i for i, line in enumerate(lines) if line[4] == prefix), lines[line_of[prefix]][5])
        orders = _entry_orders(len(lines), kept, file_ms)
        events, ids = [], {}  # ids: a line's index -> its entry's id
        for index, line in enumerate(lines):
            kind, date, content, reverses, _reversed_by = line.groups()
            if reverses is not None and line_of[reverses] not in ids:
                return None
            body = self.shared_writer.entry(layer, f"[{kind}] {date}: {content}",
                                            ids[line_of[reverses]] if reverses is not None else None).body
            if (body.type, body.date, body.content) != (kind, date, content):
                return None
            body = self.scanned(body, f"adf_files {path!r:.80}, line {index + 3}")
            ms, rand_a = orders[index]
            event = self.event(body, layer, ms, (rand_a, index))
            ids[index] = event.id
            self.layered.entries.add((layer, event.id))
            events.append(event)
        return events

    def _in_mind(self, body, ts: int | None = None):
        return self.event(body, MIND, ts)

    def _file(self, path, content, mime, protection, created, updated) -> None:
        try:
            body = self.adf_writer.file_write(path, content, mime, protection).body
        except MemError as exc:
            raise type(exc)(f"adf_files {path!r:.80}: {exc}") from None
        self.brought.add(body.path)
        body = self.scanned(msgspec.structs.replace(body, mime_type=mime, created_at=created, updated_at=updated),
                            f"adf_files {path!r:.80}")
        self.others.append(self.event(body, ts=_time(updated, None)))

    def _page(self, path: str, content: bytes, updated: str | None) -> bool:
        slug = path[5:-3] if path.startswith("mind/") and path.endswith(".md") else ""
        if not slug or "/" in slug:
            return False
        try:
            body = self.writer.page_write(slug, content).body
        except MemError:
            return False
        body = self.scanned(msgspec.structs.replace(body, quiet=True), f"adf_files {path!r:.80}")
        self.wiki.append(self._in_mind(body, _time(updated, None)))
        return True

    def _keep_aside(self, path: str, content: bytes, original: tuple) -> None:
        target = f"{KEPT_ASIDE}{self.name}/{path}"
        self.kept_aside.append(target)
        self._file(target, content, "text/markdown" if path.endswith(".md") else original[1], "none",
                   original[3], original[4])

    def _messages(self, box: str, kind, rows: list[dict]) -> None:
        for row in rows:
            message = {str(k): v for k, v in row.items() if v is not None}
            check_message_times(box, message, f"adf_{box} id {message.get('id')!r:.40}")
            when = next((message[k] for k in MESSAGE_TIMES[box] if k in message), None)
            body = self.scanned(kind(message=message, imported=True), f"adf_{box} id {message.get('id')!r:.40}")
            self.others.append(self.event(body, ts=when))

    @_reads("adf_inbox")
    def inbox(self, rows: list[dict]) -> None:
        self._messages("inbox", InboxMessage, rows)

    @_reads("adf_outbox")
    def outbox(self, rows: list[dict]) -> None:
        self._messages("outbox", OutboxMessage, rows)

    @_reads("adf_loop")
    def loop(self, rows: list[dict]) -> None:
        """The live loop rows, each checked as `mem loop append` checks a message, in seq order."""
        for row in rows:
            where = f"adf_loop seq {row.get('seq')!r:.24}"
            seq = _int(row.get("seq"), where, low=1, high=MAX_SEQ)
            if seq in self.archived:
                raise InvalidInput(f"{where} is live and archived in {self.archived[seq]} too")
            content = _json(row.get("content_json"), f"{where} content_json")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            tokens = _json(row["tokens"], f"{where} tokens") if row.get("tokens") is not None else None
            try:
                body = self.adf_writer.loop_append(
                    _str(row.get("role"), f"{where} role", optional=False), content,
                    _str(row.get("loop"), f"{where} loop") or "main",
                    _str(row.get("model"), f"{where} model"), tokens).body
            except MemError as exc:
                raise type(exc)(f"{where}: {exc}") from None
            body = msgspec.structs.replace(body, created_at=_ms(row.get("created_at"), f"{where} created_at"),
                                           ord=_int(row.get("ord"), f"{where} ord", optional=True))
            body = self.scanned(body, where)
            self.live.append((seq, body))
            self.named = max(self.named, seq)
        self.live.sort(key=lambda item: item[0])

    @_reads("sqlite_sequence")
    def counter(self, rows: list[dict]) -> None:
        """adf_loop's own counter (SQLite's AUTOINCREMENT): the file's next message would take the seq after
        it, so every seq up to it may be cited (a row cleared without audit), and none is given to another
        event."""
        for row in rows:
            if row.get("name") == "adf_loop":
                self.named = max(self.named, _int(row.get("seq"), "the file's loop counter (sqlite_sequence)",
                                                  low=0, high=MAX_SEQ))


def import_adf(memory, path: Path, progress=None, allow_secret: bool = False) -> ImportReport:
    """Turns an ADF file into events appended in one batch; refused unless the log is empty, so that
    imported loop seqs stay the seqs their citations name. A refusal appends nothing; so does a row that
    holds a secret, unless `allow_secret`."""
    if Path(path).is_dir():
        raise InvalidInput(f"{path} is a directory, not an ADF file" + (
            "; a wiki folder is brought under mindlog in place: `mem init` in it, then `mem adopt`"
            if (Path(path) / "mind.md").is_file() or (Path(path) / "mind").is_dir() else ""))
    if Path(path).exists() and not Path(path).is_file():  # a pipe: SQLite's read of it never ended (nc24a)
        raise InvalidInput(f"{path} is not a regular file (a pipe, a device), not an ADF file")
    try:
        db = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True)  # `#`, `?`: escaped (nc25a)
        try:
            contract = memory.views.hub
            reader = _Importer(db, memory.config.agent, allow_secret, contract.layers if contract else None)
            events = reader.read()
            not_read = reader.not_read()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise InvalidInput(f"{path} is not an ADF file mindlog can read: {exc}") from None
    except secrets.SecretFound as exc:
        raise secrets.SecretFound(f"{path}: {exc.refused}") from None
    except MemError as exc:
        raise type(exc)(f"{path} is not an ADF file mindlog can import: {exc}") from None
    with memory.lock():
        if memory.log.head() != 0:
            held = sum(memory.log.get(event.id) is not None for event in events)
            if held == len(events):  # this file, imported here before: nothing to add
                return ImportReport(path=str(path), schema_version=reader.schema_version, events=0,
                                    rows=dict.fromkeys(IMPORT_ROWS, 0), kept_aside=[], already=held,
                                    not_read=not_read)
            raise InvalidInput("import into a new workspace (`mem init`): imported loop rows keep their seqs, "
                               "so the log must be empty" + (f" (this one holds {held} of the file's {len(events)} "
                                                             "events already)" if held else ""))
        memory.log.append(events)
    memory.follow(progress=progress)
    rows = {"loop": len(reader.live), "audit": sum(isinstance(e.body, AuditImport) for e in events),
            "files": sum(isinstance(e.body, FileWrite) for e in events),
            "pages": sum(isinstance(e.body, PageIngest) for e in events),
            "always": sum(isinstance(e.body, AlwaysAdd) for e in events),
            "entries": sum(isinstance(e.body, EntryAppend) for e in events),
            "config": sum(isinstance(e.body, ConfigSet) for e in events),
            "messages": sum(isinstance(e.body, (InboxMessage, OutboxMessage)) for e in events),
            "change log": sum(isinstance(e.body, LogRestore) for e in events),
            "seq gap": sum(isinstance(e.body, ImportGap) for e in events)}
    return ImportReport(path=str(path), schema_version=reader.schema_version, events=len(events),
                        rows=rows, kept_aside=reader.kept_aside, shared=reader.shared_left, not_read=not_read)


IMPORT_ROWS = ("loop", "audit", "files", "pages", "always", "entries", "config", "messages", "change log", "seq gap")
"""What an import made, by kind: every event it appends is one of these."""


def _rendered_mind_differs(text: str, always: list[str], wiki: list) -> bool:
    """Whether a mind.md is not the index mindlog renders of these pages and `## Always` lines. A catalog
    line may carry its page's trust flag (`(superseded by deploy)`, `(stale since ...)`), judged on a day
    the file does not say: it matches with the flag that page gets on any day, before or after it went stale."""
    catalog = []
    for e in wiki:
        if isinstance(e.body, PageIngest):
            fm = e.body.frontmatter
            catalog.append((e.body.slug, render.title_of(e.body.slug, fm, e.body.text), render.hook_of(fm),
                            trust.stored_status(fm.get("status")), trust.stale_day(fm.get("stale_after"))))
    head = render.mind(always, [])
    lines = text[len(head):].splitlines(keepends=True) if text.startswith(head) else None
    if lines is None or len(lines) != len(catalog):
        return True
    return any(line not in {render.catalog_line(slug, title, hook, trust.catalog_flag(status, stale, day))
                            for day in ("0000-00-00", "9999-12-31")}
               for line, (slug, title, hook, status, stale) in zip(lines, sorted(catalog)))


def _line_up(live: list[tuple[int, LoopAppend]], named: int, gap, event) -> list:
    """The import's first events, on the empty log, so that `[S<n>]` names what it named in the file for
    every seq up to `named` (the highest it names): each live loop row at its own seq, and one ImportGap
    (`gap(skipped)`) for each run of the others, however long (it takes the seq after the `skipped` ones;
    the messages archived at them are found in their audit blobs). The import's other events come after
    them: no other event takes such a seq, not now (a search row's id is its seq) nor later (the next
    message is appended after them)."""
    ordered, seq = [], 0
    for wanted, body in [*live, (named + 1, None)]:
        if wanted <= seq:
            raise InvalidInput(f"adf_loop seq {wanted} appears twice")
        if seq + 1 < wanted:
            ordered.append(gap(wanted - seq - 2))
        if body is not None:
            ordered.append(event(body, LOOP, body.created_at))
        seq = wanted
    return ordered
