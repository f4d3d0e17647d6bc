"""The views database: disposable tables folded from the log, with their checkpoint.

Every read here takes `as_of` (a seq): the current state is simply the state as of the
checkpoint, so a point-in-time read and a current read are the same query.
"""

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from eventstore.envelope import decode_body
from eventstore.instants import format_instant
from eventstore.recorder import id_text

from . import adf, render, search, shared

SCHEMA_VERSION = "1"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS page_versions (
    slug TEXT NOT NULL, seq INTEGER NOT NULL, version_id BLOB NOT NULL, ts INTEGER NOT NULL, deleted INTEGER NOT NULL,
    parents TEXT NOT NULL, title TEXT NOT NULL, hook TEXT NOT NULL, doc BLOB);
CREATE UNIQUE INDEX IF NOT EXISTS page_versions_by_slug ON page_versions(slug, seq);
CREATE TABLE IF NOT EXISTS pages (
    slug TEXT PRIMARY KEY, seq INTEGER NOT NULL, version_id BLOB NOT NULL,
    title TEXT NOT NULL, hook TEXT NOT NULL, ts INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS always_versions (seq INTEGER PRIMARY KEY, ts INTEGER NOT NULL, lines TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log_entries (seq INTEGER PRIMARY KEY, ts INTEGER NOT NULL, entry TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS file_state (
    path TEXT PRIMARY KEY, written_hash TEXT, dirty INTEGER NOT NULL DEFAULT 0);
"""

VIEW_TABLES = ("page_versions", "pages", "always_versions", "log_entries", "loop_rows", "audit_rows", "file_versions",
               "config_versions", "adf_meta", "adf_inbox", "adf_outbox", "entries", "shared_versions", *search.TABLES)
MIND_PATH = "mind.md"
LOG_PATH = "mind/log.md"


def page_path(slug: str) -> str:
    return f"mind/{slug}.md"


def slug_of(path: str) -> str | None:
    if path.startswith("mind/") and path.endswith(".md") and path != LOG_PATH and path.count("/") == 1:
        return path[5:-3]
    return None


class Views:
    def __init__(self, path: str | Path, *, fast: bool = False):
        """`fast` turns off syncing, for a rebuild into a new file that is renamed into place after."""
        self.path = str(path)
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=60, check_same_thread=False)
        self.db.execute("PRAGMA busy_timeout = 60000")
        if fast:
            self.db.execute("PRAGMA journal_mode = OFF")
            self.db.execute("PRAGMA synchronous = OFF")
            self.db.execute("PRAGMA cache_size = -65536")
        else:
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
        self.contract = None  # the shared layers' contract (sync.wire.Contract), set by Memory
        self.shared = shared.SharedViews(self.db)
        for statement in (SCHEMA + adf.SCHEMA + shared.SCHEMA + search.SCHEMA).split(";"):
            if statement.strip():
                self.db.execute(statement)
        search.init(self.db)
        adf.init_meta(self.db)
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('checkpoint', '0')")
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        self.db.executemany("INSERT OR IGNORE INTO file_state (path, dirty) VALUES (?, 1)",
                            [(MIND_PATH,), (LOG_PATH,)])

    def close(self) -> None:
        self.db.close()

    def checkpoint(self) -> int:
        return int(self.db.execute("SELECT value FROM meta WHERE key='checkpoint'").fetchone()[0])

    # --- the wiki as of a seq -----------------------------------------------------------------

    def heads(self, slug: str) -> list[str]:
        row = self.db.execute("SELECT version_id FROM pages WHERE slug = ?", (slug,)).fetchone()
        return [id_text(row[0])] if row else []

    def always(self, as_of: int | None = None) -> list[str]:
        if as_of is None:
            row = self.db.execute("SELECT lines FROM always_versions ORDER BY seq DESC LIMIT 1").fetchone()
        else:
            row = self.db.execute("SELECT lines FROM always_versions WHERE seq <= ? ORDER BY seq DESC LIMIT 1",
                                  (as_of,)).fetchone()
        return json.loads(row[0]) if row else []

    def catalog(self, as_of: int | None = None) -> list[tuple[str, str, str]]:
        if as_of is None:
            return self.db.execute("SELECT slug, title, hook FROM pages ORDER BY slug").fetchall()
        rows = self.db.execute(
            "SELECT slug, MAX(seq), deleted, title, hook FROM page_versions WHERE seq <= ? GROUP BY slug ORDER BY slug",
            (as_of,)).fetchall()
        return [(slug, title, hook) for slug, _seq, deleted, title, hook in rows if not deleted]

    def page(self, slug: str, as_of: int | None = None) -> str | None:
        """A page's file text as of a seq: one index lookup on (slug, seq)."""
        if as_of is None:
            row = self.db.execute(
                "SELECT v.doc FROM pages p JOIN page_versions v ON v.slug = p.slug AND v.seq = p.seq "
                "WHERE p.slug = ?", (slug,)).fetchone()
        else:
            row = self.db.execute(
                "SELECT doc FROM page_versions WHERE slug = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
                (slug, as_of)).fetchone()
        if not row or row[0] is None:
            return None
        document = decode_body(row[0])
        return render.page(document.frontmatter, document.text)

    def mind(self, as_of: int | None = None) -> str:
        return render.mind(self.always(as_of), search.flagged_catalog(self, self.catalog(as_of), as_of))

    def log_chunks(self, as_of: int | None = None) -> Iterator[str]:
        cursor = self.db.execute("SELECT entry FROM log_entries WHERE seq <= ? ORDER BY seq DESC",
                                 (as_of if as_of is not None else self.checkpoint(),))
        return render.log(iter(lambda: cursor.fetchmany(2000), []))

    # --- shared layers ------------------------------------------------------------------------

    def shared_path(self, layer: str, slug: str | None = None) -> str | None:
        """Where a shared layer (or one page of it) is written, per the contract; None if unknown."""
        spec = self.contract.layers.get(layer) if self.contract else None
        if spec is None:
            return None
        if spec.format == "entries":
            return spec.path
        return f"{spec.path}{slug}.md" if slug else None

    def shared_target(self, path: str) -> tuple[str, str | None] | None:
        for name, spec in (self.contract.layers.items() if self.contract else ()):
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

    def shared_document(self, layer: str, slug: str) -> tuple[dict, str] | None:
        """The winner's (frontmatter, text), or None when the page does not exist (or was deleted)."""
        winner = self.shared.winner(layer, slug, self.checkpoint())
        if winner is None or winner[3]:
            return None
        page = decode_body(winner[4])
        return page.frontmatter, page.text

    def entry_exists(self, layer: str, id: str) -> bool:
        return self.db.execute("SELECT 1 FROM entries WHERE layer = ? AND id = ?", (layer, id)).fetchone() is not None

    def shared_paths(self, as_of: int | None = None) -> list[str]:
        as_of = self.checkpoint() if as_of is None else as_of
        paths = []
        for name, spec in (self.contract.layers.items() if self.contract else ()):
            if spec.format == "entries":
                if self.db.execute("SELECT 1 FROM entries WHERE layer = ? AND seq <= ? LIMIT 1",
                                   (name, as_of)).fetchone():
                    paths.append(spec.path)
            else:
                paths.extend(f"{spec.path}{slug}.md" for slug in self.shared.slugs(name, as_of)
                             if self.shared.page_text(name, slug, as_of) is not None)
        return sorted(paths)

    def file_chunks(self, path: str, as_of: int | None = None) -> Iterator[str] | None:
        """The chunks of a materialised file's text as of a seq, or None when it does not exist then."""
        target = self.shared_target(path) if self.contract else None
        if target is not None:
            as_of = self.checkpoint() if as_of is None else as_of
            layer, slug = target
            text = (self.shared.render_entries(layer, as_of) if slug is None
                    else self.shared.page_text(layer, slug, as_of))
            if slug is None and text == f"# {layer}\n\n":
                return None
            return iter([text]) if text is not None else None
        if path == MIND_PATH:
            return iter([self.mind(as_of)])
        if path == LOG_PATH:
            return self.log_chunks(as_of)
        slug = slug_of(path)
        content = self.page(slug, as_of) if slug else None
        return iter([content]) if content is not None else None

    def file_text(self, path: str, as_of: int | None = None) -> str | None:
        chunks = self.file_chunks(path, as_of)
        return "".join(chunks) if chunks is not None else None

    def paths(self, as_of: int | None = None) -> list[str]:
        """Every file that exists as of a seq: mind.md, mind/log.md and each live page."""
        return ([MIND_PATH, LOG_PATH] + [page_path(slug) for slug, _t, _h in self.catalog(as_of)]
                + self.shared_paths(as_of))

    def file(self, path: str, as_of: int | None = None):
        """The adf_files row (path, content, mime, size, protection, authorized, created, updated) or None."""
        row = self.db.execute(
            "SELECT path, content, mime_type, size, protection, authorized, created_at, updated_at, deleted "
            "FROM file_versions WHERE path = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
            (path, as_of if as_of is not None else self.checkpoint())).fetchone()
        return row[:8] if row and not row[8] else None

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
        as_of = self.checkpoint() if as_of is None else as_of
        created = (self.db.execute("SELECT value FROM adf_meta WHERE key = 'adf_created_at'").fetchone()
                   or [adf.EPOCH_ISO])[0]
        slug = slug_of(path)
        if slug:
            edge = "SELECT ts FROM page_versions WHERE slug = ? AND seq <= ? ORDER BY seq {} LIMIT 1"
            first = self.db.execute(edge.format("ASC"), (slug, as_of)).fetchone()[0]
            last = self.db.execute(edge.format("DESC"), (slug, as_of)).fetchone()[0]
            times, protection = (format_instant(first), format_instant(last)), "none"
        else:
            last = "SELECT ts FROM {} WHERE seq <= ? ORDER BY seq DESC LIMIT 1"
            tables = ("always_versions", "log_entries") if path == MIND_PATH else ("log_entries",)
            stamps = [(self.db.execute(last.format(t), (as_of,)).fetchone() or [None])[0] for t in tables]
            if path == MIND_PATH:  # quiet (imported) ingests change the catalog without a log entry
                if as_of >= self.checkpoint():
                    stamps.append(self.db.execute("SELECT MAX(ts) FROM pages").fetchone()[0])
                else:
                    stamps.append(self.db.execute("SELECT MAX(ts) FROM page_versions WHERE seq <= ?",
                                                  (as_of,)).fetchone()[0])
            stamps = [s for s in stamps if s is not None]
            times, protection = (created, format_instant(max(stamps)) if stamps else created), "no_delete"
        return (protection, 0, *times)

    def config(self, as_of: int | None = None) -> dict:
        row = self.db.execute("SELECT config_json FROM config_versions WHERE seq <= ? ORDER BY seq DESC LIMIT 1",
                              (as_of if as_of is not None else self.checkpoint(),)).fetchone()
        return json.loads(row[0]) if row else adf.DEFAULT_CONFIG

    def dump(self) -> dict[str, list]:
        """Every view table's rows, for comparing two builds."""
        return {table: self.db.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
                for table in VIEW_TABLES}
