"""Shared layers: typed entries and multi-producer pages, folded the same whatever the arrival order.

Entries render sorted by id (UUIDv7: creation order), so every replica with the same events writes
the same bytes. Page versions form a DAG through `parents`; the heads are the versions nobody names
as a parent, the winner is the head with the greatest id (a held head, `governance: hold`, before
any other: a concurrent edit cannot unfreeze a page), and a slug with several heads is listed as a
conflict until an update names all of them.

The held head wins whatever the order versions arrive in. A version is *void* when it supersedes a held
version without releasing it (eventstore.governance), is withdrawn by its agent's redaction before it ever went
out (Redaction.withdraws: no other replica has it), or names a void version as a parent (a chain built on
a bad update is as bad): no head, superseding nothing, as if it had never come. Whether a version is void
depends only on the events, not on the order they came in; from when on is the seq at which the last of
the events that make it so was folded (`shared_void`): the greater of its own seq and its held parent's, the
withdrawal's seq, or its void parent's void seq. So every replica with the same versions shows the same heads
and winner, and, as of any seq, what it showed then.
"""

import hashlib
import heapq
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path
import json

import msgspec

from eventstore.envelope import MAX_TS, decode_body
from eventstore.governance import hold_refusal, is_held
from eventstore.ids import uuid7_layout, uuid7_ms, uuid_text
from eventstore.kinds import EntryAppend, PageDelete, PageIngest, PageUpdate

from . import render
from .rows import insert_many

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    layer TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, agent TEXT NOT NULL, type TEXT NOT NULL,
    date TEXT NOT NULL, content TEXT NOT NULL, reverses TEXT, PRIMARY KEY (layer, id));
CREATE INDEX IF NOT EXISTS entries_reversals ON entries(layer, reverses) WHERE reverses IS NOT NULL;
CREATE TABLE IF NOT EXISTS shared_versions (
    layer TEXT NOT NULL, slug TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, agent TEXT NOT NULL,
    parents TEXT NOT NULL, deleted INTEGER NOT NULL, doc BLOB, PRIMARY KEY (layer, slug, id));
