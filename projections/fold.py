"""The wiki fold: events in seq order to view rows, with the checkpoint in the same transaction.

One page event yields its page version, its catalog line (the `pages` row) and its log entry in
one batch, so the three cannot drift apart. Incremental updates and `mem replay` run this same
code; only the size of the batches differs.
"""

import json
from collections.abc import Callable

from eventstore import frontmatter
from eventstore.envelope import decode_body, unpack_body
from eventstore.kinds import AlwaysAdd, AlwaysRemove, Lint, PageDelete, PageIngest, PageRename, PageUpdate

from . import render
from .views import LOG_PATH, MIND_PATH, Views, page_path

_DELETED = None


class WikiFold:
    def __init__(self, views: Views):
        self.views = views
        self.db = views.db
        self._pages: dict[str, tuple | None] = {}
        self._always: list[str] | None = None
        self._reset_batch()

    def _reset_batch(self):
        self.versions: list[tuple] = []
        self.entries: list[tuple] = []
        self.always_rows: list[tuple] = []
        self.touched_pages: set[str] = set()
        self.dirty: set[str] = set()

    def _page(self, slug: str):
        if slug not in self._pages:
            row = self.db.execute("SELECT seq, version_id, title, hook FROM pages WHERE slug = ?", (slug,)).fetchone()
            self._pages[slug] = tuple(row) if row else _DELETED
        return self._pages[slug]

    def _always_lines(self) -> list[str]:
        if self._always is None:
            self._always = self.views.always()
        return self._always

    def _version(self, seq, version_id, slug, parents, fm, text):
        title = render.title_of(slug, fm, text)
        hook = render.hook_of(fm)
        self.versions.append((slug, seq, version_id, 0, json.dumps(parents), title, hook, render.page(fm, text)))
        self._pages[slug] = (seq, version_id, title, hook)
        self.touched_pages.add(slug)
        self.dirty.add(page_path(slug))
        return title

    def _tombstone(self, seq, version_id, slug, parents):
        current = self._page(slug)
        title, hook = (current[2], current[3]) if current else (slug, "")
        self.versions.append((slug, seq, version_id, 1, json.dumps(parents), title, hook, None))
        self._pages[slug] = _DELETED
        self.touched_pages.add(slug)
        self.dirty.add(page_path(slug))
        return title

    def apply(self, seq: int, version_id: str, ts: int, body) -> None:
        if isinstance(body, (PageIngest, PageUpdate)):
            kind = "update" if self._page(body.slug) is not None else "ingest"
            title = self._version(seq, version_id, body.slug, body.parents, body.frontmatter, body.text)
            self._log(seq, ts, kind, title, body.note)
        elif isinstance(body, PageDelete):
            if self._page(body.slug) is None:
                return
            title = self._tombstone(seq, version_id, body.slug, body.parents)
            self._log(seq, ts, "delete", title, body.note)
        elif isinstance(body, PageRename):
            if self._page(body.old) is None:
                return
            content = self._content(body.old)
            self._tombstone(seq, version_id, body.old, body.parents)
            fm, text = _split_rendered(content)
            title = self._version(seq, version_id, body.new, body.parents, fm, text)
            moved = f"mind/{body.old}.md → mind/{body.new}.md"
            self._log(seq, ts, "rename", title, f"{moved}. {body.note}" if body.note else moved)
        elif isinstance(body, AlwaysAdd):
            self._always_lines().append(body.line)
            self.always_rows.append((seq, json.dumps(self._always, ensure_ascii=False)))
            self.dirty.add(MIND_PATH)
        elif isinstance(body, AlwaysRemove):
            lines = self._always_lines()
            if body.line in lines:
                lines.remove(body.line)
                self.always_rows.append((seq, json.dumps(lines, ensure_ascii=False)))
                self.dirty.add(MIND_PATH)
        elif isinstance(body, Lint):
            note = body.summary + "".join(f"\n- {finding}" for finding in body.findings)
            self._log(seq, ts, "lint", "Lint pass", note)

    def _content(self, slug: str) -> str:
        for row in reversed(self.versions):
            if row[0] == slug and row[7] is not None:
                return row[7]
        return self.views.page(slug)

    def _log(self, seq, ts, kind, title, note):
        self.entries.append((seq, render.log_entry(ts, kind, title, note)))
        self.dirty.add(LOG_PATH)
        self.dirty.add(MIND_PATH)

    def flush(self, checkpoint: int) -> None:
        """Writes the batch and the checkpoint; the caller holds the transaction."""
        db = self.db
        if self.versions:
            db.executemany("INSERT OR REPLACE INTO page_versions VALUES (?,?,?,?,?,?,?,?)", self.versions)
        if self.entries:
            db.executemany("INSERT OR REPLACE INTO log_entries VALUES (?,?)", self.entries)
        if self.always_rows:
            db.executemany("INSERT OR REPLACE INTO always_versions VALUES (?,?)", self.always_rows)
        for slug in self.touched_pages:
            page = self._pages[slug]
            if page is None:
                db.execute("DELETE FROM pages WHERE slug = ?", (slug,))
            else:
                db.execute("INSERT OR REPLACE INTO pages VALUES (?,?,?,?,?)", (slug, *page))
        if self.dirty:
            db.executemany("INSERT INTO file_state (path, dirty) VALUES (?, 1) "
                           "ON CONFLICT(path) DO UPDATE SET dirty = 1", [(p,) for p in sorted(self.dirty)])
        db.execute("UPDATE meta SET value = ? WHERE key = 'checkpoint'", (str(checkpoint),))
        self._reset_batch()


def _split_rendered(content: str) -> tuple[dict, str]:
    yaml_text, text = frontmatter.split(content)
    return frontmatter.parse(yaml_text or ""), text


WIKI_KINDS = ("page.ingest", "page.update", "page.delete", "page.rename", "always.add", "always.remove", "lint")


def catch_up(log, views: Views, upto: int | None = None, batch: int = 5000,
             progress: Callable[[int], None] | None = None) -> int:
    """Applies every event after the views' checkpoint (up to `upto`); returns the new checkpoint.

    Each batch commits its rows and the checkpoint in one transaction: exactly once, even if
    the process dies between batches.
    """
    target = log.head() if upto is None else upto
    fold = WikiFold(views)
    db = views.db
    while True:
        db.execute("BEGIN IMMEDIATE")
        try:
            start = views.checkpoint()
            if start >= target:
                db.execute("COMMIT")
                return start
            end = min(start + batch, target)
            applied = 0
            for seq, version_id, ts, kind, codec, body in log.db.execute(
                    "SELECT seq, id, ts, kind, codec, body FROM events WHERE seq > ? AND seq <= ? ORDER BY seq",
                    (start, end)):
                applied += 1
                if kind in WIKI_KINDS:
                    fold.apply(seq, version_id, ts, decode_body(unpack_body(codec, body)))
            fold.flush(end)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            fold = WikiFold(views)
            raise
        if progress:
            progress(applied)

