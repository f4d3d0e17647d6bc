"""`mem search`: full-text search (SQLite FTS5, BM25) over everything memory holds, now or as of any seq.

What is searched: wiki pages, pages of shared `pages` layers, typed entries, loop messages (live and
compacted: what `audit read` reaches) and text files. Two indexes, one row shape:

- `search_docs` holds the current version of each of them (the id is the seq of the event that made
  it) and `search_docs_fts` indexes it. A batch writes only the versions still current at its end,
  so a replay does not index the 499 versions of a page that were replaced within the same batch.
- `search_history` holds every version ever, for `--at`/`--seq`: `since` is the seq from which it is
  found (its own, or the import's for a message archived in an imported ADF file), `until` the seq
  of the version, rename or delete that replaced a page or file, or of the first version or delete
  that named a shared page's version as a parent (its successors form a DAG). `gaps` (JSON, [[from, to], ...])
  are the spans within it when a shared page's version was not found: a child of it was a head then, until
  that child became void (`_gaps`).

Both are views like the others: `SearchFold` writes them in the fold's transaction (`write_batch`),
`mem replay` rebuilds them (their rows and full-text entries batch by batch, each version's entry once its
lifetime is known: `index_closed`, `bulk_end`), and `mem replay --check` compares them.

`search_docs_fts` is sqlite-utils' (`enable_fts`, its triggers follow each insert and delete).
`search_history_fts` is laid out for searches of the past, which must find only the versions alive at
a seq among the hundreds of thousands that ever held a common word: its rowid (`history_rowid`) is a
version's id under its lifetime bucket, `k << 40 | id` for a version that lived `until - id` seqs in
[2^k, 2^(k+1)), `OPEN << 40 | id` while it is current. A version alive at `as_of` has
`as_of - 2^(k+1) < id <= as_of` in its bucket, so a search of the past reads one rowid range per
bucket (FTS5 seeks to it), about twice the versions alive then rather than every version before it.
A version changes bucket when it is closed: the fold moves its entry, in rowid order (FTS5 writes
rows out of order one segment each). The table is contentless: its rowids are not search_history's.

The trust rules (what is withheld, flagged, ranked lower) come from `trust`.
"""

import json
import math
import re
import sqlite3

import msgspec

from eventstore.blobs import blob_json, is_loop_source
from eventstore.envelope import decode_body
from eventstore.errors import InvalidInput, MemError
from eventstore.layers import AGENT, LOOP, MIND
from eventstore.kinds import AuditImport, EntryAppend, FileDelete, FileWrite, LoopAppend, LoopCompact, PageDelete, \
    PageIngest, PageUpdate

from . import render, trust
from .rows import insert_many

TABLES = ("search_docs", "search_history")
"""The view tables `mem replay --check` compares."""

COLUMNS = ("id", "kind", "layer", "key", "title", "body", "type", "status", "stale_after", "ref", "reverses",
           "agent")
_TABLE = """CREATE TABLE IF NOT EXISTS {} (
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, layer TEXT NOT NULL, key TEXT NOT NULL, title TEXT NOT NULL,
    body TEXT NOT NULL, type TEXT, status TEXT, stale_after TEXT, ref TEXT, reverses TEXT, agent TEXT{});"""
SCHEMA = (_TABLE.format("search_docs", "") + _TABLE.format("search_history", ", until INTEGER, since INTEGER NOT NULL, gaps TEXT")
          + """
CREATE INDEX IF NOT EXISTS search_docs_by_key ON search_docs(kind, key);
CREATE INDEX IF NOT EXISTS search_docs_reversals ON search_docs(reverses) WHERE reverses IS NOT NULL;
CREATE INDEX IF NOT EXISTS search_history_reversals ON search_history(reverses) WHERE reverses IS NOT NULL;
CREATE INDEX IF NOT EXISTS search_history_files ON search_history(key) WHERE kind = 'file' AND until IS NULL;
CREATE INDEX IF NOT EXISTS search_history_statuses ON search_history(lower(status)) WHERE status IS NOT NULL;
""")
SPAN = 40
"""Bits of a history rowid that hold the version's id (a seq: under 2^40)."""
OPEN = 41
"""The lifetime bucket of the versions still current (lifetimes are under 2^40: buckets 0 to 39)."""
_ID_MASK = (1 << SPAN) - 1
HISTORY_FTS = ("CREATE VIRTUAL TABLE IF NOT EXISTS search_history_fts USING fts5(title, body, content='', "
               "tokenize='porter', columnsize=0)")
"""columnsize=0: no token counts per version, which only FTS5's bm25() reads (`_past_query` ranks by its own
counts): a quarter of the cost of indexing a version. Such a table cannot be scanned, only matched."""
_FTS_WRITE = "INSERT INTO search_history_fts (search_history_fts, rowid, title, body) VALUES (?, ?, ?, ?)"
"""An entry written (first value NULL) or taken out ('delete', with the very text it was written with)."""
KINDS = ("page", "shared-page", "local-page", "entry", "loop", "file", "always")
"""What search finds, by the names `--kind` takes and hits carry. A page of a pages layer is stored as a `shared-page`
row whatever its layer; one of a layer this agent declared for itself (a local layer, never pushed) is a
`local-page`. An `always` hit is a line of mind.md's `## Always` section (`always_hits`: not in the indexes)."""
ALWAYS = "always"
LAYER_PAGE = "shared-page"
"""The stored kind of a pages layer's page, shared or local."""
LARGEST_INTEGER = 2**63 - 1
"""The largest whole number SQLite binds."""
MARK = ("**", "**")


def outdated(db) -> bool:
    """Views made before search_history had every column it has now (`since`, then `gaps`)."""
    columns = [column[1] for column in db.execute("PRAGMA table_info(search_history)")]
    return bool(columns) and "gaps" not in columns


DOCS_FTS = (
    'CREATE VIRTUAL TABLE "search_docs_fts" USING FTS5 (\n    "title", "body",\n    tokenize=\'porter\',\n'
    '    content="search_docs"\n)',
    'INSERT INTO "search_docs_fts" (rowid, "title", "body")\n    SELECT rowid, "title", "body" FROM "search_docs";',
    'CREATE TRIGGER "search_docs_ai" AFTER INSERT ON "search_docs" BEGIN\n'
    '  INSERT INTO "search_docs_fts" (rowid, "title", "body") VALUES (new.rowid, new."title", new."body");\nEND;',
    'CREATE TRIGGER "search_docs_ad" AFTER DELETE ON "search_docs" BEGIN\n'
    '  INSERT INTO "search_docs_fts" ("search_docs_fts", rowid, "title", "body") VALUES(\'delete\', old.rowid, '
    'old."title", old."body");\nEND;',
    'CREATE TRIGGER "search_docs_au" AFTER UPDATE ON "search_docs" BEGIN\n'
    '  INSERT INTO "search_docs_fts" ("search_docs_fts", rowid, "title", "body") VALUES(\'delete\', old.rowid, '
    'old."title", old."body");\n'
    '  INSERT INTO "search_docs_fts" (rowid, "title", "body") VALUES (new.rowid, new."title", new."body");\nEND;',
)
"""search_docs' full-text index and the triggers that keep it: exactly what sqlite-utils' `enable_fts(["title",
"body"], tokenize="porter", create_triggers=True)` runs (tests/test_search.py compares them), written out because
importing sqlite-utils (it imports numpy) costs a quarter of a second, at the start of every rebuild."""
DOCS_FTS_DROP = ("DROP TRIGGER IF EXISTS search_docs_ai", "DROP TRIGGER IF EXISTS search_docs_ad",
                 "DROP TRIGGER IF EXISTS search_docs_au", "DROP TABLE IF EXISTS search_docs_fts")


def init(db) -> None:
    """Creates both FTS5 indexes, search_docs' (DOCS_FTS, with the triggers that keep it) and search_history's
    as the module's docstring says."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_docs_fts'").fetchone() is None:
        begun = not db.in_transaction
        if begun:
            db.execute("BEGIN")
        for statement in DOCS_FTS:
            db.execute(statement)
        if begun:
            db.execute("COMMIT")
    db.execute(HISTORY_FTS)


def defer_indexes(db) -> None:
    """Drops both full-text indexes of a bulk build's scratch views, whose search rows the writer writes into
    the new file (`write_batch(bulk=True)`, `bulk_end`): nothing there to index."""
    for statement in (*DOCS_FTS_DROP, "DROP TABLE IF EXISTS search_history_fts"):
        db.execute(statement)


def history_rowid(id: int, until: int | None) -> int:
    """A version's rowid in search_history_fts: its id under its lifetime bucket (see the module)."""
    return ((OPEN if until is None else (until - id).bit_length() - 1) << SPAN) | id


