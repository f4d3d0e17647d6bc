"""The views database: disposable tables folded from the log, with their checkpoint.

Every read here takes `as_of` (a seq): the current state is simply the state as of the
checkpoint, so a point-in-time read and a current read are the same query.
"""

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import msgspec

from eventstore import validate
from eventstore.envelope import decode_body
from eventstore.instants import format_instant
from eventstore.readonly import connect, read_only
from eventstore.recorder import id_text
from eventstore.workspace import views_damaged

from . import activity, adf, local_layers, placements, render, search, shared
from .placements import placement

SCHEMA_VERSION = "8"
"""Views made with another schema version start over (2: shared_parents and shared_heads, and search_history
closing shared page versions; 3: shared_void; 4: search_history_fts keyed by lifetime bucket; 5: without
its column sizes; 6: shared_held, and versions built on a void one void too; 8: the words inside a loop message's
tool and thinking blocks in the search index)."""

BULK_PAGE_SIZE = 16384
"""The page size of views built from nothing (`fast`): a rebuild writes hundreds of megabytes of rows, about
7% cheaper to write in pages four times SQLite's default."""
PAGE_VERSIONS_INDEX = "CREATE UNIQUE INDEX IF NOT EXISTS page_versions_by_slug ON page_versions(slug, seq)"
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS page_versions (
    slug TEXT NOT NULL, seq INTEGER NOT NULL, version_id BLOB NOT NULL, ts INTEGER NOT NULL, deleted INTEGER NOT NULL,
    parents TEXT NOT NULL, title TEXT NOT NULL, hook TEXT NOT NULL, doc BLOB);
{page_versions_index};
CREATE TABLE IF NOT EXISTS pages (
    slug TEXT PRIMARY KEY, seq INTEGER NOT NULL, version_id BLOB NOT NULL,
    title TEXT NOT NULL, hook TEXT NOT NULL, ts INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS always_versions (seq INTEGER PRIMARY KEY, ts INTEGER NOT NULL, lines TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log_entries (seq INTEGER PRIMARY KEY, ts INTEGER NOT NULL, entry TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS page_releases (slug TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (slug, seq))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS file_state (
    path TEXT PRIMARY KEY, written_hash TEXT, dirty INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS file_landing (path TEXT PRIMARY KEY, landing_hash TEXT NOT NULL) WITHOUT ROWID;
""".replace("{page_versions_index}", PAGE_VERSIONS_INDEX)

PAGE_TIMES = ("SELECT j.value, (SELECT ts FROM page_versions WHERE slug = j.value AND seq <= ?1 ORDER BY seq LIMIT 1), "
              "(SELECT ts FROM page_versions WHERE slug = j.value AND seq <= ?1 ORDER BY seq DESC LIMIT 1) "
              "FROM json_each(?2) AS j")
"""Views.wiki_files_meta: each page's (slug, first version's ts, last version's ts) as of a seq."""

VIEW_TABLES = ("page_versions", "pages", "always_versions", "log_entries", "page_releases", "loop_rows", "audit_rows", "file_versions",
               "config_versions", "adf_meta", "adf_inbox", "adf_outbox", placements.TABLE, *shared.TABLES, *search.TABLES)
MIND_PATH = "mind.md"
LOG_PATH = "mind/log.md"
KEPT_ASIDE = "imported/"
"""Where an ADF import keeps a file it cannot take as what its path says (a free-form mind.md, a page that is no
page), under the imported agent's name: an agent's file like any other, never loaded as its mind."""


LOOP_COLUMNS = "seq, loop, role, content_json, model, tokens, created_at, ord"
FILE_COLUMNS = "path, content, mime_type, size, protection, authorized, created_at, updated_at"
AUDIT_COLUMNS = "id, source, start_seq, end_seq, ref, entry_count, size_bytes, created_at"
AUDIT_DATA_COLUMNS = "id, source, start_seq, end_seq, ref, entry_count, size_bytes, data, created_at"
"""adf_audit's columns in its order; AUDIT_COLUMNS leaves out the blob."""


def page_path(slug: str) -> str:
    return f"mind/{slug}.md"


def slug_of(path: str) -> str | None:
    if path.startswith("mind/") and path.endswith(".md") and path != LOG_PATH and path.count("/") == 1:
        return path[5:-3]
    return None


def _without_releases(db) -> bool:
    """Views made before `page_releases` was one of them (its rows would be missing)."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = 'page_versions'").fetchone() is not None and \
        db.execute("SELECT 1 FROM sqlite_master WHERE name = 'page_releases'").fetchone() is None


class WrittenFiles:
    """The one owner of `file_state` (what mindlog last wrote to each workspace file, and whether the
    views have moved since) and `wiki_files` (the wiki files' adf_files rows, as written)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def hashes(self, paths: Iterable[str] | None = None) -> dict[str, str | None]:
        """Every tracked path (or those of `paths` that are tracked) and the sha256 of what was last written
        there (None: nothing yet)."""
        if paths is None:
            return dict(self.db.execute("SELECT path, written_hash FROM file_state"))
        paths = list(paths)
        return dict(self.db.execute(f"SELECT path, written_hash FROM file_state WHERE path IN "
                                    f"({','.join('?' * len(paths))})", paths)) if paths else {}

    def any_under(self, folder: str, but: str = "") -> bool:
        """Whether mindlog wrote a file now on record under `folder` (ending in '/'), but the file `but`."""
        return self.db.execute("SELECT 1 FROM file_state WHERE path >= ? AND path < ? AND path != ? AND written_hash "
                               "IS NOT NULL LIMIT 1", (folder, folder[:-1] + chr(ord("/") + 1), but)).fetchone() \
            is not None

    def landings(self) -> dict[str, str]:
        """The hash of each file mindlog was renaming into place, not recorded yet (`land`): one whose bytes are that
        was written by mindlog, by a process stopped between its rename and its record, not edited by hand. A
        replay to an earlier seq stopped there left files of that seq, which the views had moved past at the next
        command: they were taken for hand edits, and adopting them took the pages back."""
        try:
            return dict(self.db.execute("SELECT path, landing_hash FROM file_landing"))
        except sqlite3.OperationalError:  # views made before the table, opened read-only: nothing landing
            return {}

    def land(self, items: Iterable[tuple[str, str]]) -> None:
        """Says, in a transaction committed before the renames, which files are about to be renamed into place with
        which hashes (materialize._land); `record` takes each one's row away."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.carry_landings(dict(items))
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def carry_landings(self, landings: dict[str, str]) -> None:
        """Takes over `landings` (another views database's, in a rebuild), in the caller's transaction."""
        self.db.executemany("INSERT OR REPLACE INTO file_landing VALUES (?, ?)", list(landings.items()))

    def text(self, path: str) -> str | None:
        """What mindlog last wrote at a wiki file's `path` (its adf_files row, as written), when that is what the
        file state says was written: the version a hand edit of it was made on. None when it is not known."""
        row = self.db.execute("SELECT w.content, f.written_hash FROM wiki_files w JOIN file_state f ON f.path = w.path "
                              "WHERE w.path = ?", (path,)).fetchone()
        if row is None or row[0] is None:
            return None
        content = row[0] if isinstance(row[0], bytes) else row[0].encode("utf-8")
        return content.decode("utf-8", errors="replace") if hashlib.sha256(content).hexdigest() == row[1] else None

    def dirty(self) -> list[tuple[str, str | None]]:
        """(path, last written hash) of every file the views have changed since it was written."""
        return self.db.execute("SELECT path, written_hash FROM file_state WHERE dirty = 1 ORDER BY path").fetchall()

    def track(self, paths: Iterable[str]) -> None:
        """Starts tracking files not tracked yet (to be written)."""
        self.db.executemany("INSERT OR IGNORE INTO file_state (path, dirty) VALUES (?, 1)", [(p,) for p in paths])

    def mark_dirty(self, paths: Iterable[str]) -> None:
        self.db.executemany("INSERT INTO file_state (path, dirty) VALUES (?, 1) "
                            "ON CONFLICT(path) DO UPDATE SET dirty = 1", [(p,) for p in paths])

    def carry(self, hashes: dict[str, str | None]) -> None:
        """Takes over what another views database knew was written (a rebuild), every file dirty."""
        self.db.executemany("INSERT INTO file_state (path, written_hash, dirty) VALUES (?, ?, 1) "
                            "ON CONFLICT(path) DO UPDATE SET written_hash = excluded.written_hash, dirty = 1",
                            list(hashes.items()))

    def record(self, path: str, written_hash: str | None, row: tuple | None = None, source: Path | None = None):
        """Records what was written at `path` (None: removed) and its adf_files row: `row` is (content,
        size, protection, authorized, created_at, updated_at); a content of None streams `source`."""
        db = self.db
        if written_hash is None:
            db.execute("DELETE FROM wiki_files WHERE path = ?", (path,))
        elif row[0] is not None:
            db.execute("INSERT OR REPLACE INTO wiki_files VALUES (?, ?, 'text/markdown', ?, ?, ?, ?, ?)", (path, *row))
        else:
            size = row[1]
            db.execute("INSERT OR REPLACE INTO wiki_files VALUES (?, zeroblob(?), 'text/markdown', ?, ?, ?, ?, ?)",
                       (path, size, *row[1:]))
            rowid = db.execute("SELECT rowid FROM wiki_files WHERE path = ?", (path,)).fetchone()[0]
            with db.blobopen("wiki_files", "content", rowid) as blob, open(source, "rb") as f:
                while data := f.read(1 << 20):
                    blob.write(data)
        db.execute("DELETE FROM file_landing WHERE path = ?", (path,))
        db.execute("INSERT INTO file_state (path, written_hash, dirty) VALUES (?, ?, 0) "
                   "ON CONFLICT(path) DO UPDATE SET written_hash = excluded.written_hash, dirty = 0",
                   (path, written_hash))


def _entries_chunks(layer: str, text: str) -> Iterator[str] | None:
    """An entries layer's file as chunks, or None when it holds no entry (no file)."""
    return None if text == f"# {layer}\n\n" else iter([text])


class Views:
    def __init__(self, path: str | Path, *, contract=None, agent: str | None = None, fast: bool = False):
        """`contract` (eventstore.layers.Contract, the hub's) places the shared layers' files, with the
        local layers that `agent` declared in these views' config; `fast` turns off syncing, for a
        rebuild into a new file that is renamed into place after."""
        self.path = str(path)
        self.db = connect(self.path, isolation_level=None, timeout=60, check_same_thread=False)
        try:
            self._open(contract, agent, fast)
        except BaseException:  # a damaged file: its connection (and any lock it took) is not left to the collector
            self.db.close()
            raise

    def _open(self, contract, agent: str | None, fast: bool) -> None:
        self.db.execute("PRAGMA busy_timeout = 60000")
        if fast:
            self.db.execute(f"PRAGMA page_size = {BULK_PAGE_SIZE}")  # a new file's; an existing one keeps its own
            self.db.execute("PRAGMA journal_mode = OFF")
            self.db.execute("PRAGMA synchronous = OFF")
            self.db.execute("PRAGMA cache_size = -8192")
        else:
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
        self.hub, self.agent = contract, agent
        self.contract = contract
        self._placed: dict[tuple, object] = {}
        self.shared = shared.SharedViews(self.db)
        self.written = WrittenFiles(self.db)
        self.activity = activity.Activity(self.db)
        self._versions_as_of: tuple = (None, [])
        self.started_over = False
        if read_only(self.db) and self._current():  # unwritable storage: read as they are
            self.contract = self._merged(contract)
            self._placed_by_log = placements.present(self.db)
            return
        with self.transaction():
            if search.outdated(self.db) or _without_releases(self.db) or self._older_schema():
                self._start_over()
            for statement in ";".join((SCHEMA, adf.SCHEMA, shared.SCHEMA, search.SCHEMA, activity.SCHEMA,
                                       placements.SCHEMA)).split(";"):
                if statement.strip():
                    self.db.execute(statement)
            adf.init_meta(self.db)
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('checkpoint', '0')")
            self.db.execute("INSERT INTO meta VALUES ('schema', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value "
                            "WHERE value != excluded.value", (SCHEMA_VERSION,))
            self.written.track([MIND_PATH, LOG_PATH])
        search.init(self.db)  # sqlite-utils, which commits on its own: outside the transaction
        self._placed_by_log = True
        self.contract = self._merged(contract)

    def _merged(self, hub, config: dict | None = None):
        """`hub` (the hub's contract) with the local layers declared in `config` (now: the views' own), when
        these views know their agent."""
        if self.agent is None:
            return hub
        return local_layers.merged(hub, self.config() if config is None else config, self.agent)

    def local_layers(self) -> set[str]:
        """The names of the layers these views' agent declared for itself (never pushed, never taken from a hub)."""
        return set(local_layers.declared(self.config(), self.agent)) if self.agent is not None else set()

    def close(self) -> None:
        self.db.close()

    def _current(self) -> bool:
        """Views of this version with every table: nothing to make or change before reading them."""
        return (self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_docs_fts'").fetchone() is not None
                and not search.outdated(self.db) and not _without_releases(self.db)
                and self.db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (SCHEMA_VERSION,))

    def _older_schema(self) -> bool:
        """Views folded under another SCHEMA_VERSION (their tables hold less, or differently)."""
        if self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone() is None:
            return False
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        return row is not None and row[0] != SCHEMA_VERSION

    def _start_over(self) -> None:
        """Empties views made by an older version (their tables differ): the next catch-up folds the
        whole log again. What was written to the workspace files (file_state) is kept."""
        for table in (*VIEW_TABLES, "search_docs_fts", "search_history_fts"):
            self.db.execute(f"DROP TABLE IF EXISTS {table}")
        self.db.execute("DELETE FROM meta WHERE key IN ('checkpoint', 'anchor', 'search_history')")
        self.db.execute("UPDATE file_state SET dirty = 1")
        self.started_over = True

    @contextmanager
    def transaction(self):
        """The one write transaction of the views: taken at once (IMMEDIATE), committed when the block
        ends, rolled back when it raises."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def set_contract(self, hub) -> bool:
        """Places the layers by a new contract of the hub (with the local layers the config declares now):
        every file it moves is marked to be written (or removed). True when it changed."""
        if hub != self.hub:
            self.hub = hub
            self._placed.clear()
        contract = self._merged(hub)
        if contract == self.contract:
            return False
        moved = placement(contract) != placement(self.contract)
        old = self.shared_paths() if self.contract and moved else []
        self.contract = contract
        if moved:  # a change of producers or consumers alone leaves every file (and any hand edit) as it is
            with self.transaction():
                self.written.mark_dirty(old + self.shared_paths())
        return True

    def checkpoint(self) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key='checkpoint'").fetchone()
        try:
            return int(row[0])
        except (TypeError, ValueError):  # no row, or not a number: changed outside mem
            raise views_damaged(self.path, f"their checkpoint is {row[0] if row else 'gone'!r:.40}, not a seq") \
                from None

    def anchor(self) -> tuple[int, str] | None:
        """The seq and chain value of the last event folded: a log that lacks them was truncated or rewritten."""
        row = self.db.execute("SELECT value FROM meta WHERE key='anchor'").fetchone()
        if row is None:
            return None
        try:
            seq, chain = row[0].split(" ")
            return int(seq), chain
        except (AttributeError, ValueError):
            raise views_damaged(self.path, f"their anchor is {row[0]!r:.40}, not a seq and a chain") from None

    def set_anchor(self, seq: int, chain: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('anchor', ?)", (f"{seq} {chain}",))

    # --- the wiki as of a seq -----------------------------------------------------------------

    def heads(self, slug: str) -> list[str]:
        head = self.page_head(slug)
        return [head[1]] if head else []

    def page_head(self, slug: str) -> tuple[int, str] | None:
        """The seq and id of the page's current version (None: no such page)."""
        row = self.db.execute("SELECT seq, version_id FROM pages WHERE slug = ?", (slug,)).fetchone()
        return (row[0], id_text(row[1])) if row else None

    def always(self, as_of: int | None = None) -> list[str]:
        if as_of is None:
            row = self.db.execute("SELECT lines FROM always_versions ORDER BY seq DESC LIMIT 1").fetchone()
        else:
            row = self.db.execute("SELECT lines FROM always_versions WHERE seq <= ? ORDER BY seq DESC LIMIT 1",
                                  (as_of,)).fetchone()
        return json.loads(row[0]) if row else []

    def catalog(self, as_of: int | None = None) -> list[tuple[str, str, str]]:
        if as_of is None or as_of >= self.checkpoint():
            return self.db.execute("SELECT slug, title, hook FROM pages ORDER BY slug").fetchall()
        return [(slug, title, hook) for slug, _seq, deleted, title, hook, _doc in self.versions_as_of(as_of)
                if not deleted]

    def page_version_seqs(self, slug: str, upto: int) -> list[int]:
        """The seqs of every version of a page (ingests, updates, renames in and out, deletes) up to a seq."""
        return [seq for (seq,) in self.db.execute("SELECT seq FROM page_versions WHERE slug = ? AND seq <= ? "
                                                  "ORDER BY seq", (slug, upto))]

    def versions_as_of(self, as_of: int) -> list[tuple]:
        """(slug, seq, deleted, title, hook, doc) of every page's version as of a seq (deleted ones too),
        by slug: a skip-scan of the (slug, seq) index, two seeks per slug however many versions each has.
        The last answer is kept for its (seq, checkpoint): the catalog, mind.md and the trust fields of
        one moment all read it."""
        key = (as_of, self.checkpoint())
        if self._versions_as_of[0] != key:
            self._versions_as_of = (key, self._read_versions_as_of(as_of))
        return self._versions_as_of[1]

    def _read_versions_as_of(self, as_of: int) -> list[tuple]:
        return self.db.execute(
            "WITH RECURSIVE slugs(slug) AS (SELECT MIN(slug) FROM page_versions UNION ALL "
            "SELECT (SELECT MIN(slug) FROM page_versions WHERE slug > slugs.slug) FROM slugs WHERE slug IS NOT NULL) "
            "SELECT v.slug, v.seq, v.deleted, v.title, v.hook, v.doc FROM slugs JOIN page_versions v "
            "ON v.slug = slugs.slug AND v.seq = (SELECT MAX(seq) FROM page_versions WHERE slug = slugs.slug AND seq <= ?) "
            "ORDER BY v.slug", (as_of,)).fetchall()

    def released_after(self, slug: str, seq: int) -> bool:
        """Whether a `page.release` of the wiki page was folded after `seq` (one seek on (slug, seq))."""
        return self.db.execute("SELECT 1 FROM page_releases WHERE slug = ? AND seq > ? LIMIT 1",
                               (slug, seq)).fetchone() is not None

    def current_page(self, slug: str) -> tuple | None:
        """(seq, version_id, title, hook, doc, ts) of a page's current version, or None when it does not exist."""
        row = self.db.execute(
            "SELECT p.seq, p.version_id, p.title, p.hook, v.doc, p.ts FROM pages p "
            "JOIN page_versions v ON v.slug = p.slug AND v.seq = p.seq WHERE p.slug = ?", (slug,)).fetchone()
        return tuple(row) if row else None

    def page_version(self, slug: str, as_of: int | None = None):
        """(seq, body) of a page's version as of a seq, the body a PageIngest or PageUpdate; None when the
        page does not exist then. One index lookup on (slug, seq)."""
        if as_of is None:
            current = self.current_page(slug)
            row = (current[0], current[4]) if current else None
        else:
            row = self.db.execute(
                "SELECT seq, doc FROM page_versions WHERE slug = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
                (slug, as_of)).fetchone()
        if not row or row[1] is None:
            return None
        return row[0], decode_body(row[1])

    def page(self, slug: str, as_of: int | None = None) -> str | None:
        """A page's file text as of a seq."""
        version = self.page_version(slug, as_of)
        return render.page(version[1].frontmatter, version[1].text) if version else None

    def mind(self, as_of: int | None = None) -> str:
        return render.mind(self.always(as_of), search.flagged_catalog(self, self.catalog(as_of), as_of))

    def log_chunks(self, as_of: int | None = None) -> Iterator[str]:
        cursor = self.db.execute("SELECT entry FROM log_entries WHERE seq <= ? ORDER BY seq DESC",
                                 (as_of if as_of is not None else self.checkpoint(),))
        return render.log(iter(lambda: cursor.fetchmany(2000), []))

    # --- shared layers ------------------------------------------------------------------------

    def contract_at(self, as_of: int | None = None):
        """The contract that placed the layers' files as of a seq (now: None): the one place that answers
        where a layer's file was then (projections.placements). Kept per the seqs that decide it."""
        if as_of is None or not self._placed_by_log:
            return self.contract
        taken, first, configured = key = self.db.execute(placements.IN_FORCE, (as_of,)).fetchone()
        placed = self._placed.get(key)
        if placed is None:
            if len(self._placed) > 256:
                self._placed.clear()
            hub = placements.hub_contract(self.db, taken, first)
            config = adf.DEFAULT_CONFIG if configured is None else json.loads(self.db.execute(
                "SELECT config_json FROM config_versions WHERE seq = ?", (configured,)).fetchone()[0])
            placed = self._placed[key] = self._merged(self.hub if hub is None else hub, config)
        return placed

    def tenure(self, path: str, upto: int) -> tuple[str, str | None, int, int | None] | None:
        """(layer, slug, since, until) of the last stretch up to seq `upto` in which one layer's file (or page)
        was at `path`: from the contract change at `since` (0: from the start) to the one at `until` that moved or
        dropped it (None: it still is there at `upto`); or from or to a change of the agent's own file there, which
        keeps the path while it exists (`blocked`). None when no layer's file was ever there."""
        changes = placements.changes(self.db, upto) if self._placed_by_log else []
        own = [seq for (seq,) in self.db.execute("SELECT seq FROM file_versions WHERE path = ? AND seq <= ?",
                                                 (path, upto))]
        changes = sorted({*changes, *own}, reverse=True) if own else changes
        owner, until = self.shared_target(path, upto), None
        for seq in changes:
            if owner is not None:
                if self.shared_target(path, seq - 1) != owner:
                    return (*owner, seq, until)
            else:
                owner, until = self.shared_target(path, seq - 1), seq
        return (*owner, 0, until) if owner is not None else None

    def moved_away(self, path: str) -> tuple[str, str | None] | None:
        """(layer, where its file is now: None when the layer was dropped) when a contract change moved or dropped
        the layer whose file was at `path`; None when no layer's file was ever there, or one still is."""
        if self.shared_target(path) is not None:
            return None
        held = self.tenure(path, self.checkpoint())
        if held is None:
            return None
        layer, slug, _since, _until = held
        return layer, self.shared_path(layer, slug)

    def last_placed(self, layer: str, upto: int | None = None) -> tuple[object, int | None] | None:
        """The spec of `layer` in the newest contract up to seq `upto` (now: None) that placed it, and a seq at which
        that contract was in force (None: now): a layer dropped since is found where it was last."""
        contract = self.contract_at(upto)
        if contract is not None and layer in contract.layers:
            return contract.layers[layer], upto
        if not self._placed_by_log:
            return None
        for seq in placements.changes(self.db, self.checkpoint() if upto is None else upto):
            before = self.contract_at(seq - 1) if seq > 1 else None
            if before is not None and layer in before.layers:
                return before.layers[layer], seq - 1
        return None

    def shared_path(self, layer: str, slug: str | None = None, as_of: int | None = None) -> str | None:
        """Where a shared layer (or one page of it) is written as of a seq (now: None); None if no contract
        placed it then."""
        contract = self.contract_at(as_of)
        spec = contract.layers.get(layer) if contract else None
        if spec is None:
            return None
        if spec.format == "entries":
            return spec.path
        return f"{spec.path}{slug}.md" if slug else None

    def shared_target(self, path: str, as_of: int | None = None) -> tuple[str, str | None] | None:
        """The (layer, slug) whose file is `path` as of a seq (now: None); slug None for an entries file. None while
        the agent's own file (adf_files) is there: it keeps its path (`blocked`)."""
        target = self.layer_at(path, as_of)
        return None if target is None or self.own_file_at(path, as_of) else target

    def layer_at(self, path: str, as_of: int | None = None) -> tuple[str, str | None] | None:
        """The (layer, slug) the contract then placed at `path`, whether or not the agent's own file holds it."""
        contract = self.contract_at(as_of)
        for name, spec in (contract.layers.items() if contract else ()):
            if spec.format == "entries" and path == spec.path:
                return name, None
            if spec.format == "pages" and path.startswith(spec.path) and path.endswith(".md"):
                slug = path[len(spec.path):-3]
                if slug and "/" not in slug:
                    return name, slug
        return None

    def shared_heads(self, layer: str, slug: str) -> list[str]:
        return [h.id for h in self.shared.heads(layer, slug, self.checkpoint())]

    def shared_winner(self, layer: str, slug: str) -> str | None:
        heads = self.shared_heads(layer, slug)
        return heads[-1] if heads else None

    def shared_deleted(self, layer: str, slug: str) -> bool:
        return self.shared.page_text(layer, slug, self.checkpoint()) is None

    def shared_deleted_by_every_head(self, layer: str, slug: str) -> bool:
        """Whether the page has heads and each of them deletes it (deleted by several agents at once: no conflict)."""
        heads = self.shared.heads(layer, slug, self.checkpoint())
        return bool(heads) and all(head.deleted for head in heads)

    def shared_document(self, layer: str, slug: str) -> tuple[dict, str] | None:
        """The winner's (frontmatter, text), or None when the page does not exist (or was deleted)."""
        winner = self.shared.winner(layer, slug, self.checkpoint())
        if winner is None or winner[3]:
            return None
        page = decode_body(winner[4])
        return page.frontmatter, page.text

    def entry_ids_starting(self, layer: str, prefix: str) -> list[str]:
        return self.shared.entry_ids_starting(prefix, layer)

    def own_file_at(self, path: str, as_of: int | None = None) -> bool:
        """Whether the agent's own file (`mem file write`) is at `path` as of a seq (None: all folded so far)."""
        bound = "" if as_of is None else " AND seq <= ?"
        row = self.db.execute(f"SELECT deleted FROM file_versions WHERE path = ?{bound} ORDER BY seq DESC LIMIT 1",
                              (path,) if as_of is None else (path, as_of)).fetchone()
        return row is not None and not row[0]

    def blocked(self, as_of: int | None = None) -> dict[str, str]:
        """The agent's own files at a path the contract places a layer's file at (a contract change moved the layer
        there after the file was written: `mem file write` refuses a layer's path), each with that layer. The own
        file keeps its path, for `mem show`, `cite` and an export alike; the layer's file is not written there until
        the own file is renamed or deleted."""
        return {path: target[0] for path in self.file_paths(as_of) if (target := self.layer_at(path, as_of))}

    def _unblocked(self, paths: list[str], as_of: int | None) -> list[str]:
        """`paths` of layers' files, but those the agent's own files hold (`blocked`)."""
        own = set(self.file_paths(as_of)) if paths else set()
        return [path for path in paths if path not in own]

    def shared_listing(self, as_of: int, layers: set[str] | None = None) -> list[str]:
        """The path of every shared file with a version by a seq (in `layers` only, when given), deleted pages
        included: a cheap list to pick from (`shared_paths` reads each page's heads to leave the deleted ones out)."""
        paths = []
        contract = self.contract_at(as_of)
        for name, spec in (contract.layers.items() if contract else ()):
            if layers is not None and name not in layers:
                continue
            if spec.format == "entries":
                if self.db.execute("SELECT 1 FROM entries WHERE layer = ? AND seq <= ? LIMIT 1", (name, as_of)).fetchone():
                    paths.append(spec.path)
            else:
                paths.extend(f"{spec.path}{slug}.md" for slug in self.shared.slugs(name, as_of))
        return sorted(self._unblocked(paths, as_of))

    def shared_paths(self, as_of: int | None = None) -> list[str]:
        """The shared files that exist as of a seq (now: None), each where the contract then placed it."""
        contract = self.contract_at(as_of)
        as_of = self.checkpoint() if as_of is None else as_of
        paths = []
        for name, spec in (contract.layers.items() if contract else ()):
            if spec.format == "entries":
                if self.shared.has_entries(name, as_of):
                    paths.append(spec.path)
            else:
                paths.extend(f"{spec.path}{slug}.md" for slug in self.shared.slugs(name, as_of)
                             if self.shared.page_text(name, slug, as_of) is not None)
        return sorted(self._unblocked(paths, as_of))

    def file_chunks(self, path: str, as_of: int | None = None) -> Iterator[str] | None:
        """The chunks of a materialised file's text as of a seq, or None when it does not exist then. The wiki's
        files first: no layer's path is in the wiki (eventstore.layers.path_problem)."""
        if path == MIND_PATH:
            return iter([self.mind(as_of)])
        if path == LOG_PATH:
            return self.log_chunks(as_of)
        slug = slug_of(path)
        if slug is not None:
            content = self.page(slug, as_of)
            return iter([content]) if content is not None else None
        target = self.shared_target(path, as_of)
        if target is None:
            return None
        as_of = self.checkpoint() if as_of is None else as_of
        layer, slug = target
        if slug is None:
            return _entries_chunks(layer, self.shared.render_entries(layer, as_of))
        text = self.shared.page_text(layer, slug, as_of)
        return iter([text]) if text is not None else None

    def entries_ahead(self, paths: Iterable[str]) -> dict[str, Future]:
        """The files among `paths` of the shared entries layers, each being rendered now by a thread of its own
        (`shared.entries_text_apart`) while the caller does the rest: their chunks are `entries_file`'s of the
        future's result. Nothing is rendered so inside a transaction (a fold's rows not committed, which a connection
        of another thread would not see), nor a layer kept rendered (`render_entries` grows it)."""
        if self.db.in_transaction:
            return {}
        layers = {}
        for path in paths:
            target = self.shared_target(path)
            if target is not None and target[1] is None and not self.shared.kept(target[0]):
                layers[path] = target[0]
        if not layers:
            return {}
        as_of = self.checkpoint()
        pool = ThreadPoolExecutor(len(layers), thread_name_prefix="entries")
        futures = {path: pool.submit(shared.entries_text_apart, self.path, layer, as_of) for path, layer in layers.items()}
        pool.shutdown(wait=False)  # its threads end with their renders
        return futures

    def entries_file(self, path: str, rendered) -> Iterator[str] | None:
        """The chunks of an entries layer's file rendered by `entries_ahead`."""
        layer = self.shared_target(path)[0]
        return _entries_chunks(layer, self.shared.taken(layer, rendered))

    def file_text(self, path: str, as_of: int | None = None) -> str | None:
        chunks = self.file_chunks(path, as_of)
        return "".join(chunks) if chunks is not None else None

    def paths(self, as_of: int | None = None) -> list[str]:
        """Every file that exists as of a seq: mind.md, mind/log.md and each live page."""
        return ([MIND_PATH, LOG_PATH] + [page_path(slug) for slug, _t, _h in self.catalog(as_of)]
                + self.shared_paths(as_of))

    # --- the loop and files (ADF's tables), as of a seq ---------------------------------------------
    # An `as_of` of None reads everything folded so far: the checkpoint, or inside a fold the rows
    # of the batch not yet committed.

    def loop_rows(self, loop: str | None = None, as_of: int | None = None, seq: int | None = None) -> list[tuple]:
        """The live loop (one loop, or all) as of a seq, in ADF's display order (COALESCE(ord, seq), seq):
        rows of LOOP_COLUMNS. `seq` picks one row."""
        where, params = ["removed_seq IS NULL"], []
        if as_of is not None:
            where = ["seq <= ?", "(removed_seq IS NULL OR removed_seq > ?)"]
            params = [as_of, as_of]
        for column, value in (("loop", loop), ("seq", seq)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        return self.db.execute(f"SELECT {LOOP_COLUMNS} FROM loop_rows WHERE {' AND '.join(where)} "
                               "ORDER BY COALESCE(ord, seq), seq", params).fetchall()

    def loop_names(self) -> list[str]:
        """Every loop that ever had a row."""
        return [name for (name,) in self.db.execute("SELECT DISTINCT loop FROM loop_rows ORDER BY loop")]

    def loop_began(self, loop: str) -> int | None:
        """The seq of a loop's first row (None: it never had one), as loop_rows reads a moment: by the rows' seqs."""
        return self.db.execute("SELECT MIN(seq) FROM loop_rows WHERE loop = ?", (loop,)).fetchone()[0]

    def files(self, as_of: int | None = None) -> list[tuple]:
        """The adf_files rows (FILE_COLUMNS) of the files (not the wiki's) that exist as of a seq."""
        return [row[:8] for row in self._latest_files(FILE_COLUMNS, as_of) if not row[8]]

    def file_paths(self, as_of: int | None = None) -> list[str]:
        """The paths of `files`, without reading their content."""
        return [path for path, deleted in self._latest_files("path", as_of) if not deleted]

    def _latest_files(self, columns: str, as_of: int | None):
        bound = "" if as_of is None else " AND seq <= ?"
        return self.db.execute(
            f"SELECT {columns}, deleted FROM file_versions f WHERE seq = "
            f"(SELECT MAX(seq) FROM file_versions WHERE path = f.path{bound}) ORDER BY path",
            () if as_of is None else (as_of,))

    def file(self, path: str, as_of: int | None = None):
        """The adf_files row (FILE_COLUMNS) of one file as of a seq, or None."""
        bound = "" if as_of is None else " AND seq <= ?"
        row = self.db.execute(f"SELECT {FILE_COLUMNS}, deleted FROM file_versions WHERE path = ?{bound} "
                              "ORDER BY seq DESC LIMIT 1", (path,) if as_of is None else (path, as_of)).fetchone()
        return row[:8] if row and not row[8] else None

    def file_nesting(self, path: str) -> str | None:
        """The agent's file (now) whose path is a folder of `path` (`notes` for `notes/a.md`) or lies under `path` as
        a folder (`notes/a.md/b.md`), or None: a path cannot be a file and a folder at once."""
        parts = path.split("/")
        for end in range(1, len(parts)):
            if self.file("/".join(parts[:end])) is not None:
                return "/".join(parts[:end])
        for (below,) in self.db.execute("SELECT DISTINCT path FROM file_versions WHERE path > ? AND path < ?",
                                        (f"{path}/", f"{path}0")):  # "0" follows "/": every path under it
            if self.file(below) is not None:
                return below
        return None

    def file_twin(self, path: str) -> str | None:
        """The agent's file (now) whose path is `path` once both are case-folded and NFC-normalized (`Readme.md` for
        `readme.md`, `café.md` written in NFD for NFC), itself excepted, or None."""
        name = validate.folded(path)
        return next((other for other in self.file_paths() if other != path and validate.folded(other) == name), None)

    def adf_files(self, as_of: int | None = None) -> list[tuple]:
        """Every adf_files row as of a seq, the wiki's files (mind.md, mind/log.md, pages) first."""
        as_of = self.checkpoint() if as_of is None else as_of
        return [self.wiki_file_row(path, as_of) for path in self.paths(as_of)] + self.files(as_of)

    def audit_rows(self, as_of: int | None = None, source: str | None = None, *, data: bool = False) -> list[tuple]:
        """The audit rows written as of a seq, by id: AUDIT_COLUMNS, or AUDIT_DATA_COLUMNS with `data`
        (then streamed: an iterator, not a list). A `source` of `loop` takes every loop's rows (`loop:<name>`)."""
        where, params = "event_seq <= ?", [as_of if as_of is not None else self.checkpoint()]
        if source == "loop":
            where += f" AND {adf.LOOP_SOURCE}"
        elif source:
            where += " AND source = ?"
            params.append(source)
        rows = self.db.execute(f"SELECT {AUDIT_DATA_COLUMNS if data else AUDIT_COLUMNS} FROM audit_rows "
                               f"WHERE {where} ORDER BY id", params)
        return rows if data else rows.fetchall()

    def loop_removed(self, seq: int) -> tuple[int | None] | None:
        """(removed_seq,) of the loop row of a seq (None inside: live), or None when no loop row has it
        (a message folded only from an imported audit blob)."""
        return self.db.execute("SELECT removed_seq FROM loop_rows WHERE seq = ?", (seq,)).fetchone()

    def archived_by(self, event_seq: int) -> tuple | None:
        """The audit row (AUDIT_COLUMNS) that a loop compaction or clear at this seq wrote, or None."""
        return self.db.execute(f"SELECT {AUDIT_COLUMNS} FROM audit_rows WHERE event_seq = ? AND start_seq IS NOT NULL",
                               (event_seq,)).fetchone()

    def audit_event_seq(self, audit_id: int) -> int:
        """The seq of the event that wrote an audit row (a compaction, a clear, an import)."""
        return self.db.execute("SELECT event_seq FROM audit_rows WHERE id = ?", (audit_id,)).fetchone()[0]

    def loop_audits_covering(self, seq: int, loop: str | None, as_of: int) -> list[tuple[int, str, bytes]]:
        """(id, source, data) of the loop audit rows (one loop's, or every loop's) whose seq range covers
        `seq`, written as of `as_of`, the newest range first."""
        source, params = (("source = ?", [f"loop:{loop}"]) if loop else (adf.LOOP_SOURCE, []))
        return self.db.execute(f"SELECT id, source, data FROM audit_rows WHERE {source} AND start_seq <= ? "
                               "AND end_seq >= ? AND event_seq <= ? ORDER BY start_seq DESC",
                               (*params, seq, seq, as_of)).fetchall()

    def messages(self, box: str, as_of: int | None = None) -> Iterator[tuple]:
        """The adf_inbox or adf_outbox rows (adf.MESSAGE_COLUMNS[box]) as of a seq, in the order they came."""
        columns = ", ".join(f'"{c}"' for c in adf.MESSAGE_COLUMNS[box])
        return self.db.execute(f"SELECT {columns} FROM adf_{box} WHERE _seq <= ? ORDER BY _seq",
                               (as_of if as_of is not None else self.checkpoint(),))

    def adf_meta(self) -> dict[str, str]:
        """adf_meta's keys and values (the workspace's ADF times and versions)."""
        return dict(self.db.execute("SELECT key, value FROM adf_meta").fetchall())

    def config_row(self, as_of: int | None = None) -> tuple[str, str] | None:
        """(config_json, updated_at) as of a seq, or None while the config is ADF's default."""
        return self.db.execute("SELECT config_json, updated_at FROM config_versions WHERE seq <= ? "
                               "ORDER BY seq DESC LIMIT 1",
                               (as_of if as_of is not None else self.checkpoint(),)).fetchone()

    def wiki_file_row(self, path: str, as_of: int | None = None) -> tuple | None:
        """A wiki file as an adf_files row: mind.md and mind/log.md no_delete, pages none (ADF's protections)."""
        as_of = self.checkpoint() if as_of is None else as_of
        text = self.file_text(path, as_of)
        if text is None:
            return None
        content = text.encode("utf-8")
        return (path, content, "text/markdown", len(content), *self.wiki_file_meta(path, as_of))

    def wiki_file_meta(self, path: str, as_of: int | None = None) -> tuple:
        """(protection, authorized, created_at, updated_at) of a wiki file in adf_files."""
        return self.wiki_files_meta([path], as_of)[path]

    def wiki_files_meta(self, paths: list[str], as_of: int | None = None) -> dict[str, tuple]:
        """`wiki_file_meta` of each of `paths`, the pages' times read in one statement (PAGE_TIMES): a replay
        records two thousand pages' rows at once."""
        as_of = self.checkpoint() if as_of is None else as_of
        created = self.adf_meta().get("adf_created_at", adf.EPOCH_ISO)
        slugs = {slug: path for path in paths if (slug := slug_of(path))}
        metas = {slugs[slug]: ("none", 0, format_instant(first), format_instant(last)) for slug, first, last in
                 self.db.execute(PAGE_TIMES, (as_of, json.dumps(list(slugs))))} if slugs else {}
        for path in paths:
            if path in metas:
                continue
            target = self.shared_target(path, as_of) if path not in (MIND_PATH, LOG_PATH) else None
            span = self.shared.written_span(*target, as_of) if target else None
            if span:  # a layer's file (a hub's, or a local one): its own entries' or versions' times; a page deletable
                metas[path] = ("none" if target[1] else "no_delete", 0, format_instant(span[0]), format_instant(span[1]))
                continue
            stamps = [self.wiki_changed_at(as_of)] if path == MIND_PATH else [self._last_ts("log_entries", as_of)]
            if path == MIND_PATH:  # quiet (imported) ingests change the catalog without a log entry
                if as_of >= self.checkpoint():
                    stamps.append(self.db.execute("SELECT MAX(ts) FROM pages").fetchone()[0])
                else:
                    stamps.append(self.db.execute("SELECT MAX(ts) FROM page_versions WHERE seq <= ?",
                                                  (as_of,)).fetchone()[0])
            stamps = [s for s in stamps if s is not None]
            metas[path] = ("no_delete", 0, created, format_instant(max(stamps)) if stamps else created)
        return metas

    def _last_ts(self, table: str, as_of: int) -> int | None:
        row = self.db.execute(f"SELECT ts FROM {table} WHERE seq <= ? ORDER BY seq DESC LIMIT 1", (as_of,)).fetchone()
        return row[0] if row else None

    def wiki_changed_at(self, as_of: int) -> int | None:
        """The ts of the newest log entry or Always edit as of a seq (None: neither yet)."""
        stamps = [s for s in (self._last_ts(t, as_of) for t in ("always_versions", "log_entries")) if s is not None]
        return max(stamps) if stamps else None

    def config(self, as_of: int | None = None) -> dict:
        row = self.config_row(as_of)
        return json.loads(row[0]) if row else adf.DEFAULT_CONFIG

    def _rows(self, table: str) -> sqlite3.Cursor:
        """A view table's rows in the order two builds are compared in."""
        return self.db.execute(f"SELECT * FROM {table} ORDER BY 1, 2")

    def dump(self) -> dict[str, list]:
        """Every view table's rows, for comparing two builds."""
        return {table: self._rows(table).fetchall() for table in VIEW_TABLES}

    def digests(self) -> dict[str, str]:
        """Every view table's rows as `dump` reads them, hashed as they stream (`mem replay --check` of a million
        events held both builds' rows at once: 3 GB)."""
        return {table: rows_digest(self._rows(table)) for table in VIEW_TABLES}


def rows_digest(rows: Iterable[tuple]) -> str:
    """A hash of rows in their order (msgpack, each row a frame): equal exactly when the rows are."""
    digest, encode = hashlib.sha256(), msgspec.msgpack.encode
    for row in rows:
        digest.update(encode(row))
    return digest.hexdigest()


