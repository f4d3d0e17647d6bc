"""The wiki fold: events in seq order to view rows, with the checkpoint in the same transaction.

One page event yields its page version, its catalog line (the `pages` row) and its log entry in
one batch, so the three cannot drift apart. Incremental updates and `mem replay` run this same
code; only the size of the batches differs.

A page version keeps the event's own encoded body (`doc`); its file text is rendered when read,
which keeps a rebuild from formatting a million versions nobody asked for.
"""

import gc
import json
import re
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from itertools import islice
from operator import itemgetter
from typing import Any, Union

import msgspec

from eventstore.envelope import CODEC_RAW, CODEC_REDACTED, decode_bodies, decode_body, encode_body, unpack_body
from eventstore.governance import GOVERNANCE
from eventstore.kinds import (ADF_KINDS, KINDS, SHARED_KINDS, WIKI_KINDS, AlwaysAdd, AlwaysRemove, Body, BodyUnion,
                              ContractChange, EntryAppend, FileDelete, FileWrite, Lint, LogRestore, PageDelete,
                              PageIngest, PageRelease, PageRename, PageUpdate, Redacted, Redaction)
from eventstore.errors import Damaged, InvalidInput
from eventstore.layers import AGENT, CONTRACT_LAYER, MIND
from eventstore.recorder import ROW_FAULTS, damaged_row, id_text, stored_body
from eventstore.redaction import stand_in

from . import placements, render, trust
from .render import hook_of, title_of
from .adf import AdfFold
from .search import SearchFold
from .shared import SharedFold
from .views import LOG_PATH, MIND_PATH, Views, page_path

_DAYS: dict[int, str] = {}
"""render.day of each day number met: a log entry's date."""
_UNREAD = object()
"""A page the fold has not read from the views yet (`WikiFold._pages`)."""

LeanFrontmatter = msgspec.defstruct("LeanFrontmatter", [(key, Any, None) for key in (
    "type", "description", "status", "stale_after", GOVERNANCE)], gc=False)
"""The frontmatter keys a page version's rows take (WikiFold._row) and the one that may hold it, each None when
absent: the rest are skipped undecoded (a frontmatter as a dict cost a third of a replay's decoding)."""


def _lean(cls: type[Body]) -> type[Body]:
    """`cls` (PageIngest or PageUpdate) with a LeanFrontmatter, validated alike (the same fields, the same types but
    the frontmatter's values, which are Any in both, and tuples for lists), and not tracked by the cycle collector."""
    fields = []
    for field in msgspec.structs.fields(cls):
        kind = LeanFrontmatter if field.name == "frontmatter" else field.type
        if field.default_factory is list:  # a tuple: none made for each body that leaves it out
            fields.append((field.name, tuple[kind.__args__[0], ...], ()))
        elif field.default is not msgspec.NODEFAULT:
            fields.append((field.name, kind, field.default))
        else:
            fields.append((field.name, kind))
    return msgspec.defstruct(f"Lean{cls.__name__}", fields, bases=(Body,), tag=cls.__struct_config__.tag, kw_only=True,
                             gc=False)


LeanIngest, LeanUpdate = _lean(PageIngest), _lean(PageUpdate)
LEAN_BODIES = msgspec.msgpack.Decoder(list[Union[(LeanIngest, LeanUpdate, *(
    cls for cls in BodyUnion.__args__ if cls is not PageIngest and cls is not PageUpdate))]])
"""The mind layer's bodies as the wiki fold reads them (`_bodies`): its page versions in LeanIngest and LeanUpdate
(`WikiFold.fold_batch`), every other kind as itself."""