def _bucket_sql(lifetime: str, low: int = 0, high: int = OPEN - 1) -> str:
    """`(lifetime).bit_length() - 1` in SQL for 1 <= lifetime < 2^high: six comparisons (no log2, which
    not every SQLite has)."""
    if high - low == 1:
        return str(low)
    middle = (low + high) // 2
    return (f"CASE WHEN {lifetime} >= {1 << middle} THEN {_bucket_sql(lifetime, middle, high)} "
            f"ELSE {_bucket_sql(lifetime, low, middle)} END")


HISTORY_ROWID_SQL = (f"((CASE WHEN until IS NULL THEN {OPEN} ELSE {_bucket_sql('(until - id)')} END) << {SPAN}) "
                     "| id")
"""`history_rowid` of a search_history row, in SQL."""


_INDEX_ROWS = (f"INSERT INTO search_history_fts (rowid, title, body) SELECT r.rowid, h.title, h.body "
               f"FROM (SELECT id, {HISTORY_ROWID_SQL} AS rowid FROM search_history WHERE {{}} ORDER BY rowid "
               "LIMIT -1) AS r JOIN search_history AS h ON h.id = r.id")  # LIMIT: sorted first, not flattened
"""Indexes the search_history rows a condition picks, in one statement, in rowid order."""


NEVER_CLOSED = ("entry", "loop")
"""The kinds whose versions nothing replaces (an entry is reversed by another entry, not closed): their rowid in
search_history_fts is final as soon as they are written."""
_FINAL = f"(until IS NOT NULL OR kind IN ({', '.join(repr(kind) for kind in NEVER_CLOSED)}))"


_INDEX_STAGED = (
    "INSERT INTO search_history_fts (rowid, title, body) SELECT rowid, title, body FROM ("
    f"SELECT (({_bucket_sql('(until - seq)')}) << {SPAN}) | seq AS rowid, title, body FROM temp.versions "
    "WHERE deleted = 0 AND until != 0 UNION ALL SELECT r.rowid, h.title, h.body FROM (SELECT id, "
    f"{HISTORY_ROWID_SQL} AS rowid FROM search_history WHERE id IN (SELECT value FROM json_each(?)) AND {_FINAL}) "
    "AS r JOIN search_history AS h ON h.id = r.id) ORDER BY rowid")
"""`_INDEX_ROWS` with the staged wiki page versions (`stage_versions`) closed in the batch taken from the staging
table, not looked up again in search_history."""


def index_closed(db, ids: list[int], staged: bool = False) -> None:
    """A bulk batch's search_history_fts entries, once its rows are written: those of `ids` (the versions it
    added or may have closed: `_changing`) whose rowid is final: closed, or of a kind never closed (a team's
    entries are indexed beside the fold, not all at its end). The versions still current wait for `bulk_end`,
    so no entry is ever moved in a bulk build. `staged`: with the staged wiki page versions closed already
    (those are not in `ids`)."""
    if staged:
        db.execute(_INDEX_STAGED, (msgspec.json.encode(ids),))
    elif ids:
        db.execute(_INDEX_ROWS.format(f"id IN (SELECT value FROM json_each(?)) AND {_FINAL}"),
                   (msgspec.json.encode(ids),))


def index_open(db) -> None:
    """The search_history_fts entries of every version still current (a bulk build's end: `index_closed`
    indexed the others as they were written or closed); the caller holds the transaction."""
    db.execute(_INDEX_ROWS.format(f"NOT {_FINAL}"))


_NOT_TEXT = frozenset(("type", "id", "tool_use_id", "signature", "source", "data", "media_type", "cache_control"))
"""Keys of a loop message's blocks whose values are no text a person wrote or read (ids, an image's base64 data)."""


def text_of(content: list) -> str:
    """A loop message's searchable text: its text blocks, and the words inside every other block (a tool call's
    name and input, a tool result's content, a thinking block), as the secret scanner reads them: in an agent's
    transcript most of what it saw and did is there."""
    return "\n".join(_strings(content))


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in _NOT_TEXT:
                yield from _strings(item)


_NULLABLE = 6
"""search_docs' and search_history's columns from the seventh on (type, status, stale_after, ref, reverses, agent;
then until) are NULL or text (until: a seq): a row binds 0 for NULL, which SQL makes NULL (see
VERSIONS_HISTORY). `since` never is."""
DOCS_INSERT = ("INSERT OR IGNORE INTO search_docs VALUES ("
               + ", ".join(f"?{i}" if i <= _NULLABLE else f"NULLIF(?{i}, 0)" for i in range(1, len(COLUMNS) + 1)) + ")")
HISTORY_INSERT = (f"INSERT OR IGNORE INTO search_history ({', '.join(COLUMNS)}, until, since) VALUES ("
                  + ", ".join(f"?{i}" if i <= _NULLABLE else f"NULLIF(?{i}, 0)" for i in range(1, len(COLUMNS) + 2))
                  + f", ?{len(COLUMNS) + 2})")
"""A search row (a page's, a file's, an entry's, a loop message's: `page_row`, `file_row`, `entry_row`,
`loop_row`), 0 in place of each NULL; a history row has its `until` (0: current) and `since` after them."""


def page_row(seq, kind, layer, key, slug, fm, text, ref=None, agent=None, title=None, hook=None) -> tuple:
    """A page version's row; `title` and `hook` when the caller has them already (render's title_of, hook_of)."""
    description = render.hook_of(fm) if hook is None else hook
    status = fm.get("status")
    stale = fm.get("stale_after")
    return (seq, kind, layer, key, render.title_of(slug, fm, text) if title is None else title,
            f"{description}\n\n{text}" if description else text, str(fm.get("type")),
            0 if status is None else trust.stored_status(status), 0 if stale is None else trust.stale_day(stale) or 0,
            0 if ref is None else ref, 0, 0 if agent is None else agent)


VERSION_COLUMNS = ("slug", "seq", "version_id", "ts", "deleted", "parents", "title", "hook", "doc", "body", "type",
                   "status", "stale_after", "until")
"""A wiki page version as the wiki fold hands it over (fold.WikiFold._row): its page_versions row, then what its
search_history row adds, 0 for the status, stale date and `until` it has not (see VERSIONS_HISTORY). One row for
both tables: staged once in a temporary table (`stage_versions`), from which SQL copies each table's columns."""
VERSIONS_HISTORY = (
    "INSERT INTO search_history (id, kind, layer, key, title, body, type, status, stale_after, until, since) "
    f"SELECT seq, 'page', '{MIND}', '{MIND}/' || slug, title, body, type, NULLIF(status, 0), NULLIF(stale_after, 0), "
    "NULLIF(until, 0), seq FROM temp.versions WHERE deleted = 0")
"""The search_history rows of the staged wiki page versions (a tombstone has none): the columns every such row has
alike are written by SQL. The absent status, stale date and `until` are bound as 0, which SQL makes NULL (binding
a None costs sqlite3 as much as a short string, through its adapter lookup: a third of a replay's search index
went into binding the Nones of a million page rows). A status or date is a string, never the integer 0."""


def stage_versions(db, rows: list) -> None:
    """Wiki page version rows (VERSION_COLUMNS) into `temp.versions`, in place of the last ones staged."""
    db.execute(f"CREATE TEMP TABLE IF NOT EXISTS versions ({', '.join(VERSION_COLUMNS)})")
    db.execute("DELETE FROM temp.versions")
    insert_many(db, f"INSERT INTO temp.versions VALUES ({','.join('?' * len(VERSION_COLUMNS))})", rows)


def file_row(seq, path, content: bytes, mime) -> tuple | None:
    try:
        text = bytes(content).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else (seq, "file", AGENT, path, path, text, 0 if mime is None else mime, 0, 0, 0, 0, 0)


def entry_row(seq, layer, id, type, date, content, reverses, agent) -> tuple:
    return (seq, "entry", layer, id, f"[{type}] {date}", content, type, 0, 0, id, 0 if reverses is None else reverses,
            0 if agent is None else agent)


_ENTRY_ROW = ("SELECT seq, 'entry', layer, id, '[' || type || '] ' || date, content, NULLIF(type, 0), NULL, NULL, "
              "NULLIF(id, 0), NULLIF(reverses, 0), NULLIF(agent, 0)")
