"""`mem export adf` and `mem import adf`: a real ADF file (format 0.2, schema 28) and back.

An exported file holds the views as of a seq; ADF's own audit-read recipe resolves its blobs.
Importing turns a file into events: config, files (wiki files become pages, `## Always` lines and
a restored log), live loop rows at their own seqs, messages, and every audit blob verbatim — older
schemas too (21: `start_at`/`end_at`, no `ord`, no `loop`).
"""

import json
import re
import sqlite3
from pathlib import Path

import brotli
import msgspec

from eventstore import frontmatter
from eventstore.envelope import new_event
from eventstore.errors import InvalidInput
from eventstore.ids import now_ms
from eventstore.instants import format_instant, parse_instant
from eventstore.kinds import (AlwaysAdd, AuditImport, ConfigSet, FileWrite, ImportGap, InboxMessage, LogRestore,
                              LoopAppend, OutboxMessage, PageIngest)
from eventstore.layers import AGENT, LOOP, MIND

from . import render
from .adf import MESSAGE_COLUMNS
from .views import LOG_PATH, MIND_PATH

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


class ImportReport(msgspec.Struct):
    path: str
    schema_version: str
    events: int
    rows: dict[str, int]
    kept_aside: list[str]


def _message_schema(box: str) -> str:
    columns = MESSAGE_COLUMNS[box]
    typed = ", ".join(f'"{c}" {"INTEGER" if c.endswith("_at") or c == "status_code" else "TEXT"}' +
                      (" PRIMARY KEY" if c == "id" else "") for c in columns)
    return f"CREATE TABLE adf_{box} ({typed});"


def wiki_files(views, as_of: int) -> list[tuple]:
    """mind.md, mind/log.md and the pages as adf_files rows, with ADF's protections."""
    return [views.wiki_file_row(path, as_of) for path in views.paths(as_of)]


def export_adf(memory, out: Path, as_of: int) -> ExportReport:
    views, log = memory.views, memory.log
    out = Path(out)
    if out.exists():
        raise InvalidInput(f"{out} exists already; export writes a new file")
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("BEGIN")
    for statement in (SCHEMA_28 + _message_schema("inbox") + _message_schema("outbox")).split(";"):
        if statement.strip():
            db.execute(statement)
    meta = dict(views.db.execute("SELECT key, value FROM adf_meta").fetchall())
    name = meta.get("adf_name", memory.config.agent)
    ts_at = log.get_by_seq(as_of).ts if as_of else None
    db.executemany("INSERT INTO adf_meta VALUES (?,?,?)", [
        ("adf_version", "0.2", "readonly"), ("adf_schema_version", "28", "readonly"), ("adf_name", name, "readonly"),
        ("adf_handle", meta.get("adf_handle", name), "readonly"), ("adf_parent_did", "", "readonly"),
        ("adf_created_at", meta.get("adf_created_at", format_instant(ts_at or 0)), "readonly"),
        ("adf_updated_at", format_instant(ts_at) if ts_at else meta.get("adf_created_at", ""), "readonly"),
        ("status", "", "none")])
    config = views.db.execute("SELECT config_json, updated_at FROM config_versions WHERE seq <= ? "
                              "ORDER BY seq DESC LIMIT 1", (as_of,)).fetchone()
    db.execute("INSERT INTO adf_config VALUES (1, ?, ?)",
               config or (json.dumps(views.config(as_of), indent=2), "1970-01-01T00:00:00.000Z"))
    db.executemany("INSERT INTO adf_loop VALUES (?,?,?,?,?,?,?,?)", views.db.execute(
        "SELECT seq, loop, role, content_json, model, tokens, created_at, ord FROM loop_rows WHERE seq <= ? "
        "AND (removed_seq IS NULL OR removed_seq > ?) ORDER BY seq", (as_of, as_of)))
    db.executemany("INSERT INTO adf_audit VALUES (?,?,?,?,?,?,?,?,?)", views.db.execute(
        "SELECT id, source, start_seq, end_seq, ref, entry_count, size_bytes, data, created_at FROM audit_rows "
        "WHERE event_seq <= ? ORDER BY id", (as_of,)))
    files = wiki_files(views, as_of) + [tuple(r[:8]) for r in views.db.execute(
        "SELECT path, content, mime_type, size, protection, authorized, created_at, updated_at, deleted FROM "
        "file_versions f WHERE seq = (SELECT MAX(seq) FROM file_versions WHERE path = f.path AND seq <= ?)",
        (as_of,)) if not r[8]]
    db.executemany("INSERT INTO adf_files VALUES (?,?,?,?,?,?,?,?)", files)
    for box in ("inbox", "outbox"):
        columns = ", ".join(f'"{c}"' for c in MESSAGE_COLUMNS[box])
        db.executemany(f"INSERT INTO adf_{box} VALUES ({','.join('?' * len(MESSAGE_COLUMNS[box]))})",
                       views.db.execute(f"SELECT {columns} FROM adf_{box} WHERE _seq <= ? ORDER BY _seq", (as_of,)))
    db.execute("COMMIT")
    rows = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    tmp.rename(out)
    return ExportReport(path=str(out), seq=as_of, rows=rows)