class WikiFold:
    def __init__(self, views: Views, writer=None):
        """`writer` (a bulk.HistoryWriter) takes the history tables in a rebuild. When it reads the log itself
        (`from_log`), a version row leaves out what the log holds (see `_row`)."""
        self.views = views
        self.db = views.db
        self.writer = writer
        self.from_log = writer is not None and writer.from_log
        self._pages: dict[str, tuple | None] = {}  # slug -> (seq, version_id, title, hook, doc, ts) or None
        self._always: list[str] | None = None
        self._titles: dict[str, tuple[str, str]] = {}  # slug -> (its last text's first line, the title it is)
        self.touched_pages: set[str] = set()  # pages changed since the `pages` rows were last written
        self._marked: set[str] = set()  # the files a rebuild has marked dirty (`_mark_dirty`)
        self._reset_batch()

    def _reset_batch(self):
        self.versions: list[list] = []  # a row (`_row`) for each version and tombstone
        self._open_rows: dict[str, list] = {}  # slug -> its last version's row in this batch, closed in place
        self.replaced: list[tuple[int, int]] = []  # (seq of a version stored before, seq that replaced it)
        self.entries: list[tuple] = []
        self.releases: list[tuple[str, int]] = []
        self.always_rows: list[tuple] = []
        self.dirty: set[str] = set()

    def _page(self, slug: str):
        if slug not in self._pages:
            self._pages[slug] = self.views.current_page(slug)
        return self._pages[slug]

    def _always_lines(self) -> list[str]:
        if self._always is None:
            self._always = self.views.always()
        return self._always

    def _row(self, slug, seq, version_id, ts, parents, title, hook, doc, fm=None, text="", stored=False) -> list:
        """A version's row (search.VERSION_COLUMNS): its page_versions row, then what its search_history row
        adds (its body: the hook, a blank line and the text; the type, status and stale date, 0 for those it has
        not, and `until`, 0 while it is current, set in place by a later version of the batch); a tombstone
        (`fm` None) has only the first.
        For a writer that reads the log itself (bulk.FROM_LOG), the version id and ts are 0 (those of the
        event at `seq`), and so is a `doc` that is the event's body as stored (`stored`)."""
        if self.from_log:
            version_id, ts, doc = 0, 0, 0 if stored else doc
        if fm is None:
            return [slug, seq, version_id, ts, 1, parents, title, hook, None, "", "", 0, 0, 0]
        status, stale, kind = fm.get("status"), fm.get("stale_after"), fm.get("type")
        return [slug, seq, version_id, ts, 0, parents, title, hook, doc, f"{hook}\n\n{text}" if hook else text,
                kind if kind.__class__ is str else str(kind), 0 if status is None else trust.stored_status(status),
                0 if stale is None else trust.stale_day(stale) or 0, 0]

    def _version(self, seq, version_id, ts, slug, parents, fm, text, doc, previous=None, stored=False):
        """A new version of `slug`, whose current version is `previous` (None: it has none); `stored`: see `_row`."""
        title, hook = title_of(slug, fm, text), hook_of(fm)
        if previous is not None:
            self._close(slug, previous[0], seq)
        self._open_rows[slug] = row = self._row(slug, seq, version_id, ts, ",".join(parents), title, hook, doc, fm,
                                                text, stored)
        self.versions.append(row)
        self._pages[slug] = (seq, version_id, title, hook, doc, ts)
        self.touched_pages.add(slug)
        return title

    def _close(self, slug: str, previous: int, seq: int) -> None:
        """The search_history row of a page's version `previous` was current until `seq`."""
        row = self._open_rows.pop(slug, None)
        if row is not None and row[1] == previous:
            row[-1] = seq
        else:
            self.replaced.append((previous, seq))

    def _tombstone(self, seq, version_id, ts, slug, parents):
        previous, _id, title, hook, _doc, _ts = self._page(slug)
        self.versions.append(self._row(slug, seq, version_id, ts, ",".join(parents), title, hook, None))
        self._close(slug, previous, seq)
        self._pages[slug] = None
        self.touched_pages.add(slug)
        return title

    def fold_batch(self, rows: list[tuple], raws: list[bytes], bodies: list) -> bool:
        """Folds a batch's events of the mind layer (`_catch_up`'s rows, their body bytes and their bodies, decoded
        by `_bodies`); returns whether the batch holds events for the other folds.

        A page version in a LeanIngest or LeanUpdate is folded here, `apply`'s steps for it written out (a
        rebuild's hot path: nine of ten events of a wiki's log) for the common case: not held, its title the
        text's first line as it is (title_of's first case), its hook one line already (hook_of's). Any other is
        decoded in full and folded by `apply`, like every other kind."""
        pages, open_rows, titles = self._pages, self._open_rows, self._titles
        add_version, add_replaced, add_entry = self.versions.append, self.replaced.append, self.entries.append
        apply, from_log, days, lean_update, lean_ingest = self.apply, self.from_log, _DAYS, LeanUpdate, LeanIngest
        stored_status, stale_day = trust.stored_status, trust.stale_day
        others = False
        day_start = day_end = 0
        day = ""
        for (seq, version_id, ts, layer, _codec, stored, _agent), raw, body in zip(rows, raws, bodies):
            cls = body.__class__
            if layer is not None:
                others = True
                continue
            if cls is not lean_update and cls is not lean_ingest:
                if cls in _WIKI:
                    apply(seq, version_id, ts, body, raw, raw is stored)
                else:
                    others = True
                continue
            fm, text, slug = body.frontmatter, body.text, body.slug
            hook = fm.description
            if hook is None:
                hook = ""
            elif not (hook.__class__ is str and hook.isprintable() and "  " not in hook and hook == hook.strip()):
                hook = None
            title = titles.get(slug)
            if title is not None and text.startswith(title[0]):
                title = title[1]
            else:
                end = text.find("\n")
                title = text[2:end] if end != -1 else text[2:]
                if not text.startswith("# ") or "#" in title or not title.isprintable() or "  " in title \
                        or title != title.strip():
                    hook = None
                elif end != -1:
                    titles[slug] = (text[:end + 1], title)
            if hook is None or fm.governance is not None:
                apply(seq, version_id, ts, decode_body(raw), raw, raw is stored)
                continue
            current = pages.get(slug, _UNREAD)
            if current is _UNREAD:
                current = self._page(slug)
            if current is not None:
                kind = "update"
                row = open_rows.get(slug)
                if row is not None and row[1] == current[0]:  # _close
                    row[-1] = seq
                else:
                    add_replaced((current[0], seq))
            else:
                kind = "ingest"
            status, stale, type_ = fm.status, fm.stale_after, fm.type
            open_rows[slug] = row = [  # _row
                slug, seq, 0, 0, 0, ",".join(body.parents), title, hook, 0 if raw is stored else raw,
                f"{hook}\n\n{text}" if hook else text, type_ if type_.__class__ is str else str(type_),
                0 if status is None else stored_status(status), 0 if stale is None else stale_day(stale) or 0, 0]
            if not from_log:
                row[2], row[3], row[8] = version_id, ts, raw
            add_version(row)
            pages[slug] = (seq, version_id, title, hook, raw, ts)
            if cls is lean_update or not body.quiet:
                if not day_start <= ts < day_end:
                    number = ts // 86_400_000
                    day = days.get(number)
                    if day is None:
                        day = days[number] = render.day(ts)
                    day_start = number * 86_400_000
                    day_end = day_start + 86_400_000
                note = body.note
                add_entry((seq, ts, f"## [{day}] {kind} | {title}\n\n{note}\n" if note
                           else f"## [{day}] {kind} | {title}\n"))  # render.log_entry
        self.touched_pages.update(open_rows)  # the fast path's pages: each has its row open (or a tombstone since)
        return others

    def apply(self, seq: int, version_id: bytes, ts: int, body, raw: bytes, stored: bool = False) -> None:
        """Folds one event; `version_id` is the event id as stored (16 bytes), `raw` its body bytes, `stored`
        when the log holds them as they are (not compressed nor redacted)."""
        cls = type(body)
        if cls is PageUpdate or cls is PageIngest:
            slug, fm = body.slug, body.frontmatter
            current = self._page(slug)
            kind = "update" if current is not None else "ingest"
            if "governance" in fm and trust.is_held(fm) and (
                    current is None or not trust.is_held(decode_body(current[4]).frontmatter)):
                kind = "hold"
            title = self._version(seq, version_id, ts, slug, body.parents, fm, body.text, raw, current, stored)
            if cls is PageUpdate or not body.quiet:
                self._log(seq, ts, kind, title, body.note)
        elif isinstance(body, PageDelete):
            if self._page(body.slug) is None:
                return
            title = self._tombstone(seq, version_id, ts, body.slug, body.parents)
            self._log(seq, ts, "delete", title, body.note)
        elif isinstance(body, PageRename):
            current = self._page(body.old)
            if current is None or self._page(body.new) is not None:
                return
            self._tombstone(seq, version_id, ts, body.old, body.parents)
            page = decode_body(current[4])
            title = self._version(seq, version_id, ts, body.new, body.parents, page.frontmatter, page.text, current[4])
            moved = f"mind/{body.old}.md → mind/{body.new}.md"
            self._log(seq, ts, "rename", title, f"{moved}. {body.note}" if body.note else moved)
        elif isinstance(body, PageRelease):
            self.releases.append((body.slug, seq))
            if self._page(body.slug) is not None:
                self._log(seq, ts, "release", self._page(body.slug)[2], body.note)
        elif isinstance(body, AlwaysAdd):
            lines = self._always_lines()
            lines.insert(len(lines) if body.position is None else max(body.position - 1, 0), body.line)
            self.always_rows.append((seq, ts, lines_json(self._always)))
            self.dirty.add(MIND_PATH)
        elif isinstance(body, AlwaysRemove):
            lines = self._always_lines()
            at = body.position - 1 if body.position is not None else None
            if at is None or not 0 <= at < len(lines) or lines[at] != body.line:  # no place, or another line there now
                at = lines.index(body.line) if body.line in lines else None
            if at is not None:
                del lines[at]
                self.always_rows.append((seq, ts, lines_json(lines)))
                self.dirty.add(MIND_PATH)
        elif isinstance(body, LogRestore):
            if body.entries:
                self.entries.append((seq, ts, "\n".join(body.entries)))
        elif isinstance(body, Lint):
            note = body.summary + "".join(f"\n- {finding}" for finding in body.findings)
            self._log(seq, ts, "lint", "Lint pass", note)

    def _log(self, seq, ts, kind, title, note):
        """A log entry; every title here is a page's (render.title_of) or a fixed one, one line already."""
        self.entries.append((seq, ts, render.log_entry(ts, kind, title, note, title_is_one_line=True)))

    def search_history(self) -> tuple[list, list]:
        """For SearchFold.flush: the batch's version rows (`_row`) and the (id, until) of the earlier versions
        they closed."""
        return self.versions, self.replaced

    def flush(self, checkpoint: int, final: bool = True, others: tuple = ()) -> None:
        """Writes the batch and the checkpoint; the caller holds the transaction. The current pages (their
        `pages` rows, their files marked dirty) are written when `final`: a rebuild writes them once, in its
        last batch (nothing reads them sooner), not a page updated in every batch once a batch. In a rebuild
        the writer takes the history tables, with `others`: the search index's batch (SearchFold.flush's) and
        the shared entries' (SharedFold.flush's)."""
        db = self.db
        if self.writer is not None:
            self.writer.add(self.versions, self.entries, *others)
        else:
            if self.versions:
                db.executemany("INSERT OR REPLACE INTO page_versions VALUES (?,?,?,?,?,?,?,?,?)",
                               [row[:9] for row in self.versions])
            if self.entries:
                db.executemany("INSERT OR REPLACE INTO log_entries VALUES (?,?,?)", self.entries)
        if self.always_rows:
            db.executemany("INSERT OR REPLACE INTO always_versions VALUES (?,?,?)", self.always_rows)
        if self.releases:
            db.executemany("INSERT OR REPLACE INTO page_releases VALUES (?,?)", self.releases)
        if final and self.touched_pages:
            gone = [(slug,) for slug in self.touched_pages if self._pages[slug] is None]
            live = [(slug, page[0], page[1] or b"", *page[2:4], page[5]) for slug in self.touched_pages
                    if (page := self._pages[slug]) is not None]  # b"": an id the writer's merge fills (from_log)
            db.executemany("DELETE FROM pages WHERE slug = ?", gone)
            db.executemany("INSERT OR REPLACE INTO pages VALUES (?,?,?,?,?,?)", live)
            self.dirty.update(page_path(slug) for slug in self.touched_pages)
            self.dirty.add(MIND_PATH)  # a page's catalog line is in mind.md, log entry or not
            self.touched_pages = set()
        if self.entries:
            self.dirty.update((LOG_PATH, MIND_PATH))
        self._mark_dirty()
        db.execute("UPDATE meta SET value = ? WHERE key = 'checkpoint'", (str(checkpoint),))
        self._reset_batch()

    def _mark_dirty(self) -> None:
        """The files the batch changed marked dirty. In a rebuild (`writer`) no file is written before it ends, so a
        file once marked stays dirty: marked once, not at each batch that changes it again (a team's pages, each at
        every batch of a catch-up)."""
        fresh = self.dirty - self._marked
        if fresh:
            self.views.written.mark_dirty(sorted(fresh))
            if self.writer is not None:
                self._marked |= fresh