"""`entry_row` in SQL, of a row staged in temp.staged_entries (shared.stage_entries), as DOCS_INSERT binds it."""
STAGED_ENTRIES = (
    f"INSERT OR IGNORE INTO search_docs {_ENTRY_ROW} FROM temp.staged_entries",
    "INSERT INTO search_docs_fts (rowid, title, body) SELECT d.id, d.title, d.body FROM temp.staged_entries AS s "
    "JOIN search_docs AS d ON d.id = s.seq WHERE d.kind = 'entry' ORDER BY d.id",
    f"INSERT OR IGNORE INTO search_history ({', '.join(COLUMNS)}, until, since) {_ENTRY_ROW}, NULL, seq "
    "FROM temp.staged_entries",
    f"INSERT INTO search_history_fts (rowid, title, body) SELECT ({OPEN} << {SPAN}) | h.id, h.title, h.body "
    "FROM temp.staged_entries AS s JOIN search_history AS h ON h.id = s.seq WHERE h.kind = 'entry' ORDER BY h.id")
"""A bulk batch's entries' search rows, made by SQL from their staged `entries` rows: each entry's search_docs row
and its full-text entry, its search_history row (current for good: NEVER_CLOSED) and its entry. A row whose id is
taken already (by an archived loop message: `archived_loop_rows`) is left out, as `write_batch` leaves it out, and
the one that holds the id is not indexed again (it is no entry's)."""


def loop_row(seq, loop, role, text) -> tuple:
    return (seq, "loop", LOOP, loop, role, text, role, 0, 0, 0, 0, 0)


def archived_loop_rows(source: str, data: bytes) -> list[tuple]:
    """The loop messages inside an audit blob (one imported from an ADF file: `audit read` reaches them)."""
    if not is_loop_source(source):
        return []
    try:
        entries = blob_json(data)  # bounded: a brotli bomb in an old log is skipped, not expanded
    except MemError:
        return []
    if not isinstance(entries, list):
        return []
    loop = source[5:] or "main"
    return [loop_row(e["seq"], loop, str(e.get("role", "")), text_of(e.get("content_json") or []))
            for e in entries if isinstance(e, dict) and isinstance(e.get("seq"), int)]


NAMED_SINCE = ("SELECT id, seq FROM shared_parents WHERE id IN (SELECT value FROM json_each(?1)) UNION SELECT p.value, "
               "NULL FROM shared_void v CROSS JOIN shared_versions c ON c.layer = v.layer AND c.slug = v.slug AND "
               "c.id = v.id, json_each(c.parents) p WHERE p.value IN (SELECT value FROM json_each(?1))")
"""Of the shared page versions whose ids are the JSON array ?1: each that a version names as a parent, with the seq of
the first that did, and each that a void version names (seq NULL). CROSS JOIN: the void versions (few, often none)
are read first, each one's row then found by its key, where SQLite's choice was to read every version folded so far,
blobs and all, at each batch (a team's catch-up: 200,000 versions, fifty times)."""


