"""ADF's own tables, folded from loop, file, message, config and audit events.

The tables an ADF runtime reads (`adf_loop`, `adf_audit`, `adf_files`, `adf_config`) are SQL views
over history tables that keep every row with the seq that added or removed it, so the same tables
can be read as of any seq. Compaction and clear archive exactly as ADF does: the removed rows go
into one audit row whose blob is brotli(JSON array of entries `{seq, role, content_json, model?,
tokens?, created_at, ord?}`), `source` = `loop:<name>`, `start_seq`/`end_seq` the smallest and
largest seq archived; the summary is a user row prefixed "[Loop Compacted, audited] " (or
"[Loop Compacted] " with loop audit off) whose `ord` sorts it just before the preserved rows.
"""

import base64
import copy
import json

from eventstore.blobs import compress, dumps
from eventstore.instants import format_instant
from eventstore.kinds import (ADF_KINDS, AuditImport, ConfigSet, FileDelete, FileWrite, InboxMessage, LoopAppend,
                              LoopClear, LoopCompact, OutboxMessage)

DEFAULT_CONFIG = {"audit": {"loop": True, "inbox": False, "outbox": False, "files": False}}
EPOCH_ISO = "1970-01-01T00:00:00.000Z"
COMPACTED_AUDITED = "[Loop Compacted, audited] "
COMPACTED = "[Loop Compacted] "

MESSAGE_COLUMNS = {
    "inbox": ("id", "message_id", "from", "to", "reply_to", "network", "thread_id", "parent_id", "subject",
              "content", "content_type", "attachments", "meta", "sender_alias", "recipient_alias", "owner", "card",
              "return_path", "source", "source_context", "sent_at", "received_at", "status", "original_message"),
    "outbox": ("id", "message_id", "from", "to", "address", "reply_to", "network", "thread_id", "parent_id",
               "subject", "content", "content_type", "attachments", "meta", "sender_alias", "recipient_alias",
               "owner", "card", "return_path", "status_code", "created_at", "delivered_at", "status",
               "original_message"),
}


def _message_table(name: str) -> str:
    columns = ", ".join(f'"{c}" {"INTEGER" if c.endswith("_at") or c == "status_code" else "TEXT"}'
                        for c in MESSAGE_COLUMNS[name])
    return f"CREATE TABLE IF NOT EXISTS adf_{name} ({columns}, _seq INTEGER NOT NULL);"


SCHEMA = f"""
CREATE TABLE IF NOT EXISTS loop_rows (
    seq INTEGER PRIMARY KEY, loop TEXT NOT NULL, role TEXT NOT NULL, content_json TEXT NOT NULL, model TEXT,
    tokens TEXT, created_at INTEGER NOT NULL, ord INTEGER, removed_seq INTEGER);
CREATE INDEX IF NOT EXISTS loop_rows_by_loop ON loop_rows(loop, removed_seq);
CREATE VIEW IF NOT EXISTS adf_loop AS
    SELECT seq, loop, role, content_json, model, tokens, created_at, ord FROM loop_rows WHERE removed_seq IS NULL;
CREATE TABLE IF NOT EXISTS audit_rows (
    id INTEGER PRIMARY KEY, source TEXT NOT NULL, start_seq INTEGER, end_seq INTEGER, ref TEXT,
    entry_count INTEGER NOT NULL, size_bytes INTEGER NOT NULL, data BLOB NOT NULL, created_at INTEGER NOT NULL,
    event_seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS audit_rows_by_source ON audit_rows(source, start_seq);
CREATE VIEW IF NOT EXISTS adf_audit AS
    SELECT id, source, start_seq, end_seq, ref, entry_count, size_bytes, data, created_at FROM audit_rows;
CREATE TABLE IF NOT EXISTS file_versions (
    path TEXT NOT NULL, seq INTEGER NOT NULL, deleted INTEGER NOT NULL, content BLOB, mime_type TEXT,
    size INTEGER NOT NULL, protection TEXT NOT NULL, authorized INTEGER NOT NULL, created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL, PRIMARY KEY (path, seq));
CREATE TABLE IF NOT EXISTS wiki_files (
    path TEXT PRIMARY KEY, content BLOB NOT NULL, mime_type TEXT, size INTEGER NOT NULL, protection TEXT NOT NULL,
    authorized INTEGER NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE VIEW IF NOT EXISTS adf_files AS
    SELECT path, content, mime_type, size, protection, authorized, created_at, updated_at FROM file_versions f
    WHERE seq = (SELECT MAX(seq) FROM file_versions WHERE path = f.path) AND deleted = 0
    UNION ALL SELECT * FROM wiki_files;
CREATE TABLE IF NOT EXISTS config_versions (seq INTEGER PRIMARY KEY, config_json TEXT NOT NULL,
                                            updated_at TEXT NOT NULL);
CREATE VIEW IF NOT EXISTS adf_config AS
    SELECT 1 AS id, config_json, updated_at FROM (
        SELECT seq, config_json, updated_at FROM config_versions
        UNION ALL SELECT -1, '{json.dumps(DEFAULT_CONFIG)}', '{EPOCH_ISO}')
    ORDER BY seq DESC LIMIT 1;
CREATE TABLE IF NOT EXISTS adf_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL,
                                     protection TEXT NOT NULL DEFAULT 'none');
{_message_table("inbox")}
{_message_table("outbox")}
"""