_ESCAPED = re.compile(r'[\x00-\x1f"\\]')


def lines_json(lines: list[str]) -> str:
    """`json.dumps(lines, ensure_ascii=False)` (an always_versions row), joined directly when no line has a
    character JSON escapes: a tenth of a replay's events are Always edits, each writing the whole list."""
    if any(_ESCAPED.search(line) for line in lines):
        return json.dumps(lines, ensure_ascii=False)
    return '["' + '", "'.join(lines) + '"]' if lines else "[]"


def unpacked_body(codec: int, stored: bytes) -> bytes:
    """The body bytes the fold reads: a redacted event's are its stand-in's (content `[redacted: reason]`)."""
    if codec == CODEC_REDACTED:
        form = decode_body(stored)
        if not isinstance(form, Redacted):
            raise InvalidInput(f"its body is marked redacted but is a {form.__struct_config__.tag} body")
        return encode_body(stand_in(form))
    return unpack_body(codec, stored)


def damaged_batch(rows: list[tuple], exc: BaseException) -> Damaged:
    """The first row of a batch that does not read alone (its body unpacked and decoded as `_catch_up` does), as
    `damaged_row` names it; `exc` (the batch's own failure) if none fails alone."""
    for row in rows:
        try:
            decode_body(unpacked_body(row[4], stored_body(row[4], row[5])))
        except ROW_FAULTS as found:
            return damaged_row(row[0], found)
    return damaged_row(f"{rows[0][0]}-{rows[-1][0]}", exc) if rows else exc