class SearchFold:
    """Folds events into `search_docs` (per batch, only what is current at its end is written) and
    `search_history` (every version, closed by the version that replaced it)."""

    def __init__(self, views, bulk: bool = False):
        """`bulk`: a build from nothing (bulk.build), whose rows another connection writes: `flush` returns each
        batch (for `write_batch`), and no stored row is read back (there were none when it began)."""
        self.db = views.db
        self.bulk = bulk
        self._stored_rows: dict[tuple, list[tuple[int, str | None]]] = {}  # (kind, key) -> stored current rows
        self.omitted: set[int] = set()  # ids of shared page versions left out of search_history (`_omit`)
        self._reset()

    def _reset(self):
        self.pending: dict[tuple, tuple] = {}  # (kind, key[, ref]) -> its row
        self.gone: set[int] = set()  # ids of stored rows that stopped being current
        self.history: list[tuple] = []  # the search_history row of every version the batch made
        self.closed_files: list[tuple[int, str]] = []  # (seq, path) of each write or delete of a file
        self.closed_shared: list[tuple[int, int]] = []  # (seq, id) of each shared page version named as a parent
        self.reset_shared: list[tuple[int, int | None]] = []  # (id, until) of closed rows whose `until` changes
        self.gaps: list[tuple[str | None, int]] = []  # (gaps, id) of the versions of the pages voids touched
        self.shared_from: int | None = None  # the batch's first shared page version's seq

    def _stored(self, kind: str, key: str) -> list[tuple[int, str | None]]:
        """The (id, ref) of the stored rows of (kind, key) not yet replaced, read once per fold."""
        rows = self._stored_rows.get((kind, key))
        if rows is None:
            rows = self._stored_rows[(kind, key)] = [] if self.bulk else self.db.execute(
                "SELECT id, ref FROM search_docs WHERE kind = ? AND key = ?", (kind, key)).fetchall()
        return rows

    def _replace(self, kind: str, key: str, refs: set | None = None, seq: int | None = None) -> None:
        """The current version(s) of (kind, key) stop being current; `refs` limits it to those versions,
        whose history rows `seq` (the version or delete naming them as parents) closes."""
        if refs is None:
            self.pending.pop((kind, key), None)
        else:
            for ref in refs:
                row = self.pending.pop((kind, key, ref), None)
                if row is not None:
                    self.closed_shared.append((seq, row[0]))
        rows = self._stored(kind, key)
        if rows:
            kept = []
            for id, ref in rows:
                if refs is None or ref in refs:
                    self.gone.add(id)
                    if refs is not None:
                        self.closed_shared.append((seq, id))
                else:
                    kept.append((id, ref))
            rows[:] = kept

    def _add(self, key: tuple, row: tuple, since: int | None = None) -> None:
        self.pending[key] = row
        self.history.append((*row, 0, row[0] if since is None else since))

    def apply(self, seq: int, layer: str, body, id: str | None = None, agent: str | None = None) -> None:
        """Folds one loop, file or shared-layer event (wiki pages come from the wiki fold's batch, at flush). In
        `bulk`, an entry is left to the writer, which makes its rows from its `entries` row (STAGED_ENTRIES)."""
        if isinstance(body, EntryAppend):  # first: a team's layers hold mostly entries
            if self.bulk:
                return
            self._add(("entry", id), entry_row(seq, layer, id, body.type, body.date, body.content, body.reverses,
                                               agent))
        elif isinstance(body, LoopAppend):
            self._add(("loop", seq), loop_row(seq, body.loop, body.role, text_of(body.content)))
        elif isinstance(body, LoopCompact):
            self._add(("loop", seq), loop_row(seq, body.loop, "user", body.summary))
        elif isinstance(body, AuditImport):
            for row in archived_loop_rows(body.source, body.data):
                if row[0] < seq:  # found from the import on; an import puts every seq it names first
                    self._add(("loop", row[0]), row, since=seq)  # (adf_file._line_up): no other row has it
        elif isinstance(body, FileWrite):
            self._replace("file", body.path)
            self.closed_files.append((seq, body.path))
            row = file_row(seq, body.path, body.content, body.mime_type)
            if row is not None:
                self._add(("file", body.path), row)
        elif isinstance(body, FileDelete):
            self._replace("file", body.path)
            self.closed_files.append((seq, body.path))
        elif isinstance(body, (PageIngest, PageUpdate)):
            key = f"{layer}/{body.slug}"
            if self.shared_from is None:
                self.shared_from = seq
            self._replace("shared-page", key, set(body.parents), seq)
            self._add(("shared-page", key, id), page_row(seq, "shared-page", layer, key, body.slug,
                                                         body.frontmatter, body.text, id, agent))
        elif isinstance(body, PageDelete):
            if self.shared_from is None:
                self.shared_from = seq
            self._replace("shared-page", f"{layer}/{body.slug}", set(body.parents), seq)

    def _settle_shared(self) -> None:
        """Brings the batch's shared page rows in line with the heads the shared fold left (it flushes first,
        projections.shared), each from the seq it was one: a version named on arrival by one folded before it
        (not void then) is left out; a version void from a seq is closed then (left out when void from its own
        seq), and what it had closed is closed again by what else named it (`_unname`); and a version a head
        again, once what named it is void, is current again (`_found_again`)."""
        db = self.db
        added = {row[9]: row for row in self.history if row[1] == "shared-page"}
        pages = set()
        if added:
            refs = msgspec.json.encode(list(added))
            voided = db.execute("SELECT 1 FROM shared_void LIMIT 1").fetchone() is not None
            early = db.execute(NAMED_SINCE, (refs,)).fetchall()
            for ref, first in dict(early).items():  # a ref twice (named, and by a void version): once
                seq, layer, key = added[ref][0], added[ref][2], added[ref][3]
                if not voided and first > seq:
                    continue  # no version is void: shared_parents has the first that named it, come after it
                slug = key.split("/", 1)[1]
                if db.execute("SELECT 1 FROM shared_versions c, json_each(c.parents) p WHERE c.layer = ?1 AND c.slug = "
                              "?2 AND p.value = ?3 AND c.seq < ?4 AND c.id NOT IN (SELECT id FROM shared_void WHERE "
                              "layer = ?1 AND slug = ?2 AND seq <= ?4)", (layer, slug, ref, seq)).fetchone():
                    self.pending.pop(("shared-page", key, ref), None)
                    self._omit(seq)
                    pages.add((layer, slug))
        voids = db.execute("SELECT v.layer, v.slug, v.id, v.seq, s.seq FROM shared_void v JOIN shared_versions s ON "
                           "s.layer = v.layer AND s.slug = v.slug AND s.id = v.id WHERE v.seq >= ?",
                           (self.shared_from,)).fetchall()
        for layer, slug, ref, since, seq in voids:
            key = f"{layer}/{slug}"
            pages.add((layer, slug))
            if since == seq and ref in added:
                self.pending.pop(("shared-page", key, ref), None)
                self._omit(seq)
            else:
                self._replace("shared-page", key, {ref}, since)
                self.closed_shared = [(min(at, since) if id == seq else at, id) for at, id in self.closed_shared]
        if voids:
            self._unname(voids)
        named = {}  # (layer, slug) -> what the batch's void versions name
        for layer, slug, ref, _since, _seq in voids:
            (parents,) = db.execute("SELECT parents FROM shared_versions WHERE layer = ? AND slug = ? AND id = ?",
                                    (layer, slug, ref)).fetchone()
            named.setdefault((layer, slug), set()).update(msgspec.json.decode(parents))
        for layer, slug in sorted(pages):
            key = f"{layer}/{slug}"
            current = {ref for _id, ref in self._stored("shared-page", key)}
            current.update(k[2] for k in self.pending if k[0] == "shared-page" and k[1] == key)
            heads = {ref for (ref,) in db.execute("SELECT id FROM shared_heads WHERE layer = ? AND slug = ?",
                                                  (layer, slug))}
            for ref in sorted((heads | named.get((layer, slug), set())) - current):
                self._found_again(layer, slug, ref, ref in heads)
            self._gaps(layer, slug)

    def _gaps(self, layer: str, slug: str) -> None:
        """The `gaps` of every version of a page: from each child that came after it and became void later, to
        when it did (the child was a head over that span, not the version). Worked out from the whole page each
        time, so a fold and a rebuild in other batches agree."""
        spans: dict[int, list[list[int]]] = {}
        for id, start, end in self.db.execute(
                "SELECT x.seq, c.seq, v.seq FROM shared_versions x JOIN shared_versions c ON c.layer = x.layer AND "
                "c.slug = x.slug AND c.seq > x.seq JOIN shared_void v ON v.layer = c.layer AND v.slug = c.slug AND "
                "v.id = c.id AND v.seq > c.seq WHERE x.layer = ?1 AND x.slug = ?2 AND EXISTS (SELECT 1 FROM "
                "json_each(c.parents) p WHERE p.value = x.id) ORDER BY x.seq, c.seq, v.seq", (layer, slug)):
            merged = spans.setdefault(id, [])
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for (id,) in self.db.execute("SELECT seq FROM shared_versions WHERE layer = ? AND slug = ? ORDER BY seq",
                                     (layer, slug)):
            self.gaps.append((msgspec.json.encode(spans[id]).decode() if id in spans else None, id))

    def _found_again(self, layer: str, slug: str, ref: str, head: bool) -> None:
        """A version of a page the batch made something void on, not current: current again when it is a head
        now (`reset_shared`), and one with no history row yet (named on arrival by a version void since) gets
        one, from when the last of those became void to the first version not void that named it after."""
        db, key = self.db, f"{layer}/{slug}"
        found = db.execute("SELECT seq, agent, doc, (SELECT seq FROM shared_void WHERE layer = ?1 AND slug = ?2 AND "
                           "id = ?3) FROM shared_versions WHERE layer = ?1 AND slug = ?2 AND id = ?3",
                           (layer, slug, ref)).fetchone()
        if found is None or found[2] is None:
            return  # not come, or a delete: no row
        seq, agent, doc, void = found
        page = decode_body(doc)
        row = page_row(seq, "shared-page", layer, key, slug, page.frontmatter, page.text, ref, agent)
        if seq not in self.omitted and (self.bulk or any(h[0] == seq for h in self.history) or db.execute(
                "SELECT 1 FROM search_history WHERE id = ?", (seq,)).fetchone()):
            if head:
                self.pending[("shared-page", key, ref)] = row
                self.reset_shared.append((seq, None))
            return
        namers = db.execute("SELECT c.seq, (SELECT seq FROM shared_void WHERE layer = ?1 AND slug = ?2 AND id = c.id) "
                            "FROM shared_versions c, json_each(c.parents) p WHERE c.layer = ?1 AND c.slug = ?2 AND "
                            "p.value = ?3", (layer, slug, ref)).fetchall()
        if any(at < seq and voided is None for at, voided in namers):
            return  # named on arrival by a version not void: never found
        since = max([seq] + [voided for at, voided in namers if at < seq])
        until = min([at for at, voided in namers if at > seq and voided is None] + ([void] if void else []),
                    default=None)
        if until is not None and until <= since:
            return
        self.omitted.discard(seq)
        self.history.append((*row, 0 if until is None else until, since))
        if until is None:
            self.pending[("shared-page", key, ref)] = row

    def _unname(self, voids: list[tuple]) -> None:
        """Takes back what the batch's void versions closed: a version one of them named is closed by the
        first version not void that named it once it had come, or by its own void seq, whichever is first;
        else it stays open (`_settle_shared` finds it a head again). A version closed by an earlier batch
        gets its new `until` through `reset_shared`."""
        db, fixes = self.db, {}
        for layer, slug, ref, _since, seq in voids:
            (parents,) = db.execute("SELECT parents FROM shared_versions WHERE layer = ? AND slug = ? AND id = ?",
                                    (layer, slug, ref)).fetchone()
            for parent in msgspec.json.decode(parents):
                found = db.execute("SELECT seq, (SELECT seq FROM shared_void WHERE layer = ?1 AND slug = ?2 AND id = ?3) "
                                   "FROM shared_versions WHERE layer = ?1 AND slug = ?2 AND id = ?3",
                                   (layer, slug, parent)).fetchone()
                if found is None or found[0] > seq:
                    continue  # not come, or named on arrival (see `_settle_shared`)
                (first,) = db.execute(
                    "SELECT MIN(c.seq) FROM shared_versions c, json_each(c.parents) p WHERE c.layer = ?1 AND c.slug = ?2 "
                    "AND p.value = ?3 AND c.seq > ?4 AND c.id NOT IN (SELECT id FROM shared_void WHERE layer = ?1 AND "
                    "slug = ?2)", (layer, slug, parent, found[0])).fetchone()
                fixes[found[0]] = min([at for at in (first, found[1]) if at is not None], default=None)
        here = {id for _at, id in self.closed_shared}
        self.closed_shared = [(fixes[id], id) if id in fixes else (at, id) for at, id in self.closed_shared
                              if id not in fixes or fixes[id] is not None]
        self.reset_shared += [(id, until) for id, until in fixes.items() if id not in here and until is not None]

    def _omit(self, id: int) -> None:
        """Leaves out the history row of a version of the batch that is never found (see `_settle_shared`)."""
        self.history = [row for row in self.history if row[0] != id]
        self.omitted.add(id)

    def take_pages(self, touched: set[str], current) -> None:
        """The wiki pages a batch touched, as the wiki fold left them: `current(slug)` is None for a page
        deleted or renamed away, else (seq, version_id, title, hook, doc, ts). Reading them once per
        batch, not once per event, keeps a page updated 500 times in a batch to one row written."""
        for slug in touched:
            key = f"mind/{slug}"
            self._replace("page", key)
            page = current(slug)
            if page is not None:
                document = decode_body(page[4])
                self.pending[("page", key)] = page_row(page[0], "page", MIND, key, slug, document.frontmatter,
                                                       document.text, title=page[2], hook=page[3])

    def flush(self, page_versions: list = (), replaced_pages: list[tuple[int, int]] = ()) -> tuple | None:
        """Writes the batch (`write_batch`); the caller holds the transaction. In `bulk`, returns it instead
        (`write_batch`'s arguments after the connection).

        `page_versions` are the rows (VERSION_COLUMNS) of the wiki page versions and tombstones the batch made
        (the versions they replaced already closed), `replaced_pages` the (seq of a version stored before, seq
        that replaced it) of each wiki version, rename or delete. In `bulk` the writer has those rows already:
        the batch returned holds none."""
        if self.shared_from is not None:
            self._settle_shared()
        rows = sorted(self.pending.values())
        for row in rows:
            if row[1] in ("page", "file", "shared-page"):
                self._stored(row[1], row[3]).append((row[0], row[9]))
        batch = (sorted(self.gone), rows, [] if self.bulk else page_versions, replaced_pages,
                 sorted(self.history, key=_by_id_since),
                 self.closed_files, self.closed_shared, self.reset_shared, self.gaps)
        self._reset()
        if self.bulk:
            return batch
        write_batch(self.db, *batch)
        return None