LOOP_SOURCE = "(source = 'loop' OR source LIKE 'loop:%')"
"""The audit rows of loop archives, in SQL; `is_loop_source` (eventstore.blobs) is the same test in Python."""


OBJECT_KEYS = ("audit", "context", "context.audit", "layers")
"""The config keys mindlog reads as JSON objects: an import refuses a config where one is anything else."""


def config_object(config, key: str) -> dict:
    """The object at a dotted config key; anything else there (a string an imported file held) reads as absent."""
    node = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def audit_switch(config: dict, source: str) -> bool:
    """An audit switch: `audit.<source>`, else `context.audit.<source>`, else ADF's default."""
    for holder in (config_object(config, "audit"), config_object(config, "context.audit")):
        if source in holder:
            return bool(holder[source])
    return DEFAULT_CONFIG["audit"][source]


def set_dotted(config: dict, key: str, value) -> dict:
    if not key:
        return copy.deepcopy(value)
    config = copy.deepcopy(config)
    node = config
    parts = key.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value
    return config


def loop_entry(row) -> dict:
    """One archived loop row as ADF's blob holds it: content_json parsed, optional keys omitted."""
    seq, role, content_json, model, tokens, created_at, ord = row
    entry = {"seq": seq, "role": role, "content_json": json.loads(content_json)}
    if model is not None:
        entry["model"] = model
    if tokens is not None:
        entry["tokens"] = json.loads(tokens)
    entry["created_at"] = created_at
    if ord is not None:
        entry["ord"] = ord
    return entry