def catch_up(log, views: Views, upto: int | None = None, batch: int = 5000,
             progress: Callable[[int], None] | None = None, writer=None, heads: Iterable[int] = ()) -> int:
    """Applies every event after the views' checkpoint (up to `upto`); returns the new checkpoint.

    Each batch commits its rows and the checkpoint in one transaction: exactly once, even if
    the process dies between batches. `writer` takes a rebuild's history tables (bulk.build), whose
    fold reads no page version back: one fold, with its caches, follows a log still growing up to
    each of `heads` in turn, then up to `upto` (or the head the log has then).
    """
    folds = WikiFold(views, writer), AdfFold(views), SharedFold(views, bulk=writer is not None), \
        SearchFold(views, bulk=writer is not None)
    with no_cyclic_gc():
        for head in heads:
            _catch_up(log, views, head, batch, progress, *folds)
        return _catch_up(log, views, log.head() if upto is None else upto, batch, progress, *folds)


@contextmanager
def no_cyclic_gc():
    """Bulk work (a fold's batch, a catch-up's pages) keeps tens of thousands of rows and bodies alive at
    once; the cycle collector would walk them again and again (a quarter of the time) while refcounting
    alone frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_WIKI, _ADF, _SHARED = (frozenset(KINDS[kind] for kind in group) for group in (WIKI_KINDS, ADF_KINDS, SHARED_KINDS))
"""Each fold's kinds, as the classes the bodies decode to."""
_WIKI |= {LeanIngest, LeanUpdate}
_SEARCHED_IN_BULK = _SHARED - {EntryAppend}
"""The shared kinds SearchFold.apply takes in a bulk build: an entry's search rows the writer makes from its `entries`
row (search.STAGED_ENTRIES), so a team's 800,000 entries of a first pull are not handed to it one by one for
nothing."""
_OWN_FILES = frozenset((FileWrite, FileDelete))
_layer = itemgetter(3)