def write_batch(db, gone: list[int], rows: list, page_versions: list, replaced_pages: list, history: list,
                closed_files: list, closed_shared: list, reset_shared: list = (), gaps: list = (), *,
                bulk: bool = False, staged: bool = False, staged_entries: bool = False) -> None:
    """A batch of SearchFold (its `flush`), in the connection's transaction: the search_docs rows that stopped
    being current and those that are, then the search_history rows and the versions they closed, then (but in
    `bulk`) their search_history_fts entries (`_index`).

    `bulk`: a build from nothing, in a file without the FTS triggers (`bulk_begin`): search_docs' rows are
    indexed here, together (much cheaper than a trigger row by row); search_history's once closed
    (`index_closed`: their rowid final then), the versions still current at the end by `bulk_end`. `staged`:
    `page_versions` are in temp.versions already (`stage_versions`); `staged_entries`: the batch's entries are in
    temp.staged_entries (shared.stage_entries), their search rows not among `rows` and `history` (STAGED_ENTRIES)."""
    moved, fresh = _changing(db, page_versions, replaced_pages, history, closed_files, closed_shared)
    if gone and bulk:  # one statement each: FTS5 writes out what it holds at each statement (a segment each)
        ids = msgspec.json.encode(gone)
        db.execute("INSERT INTO search_docs_fts (search_docs_fts, rowid, title, body) SELECT 'delete', id, title, "
                   "body FROM search_docs WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id", (ids,))
        db.execute("DELETE FROM search_docs WHERE id IN (SELECT value FROM json_each(?))", (ids,))
    elif gone:
        db.executemany("DELETE FROM search_docs WHERE id = ?", [(id,) for id in gone])
    if staged_entries:  # before the other rows: an entry's row comes first of those with its id (by `flush`'s sort)
        for statement in STAGED_ENTRIES:
            db.execute(statement)
    if bulk and rows:  # indexed: the rows the insert adds (one whose id is taken already is left out)
        ids = msgspec.json.encode([row[0] for row in rows])
        taken = {id for (id,) in db.execute("SELECT id FROM search_docs WHERE id IN (SELECT value FROM json_each(?))",
                                            (ids,))}
        insert_many(db, DOCS_INSERT, rows)
        added = msgspec.json.encode(sorted({row[0] for row in rows} - taken))
        db.execute("INSERT INTO search_docs_fts (rowid, title, body) SELECT id, title, body FROM search_docs "
                   "WHERE id IN (SELECT value FROM json_each(?))", (added,))
    else:
        insert_many(db, DOCS_INSERT, rows)
    if page_versions:
        if not staged:
            stage_versions(db, page_versions)
        db.execute(VERSIONS_HISTORY)  # a version's id is its event's seq: still free
    if replaced_pages and bulk:
        _close_pages(db, replaced_pages)
    elif replaced_pages:
        db.executemany("UPDATE search_history SET until = ? WHERE id = ? AND kind = 'page'",
                       [(seq, id) for id, seq in replaced_pages])
    # sorted by (id, since): the first wins
    insert_many(db, HISTORY_INSERT, history)
    if closed_files:
        db.executemany("UPDATE search_history SET until = ? WHERE kind = 'file' AND key = ? "
                       "AND until IS NULL AND id < ?", [(seq, path, seq) for seq, path in closed_files])
    if closed_shared and bulk:
        _close_shared(db, closed_shared)
    elif closed_shared:
        db.executemany(CLOSE_SHARED, closed_shared)
    if reset_shared:
        _reset_until(db, reset_shared, {*moved, *fresh}, bulk)
    if gaps:
        db.executemany("UPDATE search_history SET gaps = ? WHERE id = ? AND kind = 'shared-page'", gaps)
    if bulk:
        if staged:
            index_closed(db, sorted({*moved, *fresh} - {row[1] for row in page_versions if not row[4]}), staged=True)
        else:
            index_closed(db, sorted({*moved, *fresh}))
    elif moved or fresh:
        _index(db, moved, fresh)


CLOSE_STAGED_PAGES = ("UPDATE search_history SET until = (SELECT seq FROM temp.closed_pages AS c WHERE c.id = "
                      "search_history.id) WHERE id IN (SELECT id FROM temp.closed_pages) AND kind = 'page'")


def _close_pages(db, replaced_pages: list[tuple[int, int]]) -> None:
    """A bulk batch's (id, seq) of the wiki page versions of earlier batches it closed (two thousand a batch on the
    bench log): staged, then `until` set by one statement (CLOSE_STAGED_PAGES), not one UPDATE a row (3.7 -> 2.1
    µs a row); the last seq of an id, as one UPDATE a row would leave it."""
    db.execute("CREATE TEMP TABLE IF NOT EXISTS closed_pages (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL)")
    db.execute("DELETE FROM temp.closed_pages")
    insert_many(db, "INSERT OR REPLACE INTO temp.closed_pages VALUES (?, ?)", replaced_pages)
    db.execute(CLOSE_STAGED_PAGES)


CLOSE_SHARED = "UPDATE search_history SET until = ? WHERE id = ? AND kind = 'shared-page' AND until IS NULL"
"""A shared page version closed at a seq (named as a parent), unless closed already: the first seq stays."""
CLOSE_STAGED_SHARED = ("UPDATE search_history SET until = (SELECT seq FROM temp.closed_shared AS c WHERE c.id = "
                       "search_history.id) WHERE id IN (SELECT id FROM temp.closed_shared) AND kind = 'shared-page' "
                       "AND until IS NULL")


def _close_shared(db, closed_shared: list[tuple[int, int]]) -> None:
    """A bulk batch's (seq, id) of the shared page versions it closed (a team's pages: one a version), as
    CLOSE_SHARED row by row would set them, by one statement (CLOSE_STAGED_SHARED): the first seq of an id staged."""
    db.execute("CREATE TEMP TABLE IF NOT EXISTS closed_shared (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL)")
    db.execute("DELETE FROM temp.closed_shared")
    insert_many(db, "INSERT OR IGNORE INTO temp.closed_shared VALUES (?2, ?1)", closed_shared)
    db.execute(CLOSE_STAGED_SHARED)


def _reset_until(db, rows: list[tuple[int, int | None]], indexed: set[int], bulk: bool) -> None:
    """Gives shared page versions closed by an earlier batch another `until` (SearchFold._unname; None: current
    again), their index entries moved to the bucket it puts them in (in `bulk`, where only closed versions are
    indexed before the end, a version current again waits for `bulk_end`). `indexed`: the ids this batch
    indexes anyway (it finds them as they are once written)."""
    old = db.execute("SELECT id, until, title, body FROM search_history WHERE id IN (SELECT value FROM json_each(?)) "
                     "AND until IS NOT NULL", (msgspec.json.encode(sorted({id for id, _u in rows} - indexed)),)).fetchall()
    db.executemany("UPDATE search_history SET until = ? WHERE id = ? AND kind = 'shared-page'",
                   [(until, id) for id, until in rows])
    new = dict(rows)
    writes = [("delete", history_rowid(id, until), title, body) for id, until, title, body in old]
    writes += [(None, history_rowid(id, new[id]), title, body) for id, _until, title, body in old
               if not bulk or new[id] is not None]
    db.executemany(_FTS_WRITE, sorted(writes, key=_rowid_of))