CREATE TABLE IF NOT EXISTS shared_parents (id TEXT PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS shared_heads (
    layer TEXT NOT NULL, slug TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (layer, slug, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS shared_void (
    layer TEXT NOT NULL, slug TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (layer, slug, id))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS shared_held (
    layer TEXT NOT NULL, slug TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (layer, slug, id))
    WITHOUT ROWID;
"""
ENTRIES_INSERT = "INSERT OR IGNORE INTO entries VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULLIF(?8, 0))"
"""An `entries` row, its `reverses` 0 when it reverses nothing (bound as 0, made NULL by SQL: see search.DOCS_INSERT)."""
ENTRY_COLUMNS = ("layer", "id", "seq", "agent", "type", "date", "content", "reverses")
"""An `entries` row as the fold hands it over (ENTRIES_INSERT's parameters) and as `stage_entries` stages it."""
LATEST_ID = uuid_text(uuid7_layout(MAX_TS, 0xFFF, (1 << 62) - 1))
"""The greatest id whose time an event may carry (ids sort as their times do)."""
TABLES = ("entries", "shared_versions", "shared_parents", "shared_heads", "shared_void", "shared_held")
"""The view tables this module folds. `shared_parents` holds each version some version not void names as a
parent, with the seq of the first that did; `shared_heads` the versions no version names (the heads as of the
checkpoint), so the open conflicts are found among a few rows per page, not by unpacking every version's
parents. `shared_void` holds each void version (see the module) and the seq from which it is: from then on it
counts as never having come. `shared_held` holds each held version and its seq, so that the fold finds a held
parent without reading documents."""

VOID = "SELECT id FROM shared_void WHERE layer = ?1 AND slug = ?2 AND seq <= ?3"
"""The void versions of a page as of a seq (parameters: layer, slug, seq)."""
KEPT_HEADS = ("SELECT h.layer, h.slug, h.id, v.agent, v.deleted FROM shared_heads AS h JOIN shared_versions AS v "
              "ON v.layer = h.layer AND v.slug = h.slug AND v.id = h.id ORDER BY h.layer, h.slug, h.id")
"""The heads of every page as of the checkpoint, as `SharedViews.heads` reads them, with their layer and slug."""


class Entry(msgspec.Struct):
    id: str
    agent: str
    type: str
    date: str
    content: str
    reverses: str | None = None
    reversed_by: str | None = None


class Head(msgspec.Struct):
    id: str
    agent: str
    deleted: bool


class SharedPage(msgspec.Struct):
    slug: str
    title: str
    agent: str
    heads: int


class Conflict(msgspec.Struct):
    layer: str
    slug: str
    winner: str
    heads: list[Head]


def entry_line(type: str, date: str, content: str, reverses: str | None, reversed_by: str | None) -> str:
    """An entry's line in its layer's file."""
    line = f"[{type}] {date}: {content}"
    if reverses:
        line += f" (reverses {reverses[:18]})"
    if reversed_by:
        line += f" [reversed by {reversed_by[:18]}]"
    return line


class _Rendered(msgspec.Struct, frozen=True):
    """An entries layer's file as rendered as of `as_of`: `count` entries, the greatest id `last`."""

    as_of: int
    count: int
    last: str
    text: str


RENDERED_KEPT_CHARS = 16 << 20
"""The largest entries file a process keeps rendered (SharedViews.render_entries): about 200,000 entries."""
ENTRIES_LINES = ("SELECT group_concat(line, '') FROM (SELECT '[' || type || '] ' || date || ': ' || content || char(10) "
                 "AS line FROM entries WHERE layer = ?1 AND seq <= ?2 ORDER BY id)")
"""The lines of a layer's file where no entry is reversed (`_render_entries`' plain lines), joined by SQLite: the
subquery's order holds (SQLite does not flatten an ordered subquery into an aggregate)."""
REVERSED_ANY = "SELECT 1 FROM entries WHERE layer = ?1 AND reverses IS NOT NULL AND seq <= ?2 LIMIT 1"


def entries_text_apart(path: str, layer: str, as_of: int) -> "_Rendered | None":
    """A layer's file as of the checkpoint `as_of`, rendered by SQLite alone through a connection of its own to the
    views at `path`: no row reaches Python, so a thread running it holds no GIL while a rebuild's other files are
    rendered (`Views.entries_ahead`: a team's layer of 800,000 entries took a second and a half of the rebuild's
    last, single-threaded, step). None when the views there are not at `as_of` or an entry is reversed (those
    lines are `entry_line`'s): the caller renders it as usual."""
    db = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True, isolation_level=None,
                         check_same_thread=False)
    try:
        db.execute("BEGIN")
        checkpoint = db.execute("SELECT value FROM meta WHERE key = 'checkpoint'").fetchone()
        if checkpoint is None or int(checkpoint[0]) != as_of or db.execute(REVERSED_ANY, (layer, as_of)).fetchone():
            return None
        (lines,) = db.execute(ENTRIES_LINES, (layer, as_of)).fetchone()
        text = f"# {layer}\n\n{lines or ''}"
        count, last = (db.execute("SELECT count(*), max(id) FROM entries WHERE layer = ?", (layer,)).fetchone()
                       if len(text) <= RENDERED_KEPT_CHARS else (0, ""))
        return _Rendered(as_of, count, last or "", text)
    except sqlite3.Error:
        return None
    finally:
        db.close()


class SharedViews:
    """Reads of the shared-layer tables, as of any seq."""

    def __init__(self, db):
        self.db = db
        self._rendered: dict[str, _Rendered] = {}
        self._kept_heads: dict[int, dict[tuple[str, str], list[tuple]]] = {}  # checkpoint -> heads_kept's

    def checkpoint(self) -> int:
        return int(self.db.execute("SELECT value FROM meta WHERE key = 'checkpoint'").fetchone()[0])

    def entries(self, layer: str, as_of: int) -> list[Entry]:
        reversed_by = self.reversers(layer, as_of)
        return [Entry(*row, reversed_by=reversed_by.get(row[0])) for row in self.db.execute(
            "SELECT id, agent, type, date, content, reverses FROM entries WHERE layer = ? AND seq <= ? ORDER BY id",
            (layer, as_of))]

    def reversers(self, layer: str, as_of: int) -> dict[str, str]:
        """The id of every entry of a layer reversed as of a seq, and the greatest id of those reversing it."""
        return dict(self.db.execute("SELECT reverses, MAX(id) FROM entries WHERE layer = ? AND reverses IS NOT NULL "
                                    "AND seq <= ? GROUP BY reverses", (layer, as_of)))

    def entry_ids_starting(self, prefix: str, layer: str | None = None) -> list[str]:
        """The ids of entries starting with `prefix`, at most two, in one layer or any."""
        in_layer = " AND layer = ?" if layer is not None else ""
        return [id for id, in self.db.execute(
            f"SELECT id FROM entries WHERE id >= ? AND id < ?{in_layer} ORDER BY id LIMIT 2",
            (prefix, prefix + "\uffff", *([layer] if layer is not None else [])))]

    def entries_starting(self, prefix: str, as_of: int) -> list[tuple]:
        """(layer, Entry, seq) of the entries made by a seq whose ids start with `prefix`, at most two (one says
        it is unique), in any layer."""
        rows = self.db.execute("SELECT layer, id, agent, type, date, content, reverses, seq FROM entries "
                               "WHERE id >= ? AND id < ? AND seq <= ? ORDER BY id LIMIT 2",
                               (prefix, prefix + "\uffff", as_of)).fetchall()
        return [(layer, Entry(*row[:6], reversed_by=self.reversers(layer, as_of).get(row[0])), row[6])
                for layer, *row in rows]

    def holds(self, layer: str) -> bool:
        """Whether these views hold anything of `layer` (an entry, a page version): two seeks."""
        return any(self.db.execute(f"SELECT 1 FROM {table} WHERE layer = ? LIMIT 1", (layer,)).fetchone()
                   for table in ("entries", "shared_versions"))

    def held_layers(self) -> list[str]:
        """Every layer these views hold anything of."""
        return sorted({layer for (layer,) in self.db.execute(
            "SELECT DISTINCT layer FROM entries UNION SELECT DISTINCT layer FROM shared_versions")})

    def written_span(self, layer: str, slug: str | None, as_of: int) -> tuple[int, int] | None:
        """When the first and the last entry of an entries layer (slug None), or version of one of its pages, as of a
        seq were written, in ms: their ids are UUIDv7s made from the times their events carry (the log is not at hand
        here). An id is any UUID a writer chose, though: one whose first 48 bits read past the last time an event may
        carry (year 9999, MAX_TS) is left out; it made every command that rendered the files fail (nc21b)."""
        table, page = ("entries", "") if slug is None else ("shared_versions", " AND slug = ?4")
        ends = [self.db.execute(f"SELECT id FROM {table} WHERE layer = ?1 AND seq <= ?2 AND id <= ?3{page} ORDER BY id "
                                f"{order} LIMIT 1", (layer, as_of, LATEST_ID, *([slug] if slug else []))).fetchone()
                for order in ("", "DESC")]  # each end read along the primary key: MIN and MAX together read every row
        return (uuid7_ms(ends[0][0]), uuid7_ms(ends[1][0])) if ends[0] else None

    def has_entries(self, layer: str, as_of: int) -> bool:
        return self.db.execute("SELECT 1 FROM entries WHERE layer = ? AND seq <= ? LIMIT 1",
                               (layer, as_of)).fetchone() is not None

    def entry_layers(self, as_of: int) -> list[str]:
        """The layers that hold at least one entry as of a seq."""
        return [layer for (layer,) in self.db.execute("SELECT DISTINCT layer FROM entries WHERE seq <= ? "
                                                      "ORDER BY layer", (as_of,))]

    def render_entries(self, layer: str, as_of: int) -> str:
        """A layer's file: its entries by id (the rows read as they are: a team's file holds a million). The current
        file last rendered is kept, and grown by the entries since when they only add lines at its end (each entry
        appended rendered the whole file again: 18 ms an entry at 8,000)."""
        if as_of != self.checkpoint():
            return self._render_entries(layer, as_of)
        kept = self._rendered.get(layer)
        text = self._grown(layer, kept, as_of) if kept is not None else None
        if text is None:
            text = self._render_entries(layer, as_of)
            count, last = self.db.execute("SELECT count(*), max(id) FROM entries WHERE layer = ?", (layer,)).fetchone()
            self._keep(layer, _Rendered(as_of, count, last or "", text))
        return text

    def taken(self, layer: str, rendered: _Rendered) -> str:
        """The text of a layer's file rendered elsewhere (`entries_text_apart`), kept as `render_entries` keeps its own."""
        self._keep(layer, rendered)
        return rendered.text

    def kept(self, layer: str) -> bool:
        return layer in self._rendered

    def _grown(self, layer: str, kept: _Rendered, as_of: int) -> str | None:
        """The current file made from `kept`, when the entries folded since each add a line after its last one
        (none sorts before its last, none reverses an entry); else None. The fold only adds entries, in seq order,
        so at a checkpoint the entries of a layer are those of `kept` and those after its last id."""
        (count,) = self.db.execute("SELECT count(*) FROM entries WHERE layer = ?", (layer,)).fetchone()
        rows = self.db.execute("SELECT id, type, date, content, reverses FROM entries WHERE layer = ? AND id > ? "
                               "ORDER BY id", (layer, kept.last)).fetchall()
        if kept.count + len(rows) != count or any(row[4] is not None for row in rows):
            return None
        text = kept.text + "".join([f"[{type}] {date}: {content}\n" for _id, type, date, content, _r in rows])
        self._keep(layer, _Rendered(as_of, count, rows[-1][0] if rows else kept.last, text))
        return text

    def _keep(self, layer: str, rendered: _Rendered) -> None:
        if len(rendered.text) <= RENDERED_KEPT_CHARS:
            self._rendered[layer] = rendered
        else:
            self._rendered.pop(layer, None)

    def _render_entries(self, layer: str, as_of: int) -> str:
        reversers = self.reversers(layer, as_of)
        if not reversers:  # nothing reversed, so nothing reverses: each line is `entry_line`'s first part alone
            rows = self.db.execute("SELECT type, date, content FROM entries WHERE layer = ? AND seq <= ? ORDER BY id",
                                   (layer, as_of))
            return f"# {layer}\n\n" + "".join([f"[{type}] {date}: {content}\n" for type, date, content in rows])
        reversed_by = reversers.get
        rows = self.db.execute("SELECT id, type, date, content, reverses FROM entries WHERE layer = ? AND seq <= ? "
                               "ORDER BY id", (layer, as_of))
        return f"# {layer}\n\n" + "".join([entry_line(type, date, content, reverses, reversed_by(id)) + "\n"
                                            for id, type, date, content, reverses in rows])

    def versions(self, layer: str, slug: str, as_of: int) -> list[tuple]:
        return self.db.execute("SELECT id, agent, parents, deleted, doc FROM shared_versions WHERE layer = ? "
                               "AND slug = ? AND seq <= ?", (layer, slug, as_of)).fetchall()

    def doc(self, layer: str, slug: str, id: str) -> bytes | None:
        """The stored body of one version (None: a delete)."""
        return self.db.execute("SELECT doc FROM shared_versions WHERE layer = ? AND slug = ? AND id = ?",
                               (layer, slug, id)).fetchone()[0]

    def entry_seqs(self, layer: str, upto: int) -> list[int]:
        return [seq for (seq,) in self.db.execute("SELECT seq FROM entries WHERE layer = ? AND seq <= ? ORDER BY seq",
                                                  (layer, upto))]

    def heads(self, layer: str, slug: str, as_of: int) -> list[Head]:
        """The versions as of a seq that no other version of then names as a parent, the winner last:
        held ones (`governance: hold`) after the others, then by id. One statement finds them (the
        parents unpacked by SQLite); a document is read only to tell a held head among several."""
        kept = self._kept_heads.get(as_of)
        rows = kept.get((layer, slug), []) if kept is not None else self.db.execute(
            f"SELECT id, agent, deleted FROM shared_versions WHERE layer = ?1 AND slug = ?2 AND seq <= ?3 "
            f"AND id NOT IN ({VOID}) AND id NOT IN (SELECT p.value FROM shared_versions c, json_each(c.parents) p "
            f"WHERE c.layer = ?1 AND c.slug = ?2 AND c.seq <= ?3 AND c.id NOT IN ({VOID})) ORDER BY id",
            (layer, slug, as_of)).fetchall()
        held = set()
        if len(rows) > 1:
            for id, _agent, _deleted in rows:
                doc = self.doc(layer, slug, id)
                if doc is not None and is_held(getattr(decode_body(doc), "frontmatter", None)):
                    held.add(id)
        return sorted((Head(id=id, agent=agent, deleted=bool(deleted)) for id, agent, deleted in rows),
                      key=lambda h: (h.id in held, h.id))

    @contextmanager
    def heads_kept(self):
        """Within it, `heads` as of the checkpoint reads the heads the fold keeps (`shared_heads`), every page's read
        at once: the files of a rebuild's two thousand pages found theirs by one statement each (0.75 s), on rows
        the fold has worked out already. Not inside a transaction, whose fold may have moved them past the
        checkpoint."""
        if self.db.in_transaction:
            yield
            return
        as_of, found = self.checkpoint(), {}
        for layer, slug, *head in self.db.execute(KEPT_HEADS):
            found.setdefault((layer, slug), []).append(tuple(head))
        self._kept_heads[as_of] = found
        try:
            yield
        finally:
            self._kept_heads.pop(as_of, None)

    def winner_at_each_version(self, layer: str, slug: str, upto: int) -> Iterator[tuple[int, tuple]]:
        """(seq, winner row) at each of the page's versions up to a seq, oldest first (a version that did not win,
        one side of a conflict, too): its versions read once, in seq order, the heads kept as they go (what `heads`
        finds as of each seq). The winner is None where no version is a head: versions that name one another, which
        a hub that did not check them may hand out (nc26a)."""
        heads: dict[str, tuple] = {}
        named: dict[str, int] = {}  # how many versions (not void) name each id
        rows: dict[str, tuple] = {}
        voiding: dict[int, list[str]] = {}
        void_now: set[str] = set()
        for id, seq in self.db.execute("SELECT id, seq FROM shared_void WHERE layer = ? AND slug = ? AND seq <= ?",
                                       (layer, slug, upto)):
            voiding.setdefault(seq, []).append(id)
        for seq, *row in self.db.execute("SELECT seq, id, agent, parents, deleted, doc FROM shared_versions "
                                          "WHERE layer = ? AND slug = ? AND seq <= ? ORDER BY seq", (layer, slug, upto)):
            row = rows[row[0]] = tuple(row)
            for parent in json.loads(row[2]):
                heads.pop(parent, None)
                named[parent] = named.get(parent, 0) + 1
            if not named.get(row[0]):
                heads[row[0]] = row
            for void in voiding.get(seq, ()):  # void from this seq on
                void_now.add(void)
                heads.pop(void, None)
                for parent in json.loads(rows[void][2]):
                    named[parent] -= 1
                    if not named[parent] and parent in rows and parent not in void_now:
                        heads[parent] = rows[parent]
            several = len(heads) > 1
            yield seq, max(heads.values(), key=lambda r: (several and r[4] is not None
                                                          and is_held(getattr(decode_body(r[4]), "frontmatter", None)),
                                                          r[0]), default=None)

    def winner(self, layer: str, slug: str, as_of: int) -> tuple | None:
        """(id, agent, parents, deleted, doc) of the head shown in the file (the newest id), or None."""
        heads = self.heads(layer, slug, as_of)
        if not heads:
            return None
        return self.db.execute("SELECT id, agent, parents, deleted, doc FROM shared_versions WHERE layer = ? "
                               "AND slug = ? AND id = ?", (layer, slug, heads[-1].id)).fetchone()

    def page_text(self, layer: str, slug: str, as_of: int) -> str | None:
        winner = self.winner(layer, slug, as_of)
        if winner is None or winner[3]:
            return None
        page = decode_body(winner[4])
        return render.page(page.frontmatter, page.text)

    def version_rendered_as(self, layer: str, slug: str, digest: str) -> str | None:
        """The id of the version whose file text hashes to `digest` (what a file was materialised from).
        Versions with the same text are told apart by preferring the winner, then the newest."""
        winner = self.winner(layer, slug, 1 << 62)
        rows = sorted(self.versions(layer, slug, 1 << 62), key=lambda r: (r[0] == (winner and winner[0]), r[0]),
                      reverse=True)
        for id, _agent, _parents, deleted, doc in rows:
            if not deleted:
                page = decode_body(doc)
                if hashlib.sha256(render.page(page.frontmatter, page.text).encode()).hexdigest() == digest:
                    return id
        return None

    def pages(self, layer: str, as_of: int) -> list[SharedPage]:
        """The live pages of a layer: each winner's title and author, and how many heads it has."""
        found = []
        for slug in self.slugs(layer, as_of):
            heads = self.heads(layer, slug, as_of)
            winner = self.winner(layer, slug, as_of)
            if winner is None or winner[3]:  # deleted, or no head (versions naming one another, nc26a)
                continue
            page = decode_body(winner[4])
            title = render.title_of(slug, page.frontmatter, page.text)
            found.append(SharedPage(slug=slug, title=title, agent=winner[1], heads=len(heads)))
        return found

    def slugs(self, layer: str, as_of: int) -> list[str]:
        """The slugs of a layer with a version by a seq (deleted ones too): a skip-scan of the key, one
        seek per slug however many versions each has."""
        return [s for (s,) in self.db.execute(
            "WITH RECURSIVE s(slug) AS (SELECT MIN(slug) FROM shared_versions WHERE layer = ?1 UNION ALL "
            "SELECT (SELECT MIN(slug) FROM shared_versions WHERE layer = ?1 AND slug > s.slug) FROM s "
            "WHERE slug IS NOT NULL) SELECT slug FROM s WHERE slug IS NOT NULL AND EXISTS "
            "(SELECT 1 FROM shared_versions WHERE layer = ?1 AND slug = s.slug AND seq <= ?2)", (layer, as_of))]

    def conflicts(self, as_of: int) -> list[Conflict]:
        """The pages with several heads as of a seq, but those whose heads all delete them (deleted by two agents at
        once: nothing to choose between), then each one's heads read in order. As of the
        checkpoint they are the pages with several rows in `shared_heads`; before it, one statement over
        every version then (an id is a head unless some version names it as a parent: ids are unique
        across slugs)."""
        if as_of >= self.checkpoint():
            candidates = self.db.execute("SELECT layer, slug FROM shared_heads GROUP BY layer, slug "
                                         "HAVING COUNT(*) > 1 ORDER BY layer, slug").fetchall()
        else:
            candidates = self.db.execute(
                "SELECT layer, slug FROM shared_versions WHERE seq <= ?1 AND id NOT IN (SELECT id FROM shared_void "
                "WHERE seq <= ?1) AND id NOT IN (SELECT p.value FROM shared_versions c, json_each(c.parents) p "
                "WHERE c.seq <= ?1 AND c.id NOT IN (SELECT id FROM shared_void WHERE seq <= ?1)) GROUP BY layer, slug "
                "HAVING COUNT(*) > 1 ORDER BY layer, slug", (as_of,)).fetchall()
        found = []
        for layer, slug in candidates:
            heads = self.heads(layer, slug, as_of)
            if len(heads) > 1 and not all(head.deleted for head in heads):  # deleted twice at once: agreed (nc29b)
                found.append(Conflict(layer=layer, slug=slug, winner=heads[-1].id, heads=heads))
        return found


_PLAIN_IDS = re.compile(r"[0-9a-f-]*").fullmatch


def ids_json(ids: list[str]) -> str:
    """`json.dumps(ids)` (a version's `parents`), joined directly when every id is a UUID's text (nothing to escape):
    a catch-up writes the parents of every version of a team's pages."""
    if _PLAIN_IDS("".join(ids)):
        return '["' + '", "'.join(ids) + '"]' if ids else "[]"
    return json.dumps(ids)


def stage_entries(db, rows: list[tuple]) -> None:
    """A bulk build's batch of `entries` rows (ENTRY_COLUMNS) staged in `temp.staged_entries`, in place of the last
    ones, and written into `entries` from there: the search index takes their rows from the same staging
    (search.STAGED_ENTRIES), so the fold makes and hands over one row per entry, not three."""
    db.execute(f"CREATE TEMP TABLE IF NOT EXISTS staged_entries ({', '.join(ENTRY_COLUMNS)})")
    db.execute("DELETE FROM temp.staged_entries")
    insert_many(db, f"INSERT INTO temp.staged_entries VALUES ({','.join('?' * len(ENTRY_COLUMNS))})", rows)
    db.execute("INSERT OR IGNORE INTO entries SELECT layer, id, seq, agent, type, date, content, NULLIF(reverses, 0) "
               "FROM temp.staged_entries")


_seq = itemgetter(2)
"""An `entries` row's seq (ENTRY_COLUMNS)."""


class SharedFold:
    """Folds entry and shared-page events, marking the file each one changes (`Views.shared_path`) dirty."""

    def __init__(self, views, bulk: bool = False):
        """`bulk`: a build from nothing (bulk.build), whose `entries` another connection writes: `flush`
        returns each batch's rows (for ENTRIES_INSERT)."""
        self.db = views.db
        self.views = views
        self.bulk = bulk
        self.entries: list[tuple] = []
        self.unordered = False  # `entries` out of seq order (`apply`)
        self.versions: list[tuple] = []
        self.parents: list[list[str]] = []  # each version's parents, sorted (its row holds them in JSON)
        self.held: list[tuple] = []  # (layer, slug, id, seq) of each held version of the batch
        self.withdrawn: list[tuple] = []  # (seq, layer, id) of each page version the batch's withdrawals withdraw
        self.holds = views.db.execute("SELECT 1 FROM shared_held UNION ALL SELECT 1 FROM shared_void "
                                      "LIMIT 1").fetchone() is not None  # a version may be void: `_void` looks
        self._paths: dict[tuple, str | None] = {}  # (layer, slug or None) -> Views.shared_path
        self._entry_paths: dict[str, str | None] = {}  # layer -> Views.shared_path of its entries

    def _path(self, layer: str, slug: str | None = None) -> str | None:
        key = (layer, slug)
        path = self._paths.get(key, False)
        if path is False:
            path = self._paths[key] = self.views.shared_path(layer, slug)
        return path

    def fold_entries(self, rows: list[tuple], bodies: list, dirty: set) -> None:
        """The entries of a batch's events (fold._catch_up's rows and their bodies) in the team's layers (all but the
        mind layer, whose `apply` takes), in one pass: a team's catch-up is mostly entries, eight hundred thousand of
        a million events, each folded here in a few steps, not handed one by one to `apply`."""
        add, entry, layers = self.entries.append, EntryAppend, set()
        for (seq, id, _ts, layer, _codec, _body, agent), body in zip(rows, bodies):
            if body.__class__ is entry and layer is not None:
                add((layer, uuid_text(id), seq, agent, body.type, body.date, body.content,
                     0 if body.reverses is None else body.reverses))
                layers.add(layer)
        for layer in layers:
            self._entry_dirty(layer, dirty)

    def _entry_dirty(self, layer: str, dirty: set) -> None:
        path = self._entry_paths.get(layer, False)
        if path is False:
            path = self._entry_paths[layer] = self._path(layer)
        if path:
            dirty.add(path)

    def apply(self, seq: int, id: str, agent: str, layer: str, body, raw: bytes, dirty: set) -> None:
        """Folds one event of the mind layer, or a page version of any (`fold_entries` takes the team's entries)."""
        cls = body.__class__
        if cls is EntryAppend:
            if self.entries and self.entries[-1][2] > seq:  # after `fold_entries`' of the batch: in seq order again
                self.unordered = True
            self.entries.append((layer, id, seq, agent, body.type, body.date, body.content,
                                 0 if body.reverses is None else body.reverses))
            self._entry_dirty(layer, dirty)
            return
        if cls is PageUpdate or cls is PageIngest or cls is PageDelete:
            deleted = cls is PageDelete
            parents = sorted(body.parents)
            self.versions.append((layer, body.slug, id, seq, agent, ids_json(parents), int(deleted),
                                  None if deleted else raw))
            self.parents.append(parents)
            if not deleted and "governance" in body.frontmatter and is_held(body.frontmatter):
                self.held.append((layer, body.slug, id, seq))
            path = self._path(layer, body.slug)
        else:
            return
        if path:
            dirty.add(path)

    def withdraw(self, seq: int, layer: str, ids: list[str]) -> None:
        """A redaction at `seq` that withdraws its targets (Redaction.withdraws): the page versions among them are
        void from it on (`_void`), as is every version built on one."""
        self.withdrawn.extend((seq, layer, id) for id in ids)

    def flush(self) -> list[tuple]:
        """Writes the batch; the caller holds the transaction that also moves the checkpoint. In `bulk`, the
        batch's `entries` rows are returned instead of written."""
        entries = self.entries
        if self.unordered:
            entries.sort(key=_seq)
            self.unordered = False
        if entries and not self.bulk:
            self.db.executemany(ENTRIES_INSERT, entries)
        if self.versions:
            db = self.db
            insert_many(db, "INSERT OR IGNORE INTO shared_versions VALUES (?,?,?,?,?,?,?,?)", self.versions)
            named = [(v[0], v[1], parent, v[3]) for v, parents in zip(self.versions, self.parents) for parent in parents]
            insert_many(db, "INSERT OR IGNORE INTO shared_parents VALUES (?, ?)",  # in seq order: the first stays
                        [(parent, seq) for _layer, _slug, parent, seq in named])
            self._move_heads(named)
            if self.held:
                db.executemany("INSERT OR IGNORE INTO shared_held VALUES (?, ?, ?, ?)", self.held)
                self.holds = True
        if self.holds or self.withdrawn:
            self._void()
            self.holds = True
        self.entries, self.versions, self.parents, self.held, self.withdrawn = [], [], [], [], []
        return entries if self.bulk else []

    def _move_heads(self, named: list[tuple]) -> None:
        """The batch's versions in `shared_heads`, the versions they name (`named`: layer, slug, parent, seq) out of
        it. A parent of the batch itself is in no head row yet, and a version the batch names is in shared_parents
        now: neither is looked up (a team's catch-up names most of its versions in the batch that brings them)."""
        ids = {version[2] for version in self.versions}
        self.db.executemany("DELETE FROM shared_heads WHERE layer = ? AND slug = ? AND id = ?",
                            [row[:3] for row in named if row[2] not in ids])
        parents = {row[2] for row in named}
        self.db.executemany("INSERT OR IGNORE INTO shared_heads SELECT ?1, ?2, ?3 WHERE NOT EXISTS "
                            "(SELECT 1 FROM shared_parents WHERE id = ?3)",
                            [version[:3] for version in self.versions if version[2] not in parents])

    def _void(self) -> None:
        """Makes void what the batch makes void (see the module), each from its seq: a version of the batch
        naming a held version it does not release, or a void one; a version folded before a held version of
        the batch that names it without releasing it; and every version built on one made void. Each stops
        being a head, and each of its parents that no other version (not void) names is a head again (unless
        void itself). Read only when some version is held."""
        db = self.db
        candidates: list[tuple[int, str, str, str]] = []  # (seq void from, layer, slug, id)
        by_parent: dict[tuple, list[tuple]] = {}
        for layer, slug, id, seq, _agent, parents, _deleted, _doc in self.versions:
            for parent in json.loads(parents):
                by_parent.setdefault((layer, slug, parent), []).append((id, seq))
        if by_parent:
            keys = msgspec.json.encode(list(by_parent))
            for table, holds in (("shared_held", True), ("shared_void", False)):
                for layer, slug, parent, since in db.execute(
                        f"SELECT t.layer, t.slug, t.id, t.seq FROM json_each(?) k, {table} t WHERE t.layer = "
                        "json_extract(k.value, '$[0]') AND t.slug = json_extract(k.value, '$[1]') "
                        "AND t.id = json_extract(k.value, '$[2]')", (keys,)).fetchall():
                    for child, seq in by_parent[(layer, slug, parent)]:
                        if not holds or self._refuses(layer, slug, child, parent):
                            candidates.append((max(seq, since), layer, slug, child))
        for layer, slug, id, seq in self.held:
            for child, child_seq in self._children(layer, slug, id):
                if child_seq < seq and self._refuses(layer, slug, child, id):
                    candidates.append((seq, layer, slug, child))
        for seq, layer, id in self.withdrawn:
            candidates += [(seq, layer, slug, id) for (slug,) in db.execute(
                "SELECT slug FROM shared_versions WHERE layer = ? AND id = ?", (layer, id))]
        heapq.heapify(candidates)
        made = []
        while candidates:
            since, layer, slug, id = heapq.heappop(candidates)
            if db.execute("SELECT 1 FROM shared_void WHERE layer = ? AND slug = ? AND id = ?",
                          (layer, slug, id)).fetchone():
                continue  # void already, from as early or earlier (taken in seq order)
            db.execute("INSERT INTO shared_void VALUES (?, ?, ?, ?)", (layer, slug, id, since))
            made.append((layer, slug, id))
            for child, child_seq in self._children(layer, slug, id):
                heapq.heappush(candidates, (max(since, child_seq), layer, slug, child))
        for layer, slug, id in made:
            db.execute("DELETE FROM shared_heads WHERE layer = ? AND slug = ? AND id = ?", (layer, slug, id))
            parents = db.execute("SELECT parents FROM shared_versions WHERE layer = ? AND slug = ? AND id = ?",
                                 (layer, slug, id)).fetchone()[0]
            for parent in json.loads(parents):
                (first,) = db.execute(f"SELECT MIN(c.seq) FROM shared_versions c, json_each(c.parents) p WHERE "
                                      f"c.layer = ?1 AND c.slug = ?2 AND p.value = ?4 AND c.id NOT IN ({VOID})",
                                      (layer, slug, 1 << 62, parent)).fetchone()
                if first is not None:  # the first version not void that names it, however the batches fell
                    db.execute("UPDATE shared_parents SET seq = ? WHERE id = ?", (first, parent))
                else:
                    db.execute("DELETE FROM shared_parents WHERE id = ?", (parent,))
                    db.execute("INSERT OR IGNORE INTO shared_heads SELECT layer, slug, id FROM shared_versions "
                               "WHERE layer = ?1 AND slug = ?2 AND id = ?3 AND id NOT IN (SELECT id FROM shared_void "
                               "WHERE layer = ?1 AND slug = ?2)", (layer, slug, parent))

    def _children(self, layer: str, slug: str, id: str) -> list[tuple[str, int]]:
        """(id, seq) of the versions folded so far that name `id` as a parent."""
        return self.db.execute("SELECT c.id, c.seq FROM shared_versions c, json_each(c.parents) p WHERE c.layer = ? "
                               "AND c.slug = ? AND p.value = ?", (layer, slug, id)).fetchall()

    def _refuses(self, layer: str, slug: str, child: str, held: str) -> bool:
        """Whether the version `child` supersedes the held version `held` without releasing it."""
        bodies = {}
        for id, parents, doc in self.db.execute("SELECT id, parents, doc FROM shared_versions WHERE layer = ? AND "
                                                "slug = ? AND id IN (?, ?)", (layer, slug, child, held)):
            bodies[id] = PageDelete(slug=slug, parents=json.loads(parents)) if doc is None else decode_body(doc)
        return child in bodies and hold_refusal(bodies[child], {held: bodies.get(held)}.get) is not None