class AdfFold:
    kinds = ADF_KINDS

    def __init__(self, views):
        self.views = views
        self.db = views.db
        self._config: dict | None = None

    def config(self) -> dict:
        if self._config is None:
            self._config = json.loads(self.db.execute("SELECT config_json FROM adf_config").fetchone()[0])
        return self._config

    def _audit(self, seq, source, start, end, ref, count, data, size, created_at):
        self.db.execute("INSERT INTO audit_rows (source, start_seq, end_seq, ref, entry_count, size_bytes, data, "
                        "created_at, event_seq) VALUES (?,?,?,?,?,?,?,?,?)",
                        (source, start, end, ref, count, size, data, created_at, seq))

    def _live_rows(self, loop: str):
        """The loop's live rows in display order, without the loop column (as `loop_entry` takes them)."""
        return [(row[0], *row[2:]) for row in self.views.loop_rows(loop)]

    def _archive(self, seq, ts, loop, rows) -> bool:
        """Removes rows from the live loop, archiving them in one blob when loop audit is on."""
        if not rows:
            return False
        audited = audit_switch(self.config(), "loop")
        if audited:
            data, size = compress([loop_entry(r) for r in rows])
            seqs = [r[0] for r in rows]
            self._audit(seq, f"loop:{loop}", min(seqs), max(seqs), None, len(rows), data, size, ts)
        self.db.executemany("UPDATE loop_rows SET removed_seq = ? WHERE seq = ?", [(seq, r[0]) for r in rows])
        return audited

    def apply(self, seq: int, ts: int, body) -> None:
        db = self.db
        if isinstance(body, LoopAppend):
            db.execute("INSERT INTO loop_rows VALUES (?,?,?,?,?,?,?,?,NULL)",
                       (seq, body.loop, body.role, dumps(body.content, True), body.model,
                        dumps(body.tokens, True) if body.tokens is not None else None,
                        body.created_at if body.created_at is not None else ts, body.ord))
        elif isinstance(body, LoopCompact):
            rows = self._live_rows(body.loop)
            keep = rows[len(rows) - body.preserve:] if body.preserve > 0 else []
            self._archive(seq, ts, body.loop, rows[:len(rows) - len(keep)])
            prefix = COMPACTED_AUDITED if audit_switch(self.config(), "loop") else COMPACTED
            ord = min(r[6] if r[6] is not None else r[0] for r in keep) - 1 if keep else None
            db.execute("INSERT INTO loop_rows VALUES (?,?,?,?,NULL,NULL,?,?,NULL)",
                       (seq, body.loop, "user", dumps([{"type": "text", "text": prefix + body.summary}], True), ts,
                        ord))
        elif isinstance(body, LoopClear):
            rows = self._live_rows(body.loop)
            self._archive(seq, ts, body.loop, rows[body.start:body.end])
        elif isinstance(body, FileWrite):
            current = self.file(body.path)
            created = body.created_at or (current[6] if current else format_instant(ts))
            db.execute("INSERT OR REPLACE INTO file_versions VALUES (?,?,0,?,?,?,?,0,?,?)",
                       (body.path, seq, body.content, body.mime_type, len(body.content), body.protection, created,
                        body.updated_at or format_instant(ts)))
        elif isinstance(body, FileDelete):
            current = self.file(body.path)
            if current is None:
                return
            _path, content, mime, size, protection, _auth, created, _updated = current
            if audit_switch(self.config(), "files"):
                data, length = compress({"path": body.path, "content_base64": base64.b64encode(content).decode(),
                                         "mime_type": mime, "size": size})
                self._audit(seq, "file", None, None, body.path, 1, data, length, ts)
            db.execute("INSERT OR REPLACE INTO file_versions VALUES (?,?,1,NULL,?,0,?,0,?,?)",
                       (body.path, seq, mime, protection, created, format_instant(ts)))
        elif isinstance(body, (InboxMessage, OutboxMessage)):
            box = "inbox" if isinstance(body, InboxMessage) else "outbox"
            message = body.message
            columns = MESSAGE_COLUMNS[box]
            row = [message.get(c) if not isinstance(message.get(c), (dict, list)) else dumps(message[c])
                   for c in columns]
            quoted = ", ".join(f'"{c}"' for c in columns)
            db.execute(f"INSERT INTO adf_{box} ({quoted}, _seq) VALUES ({','.join('?' * (len(columns) + 1))})",
                       (*row, seq))
            if audit_switch(self.config(), box) and not body.imported:
                data, length = compress(message)
                self._audit(seq, f"{box}_message", None, None, message.get("id"), 1, data, length, ts)
        elif isinstance(body, ConfigSet) and body.redacted is None:
            self._config = set_dotted(self.config(), body.key, body.value)
            db.execute("INSERT INTO config_versions VALUES (?,?,?)",
                       (seq, json.dumps(self._config, indent=2, ensure_ascii=False, sort_keys=True),
                        body.updated_at or format_instant(ts)))
        elif isinstance(body, AuditImport):
            self._audit(seq, body.source, body.start_seq, body.end_seq, body.ref, body.entry_count, body.data,
                        body.size_bytes, body.created_at)

    def file(self, path: str):
        return self.views.file(path)

    def note_events(self, first: tuple[int] | None, last_ts: int) -> None:
        """Keeps adf_meta's times in step with the events folded so far (`first`: the batch's first ts).

        The name is not kept here: the first event may be another agent's (pulled), and an export
        names the workspace's own agent."""
        if first is None:
            return
        self.db.execute("INSERT OR IGNORE INTO adf_meta VALUES ('adf_created_at', ?, 'readonly')",
                        (format_instant(first[0]),))
        self.db.execute("INSERT OR REPLACE INTO adf_meta VALUES ('adf_updated_at', ?, 'readonly')",
                        (format_instant(last_ts),))


def init_meta(db) -> None:
    db.executemany("INSERT OR IGNORE INTO adf_meta VALUES (?, ?, ?)",
                   [("adf_version", "0.2", "readonly"), ("adf_schema_version", "28", "readonly"),
                    ("status", "", "none")])