def _changing(db, page_versions, replaced_pages, history, closed_files, closed_shared) -> tuple[list[int], list[int]]:
    """Before a batch is written: (ids of the stored versions still current that it may close, ids of the
    versions it adds), for `_index`."""
    candidates = {id for id, _seq in replaced_pages} | {id for _seq, id in closed_shared}
    moved = [id for (id,) in db.execute(
        "SELECT id FROM search_history WHERE id IN (SELECT value FROM json_each(?)) AND until IS NULL",
        (msgspec.json.encode(sorted(candidates)),))]
    if closed_files:
        moved += [id for (id,) in db.execute(
            "SELECT id FROM search_history WHERE kind = 'file' AND until IS NULL "
            "AND key IN (SELECT value FROM json_each(?))", (msgspec.json.encode(sorted({p for _s, p in closed_files})),))]
    fresh = {row[1] for row in page_versions if not row[4]}
    if history:
        offered = sorted({row[0] for row in history} - fresh)
        taken = {id for (id,) in db.execute("SELECT id FROM search_history WHERE id IN "
                                            "(SELECT value FROM json_each(?))", (msgspec.json.encode(offered),))}
        fresh.update(id for id in offered if id not in taken)
    return moved, sorted(fresh)


def _index(db, moved: list[int], fresh: list[int]) -> None:
    """A batch's search_history_fts entries, once its rows are written: each new version under the bucket its
    `until` puts it in, each stored version it closed taken out of the open bucket and put in its own; all in
    rowid order (see the module's docstring)."""
    writes, stored = [], set(moved)
    for id, until, title, body in db.execute(
            "SELECT id, until, title, body FROM search_history WHERE id IN (SELECT value FROM json_each(?))",
            (msgspec.json.encode([*moved, *fresh]),)):
        if id in stored:
            if until is None:
                continue
            writes.append(("delete", history_rowid(id, None), title, body))
        writes.append((None, history_rowid(id, until), title, body))
    writes.sort(key=_rowid_of)
    db.executemany(_FTS_WRITE, writes)


def bulk_begin(db) -> list[str]:
    """Takes search_docs' FTS triggers away from a new views file for `write_batch(bulk=True)`; returns what
    `bulk_end` needs to put them back."""
    triggers = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                          "AND tbl_name IN ('search_docs', 'search_history')").fetchall()
    for name, _sql in triggers:
        db.execute(f'DROP TRIGGER "{name}"')
    return [sql for _name, sql in triggers]


def bulk_end(db, triggers: list[str]) -> None:
    """After the last bulk batch, in the caller's transaction: the versions still current indexed (`index_open`)
    and the triggers back."""
    index_open(db)
    for sql in triggers:
        db.execute(sql)


def _by_id_since(row: tuple) -> tuple[int, int]:
    return row[0], row[-1]


def _rowid_of(write: tuple) -> int:
    return write[1]


# --- queries -------------------------------------------------------------------------------------

class Hit(msgspec.Struct):
    """One search result: where it lives, what to cite, its trust status and why it is flagged."""

    kind: str
    path: str
    citation: str
    title: str
    snippet: str
    seq: int
    status: str | None = None
    flags: list[str] = []
    layer: str | None = None
    type: str | None = None
    score: float = 0.0


_OPERATOR_LIKE = re.compile(r"(?<!\S)(?:OR|AND|NOT|NEAR)(?!\S)|(?<!\S)-\w\S*|(?<!\w)\w+\*|\bNEAR\(")


def operators_in(query: str) -> list[str]:
    """What in a query other search tools take as operators (`OR`, `AND`, `NOT`, `NEAR(`, `-word`, `prefix*`) and
    `search` takes as words that must appear, like any other (`quote`): said beside a "no matches", so that an
    agent does not conclude it remembers nothing of either alternative."""
    return list(dict.fromkeys(match.group() for match in _OPERATOR_LIKE.finditer(query)))


def operators_hint(query: str) -> str | None:
    """One line on the operators a query seems to hold (`operators_in`), or None."""
    found = operators_in(query)
    if not found:
        return None
    return (f"{', '.join(found)} {'is' if len(found) == 1 else 'are'} searched as text, not as an operator: every "
            "word of a query must appear (\"quoted phrases\" too); search for each alternative on its own")


def quote(query: str) -> str:
    """The user's words as an FTS5 query: every word quoted (so `NOT`, `-` or `:` are just text), all required.
    A NUL parts words, as the index's tokenizer parts them: inside a quoted word, FTS5 read it as the string's end."""
    import sqlite_utils

    return sqlite_utils.Database(memory=True).quote_fts(query.replace("\0", " "))


def search(views, query: str, *, as_of: int | None = None, day: str, kinds=(), layers=(), types=(),
           agent: str | None = None, self_agent: str | None = None, status: str | None = None,
           include_all: bool = False, limit: int = 10) -> list[Hit]:
    """The best `limit` hits for `query`, as memory stood at `as_of` (None: now), staleness judged on `day`.

    Withheld material (superseded, deprecated, archived) is left out unless `include_all` or a
    `status` filter asks for it; flagged material (stale, reversed) ranks below the rest.
    """
    if agent is not None and not agent.strip():  # read as no filter: every agent's hits (nc17b)
        raise InvalidInput("an agent filter needs an agent's name", field="agent")
    if status is not None and not status.strip():
        raise InvalidInput("a status filter needs a word (statuses are free-form: current, draft, deprecated, ...)")
    match = quote(query)
    if not match:
        raise InvalidInput("the query is empty: give at least one word to search for", field="query")
    if not any(char.isalnum() for char in query):
        raise InvalidInput(f"the query {query.strip()!r} holds no word to search for: the index keeps words (letters "
                           "and digits), not emoji or punctuation", field="query")
    checkpoint = views.checkpoint()
    past = as_of is not None and as_of < checkpoint
    where, params = [], []
    if past:
        where.append("d.since <= ? AND (d.until IS NULL OR d.until > ?) AND (d.gaps IS NULL OR NOT EXISTS "
                     "(SELECT 1 FROM json_each(d.gaps) g WHERE json_extract(g.value, '$[0]') <= ? AND json_extract(g.value, '$[1]') > ?))")
        params += [as_of, as_of, as_of, as_of]
    local = sorted(views.local_layers())
    if kinds:
        condition, values = _kinds_condition(kinds, local)
        where.append(condition)
        params += values
    if layers:
        where.append(f"d.layer IN ({','.join('?' * len(layers))})")
        params += list(layers)
    if types:
        where.append(f"lower(d.type) IN ({','.join('?' * len(types))})")
        params += [t.lower() for t in types]
    if agent:
        where.append("coalesce(d.agent, ?) = ?")
        params += [self_agent, agent]
    if status:
        where.append("lower(d.status) LIKE ?")
        params.append(status.lower().strip() + "%")
    elif not include_all:
        where.append(trust.WITHHELD_SQL.replace("status", "d.status"))
    # Ranked without snippets: SQLite would make one for every match before sorting.
    columns = ", ".join("d." + c for c in COLUMNS)
    order = f"{' AND '.join(where) or 'true'} ORDER BY (d.stale_after IS NOT NULL AND d.stale_after < ?), score LIMIT ?"
    if past:
        table = "search_history"
        sql, params = _past_query(views.db, query, match, _alive_ranges(as_of, checkpoint), where, params)
    else:
        table = "search_docs"
        sql = (f"SELECT {columns}, bm25(search_docs_fts, 3.0, 1.0) AS score FROM search_docs_fts "
               f"JOIN search_docs d ON d.id = search_docs_fts.rowid WHERE search_docs_fts MATCH ? AND {order}")
        params = [match, *params]
    point = checkpoint if as_of is None else min(as_of, checkpoint)
    wanted = min(limit * 3 + 20, LARGEST_INTEGER)  # a limit of 2**63 - 1 is any number of hits, not an overflow
    rows = views.db.execute(sql, [*params, day, wanted]).fetchall()
    if not rows and status:
        _refuse_unknown_status(views.db, status)
    if not rows and (agent or types):
        _refuse_unknown_names(views.db, agent, self_agent, types)
    stems = _stems(query)
    found = [hit for hit in (_hit(views, table, row, point, day, local) for row in rows) if hit is not None]
    bodies = {row[0]: row[5] for row in rows}
    if (not kinds or ALWAYS in kinds) and (not layers or MIND in layers) and not types and not status and (
            not agent or agent == self_agent):
        found += always_hits(views, match, stems, point, limit)
    hits = sorted(found, key=lambda h: (trust.demoted(h.flags), h.score))[:limit]
    for hit in hits:
        if hit.kind != ALWAYS:
            hit.snippet = snippet(bodies[hit.seq], stems)
    return hits