def _columns(db, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def _parse_always(text: str) -> list[str] | None:
    """The `## Always` lines of a mindlog-style mind.md, or None when the file is not one."""
    match = re.search(r"^## Always\n\n((?:- .*\n)*)", text, re.M)
    return [line[2:] for line in match.group(1).splitlines()] if match else None


def _log_entries(text: str) -> list[str] | None:
    if not text.startswith(render.LOG_TITLE + "\n"):
        return None
    body = text[len(render.LOG_TITLE) + 1:]
    if not body:
        return []
    if not body.startswith("\n## ["):
        return None
    return [chunk + "\n" if not chunk.endswith("\n") else chunk
            for chunk in re.split(r"\n(?=## \[)", body[1:]) if chunk]


def _time(iso: str | None, fallback: int) -> int:
    try:
        return parse_instant(iso) if iso else fallback
    except InvalidInput:
        return fallback


class _Importer:
    """Reads one ADF file into events, table by table, all stamped with the importing agent."""

    def __init__(self, db, agent: str, name: str):
        self.db, self.agent, self.name = db, agent, name
        self.now = now_ms()
        self.wiki: list = []
        self.others: list = []
        self.kept_aside: list[str] = []

    def event(self, body, layer: str = AGENT, ts: int | None = None):
        return new_event(body, agent=self.agent, layer=layer, ts=ts or self.now)

    def config(self) -> None:
        row = self.db.execute("SELECT config_json, updated_at FROM adf_config").fetchone()
        if row:
            self.others.append(self.event(ConfigSet(key="", value=json.loads(row[0]), updated_at=row[1])))

    def audit(self) -> None:
        columns = _columns(self.db, "adf_audit")
        for row in self.db.execute("SELECT * FROM adf_audit ORDER BY id"):
            record = dict(zip(columns, row))
            start, end = record.get("start_seq"), record.get("end_seq")
            if "start_seq" not in record and re.match(r"^loop(:|$)", record["source"]):
                # Schema 21 has start_at/end_at (times): the seq range comes from the entries.
                seqs = [e.get("seq") for e in json.loads(brotli.decompress(record["data"])) if "seq" in e]
                start, end = (min(seqs), max(seqs)) if seqs else (None, None)
            self.others.append(self.event(AuditImport(
                source=record["source"], start_seq=start, end_seq=end, ref=record.get("ref"),
                entry_count=record["entry_count"], size_bytes=record["size_bytes"], data=bytes(record["data"]),
                created_at=record["created_at"])))

    def files(self) -> None:
        """Wiki pages become quiet ingests, `## Always` lines and the log are restored; other files are
        written as they are, and a mind.md or log.md that is not mindlog's own is kept aside."""
        files = {p: (bytes(c) if isinstance(c, (bytes, memoryview)) else str(c).encode(), m, pr, ca, ua)
                 for p, c, m, pr, ca, ua in self.db.execute(
                     "SELECT path, content, mime_type, protection, created_at, updated_at FROM adf_files")}
        always: list[str] = []
        for path, (content, mime, protection, created, updated) in sorted(files.items()):
            if path == MIND_PATH:
                always = _parse_always(content.decode("utf-8", "replace")) or []
            elif path != LOG_PATH and not self._page(path, content, updated):
                self.others.append(self.event(FileWrite(path=path, content=content, mime_type=mime,
                                                        protection=protection, created_at=created,
                                                        updated_at=updated)))
        self.wiki.extend(self.event(AlwaysAdd(line=line), MIND) for line in always)
        mind_text = files.get(MIND_PATH, (b"",))[0].decode("utf-8", "replace")
        log_text = files.get(LOG_PATH, (b"",))[0].decode("utf-8", "replace")
        entries = _log_entries(log_text) if LOG_PATH in files else []
        if entries:
            self.wiki.append(self.event(LogRestore(entries=entries), MIND))
        if MIND_PATH in files and _rendered_mind_differs(mind_text, always, self.wiki):
            self._keep_aside(MIND_PATH, mind_text, files[MIND_PATH])
        if LOG_PATH in files and entries is None:
            self._keep_aside(LOG_PATH, log_text, files[LOG_PATH])

    def _page(self, path: str, content: bytes, updated: str) -> bool:
        slug = path[5:-3] if path.startswith("mind/") and path.endswith(".md") else ""
        if not slug or "/" in slug:
            return False
        try:
            yaml_text, text = frontmatter.split(content.decode("utf-8"))
            fm = frontmatter.parse(yaml_text) if yaml_text is not None else None
        except (InvalidInput, UnicodeDecodeError):
            return False
        if fm is None:
            return False
        self.wiki.append(self.event(PageIngest(slug=slug, frontmatter=fm, text=text, quiet=True), MIND,
                                    _time(updated, self.now)))
        return True

    def _keep_aside(self, path: str, text: str, original: tuple) -> None:
        target = f"imported/{self.name}/{path}"
        self.kept_aside.append(target)
        self.others.append(self.event(FileWrite(path=target, content=text.encode(), mime_type="text/markdown",
                                                protection="none", created_at=original[3], updated_at=original[4])))

    def messages(self) -> None:
        for box, kind in (("inbox", InboxMessage), ("outbox", OutboxMessage)):
            columns = _columns(self.db, f"adf_{box}")
            for row in self.db.execute(f"SELECT * FROM adf_{box}"):
                message = {k: v for k, v in zip(columns, row) if v is not None}
                self.others.append(self.event(kind(message=message, imported=True)))

    def loop(self) -> tuple[list, list]:
        """The live loop rows, and every event ordered so each row lands at its own seq."""
        columns = _columns(self.db, "adf_loop")
        live = [dict(zip(columns, row)) for row in self.db.execute("SELECT * FROM adf_loop ORDER BY seq")]
        return live, _line_up(live, self.wiki + self.others, self.event, self.name)


def import_adf(memory, path: Path, progress=None) -> ImportReport:
    """Turns an ADF file into events appended in one batch; refused unless the log is empty, so that
    imported loop seqs stay the seqs their citations name."""
    if memory.log.head() != 0:
        raise InvalidInput("import into a new workspace (`mem init`): imported loop rows keep their seqs, "
                           "so the log must be empty")
    try:
        db = sqlite3.connect(f"file:{Path(path).absolute()}?mode=ro", uri=True)
        try:
            meta = dict((k, v) for k, v, *_ in db.execute("SELECT * FROM adf_meta"))
            name = re.sub(r"[^a-z0-9_-]", "-", (meta.get("adf_handle") or meta.get("adf_name") or "adf").lower())
            reader = _Importer(db, memory.config.agent, name)
            reader.config()
            reader.audit()
            reader.files()
            reader.messages()
            live, events = reader.loop()
        finally:
            db.close()
    except (sqlite3.DatabaseError, KeyError) as exc:
        raise InvalidInput(f"{path} is not an ADF file mindlog can read: {exc}") from None
    with memory.lock():
        memory.log.append(events)
    memory.refresh(progress=progress)
    rows = {"loop": len(live), "audit": sum(isinstance(e.body, AuditImport) for e in events),
            "files": sum(isinstance(e.body, FileWrite) for e in events),
            "pages": sum(isinstance(e.body, PageIngest) for e in events),
            "messages": sum(isinstance(e.body, (InboxMessage, OutboxMessage)) for e in events)}
    return ImportReport(path=str(path), schema_version=meta.get("adf_schema_version", "?"), events=len(events),
                        rows=rows, kept_aside=reader.kept_aside)


def _rendered_mind_differs(text: str, always: list[str], wiki: list) -> bool:
    catalog = []
    for e in wiki:
        if isinstance(e.body, PageIngest):
            catalog.append((e.body.slug, render.title_of(e.body.slug, e.body.frontmatter, e.body.text),
                            render.hook_of(e.body.frontmatter)))
    return render.mind(always, sorted(catalog)) != text


def _line_up(live: list[dict], others: list, event, name: str) -> list:
    """Orders the import so that each live loop row is appended at its own seq (the log is empty):
    other imported events fill the seqs below it, and ImportGap events any that remain."""
    ordered = []
    queue = list(others)
    for row in live:
        while len(ordered) + 1 < row["seq"]:
            ordered.append(queue.pop(0) if queue else event(ImportGap(source=name)))
        content = json.loads(row["content_json"])
        if not isinstance(content, list):
            content = [{"type": "text", "text": str(content)}]
        tokens = json.loads(row["tokens"]) if row.get("tokens") else None
        ordered.append(event(LoopAppend(role=row["role"], content=content, loop=row.get("loop") or "main",
                                        model=row.get("model"), tokens=tokens if isinstance(tokens, dict) else None,
                                        created_at=row["created_at"], ord=row.get("ord")), LOOP))
    return ordered + queue