def _bodies(rows: list[tuple], raws: list[bytes]) -> list:
    """The batch's bodies: the mind layer's as the wiki fold reads them (LEAN_BODIES), the other layers' (a team's
    shared pages, which the shared and search folds read whole) as `Body`s."""
    layers = list(map(_layer, rows))
    mind = layers.count(None)
    if mind == len(layers):
        return decode_bodies(raws, LEAN_BODIES)
    if not mind:
        return decode_bodies(raws)
    lean = iter(decode_bodies([raw for layer, raw in zip(layers, raws) if layer is None], LEAN_BODIES))
    whole = iter(decode_bodies([raw for layer, raw in zip(layers, raws) if layer is not None]))
    return [next(lean) if layer is None else next(whole) for layer in layers]


def _catch_up(log, views, target, batch, progress, wiki, adf, shared, search) -> int:
    while True:
        with views.transaction():
            start = views.checkpoint()
            if start >= target:
                return start
            rows = list(islice(log.fold_rows(start, target, mind_ids=not wiki.from_log),
                               batch))  # seqs an ImportGap skipped count for none
            end = rows[-1][0] if len(rows) == batch else target
            try:
                raws = [row[5] if row[4] == CODEC_RAW else unpacked_body(row[4], row[5]) for row in rows]
                bodies = _bodies(rows, raws)
            except ROW_FAULTS as exc:  # a row changed outside mindlog: named by its seq, not a traceback
                raise damaged_batch(rows, exc) from None
            if wiki.fold_batch(rows, raws, bodies):  # the folds keep apart: each may take its events on its own
                shared.fold_entries(rows, bodies, wiki.dirty)
                apply_adf, apply_shared, apply_search = adf.apply, shared.apply, search.apply
                searched = _SEARCHED_IN_BULK if search.bulk else _SHARED
                entry, search_entries = EntryAppend, EntryAppend in searched
                for (seq, version_id, ts, layer, _codec, body, agent), raw, decoded in zip(rows, raws, bodies):
                    cls = decoded.__class__
                    if cls is entry and layer is not None:  # a team's entry, the shared fold's already
                        if search_entries:
                            apply_search(seq, layer, decoded, id_text(version_id), agent)
                        continue
                    if layer is None and cls in _WIKI:  # the mind layer's (fold_rows): the wiki fold's
                        continue
                    if cls in _ADF:
                        apply_adf(seq, ts, decoded)
                        apply_search(seq, layer or MIND, decoded)
                        if cls in _OWN_FILES and views.layer_at(decoded.path) is not None:
                            wiki.dirty.add(decoded.path)  # the layer's file leaves or takes the path (Views.blocked)
                    elif cls in _SHARED:
                        id = id_text(version_id) if version_id is not None else log.get_by_seq(seq).id
                        apply_shared(seq, id, agent, layer or MIND, decoded, raw, wiki.dirty)
                        if cls in searched:
                            apply_search(seq, layer or MIND, decoded, id, agent)
                    elif cls is Redaction and decoded.withdraws:
                        shared.withdraw(seq, layer, decoded.target_ids)
                    elif cls is ContractChange and layer == AGENT:
                        placements.record(views.db, seq, decoded)
                    elif cls is ContractChange and layer == CONTRACT_LAYER:  # a hub's mirror
                        placements.record_hub(views.db, seq, decoded)
            ts = rows[-1][2] if rows else 0
            del rows, raws, bodies
            first = next(log.read(after=start, limit=1), None)
            adf.note_events((first.ts,) if first else None, ts)
            final = wiki.writer is None or end >= target  # a rebuild writes the current pages once, at its end
            entries = shared.flush()
            if final:
                search.take_pages(wiki.touched_pages, wiki._page)
            wiki.flush(end, final, (search.flush(*wiki.search_history()), entries))
            anchor = log.get_by_seq(end)
            if anchor is not None:
                views.set_anchor(end, anchor.chain)
        if progress:
            progress(end - start)