def always_hits(views, match: str, stems: list[str], as_of: int, limit: int) -> list[Hit]:
    """The `## Always` lines of mind.md as of a seq that hold the query (`match`, as `quote` makes it), the best
    `limit` ranked by BM25 among themselves, each cited as mind.md, its seq the event that added it (`always_added`).
    They are few and always in front of the agent, so they are matched when searched, in a scratch full-text table
    with the indexes' tokenizer: a line in the indexes would be a version of mind.md at every page write."""
    lines = views.always(as_of)
    if not lines:
        return []
    scratch = sqlite3.connect(":memory:")
    try:
        scratch.execute("CREATE VIRTUAL TABLE lines USING fts5(body, tokenize='porter')")
        scratch.executemany("INSERT INTO lines (rowid, body) VALUES (?, ?)", enumerate(lines))
        ranked = scratch.execute("SELECT rowid, bm25(lines) FROM lines WHERE lines MATCH ? ORDER BY bm25(lines) "
                                 "LIMIT ?", (match, limit)).fetchall()
    finally:
        scratch.close()
    return [Hit(kind=ALWAYS, path="mind.md", citation="adf-file://mind.md", title="Always",
                snippet=snippet(lines[index], stems), seq=always_added(views, lines[index], as_of), layer=MIND,
                score=_score(score))
            for index, score in ranked]


def always_added(views, line: str, as_of: int) -> int:
    """The seq of the event that added an Always line standing as of a seq: the first version of `## Always` since the
    last one before `as_of` without it (of a line given twice, the version since which it has been there at all). Read
    back from `as_of` along the versions' primary key, one comparison of bytes each: every search that finds a line
    replayed the whole history of the section (4 s with 3,000 edits: nc23a)."""
    quoted = json.dumps(line, ensure_ascii=False)  # as the versions' rows hold it (fold.lines_json)
    without = views.db.execute("SELECT seq FROM always_versions WHERE seq <= ? AND instr(lines, ?) = 0 "
                               "ORDER BY seq DESC LIMIT 1", (as_of, quoted)).fetchone()
    return views.db.execute("SELECT min(seq) FROM always_versions WHERE seq > ? AND seq <= ?",
                            (without[0] if without else 0, as_of)).fetchone()[0]


def _refuse_unknown_names(db, agent: str | None, self_agent: str | None, types) -> None:
    """An agent that never wrote anything searchable here, or types (free-form, as statuses are) that nothing ever
    had, find nothing at any moment: most likely a typo, said as such rather than as "no matches"."""
    if agent:
        agents = {self_agent} | {name for (name,) in db.execute(
            "SELECT DISTINCT agent FROM search_history WHERE agent IS NOT NULL")}
        if agent not in agents:
            raise InvalidInput(f"no agent {agent!r} has written anything here (the agents: "
                               f"{', '.join(sorted(name for name in agents if name))})")
    if types:
        known = {name for (name,) in db.execute("SELECT DISTINCT lower(type) FROM search_history WHERE type IS NOT NULL")}
        if not known & {name.lower() for name in types}:
            listed = sorted(known)
            raise InvalidInput(f"nothing here has ever had the type {', '.join(map(repr, types))} (the types of "
                               f"pages, entries, loop roles and files here: {', '.join(listed[:20]) or 'none'}"
                               f"{', ...' if len(listed) > 20 else ''})")


def _refuse_unknown_status(db, status: str) -> None:
    """Statuses are free-form, so any word may be one; but a status no page ever had (in any version)
    finds nothing at any moment: most likely a typo, said as such rather than as "no matches"."""
    prefix = status.lower().strip()
    if db.execute("SELECT 1 FROM search_history WHERE status IS NOT NULL AND lower(status) >= ? "
                  "AND lower(status) < ? LIMIT 1", (prefix, prefix + "\U0010ffff")).fetchone() is None:
        words = sorted({trust.status_word(s) for (s,) in db.execute(
            "SELECT DISTINCT lower(status) FROM search_history WHERE status IS NOT NULL")})
        known = f"the statuses pages have had here: {', '.join(words[:12])}" if words else "no page here has a status"
        raise InvalidInput(f"no page has ever had a status starting with {status.strip()!r} ({known})")


DF_CAP = 1_000
"""How many versions of a word a search of the past counts at most for its weight: a rarer word weighs
more, and every word at least as common weighs alike (and still something)."""


def _past_query(db, query: str, match: str, ranges: list[tuple[int, int]], where: list[str],
                params: list) -> tuple[str, list]:
    """A search of the past as one statement: the matches in the rowid ranges of the moment, kept when
    alive then, ranked by BM25 (k1 1.2, b 0.75, the title weighing 3) over the versions those ranges hold.

    Not FTS5's bm25(): it weighs each word by counting every version that ever held it, which for a
    common word is a scan of most of the history (tens of ms), and again for each range with a match.
    Here a word's frequency is counted in the moment's ranges (up to DF_CAP), a word's occurrences in a
    version by its stem (`_stems`; at least once: FTS5 found it), and lengths in characters."""
    found = " UNION ALL ".join(["SELECT rowid AS r FROM search_history_fts WHERE search_history_fts MATCH ?1 "
                                "AND rowid BETWEEN ? AND ?"] * len(ranges))
    bounds = [bound for low_high in ranges for bound in low_high]
    words = _WORD.findall(query.lower())
    weights = [1.0] * len(words)
    if len(words) > 1:  # one word: its weight changes no order
        for i, word in enumerate(words):
            count = db.execute(f"SELECT count(*) FROM ({found} LIMIT {DF_CAP})", [f'"{word}"', *bounds]).fetchone()[0]
            weights[i] = math.log(1 + (DF_CAP + 0.5) / (count + 0.5))
    counts, terms, stems = [], [], _stems(query)
    for i, weight in enumerate(weights):
        counts.append(f"max(1, (3 * (length(d.title) - length(replace(lower(d.title), ?{i + 1}, ''))) + length(d.body) "
                      f"- length(replace(lower(d.body), ?{i + 1}, ''))) / length(?{i + 1})) AS tf{i}")
        terms.append(f"{weight!r} * tf{i} * 2.2 / (tf{i} + 1.2 * (0.25 + 0.75 * dl / avgdl))")
    columns = ", ".join("d." + c for c in COLUMNS)
    found = found.replace("?1", f"?{len(stems) + 1}")
    sql = (f"WITH found AS MATERIALIZED ({found}), alive AS (SELECT d.id, d.stale_after, "
           f"3 * length(d.title) + length(d.body) AS dl{''.join(', ' + count for count in counts)} FROM found "
           f"JOIN search_history d ON d.id = found.r & {_ID_MASK} WHERE {' AND '.join(where) or 'true'}), "
           "ranked AS (SELECT id, (stale_after IS NOT NULL AND stale_after < ?) AS stale, "
           f"-({_sum(terms) if terms else '0'}) AS score FROM (SELECT *, max(1.0, avg(dl) OVER ()) AS avgdl FROM alive) "
           f"ORDER BY stale, score LIMIT ?) "
           f"SELECT {columns}, ranked.score FROM ranked JOIN search_history d ON d.id = ranked.id "
           "ORDER BY ranked.stale, ranked.score")
    return sql, [*stems, match, *bounds, *params]


def _sum(terms: list[str]) -> str:
    """The terms added up as a balanced tree: a pasted paragraph's thousand words added one after another made an
    expression deeper than SQLite takes (1,000)."""
    if len(terms) == 1:
        return terms[0]
    middle = len(terms) // 2
    return f"({_sum(terms[:middle])} + {_sum(terms[middle:])})"


def _alive_ranges(as_of: int, checkpoint: int) -> list[tuple[int, int]]:
    """The search_history_fts rowid ranges that hold every version alive at `as_of` (see the module): the
    open bucket's ids up to it, and in bucket k, which lifetimes under 2^(k+1) fill, the ids after
    `as_of - 2^(k+1)`. No version has lived longer than the log."""
    ranges = [((k << SPAN) | max(0, as_of - (1 << (k + 1)) + 1), (k << SPAN) | as_of)
              for k in range(checkpoint.bit_length())]
    return [*ranges, ((OPEN << SPAN), (OPEN << SPAN) | as_of)]


_WORD = re.compile(r"\w+")
_SUFFIXES = ("ing", "ed", "es", "s", "ly")


def _stems(query: str) -> list[str]:
    """Rough stems of the query's words, to mark what the porter tokenizer matched (`acks` marks `ack`)."""
    stems = []
    for word in _WORD.findall(query.lower()):
        for suffix in _SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[:-len(suffix)]
                break
        stems.append(word)
    return stems


def _matches(word: str, stems: list[str]) -> bool:
    """Whether the tokenizer could have matched `word` for one of the query's stems: the same rough stem,
    or (for a stem of 4 letters or more) a longer form of it. A short query word marks only itself, so
    `a` does not mark `ack` and `and`."""
    return any(word.startswith(stem) and (len(stem) >= 4 or len(word) == len(stem) or _stems(word)[0] == stem)
               for stem in stems)


def snippet(text: str, stems: list[str], width: int = 140) -> str:
    """About `width` characters of `text` around its first match, every matching word marked `**so**`."""
    text = " ".join(text.split())
    words = [m for m in _WORD.finditer(text) if _matches(m.group().lower(), stems)]
    if not words:
        return text[:width] + ("…" if len(text) > width else "")
    start = max(0, words[0].start() - width // 3)
    if start and text[start - 1] != " ":  # from a word's start, not from the middle of one
        cut = text.find(" ", start, words[0].start())
        start = cut + 1 if cut != -1 else words[0].start()
    end = min(len(text), start + width)
    if end < len(text) and text[end] != " ":
        cut = text.rfind(" ", words[0].end(), end)
        end = cut if cut != -1 else end
    out, at = [], start
    for m in words:
        if m.start() < start or m.end() > end:
            continue
        out += [text[at:m.start()], MARK[0], m.group(), MARK[1]]
        at = m.end()
    out.append(text[at:end])
    return ("…" if start else "") + "".join(out) + ("…" if end < len(text) else "")


def _score(bm25: float) -> float:
    """Four significant digits: BM25 gives a word in most documents a weight near zero (1e-06), which
    rounding to places would print as -0.0 for every hit of a small memory."""
    return float(f"{bm25:.4g}") + 0.0


def _kinds_condition(kinds, local: list[str]) -> tuple[str, list]:
    """The condition on search rows of `--kind` names (KINDS): a `shared-page` or `local-page` is a pages layer's
    row, told apart by whether its layer is one of the `local` layers."""
    plain = [kind for kind in kinds if kind not in ("shared-page", "local-page")]
    either = [f"d.kind IN ({','.join('?' * len(plain))})"] if plain else []
    params = list(plain)
    for kind, among in (("shared-page", "NOT IN"), ("local-page", "IN")):
        if kind in kinds:
            either.append(f"(d.kind = '{LAYER_PAGE}' AND d.layer {among} ({','.join('?' * len(local))}))")
            params += local
    return f"({' OR '.join(either)})", params


def _hit(views, table: str, row, as_of: int, day: str, local: list[str]) -> Hit | None:
    """The hit of a row; None for an entry or a shared page of a layer no contract or config placed either as of
    the search's moment or when it was written (a local layer whose declaration was redacted: `mem entry list`,
    `show` and `cite` know no such layer, at any moment, so search does not find its material either)."""
    id, kind, layer, key, title, _body, type, status, stale_after, ref, _reverses, _agent, score = row
    reversed_by = None
    if kind == "entry":
        reverser = views.db.execute(f"SELECT ref FROM {table} WHERE reverses = ? AND layer = ? AND id <= ? "
                                    "ORDER BY ref DESC LIMIT 1", (ref, layer, as_of)).fetchone()
        reversed_by = reverser[0] if reverser else None
    flags = trust.flags(status, stale_after, day, reversed_by)
    if kind == "page":
        path = f"{key}.md"
        citation = f"adf-file://{path}"
    elif kind == "shared-page":
        slug = key.split("/", 1)[1]
        path = _placed(views, layer, slug, as_of, id, flags)
        if path is None:
            return None
        citation = f"adf-file://{path}"
        winner = views.shared.winner(layer, slug, as_of)
        if winner is not None and winner[0] != ref:  # a losing head of a conflict: its text is not in the file
            flags.append(f"conflict: not the version the file shows ({WAYS['conflicts'][0]})")
    elif kind == "entry":
        path = _placed(views, layer, None, as_of, id, flags)
        if path is None:
            return None
        citation = ref
    elif kind == "loop":
        how = _removed_how(views, id, as_of)
        path = f"loop {key}" + (f" ({how}: {WAYS['audit'][0]})" if how else "")
        citation = f"[S{id}]"
        if how:
            flags.append(how.split(",")[0])
    else:
        path = key
        citation = f"adf-file://{key}"
    if kind == LAYER_PAGE and layer in local:
        kind = "local-page"
    return Hit(kind=kind, path=path, citation=citation, title=title, snippet="", seq=id,
               status=status, flags=flags, layer=layer, type=type, score=_score(score))


WAYS = {"conflicts": ("`mem conflicts --show`", "the conflicts tool"), "audit": ("`mem audit read`", "the audit tool")}
"""The way to more that a hit's path or flag names: (a command, the MCP tool that does it)."""


def in_tools_words(hits: list[Hit]) -> list[Hit]:
    """`hits` with the ways to more they name (WAYS) named as the MCP tools take them (nc34b: the search tool's flags
    named `mem conflicts --show`, which an agent cannot run)."""
    def said(text: str) -> str:
        for command, tool in WAYS.values():
            text = text.replace(command, tool)
        return text

    return [msgspec.structs.replace(hit, path=said(hit.path), flags=[said(flag) for flag in hit.flags]) for hit in hits]


def _removed_how(views, seq: int, as_of: int) -> str | None:
    """How a loop message had left the live loop as of `as_of` (None: it had not): `compacted` (a compaction,
    whose summary takes the removing seq, or a message imported archived), `cleared`, and, when no audit blob kept
    it (the loop audit was off), that `mem audit read` reads it from the log."""
    removed = views.loop_removed(seq)
    if removed is None:
        return "compacted"
    if removed[0] is None or removed[0] > as_of:
        return None
    how = "compacted" if views.loop_removed(removed[0]) is not None else "cleared"
    return how if views.archived_by(removed[0]) is not None else f"{how}, loop audit off"


def _placed(views, layer: str, slug: str | None, as_of: int, seq: int, flags: list[str]) -> str | None:
    """Where a hit's layer file was as of the search's moment; for a layer the contract then no longer placed
    (dropped), where it was when the hit was written, flagged so; None when it was placed at neither."""
    path = views.shared_path(layer, slug, as_of)
    if path is None:
        path = views.shared_path(layer, slug, seq)
        if path is not None:
            flags.append(f"layer {layer} was dropped from the contract")
    return path


def page_trust(views, as_of: int | None = None) -> dict[str, tuple[str | None, str | None]]:
    """slug -> (status, stale_after) of every wiki page that has either, as of a seq."""
    if as_of is None or as_of >= views.checkpoint():
        rows = views.db.execute("SELECT key, status, stale_after FROM search_docs WHERE kind = 'page' "
                                "AND (status IS NOT NULL OR stale_after IS NOT NULL)")
        return {key[5:]: (status, stale) for key, status, stale in rows}
    found = {}
    for slug, _seq, _deleted, _title, _hook, doc in views.versions_as_of(as_of):
        if doc is not None:
            fm = decode_body(doc).frontmatter
            if fm.get("status") is not None or fm.get("stale_after") is not None:
                found[slug] = (trust.stored_status(fm.get("status")),
                               trust.stale_day(fm.get("stale_after")))
    return found


def flagged_catalog(views, catalog: list[tuple[str, str, str]], as_of: int | None = None) -> list[tuple]:
    """Catalog rows with the flag each line of mind.md carries, judged on the day mind.md last changed.

    That day comes from the log (the newest wiki event), not the clock, so mind.md stays a pure
    function of the log: a page past `stale_after` is flagged by the next wiki event.
    """
    fields = page_trust(views, as_of)
    if not fields:
        return catalog
    point = views.checkpoint() if as_of is None else as_of
    changed = views.wiki_changed_at(point)
    day = trust.day_of(changed) if changed is not None else "0000-00-00"
    return [(slug, title, hook, trust.catalog_flag(*fields[slug], day)) if slug in fields else (slug, title, hook)
            for slug, title, hook in catalog]
